// main() of every gpubatch benchmark executable: Google Benchmark's own, plus the hardware and
// commit context (harness.hpp) that docs/benchmarks.md is written from. AddCustomContext must
// run before the benchmarks, which is why benchmark_main cannot be used.
#include "support/harness.hpp"

#include <benchmark/benchmark.h>

#ifndef GPUBATCH_BENCH_CONFIGURED_COMMIT
#define GPUBATCH_BENCH_CONFIGURED_COMMIT "unknown"
#endif

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    return 1;
  }
  gpubatch::bench::add_context(GPUBATCH_BENCH_CONFIGURED_COMMIT);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
