// The ThreadSanitizer build of the emulated tests (the race check, CMake option
// GPUBATCH_SANITIZE_THREAD) runs every kernel and staging path, but its costliest cases on fewer
// shapes: each CUDA thread is a fiber under ThreadSanitizer, minutes per case at full size.
#pragma once

#include <cstddef>
#include <vector>

namespace gpubatch::test {

#if defined(__SANITIZE_THREAD__)
inline constexpr bool race_check_build = true;
#else
inline constexpr bool race_check_build = false;
#endif

/// `all` in every build but the race check, which keeps `reduced` (the choices that still reach
/// each path the case is about).
template <class T>
std::vector<T> unless_race_check(std::vector<T> all, std::vector<T> reduced) {
  return race_check_build ? reduced : all;
}

/// Every item in every build but the race check, which keeps every `stride`-th (first included).
template <class T>
std::vector<T> sampled_in_race_check(const std::vector<T>& items, std::size_t stride) {
  if (!race_check_build) return items;
  std::vector<T> kept;
  for (std::size_t i = 0; i < items.size(); i += stride) kept.push_back(items[i]);
  return kept;
}

}  // namespace gpubatch::test
