// What every numeric test needs besides random values: inputs in each element type, the poison
// that marks unwritten outputs, and the relative-norm tolerance of each output type.
#pragma once

#include <gpubatch/numeric.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "random.hpp"

namespace gpubatch::test {

/// Random inputs: floating point uniform in [-1, 1) (rounded to T), int8 over its whole range.
template <class T>
std::vector<T> random_inputs(std::size_t count, std::uint64_t seed) {
  if constexpr (std::is_integral_v<T>) {
    return random_values<T>(count, seed, -128, 127);
  } else {
    const auto values = random_values<double>(count, seed, -1.0, 1.0);
    std::vector<T> out(count);
    for (std::size_t i = 0; i < count; ++i) out[i] = convert<T>(values[i]);
    return out;
  }
}

/// What outputs hold before a run: NaN, or the most negative integer, so that an element an
/// operation never wrote fails the comparison.
template <class T>
T poison_value() {
  if constexpr (std::is_integral_v<T>) {
    return std::numeric_limits<T>::min();
  } else {
    return convert<T>(std::numeric_limits<float>::quiet_NaN());
  }
}

/// A bit pattern no load or conversion produces (0x5a in every byte: neither zero nor a value in
/// [-1, 1)), for shared-memory images in which a never-written slot must stand out.
template <class T>
T byte_poison() {
  T value;
  std::memset(static_cast<void*>(&value), 0x5a, sizeof(T));
  return value;
}

/// Whether x and y are the same bits (NaN-safe and exact, for staged copies of inputs).
template <class T>
bool same_bits(const T& x, const T& y) {
  return std::memcmp(&x, &y, sizeof(T)) == 0;
}

/// Relative-norm tolerance for results of type T computed with f32 (or wider) accumulation from
/// inputs exactly representable in the input type.
template <class T>
double output_tolerance() {
  if constexpr (std::is_integral_v<T>) {
    return 0.0;  // int8 -> int32 is exact
  } else if constexpr (std::is_same_v<T, half>) {
    return 2e-3;  // half's unit roundoff is 4.9e-4
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    return 1.6e-2;  // bfloat16's unit roundoff is 3.9e-3
  } else if constexpr (std::is_same_v<T, double>) {
    return 1e-12;
  } else {
    return 1e-5;  // f32 accumulation
  }
}

}  // namespace gpubatch::test
