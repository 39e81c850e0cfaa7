// Checks that the runners' built-in sanitizer options take effect: a signed overflow must be
// reported with its stack (UBSan's print_stacktrace). CTest passes this test on that output
// (PASS_REGULAR_EXPRESSION), whatever the exit status UBSan leaves.
#include <climits>
#include <cstdio>

#include "sanitizer_options.hpp"

int main(int argc, char**) {
  volatile int big = INT_MAX;
  const int overflowed = big + argc;  // argc >= 1: undefined behaviour
  std::printf("not reported: %d\n", overflowed);
  return 0;
}
