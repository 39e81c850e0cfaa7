#pragma once

namespace gpubatch::test {
/// Exit code of a gpu test executable that found no device; CMake passes the same number to
/// CTest as SKIP_RETURN_CODE (tests/CMakeLists.txt).
inline constexpr int skip_exit_code = 77;
}  // namespace gpubatch::test
