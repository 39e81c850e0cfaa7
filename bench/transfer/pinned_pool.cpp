// Repeated same-size pinned allocations: gpubatch's pinned_pool against the allocators it
// replaces, from 4 KiB to 64 MiB.
//
//   pinned_alloc.cuda   pinned_pool::allocate + release to the pool  vs cudaHostAlloc/cudaFreeHost
//   pinned_alloc.host   pinned_pool<host_exec> (the host backend)    vs aligned operator new/delete
//
// One iteration borrows one block and gives it back: the pattern of a staging buffer per copy.
// After the first iteration the pool serves every request from its cache, so the pool's counter
// `system_allocations` stays at 1 (steady state allocates nothing). Target: >= 100x faster
// than cudaHostAlloc, which pins pages in the driver on every call. Host-side work, so wall
// clock (UseRealTime).
#include "support/harness.hpp"

#include <gpubatch/execution.hpp>
#include <gpubatch/pinned_pool.hpp>
#include <gpubatch/stream.hpp>

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <new>

namespace {

namespace bench = gpubatch::bench;

void alloc_sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("bytes")->RangeMultiplier(4)->Range(4 * bench::kib, 64 * bench::mib);
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}

template <class Exec>
void pool_allocations(benchmark::State& state, Exec exec) {
  const std::size_t bytes = bench::size_arg(state);
  gpubatch::pinned_pool pool(exec);
  {
    auto warm = pool.template allocate<std::byte>(bytes);  // the one system allocation
    benchmark::DoNotOptimize(warm.data());
  }
  for (auto _ : state) {
    auto block = pool.template allocate<std::byte>(bytes);
    benchmark::DoNotOptimize(block.data());
  }
  state.counters["system_allocations"] = static_cast<double>(pool.stats().allocations);
}

void pinned_alloc_cuda_gpubatch(benchmark::State& state) {
  bench::run_cuda_benchmark(
      state, [&](const gpubatch::cuda_stream& stream) { pool_allocations(state, stream.exec()); });
}

void pinned_alloc_cuda_host_alloc(benchmark::State& state) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream&) {
    const std::size_t bytes = bench::size_arg(state);
    const auto once = [&] {
      void* p = nullptr;
      GPUBATCH_CUDA_TRY(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
      benchmark::DoNotOptimize(p);
      GPUBATCH_CUDA_TRY(cudaFreeHost(p));
    };
    once();
    for (auto _ : state) {
      once();
    }
  });
}

void pinned_alloc_host_gpubatch(benchmark::State& state) {
  bench::run_host_benchmark(state, [&] { pool_allocations(state, gpubatch::on_host); });
}

void pinned_alloc_host_aligned_new(benchmark::State& state) {
  bench::run_host_benchmark(state, [&] {
    const std::size_t bytes = bench::size_arg(state);
    for (auto _ : state) {
      void* p = ::operator new(bytes, std::align_val_t{64});
      benchmark::DoNotOptimize(p);
      ::operator delete(p, std::align_val_t{64});
    }
  });
}

}  // namespace

BENCHMARK(pinned_alloc_cuda_gpubatch)
    ->Name(bench::name("pinned_alloc.cuda", bench::subject))
    ->Apply(alloc_sizes);
BENCHMARK(pinned_alloc_cuda_host_alloc)
    ->Name(bench::name("pinned_alloc.cuda", "cudaHostAlloc"))
    ->Apply(alloc_sizes);
BENCHMARK(pinned_alloc_host_gpubatch)
    ->Name(bench::name("pinned_alloc.host", bench::subject))
    ->Apply(alloc_sizes);
BENCHMARK(pinned_alloc_host_aligned_new)
    ->Name(bench::name("pinned_alloc.host", "aligned_new"))
    ->Apply(alloc_sizes);
