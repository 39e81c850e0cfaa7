// Catch2 runner for gpu-labelled test executables. Without a usable CUDA device it prints one
// line and exits with skip_exit_code, which CTest maps to "Skipped" (SKIP_RETURN_CODE), so a
// machine without a GPU never reports these tests as passed. Listing still works without a
// device, so CTest can discover the test cases at build time.
#include <gpubatch/execution.hpp>

#include <cstdio>
#include <cstring>

#include "catch_runner.hpp"
#include "sanitizer_options.hpp"
#include "skip_code.hpp"

int main(int argc, char* argv[]) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) {
    listing = listing || std::strncmp(argv[i], "--list", 6) == 0;
  }
  if (!listing && !gpubatch::cuda_available()) {
    std::puts("no CUDA device: skipped");
    return gpubatch::test::skip_exit_code;
  }
  return gpubatch::test::run_catch(argc, argv);
}
