// The streaming pipeline on the host backend against the same chunks done one after another
// on one thread (copy in, compute, copy out), 4 KiB items of floats:
//
//   pipeline.host   pipeline<float, float, host_exec>::run   vs serial
//
// With worker threads per stage, copy in, compute and copy out of consecutive chunks overlap,
// so the pipeline approaches the time of its slowest stage; `serial` pays for all three.
// bytes_per_second counts input read plus output written. Wall clock (UseRealTime).
#include "support/harness.hpp"

#include <gpubatch/containers.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/pipeline.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

namespace {

namespace bench = gpubatch::bench;

constexpr std::size_t item_floats = 1024;
constexpr std::size_t chunk_items = 256;  // 1 MiB chunks
constexpr int rounds = 8;                 // arithmetic per element: makes compute ~ copies

/// The stage's arithmetic, shared by both implementations so they do the same work.
void compute(const float* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    float v = in[i];
    for (int r = 0; r < rounds; ++r) {
      v = v * 1.0001F + 0.5F;
    }
    out[i] = v;
  }
}

void pipeline_sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("bytes")->RangeMultiplier(4)->Range(4 * bench::mib, 64 * bench::mib);
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

void pipeline_host_gpubatch(benchmark::State& state) {
  bench::run_host_benchmark(state, [&] {
    const std::size_t bytes = bench::size_arg(state);
    const std::size_t items = bytes / (item_floats * sizeof(float));
    std::vector<float> input(items * item_floats, 1.0F);
    std::vector<float> output(items * item_floats, 0.0F);
    gpubatch::pipeline_options options;
    options.chunk_items = chunk_items;
    gpubatch::pipeline<float, float, gpubatch::host_exec> p(
        gpubatch::on_host, gpubatch::item_shape{item_floats, item_floats}, options);
    const auto stage = [](gpubatch::host_exec, const gpubatch::pipeline_chunk<float, float>& c) {
      compute(c.input.data(), c.output.data(), c.input.size());
    };
    (void)p.run(input, output, stage);  // warm-up: allocation, first touch
    for (auto _ : state) {
      (void)p.run(input, output, stage);
    }
    benchmark::DoNotOptimize(output.data());
    bench::set_rates(state, 0, 2.0 * static_cast<double>(bytes));
  });
}

void pipeline_host_serial(benchmark::State& state) {
  bench::run_host_benchmark(state, [&] {
    const std::size_t bytes = bench::size_arg(state);
    const std::size_t items = bytes / (item_floats * sizeof(float));
    std::vector<float> input(items * item_floats, 1.0F);
    std::vector<float> output(items * item_floats, 0.0F);
    const std::size_t chunk = chunk_items * item_floats;
    gpubatch::device_buffer<float> in(chunk, gpubatch::on_host);
    gpubatch::device_buffer<float> out(chunk, gpubatch::on_host);
    const auto once = [&] {
      for (std::size_t first = 0; first < input.size(); first += chunk) {
        const std::size_t n = std::min(chunk, input.size() - first);
        std::memcpy(in.data(), input.data() + first, n * sizeof(float));
        compute(in.data(), out.data(), n);
        std::memcpy(output.data() + first, out.data(), n * sizeof(float));
      }
    };
    once();
    for (auto _ : state) {
      once();
    }
    benchmark::DoNotOptimize(output.data());
    bench::set_rates(state, 0, 2.0 * static_cast<double>(bytes));
  });
}

}  // namespace

BENCHMARK(pipeline_host_gpubatch)
    ->Name(bench::name("pipeline.host", bench::subject))
    ->Apply(pipeline_sizes);
BENCHMARK(pipeline_host_serial)->Name(bench::name("pipeline.host", "serial"))->Apply(pipeline_sizes);
