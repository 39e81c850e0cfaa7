// Catch2 for gpubatch's tests: v3 (a compiled library) or v2 (one header), whichever the build
// found (GPUBATCH_CATCH2_V3, set by cmake/GpubatchTesting.cmake). Test files include this, never
// Catch2's headers directly.
#pragma once

#if defined(GPUBATCH_CATCH2_V3)
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif

#include <string>

namespace gpubatch::test {
/// Matches a string that contains `text` (v2's Matchers::Contains, v3's ContainsSubstring).
inline auto Contains(const std::string& text) {
#if defined(GPUBATCH_CATCH2_V3)
  return Catch::Matchers::ContainsSubstring(text);
#else
  return Catch::Matchers::Contains(text);
#endif
}
}  // namespace gpubatch::test
