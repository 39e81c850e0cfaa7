// Fixed-seed random inputs for tests: fresh values every call, never all zeros.
#pragma once

#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

namespace gpubatch::test {

/// `count` values uniform in [lo, hi] (integers) or [lo, hi) (floating point), from `seed`.
template <class T>
std::vector<T> random_values(std::size_t count, std::uint64_t seed, double lo = -1.0,
                             double hi = 1.0) {
  std::mt19937_64 engine(seed);
  std::vector<T> values(count);
  if constexpr (std::is_integral_v<T>) {
    std::uniform_int_distribution<long long> dist(static_cast<long long>(lo),
                                                  static_cast<long long>(hi));
    for (auto& v : values) v = static_cast<T>(dist(engine));
  } else {
    std::uniform_real_distribution<double> dist(lo, hi);
    for (auto& v : values) v = static_cast<T>(dist(engine));
  }
  return values;
}

}  // namespace gpubatch::test
