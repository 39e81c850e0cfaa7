// The pipeline on the CUDA backend: the shared bodies, and what only a device can show.
#include "../support/cuda_backend.hpp"

#include "pipeline.inc"

#include <chrono>
#include <thread>

namespace {
__global__ void never_runs() {}
}  // namespace

TEST_CASE("pipeline chunk views are device memory on the compute stream", "[pipeline][gpu]") {
  const auto input = random_input(40, 2, 8);
  std::vector<out_t> output(40 * 2, poison);
  gpubatch::pipeline_options options;
  options.chunk_items = 16;
  pipeline_type p(test_backend::exec(), gpubatch::item_shape{2, 2, gpubatch::workspace_of<in_t>(2)}, options);
  bool device_views = true;
  bool own_stream = true;
  (void)gpubatch::test::within(gpubatch::test::wait_limit, [&] {
    return p.run(input, output,
                 [&](gpubatch::cuda_exec exec, const gpubatch::pipeline_chunk<in_t, out_t>& c) {
                   device_views = device_views &&
                                  gpubatch::memory_space_of(c.input.data()) ==
                                      gpubatch::memory_space::device &&
                                  c.output.space() == gpubatch::memory_space::device &&
                                  c.workspace.space() == gpubatch::memory_space::device;
                   own_stream = own_stream && exec.stream() != test_backend::stream().get();
                   gpubatch::test::transform_items{2, 2}(exec, c);
                 });
  });
  CHECK(device_views);
  CHECK(own_stream);
  CHECK(output == gpubatch::test::expected_output(input, 2, 2));
  CHECK(p.device() >= 0);
}

TEST_CASE("pipeline fault: a CUDA launch error stops the run at its chunk", "[pipeline][gpu][fault]") {
  const std::size_t items = 80;
  const auto input = random_input(items, 1, 9);
  std::vector<out_t> output(items, poison);
  gpubatch::pipeline_options options;
  options.chunk_items = 16;
  pipeline_type p(test_backend::exec(), gpubatch::item_shape{1, 1}, options);
  try {
    gpubatch::test::within(gpubatch::test::wait_limit, [&] {
      return p.run(input, output, [](gpubatch::cuda_exec exec, const auto& c) {
        if (c.index == 2) {
          // Too many threads: a launch error.
          gpubatch::launch(never_runs, gpubatch::launch_config{1, 4096, 0, exec.stream()});
          return;
        }
        gpubatch::test::transform_items{1, 1}(exec, c);
      });
    });
    FAIL("no exception");
  } catch (const gpubatch::pipeline_error& e) {
    CHECK(e.chunk() == 2);
    CHECK_THROWS_AS(e.rethrow_cause(), gpubatch::cuda_error);
  }
  const auto expected = gpubatch::test::expected_output(input, 1, 1);
  CHECK(std::equal(output.begin(), output.begin() + 32, expected.begin()));
  CHECK(p.pinned_stats().bytes_in_use == 0);
  CHECK(p.device_bytes() == 0);
  CHECK(cudaPeekAtLastError() == cudaSuccess);  // the error was consumed, not left behind
}

TEST_CASE("pipeline runs after the work already issued to the caller's stream",
          "[pipeline][gpu]") {
  const auto input = random_input(64, 1, 10);
  std::vector<out_t> output(64, poison);
  gpubatch::pipeline_options options;
  options.chunk_items = 16;
  pipeline_type p(test_backend::exec(), gpubatch::item_shape{1, 1}, options);
  gpubatch::test::gate<gpubatch::cuda_exec> g(test_backend::exec());
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    g.open();
  });
  const auto start = std::chrono::steady_clock::now();
  (void)gpubatch::test::within(gpubatch::test::wait_limit, [&] {
    return p.run(input, output, gpubatch::test::transform_items{1, 1});
  });
  const auto elapsed = std::chrono::steady_clock::now() - start;
  opener.join();
  CHECK(elapsed >= std::chrono::milliseconds(90));
  CHECK(output == gpubatch::test::expected_output(input, 1, 1));
}
