// The pipeline on the host backend (worker threads stand in for streams), plus the arithmetic
// every backend shares: chunking, ring slots, the memory-aware chooser, slicing, and the
// host queue that stands in for a CUDA stream.
#include "../support/host_backend.hpp"

#include "pipeline.inc"

#include <gpubatch/detail/pipeline/chunking.hpp>
#include <gpubatch/detail/pipeline/host_queue.hpp>

#include <atomic>
#include <chrono>
#include <limits>
#include <new>
#include <thread>

namespace {
using gpubatch::detail::chunk_at;
using gpubatch::detail::chunk_count;
constexpr std::size_t mib = std::size_t{1} << 20;
}  // namespace

TEST_CASE("chunk arithmetic: partial last chunk, small and empty batches", "[pipeline][chunking]") {
  CHECK(chunk_count(100, 16) == 7);
  CHECK(chunk_at(6, 100, 16).first == 96);
  CHECK(chunk_at(6, 100, 16).count == 4);
  CHECK(chunk_count(96, 16) == 6);  // divisible: no partial chunk
  CHECK(chunk_at(5, 96, 16).count == 16);
  CHECK(chunk_count(7, 1000) == 1);  // smaller than one chunk
  CHECK(chunk_at(0, 7, 1000).count == 7);
  CHECK(chunk_count(0, 16) == 0);  // empty
  CHECK(chunk_at(0, 0, 16).count == 0);
  CHECK(chunk_count(1, 1) == 1);
  // Every item in exactly one chunk, in order.
  const auto sizes = gpubatch::test::random_values<std::size_t>(50, 3, 1, 5000);
  for (std::size_t i = 0; i + 1 < sizes.size(); i += 2) {
    const std::size_t items = sizes[i];
    const std::size_t chunk = sizes[i + 1];
    std::size_t next = 0;
    for (std::size_t k = 0; k < chunk_count(items, chunk); ++k) {
      const auto r = chunk_at(k, items, chunk);
      CHECK(r.first == next);
      CHECK(r.count >= 1);
      CHECK(r.count <= chunk);
      next += r.count;
    }
    CHECK(next == items);
  }
  CHECK(gpubatch::detail::ring_slot(7, 3) == 1);
  const auto plan = gpubatch::detail::make_plan(100, 16, false);
  CHECK(plan.chunks == 7);
  CHECK(plan.last_chunk_items == 4);
  CHECK(gpubatch::detail::make_plan(0, 16, false).last_chunk_items == 0);
}

TEST_CASE("split_items cuts a batch into contiguous near-equal slices", "[pipeline][chunking]") {
  for (const std::size_t items : {0, 1, 7, 100, 101}) {
    for (const std::size_t parts : {1, 2, 3, 8}) {
      std::size_t next = 0;
      for (std::size_t part = 0; part < parts; ++part) {
        const auto slice = gpubatch::split_items(items, parts, part);
        CHECK(slice.first == next);
        CHECK(slice.count <= items / parts + 1);
        CHECK(slice.count >= items / parts);
        next += slice.count;
      }
      CHECK(next == items);
    }
  }
  CHECK_THROWS_AS(gpubatch::split_items(10, 2, 2), gpubatch::invalid_argument);
  CHECK_THROWS_AS(gpubatch::split_items(10, 0, 0), gpubatch::invalid_argument);
}

TEST_CASE("the chooser: memory with headroom, policy bounds, overlap, batch size",
          "[pipeline][chooser]") {
  using policy = gpubatch::pipeline_policy<3, 3, 4, 1024>;
  gpubatch::pipeline_options options;
  options.headroom_bytes = 100 * mib;
  options.headroom_fraction = 0.0;
  // 1 MiB per item, 3 buffers: 400 MiB free - 100 MiB headroom fits 100 items per chunk.
  auto plan = gpubatch::choose_chunk_items<policy>(100000, mib, 400 * mib, options);
  CHECK(plan.chunk_items == 100);
  CHECK(plan.memory_limited);
  CHECK(plan.chunks == 1000);
  // The fraction wins when it is larger: 50 % of 400 MiB leaves 200 MiB, 66 items.
  options.headroom_fraction = 0.5;
  plan = gpubatch::choose_chunk_items<policy>(100000, mib, 400 * mib, options);
  CHECK(plan.chunk_items == 66);
  // Plenty of memory: the policy's maximum.
  plan = gpubatch::choose_chunk_items<policy>(100000, 16, std::size_t{64} << 30, options);
  CHECK(plan.chunk_items == 1024);
  CHECK_FALSE(plan.memory_limited);
  // A small batch is split over the buffers, never below the policy's minimum.
  CHECK(gpubatch::choose_chunk_items<policy>(30, 16, std::size_t{64} << 30, options).chunk_items == 10);
  CHECK(gpubatch::choose_chunk_items<policy>(9, 16, std::size_t{64} << 30, options).chunk_items == 4);
  CHECK(gpubatch::choose_chunk_items<policy>(3, 16, std::size_t{64} << 30, options).chunk_items == 3);
  // Memory below the policy's minimum still runs, with what fits.
  options.headroom_fraction = 0.0;
  plan = gpubatch::choose_chunk_items<policy>(1000, mib, 106 * mib, options);
  CHECK(plan.chunk_items == 2);
  CHECK(plan.memory_limited);
  // Not one item per buffer fits: out_of_memory, with the numbers.
  try {
    (void)gpubatch::choose_chunk_items<policy>(1000, mib, 102 * mib, options);
    FAIL("no exception");
  } catch (const gpubatch::out_of_memory& e) {
    CHECK(e.bytes_free() == 102 * mib);
    CHECK(e.bytes_requested() == 103 * mib);
  }
  // No device bytes per item: the policy decides alone. An empty batch still gets a size.
  CHECK(gpubatch::choose_chunk_items<policy>(5000, 0, 0, options).chunk_items == 1024);
  CHECK(gpubatch::choose_chunk_items<policy>(0, 16, 400 * mib, options).chunk_items == 1024);
  options.headroom_fraction = -0.1;
  CHECK_THROWS_AS(gpubatch::choose_chunk_items<policy>(10, 1, mib, options),
                  gpubatch::invalid_argument);
}

TEST_CASE("pipeline_policy exposes its parameters", "[pipeline]") {
  using policy = gpubatch::pipeline_policy<4, 2, 8, 64>;
  STATIC_REQUIRE(policy::buffers_in_flight == 4);
  STATIC_REQUIRE(policy::streams == 2);
  STATIC_REQUIRE(policy::min_chunk_items == 8);
  STATIC_REQUIRE(policy::max_chunk_items == 64);
  STATIC_REQUIRE(gpubatch::default_pipeline_policy::buffers_in_flight == 3);
  STATIC_REQUIRE(std::is_nothrow_move_constructible_v<pipeline_type>);
  STATIC_REQUIRE_FALSE(std::is_copy_constructible_v<pipeline_type>);
  STATIC_REQUIRE(std::is_trivially_copyable_v<gpubatch::pipeline_chunk<float, double>>);
}

TEST_CASE("host_queue runs in order, and a failure poisons what follows", "[pipeline][queue]") {
  gpubatch::detail::host_queue a;
  gpubatch::detail::host_queue b;
  std::vector<int> order;
  std::mutex m;
  const auto note = [&](int v) {
    const std::lock_guard<std::mutex> lock(m);
    order.push_back(v);
  };
  a.enqueue([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    note(1);
  });
  const auto first = a.signal();
  b.wait(first);  // b's work must not overtake a's
  b.enqueue([&] { note(2); });
  const auto second = b.signal();
  REQUIRE(second.wait_for(gpubatch::test::wait_limit));
  CHECK(order == std::vector<int>{1, 2});
  CHECK_NOTHROW(second.wait());

  a.enqueue([] { throw std::runtime_error("stage failed"); });
  a.enqueue([&] { note(3); });  // skipped: the queue has failed
  const auto failed = a.signal();
  b.wait(failed);
  b.enqueue([&] { note(4); });  // skipped: b waited on a failed fence
  const auto propagated = b.signal();
  REQUIRE(propagated.wait_for(gpubatch::test::wait_limit));
  CHECK_THROWS_WITH(failed.wait(), "stage failed");
  CHECK_THROWS_WITH(propagated.wait(), "stage failed");
  a.drain();
  b.drain();
  CHECK(order == std::vector<int>{1, 2});
  CHECK(first.failure() == nullptr);  // fences before the failure stay clean

  a.reset();
  b.reset();
  a.enqueue([&] { note(5); });
  CHECK_NOTHROW(a.signal().wait());
  CHECK(order.back() == 5);
}

TEST_CASE("the host pipeline overlaps stages on worker threads", "[pipeline]") {
  // Five chunks whose stage sleeps, and a progress callback (on the driver's thread) that sleeps
  // as long: run one after the other they take 10 naps; overlapped, about 6. The stage must run
  // on a worker, and be seen running while the driver is in a callback.
  using namespace std::chrono_literals;
  constexpr auto nap = 100ms;
  constexpr std::size_t chunks = 5;
  const std::size_t items = chunks * 10;
  const auto input = random_input(items, 1, 2);
  std::vector<out_t> output(items, poison);
  gpubatch::pipeline_options options;
  options.chunk_items = 10;
  pipeline_type p(gpubatch::on_host, gpubatch::item_shape{1, 1}, options);
  std::atomic<int> stages_on_driver{0};
  std::atomic<int> stages_running{0};
  std::atomic<bool> overlapped{false};
  const auto started = std::chrono::steady_clock::now();
  (void)gpubatch::test::within(gpubatch::test::wait_limit, [&] {
    const auto driver = std::this_thread::get_id();  // the thread that calls run()
    return p.run(
        input, output,
        [&](auto exec, const gpubatch::pipeline_chunk<in_t, out_t>& c) {
          if (std::this_thread::get_id() == driver) {
            ++stages_on_driver;
          }
          ++stages_running;
          std::this_thread::sleep_for(nap);
          gpubatch::test::transform_items{1, 1}(exec, c);
          --stages_running;
        },
        [&](std::size_t, std::size_t) {
          const auto until = std::chrono::steady_clock::now() + nap;
          while (std::chrono::steady_clock::now() < until) {
            if (stages_running.load() > 0) {
              overlapped = true;
            }
            std::this_thread::sleep_for(1ms);
          }
        });
  });
  const auto elapsed = std::chrono::steady_clock::now() - started;
  CHECK(stages_on_driver == 0);
  CHECK(overlapped);
  // Serial execution takes at least 2 * chunks naps; overlapped about chunks + 1.
  CHECK(elapsed < 2 * chunks * nap);
  CHECK(output == gpubatch::test::expected_output(input, 1, 1));
}
