// Host <-> device copy bandwidth through gpubatch's helpers against raw cudaMemcpyAsync on the
// same buffers, from 64 KiB to 256 MiB:
//
//   copy_h2d.cuda            copy_async(exec, device, pinned)   vs cudaMemcpyAsync (pinned)
//   copy_d2h.cuda            copy_async(exec, pinned, device)   vs cudaMemcpyAsync (pinned)
//   copy_h2d_pageable.cuda   copy_async(..., stage_through(pool)) from pageable memory
//                                                               vs cudaMemcpyAsync (pageable)
//   copy_d2h_pageable.cuda   the same, device to pageable host memory
//
// Target: the helpers reach >= 98 % of raw cudaMemcpyAsync's pinned bandwidth (the first two
// groups' ratios). The pageable groups show what the refusal of pageable memory is about: the
// driver's own staging blocks the caller, gpubatch's goes through a pinned pool block.
//
// Time is device time between CUDA events (UseManualTime). A copy over PCIe or NVLink-C2C is
// bound by the link, not by L2, so inputs are not rotated. bytes_per_second counts the bytes
// copied once; compare it with the link's bandwidth, not the HBM peak in the context.
#include "support/harness.hpp"

#include <gpubatch/containers.hpp>
#include <gpubatch/pinned_pool.hpp>
#include <gpubatch/stream.hpp>
#include <gpubatch/transfer.hpp>

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

namespace {

namespace bench = gpubatch::bench;

void copy_sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("bytes")->RangeMultiplier(4)->Range(64 * bench::kib, 256 * bench::mib);
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

enum class direction { h2d, d2h };

/// Times `copy(stream, host, device, pool)` for buffers of the benchmark's size; `Host` is
/// pinned or pageable. The pool (staging only) lives for the whole benchmark, so the timed
/// iterations reuse its block as steady state would.
template <class Host, class Copy>
void run_copy(benchmark::State& state, Copy copy) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    const std::size_t bytes = bench::size_arg(state);
    Host host = [&] {
      if constexpr (std::is_same_v<Host, std::vector<std::byte>>) {
        return Host(bytes);
      } else {
        return Host(bytes, stream.exec());
      }
    }();
    std::memset(host.data(), 0x5a, bytes);  // first touch outside the timing
    gpubatch::device_buffer<std::byte> device(bytes, stream.exec());
    gpubatch::pinned_pool pool(stream.exec());
    bench::time_on_device(state, stream.get(), [&] { copy(stream, host, device, pool); });
    bench::set_rates(state, 0, static_cast<double>(bytes));
  });
}

template <direction D>
void pinned_gpubatch(benchmark::State& state) {
  run_copy<gpubatch::pinned_buffer<std::byte>>(
      state, [](const gpubatch::cuda_stream& stream, auto& host, auto& device, auto&) {
        if constexpr (D == direction::h2d) {
          gpubatch::copy_async(stream.exec(), device, host);
        } else {
          gpubatch::copy_async(stream.exec(), host, device);
        }
      });
}

template <direction D, class Host>
void raw_memcpy_async(benchmark::State& state) {
  run_copy<Host>(state, [](const gpubatch::cuda_stream& stream, auto& host, auto& device, auto&) {
    const std::size_t bytes = device.size_bytes();
    if constexpr (D == direction::h2d) {
      GPUBATCH_CUDA_TRY(cudaMemcpyAsync(device.data(), host.data(), bytes,
                                        cudaMemcpyHostToDevice, stream.get()));
    } else {
      GPUBATCH_CUDA_TRY(cudaMemcpyAsync(host.data(), device.data(), bytes,
                                        cudaMemcpyDeviceToHost, stream.get()));
    }
  });
}

template <direction D>
void staged_gpubatch(benchmark::State& state) {
  run_copy<std::vector<std::byte>>(
      state, [](const gpubatch::cuda_stream& stream, auto& host, auto& device, auto& pool) {
        if constexpr (D == direction::h2d) {
          gpubatch::copy_async(stream.exec(), device, host, gpubatch::stage_through(pool));
        } else {
          gpubatch::copy_async(stream.exec(), host, device, gpubatch::stage_through(pool));
        }
      });
}

using pinned = gpubatch::pinned_buffer<std::byte>;
using pageable = std::vector<std::byte>;

}  // namespace

BENCHMARK(pinned_gpubatch<direction::h2d>)
    ->Name(bench::name("copy_h2d.cuda", bench::subject))
    ->Apply(copy_sizes);
BENCHMARK(raw_memcpy_async<direction::h2d, pinned>)
    ->Name(bench::name("copy_h2d.cuda", "cudaMemcpyAsync"))
    ->Apply(copy_sizes);
BENCHMARK(pinned_gpubatch<direction::d2h>)
    ->Name(bench::name("copy_d2h.cuda", bench::subject))
    ->Apply(copy_sizes);
BENCHMARK(raw_memcpy_async<direction::d2h, pinned>)
    ->Name(bench::name("copy_d2h.cuda", "cudaMemcpyAsync"))
    ->Apply(copy_sizes);
BENCHMARK(staged_gpubatch<direction::h2d>)
    ->Name(bench::name("copy_h2d_pageable.cuda", bench::subject))
    ->Apply(copy_sizes);
BENCHMARK(raw_memcpy_async<direction::h2d, pageable>)
    ->Name(bench::name("copy_h2d_pageable.cuda", "cudaMemcpyAsync"))
    ->Apply(copy_sizes);
BENCHMARK(staged_gpubatch<direction::d2h>)
    ->Name(bench::name("copy_d2h_pageable.cuda", bench::subject))
    ->Apply(copy_sizes);
BENCHMARK(raw_memcpy_async<direction::d2h, pageable>)
    ->Name(bench::name("copy_d2h_pageable.cuda", "cudaMemcpyAsync"))
    ->Apply(copy_sizes);
