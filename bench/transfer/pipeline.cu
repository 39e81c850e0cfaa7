// The streaming pipeline on the GPU, 4 KiB items of floats, input and output in pinned memory:
//
//   pipeline.cuda          pipeline::run                      vs serial: per chunk, copy in,
//                                                                kernel, copy out on one stream
//   pipeline_chunks.cuda   pipeline::run over a 256 MiB batch, sweeping chunk_items (x axis)
//
// Arguments: `rounds` of dependent FMAs per element set the compute per byte (0: copy-bound;
// about 4096 balances an H100's PCIe copies; 16384: compute-bound), `bytes` the batch input.
//
// Counters:
//   overlap_efficiency   max(t_copy_in, t_compute, t_copy_out) / t_run, the three stage times
//                        measured beforehand on the same chunks one stage at a time (device
//                        time). 1 means perfect overlap; the target is >= 0.9.
//   bound_seconds        that max, the floor of one run
//   steady_pinned_allocations, steady_device_allocations   allocations made during the timed
//                        runs (after the warm-up run): the target is 0
// bytes_per_second counts input read plus output written. Runs are host calls that return
// when the output has landed: wall clock (UseRealTime).
#include "support/harness.hpp"

#include <gpubatch/containers.hpp>
#include <gpubatch/launch.hpp>
#include <gpubatch/pipeline.hpp>
#include <gpubatch/stream.hpp>

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace {

namespace bench = gpubatch::bench;

constexpr std::size_t item_floats = 1024;

__global__ void rounds_kernel(const float* in, float* out, std::size_t n, int rounds) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float v = in[i];
    for (int r = 0; r < rounds; ++r) {
      v = fmaf(v, 1.0001F, 0.5F);
    }
    out[i] = v;
  }
}

void launch_rounds(cudaStream_t stream, const float* in, float* out, std::size_t n, int rounds) {
  const auto blocks = static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 65535));
  gpubatch::launch(rounds_kernel, gpubatch::launch_config{blocks, 256, 0, stream}, in, out, n,
                   rounds);
  GPUBATCH_CUDA_TRY(cudaGetLastError());
}

/// A batch in pinned memory and the pipeline's stage over it.
struct workload {
  workload(std::size_t bytes, gpubatch::cuda_exec exec)
      : items(bytes / (item_floats * sizeof(float))),
        input(items * item_floats, exec),
        output(items * item_floats, exec) {
    for (std::size_t i = 0; i < input.size(); ++i) {
      input[i] = static_cast<float>(i % 1000) * 1e-3F;
    }
  }
  std::size_t items;
  gpubatch::pinned_buffer<float> input;
  gpubatch::pinned_buffer<float> output;
};

/// Device time of each stage alone over the same chunks: the floor a perfect overlap reaches.
double stage_bound_seconds(const gpubatch::cuda_stream& stream, workload& w, std::size_t chunk,
                           int rounds) {
  const std::size_t chunk_floats = chunk * item_floats;
  gpubatch::device_buffer<float> in(chunk_floats, stream.exec());
  gpubatch::device_buffer<float> out(chunk_floats, stream.exec());
  const std::size_t total = w.input.size();
  const auto timed = [&](auto&& per_chunk) {
    per_chunk(0, std::min(chunk_floats, total));  // warm-up
    gpubatch::event_timer timer;
    timer.start(stream.get());
    for (std::size_t first = 0; first < total; first += chunk_floats) {
      per_chunk(first, std::min(chunk_floats, total - first));
    }
    timer.stop(stream.get());
    return static_cast<double>(timer.elapsed_ms()) * 1e-3;
  };
  const double copy_in = timed([&](std::size_t first, std::size_t n) {
    GPUBATCH_CUDA_TRY(cudaMemcpyAsync(in.data(), w.input.data() + first, n * sizeof(float),
                                      cudaMemcpyHostToDevice, stream.get()));
  });
  const double compute = timed([&](std::size_t, std::size_t n) {
    launch_rounds(stream.get(), in.data(), out.data(), n, rounds);
  });
  const double copy_out = timed([&](std::size_t first, std::size_t n) {
    GPUBATCH_CUDA_TRY(cudaMemcpyAsync(w.output.data() + first, out.data(), n * sizeof(float),
                                      cudaMemcpyDeviceToHost, stream.get()));
  });
  return std::max({copy_in, compute, copy_out});
}

/// Times pipeline runs; `chunk_items` 0 lets the chooser decide.
void time_pipeline(benchmark::State& state, const gpubatch::cuda_stream& stream, std::size_t bytes,
                   int rounds, std::size_t chunk_items) {
  workload w(bytes, stream.exec());
  gpubatch::pipeline_options options;
  options.chunk_items = chunk_items;
  gpubatch::pipeline<float, float, gpubatch::cuda_exec> p(
      stream.exec(), gpubatch::item_shape{item_floats, item_floats}, options);
  const auto stage = [rounds](gpubatch::cuda_exec exec,
                              const gpubatch::pipeline_chunk<float, float>& c) {
    launch_rounds(exec.stream(), c.input.data(), c.output.data(), c.input.size(), rounds);
  };
  const std::size_t chunk = p.plan(w.items).chunk_items;
  const double bound = stage_bound_seconds(stream, w, chunk, rounds);

  (void)p.run(w.input, w.output, stage);  // warm-up: the ring's only allocations
  const std::size_t pinned_before = p.pinned_stats().allocations;
  const std::size_t device_before = p.device_allocations();
  double seconds = 0.0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    (void)p.run(w.input, w.output, stage);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  const double per_run = seconds / static_cast<double>(std::max<std::int64_t>(state.iterations(), 1));
  state.counters["overlap_efficiency"] = per_run > 0.0 ? bound / per_run : 0.0;
  state.counters["bound_seconds"] = bound;
  state.counters["chunk_items"] = static_cast<double>(chunk);
  state.counters["steady_pinned_allocations"] =
      static_cast<double>(p.pinned_stats().allocations - pinned_before);
  state.counters["steady_device_allocations"] =
      static_cast<double>(p.device_allocations() - device_before);
  bench::set_rates(state, 0, 2.0 * static_cast<double>(w.items * item_floats * sizeof(float)));
}

void pipeline_cuda_gpubatch(benchmark::State& state) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    time_pipeline(state, stream, bench::size_arg(state, 1), static_cast<int>(state.range(0)), 0);
  });
}

void pipeline_cuda_serial(benchmark::State& state) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    const int rounds = static_cast<int>(state.range(0));
    workload w(bench::size_arg(state, 1), stream.exec());
    // The chunk size the pipeline would choose, so both split the batch alike.
    gpubatch::pipeline<float, float, gpubatch::cuda_exec> sizing(
        stream.exec(), gpubatch::item_shape{item_floats, item_floats});
    const std::size_t chunk_floats = sizing.plan(w.items).chunk_items * item_floats;
    gpubatch::device_buffer<float> in(chunk_floats, stream.exec());
    gpubatch::device_buffer<float> out(chunk_floats, stream.exec());
    const std::size_t total = w.input.size();
    const auto once = [&] {
      for (std::size_t first = 0; first < total; first += chunk_floats) {
        const std::size_t n = std::min(chunk_floats, total - first);
        GPUBATCH_CUDA_TRY(cudaMemcpyAsync(in.data(), w.input.data() + first, n * sizeof(float),
                                          cudaMemcpyHostToDevice, stream.get()));
        launch_rounds(stream.get(), in.data(), out.data(), n, rounds);
        GPUBATCH_CUDA_TRY(cudaMemcpyAsync(w.output.data() + first, out.data(), n * sizeof(float),
                                          cudaMemcpyDeviceToHost, stream.get()));
      }
      stream.synchronize();
    };
    once();
    for (auto _ : state) {
      once();
    }
    bench::set_rates(state, 0, 2.0 * static_cast<double>(total * sizeof(float)));
  });
}

void pipeline_chunks_cuda_gpubatch(benchmark::State& state) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    time_pipeline(state, stream, 256 * bench::mib, 4096, bench::size_arg(state));
  });
}

void pipeline_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rounds", "bytes"})
      ->ArgsProduct({{0, 4096, 16384}, {64 * bench::mib, 256 * bench::mib, 1024 * bench::mib}});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(pipeline_cuda_gpubatch)
    ->Name(bench::name("pipeline.cuda", bench::subject))
    ->Apply(pipeline_args);
BENCHMARK(pipeline_cuda_serial)->Name(bench::name("pipeline.cuda", "serial"))->Apply(pipeline_args);
BENCHMARK(pipeline_chunks_cuda_gpubatch)
    ->Name(bench::name("pipeline_chunks.cuda", bench::subject))
    ->ArgName("chunk_items")
    ->RangeMultiplier(4)
    ->Range(64, 65536)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
