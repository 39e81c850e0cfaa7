// Allocation and release of gpubatch's containers against the allocators they wrap, from 1 KiB
// to 256 MiB: the containers must cost nothing over the raw calls.
//
//   device_buffer_alloc.cuda   device_buffer(n, cuda_exec)  vs cudaMallocAsync/cudaFreeAsync
//                                                            and cudaMalloc/cudaFree
//   pinned_buffer_alloc.cuda   pinned_buffer(n, cuda_exec)  vs cudaMallocHost/cudaFreeHost
//   device_buffer_alloc.host   device_buffer(n, host_exec)  vs std::malloc/std::free
//                                                            and std::aligned_alloc(64)/std::free
//
// One iteration allocates and frees one buffer. Allocation is host-side driver or libc work:
// nothing reaches the GPU that CUDA events could time, so every group here is timed in wall
// clock (UseRealTime). The stream-ordered allocations are measured in steady state: a buffer freed
// on a stream is reused by the next allocation on that stream, the pattern of a loop that
// allocates temporaries; the stream is synchronised only after the timed loop. cudaFree, in
// contrast, synchronises the device on every call: that difference is what the group shows.
//
// Buffers are never touched, so the host sizes measure the allocator, not page faults.
#include "support/harness.hpp"

#include <gpubatch/containers.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/stream.hpp>

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdlib>
#include <new>

namespace {

namespace bench = gpubatch::bench;

// 1 KiB, 4 KiB, ..., 256 MiB: from a small workspace to a large batch of matrices.
void alloc_sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("bytes")->RangeMultiplier(4)->Range(bench::kib, 256 * bench::mib);
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}

// Runs `once` untimed to warm up (first allocation from a pool, first mmap), then per iteration.
template <class Once>
void time_each_iteration(benchmark::State& state, Once once) {
  once();
  for (auto _ : state) {
    once();
  }
}

// --- device_buffer_alloc.cuda -----------------------------------------------------------------

void device_buffer_cuda_gpubatch(benchmark::State& state) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    const std::size_t bytes = bench::size_arg(state);
    time_each_iteration(state, [&] {
      gpubatch::device_buffer<std::byte> buffer(bytes, stream.exec());
      benchmark::DoNotOptimize(buffer.data());
    });
  });
}

void device_buffer_cuda_malloc_async(benchmark::State& state) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    const std::size_t bytes = bench::size_arg(state);
    time_each_iteration(state, [&] {
      void* p = nullptr;
      GPUBATCH_CUDA_TRY(cudaMallocAsync(&p, bytes, stream.get()));
      benchmark::DoNotOptimize(p);
      GPUBATCH_CUDA_TRY(cudaFreeAsync(p, stream.get()));
    });
  });
}

void device_buffer_cuda_malloc(benchmark::State& state) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream&) {
    const std::size_t bytes = bench::size_arg(state);
    time_each_iteration(state, [&] {
      void* p = nullptr;
      GPUBATCH_CUDA_TRY(cudaMalloc(&p, bytes));
      benchmark::DoNotOptimize(p);
      GPUBATCH_CUDA_TRY(cudaFree(p));
    });
  });
}

BENCHMARK(device_buffer_cuda_gpubatch)
    ->Name(bench::name("device_buffer_alloc.cuda", bench::subject))
    ->Apply(alloc_sizes);
BENCHMARK(device_buffer_cuda_malloc_async)
    ->Name(bench::name("device_buffer_alloc.cuda", "cudaMallocAsync"))
    ->Apply(alloc_sizes);
BENCHMARK(device_buffer_cuda_malloc)
    ->Name(bench::name("device_buffer_alloc.cuda", "cudaMalloc"))
    ->Apply(alloc_sizes);

// --- pinned_buffer_alloc.cuda -----------------------------------------------------------------

void pinned_buffer_cuda_gpubatch(benchmark::State& state) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    const std::size_t bytes = bench::size_arg(state);
    time_each_iteration(state, [&] {
      gpubatch::pinned_buffer<std::byte> buffer(bytes, stream.exec());
      benchmark::DoNotOptimize(buffer.data());
    });
  });
}

void pinned_buffer_cuda_malloc_host(benchmark::State& state) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream&) {
    const std::size_t bytes = bench::size_arg(state);
    time_each_iteration(state, [&] {
      void* p = nullptr;
      GPUBATCH_CUDA_TRY(cudaMallocHost(&p, bytes));
      benchmark::DoNotOptimize(p);
      GPUBATCH_CUDA_TRY(cudaFreeHost(p));
    });
  });
}

BENCHMARK(pinned_buffer_cuda_gpubatch)
    ->Name(bench::name("pinned_buffer_alloc.cuda", bench::subject))
    ->Apply(alloc_sizes);
BENCHMARK(pinned_buffer_cuda_malloc_host)
    ->Name(bench::name("pinned_buffer_alloc.cuda", "cudaMallocHost"))
    ->Apply(alloc_sizes);

// --- device_buffer_alloc.host -----------------------------------------------------------------

void device_buffer_host_gpubatch(benchmark::State& state) {
  bench::run_host_benchmark(state, [&] {
    const std::size_t bytes = bench::size_arg(state);
    time_each_iteration(state, [&] {
      gpubatch::device_buffer<std::byte> buffer(bytes, gpubatch::on_host);
      benchmark::DoNotOptimize(buffer.data());
    });
  });
}

void device_buffer_host_malloc(benchmark::State& state) {
  bench::run_host_benchmark(state, [&] {
    const std::size_t bytes = bench::size_arg(state);
    time_each_iteration(state, [&] {
      void* p = std::malloc(bytes);
      if (p == nullptr) {
        throw std::bad_alloc();
      }
      benchmark::DoNotOptimize(p);
      std::free(p);
    });
  });
}

// The alignment gpubatch's host allocations have; tells the cost of alignment from the cost of
// the container.
void device_buffer_host_aligned_alloc(benchmark::State& state) {
  bench::run_host_benchmark(state, [&] {
    constexpr std::size_t alignment = 64;
    const std::size_t bytes = (bench::size_arg(state) + alignment - 1) / alignment * alignment;
    time_each_iteration(state, [&] {
      void* p = std::aligned_alloc(alignment, bytes);
      if (p == nullptr) {
        throw std::bad_alloc();
      }
      benchmark::DoNotOptimize(p);
      std::free(p);
    });
  });
}

BENCHMARK(device_buffer_host_gpubatch)
    ->Name(bench::name("device_buffer_alloc.host", bench::subject))
    ->Apply(alloc_sizes);
BENCHMARK(device_buffer_host_malloc)
    ->Name(bench::name("device_buffer_alloc.host", "malloc"))
    ->Apply(alloc_sizes);
BENCHMARK(device_buffer_host_aligned_alloc)
    ->Name(bench::name("device_buffer_alloc.host", "aligned_alloc"))
    ->Apply(alloc_sizes);

}  // namespace
