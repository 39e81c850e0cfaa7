// The host's own floors, measured by the executable that measures host GEMM, so that its rates
// have something to be read against (a ratio to OpenBLAS alone says nothing about headroom):
//
//   fma_peak.host/f32, /f64            independent vector multiply-adds on every thread: the
//                                      most FLOP/s any GEMM can reach on this machine
//   memory_bandwidth.host/triad/bytes  c[i] = a[i] * b[i] + 1 over three arrays of `bytes` in
//                                      all, on every thread: the bytes/s a batch of tiny problems
//                                      can stream at when it lives in L2 (1 MiB) or in memory
//                                      (bench::host_streaming_bytes: 4x the last-level cache)
//
// bytes_per_second counts what the triad must move (a and b read, c written), as the GEMM
// benchmarks count A, B and C; like them it pays for reading c's lines before writing them.
#include "support/harness.hpp"

#include <gpubatch/detail/gemm/host.hpp>

#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace {

namespace bench = gpubatch::bench;
using index_t = std::int64_t;

// The widest vector the host backend's kernels use in this build.
constexpr int vector_bytes = gpubatch::detail::host_gemm::vector_bytes;

/// What this executable's host kernels were compiled for (-march=native here), in the JSON
/// context.
const bool host_isa_described = bench::detail::describe_host_vector_isa();

template <class T>
void fma_peak(benchmark::State& state) {
  typedef T vec __attribute__((vector_size(vector_bytes)));
  constexpr int lanes = vector_bytes / static_cast<int>(sizeof(T));
  // More independent chains than multiply-add latency times ports on any current core (8), yet
  // few enough that they and the two operands stay in 16 registers: with 16 chains an AVX2 build
  // spills and measures half the peak.
  constexpr int chains = 12;
  constexpr index_t steps = index_t{1} << 16;
  const int threads = omp_get_max_threads();
  for (auto _ : state) {
    T sink = 0;
#pragma omp parallel reduction(+ : sink)
    {
      vec acc[chains];
      for (int c = 0; c < chains; ++c) acc[c] = T(c) - vec{};
      const vec x = T(0.999999) - vec{};
      const vec y = T(1e-6) - vec{};
      for (index_t s = 0; s < steps; ++s) {
        for (int c = 0; c < chains; ++c) acc[c] = acc[c] * x + y;
      }
      T local = 0;
      for (int c = 0; c < chains; ++c)
        for (int l = 0; l < lanes; ++l) local += acc[c][l];
      sink += local;
    }
    benchmark::DoNotOptimize(sink);
  }
  bench::set_rates(state, 2.0 * lanes * chains * static_cast<double>(steps) * threads, 0);
}

void triad(benchmark::State& state) {
  const auto n = static_cast<index_t>(bench::size_arg(state) / (3 * sizeof(float)));
  std::vector<float> a(static_cast<std::size_t>(n), 1.5F);
  std::vector<float> b(static_cast<std::size_t>(n), 0.5F);
  std::vector<float> c(static_cast<std::size_t>(n), 0.0F);
  float* const pc = c.data();
  const float* const pa = a.data();
  const float* const pb = b.data();
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (index_t i = 0; i < n; ++i) pc[i] = pa[i] * pb[i] + 1.0F;
    benchmark::DoNotOptimize(pc);
    benchmark::ClobberMemory();
  }
  bench::set_rates(state, 0, 3.0 * static_cast<double>(n) * sizeof(float));
}

BENCHMARK(fma_peak<float>)->Name(bench::name("fma_peak.host", "f32"))->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(fma_peak<double>)->Name(bench::name("fma_peak.host", "f64"))->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(triad)->Name(bench::name("memory_bandwidth.host", "triad"))->ArgName("bytes")
    ->Arg(bench::mib)->Arg(bench::host_streaming_bytes())->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
