#pragma once
// The sanitizer options every test runner (host and emulated) starts with, built into the
// executable: Catch2's test discovery keeps only the first entry of a CTest ENVIRONMENT list, so
// UBSan's stack traces, set there, never reached a host test. ASAN_OPTIONS and UBSAN_OPTIONS in
// the environment still override these. Include from one source per executable.

#if defined(__SANITIZE_ADDRESS__)
/// Impossible allocations must fail with out_of_memory rather than abort inside ASan; leaks fail
/// the test.
extern "C" const char* __asan_default_options() {
  return "allocator_may_return_null=1:detect_leaks=1";
}
/// Undefined behaviour is reported with the stack that reached it (the sanitize build also
/// compiles with -fno-sanitize-recover=all, so the test fails there).
extern "C" const char* __ubsan_default_options() { return "print_stacktrace=1"; }
#endif
