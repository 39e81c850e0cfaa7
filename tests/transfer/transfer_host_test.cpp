// Transfers on the host backend, plus the pure logic every backend relies on: size classes,
// copy planning (including the CUDA backend's pageable refusal, decided before any CUDA call),
// region simplification and host fences.
// This executable builds with the NVTX ranges compiled out (the pipeline tests keep them in),
// and checks below that the pipeline still builds and runs so.
#define GPUBATCH_DISABLE_NVTX
#include "../support/host_backend.hpp"

#include "transfer.inc"

#include <gpubatch/detail/transfer/plan.hpp>
#include <gpubatch/detail/transfer/size_class.hpp>

#include <set>
#include <stdexcept>

namespace {
using gpubatch::memory_space;
using gpubatch::detail::copy_mode;
using gpubatch::detail::copy_region;
}  // namespace

TEST_CASE("pinned size classes bound the waste to 1/8 (or 256 bytes)", "[transfer][pool]") {
  using gpubatch::detail::pinned_block_size;
  const auto sizes = gpubatch::test::random_values<std::size_t>(2000, 17, 1, 1 << 30);
  std::vector<std::size_t> all(sizes);
  for (std::size_t s : {1, 255, 256, 257, 2047, 2048, 2049, 4095, 4096, 4097, 1 << 20}) {
    all.push_back(s);
  }
  for (const std::size_t bytes : all) {
    const std::size_t block = pinned_block_size(bytes);
    INFO("bytes = " << bytes << ", block = " << block);
    REQUIRE(block >= bytes);
    CHECK((block - bytes < 256 || (block - bytes) * 8 < bytes));
    CHECK(pinned_block_size(block) == block);  // a block is its own class
    CHECK(block % 256 == 0);
  }
  for (std::size_t bytes = 1; bytes < 100000; bytes += 37) {
    CHECK(pinned_block_size(bytes) <= pinned_block_size(bytes + 37));  // monotonic
  }
  // Eight classes per doubling above the small sizes (power-of-two classes would have one).
  std::set<std::size_t> classes;
  for (std::size_t bytes = (1 << 20) + 1; bytes <= (1 << 21); bytes += 1024) {
    classes.insert(pinned_block_size(bytes));
  }
  CHECK(classes.size() == 8);
  CHECK(pinned_block_size(std::size_t(-1)) == 0);  // overflow is reported, not wrapped
  CHECK(gpubatch::pinned_pool<gpubatch::host_exec>::block_size(4000) == 4096);
}

TEST_CASE("copy planning: pageable memory is refused by async copies, with the reason",
          "[transfer][plan]") {
  using gpubatch::detail::plan_cuda_copy;
  const auto refused = [](memory_space dst, memory_space src, const char* parameter) {
    try {
      (void)plan_cuda_copy(dst, src, copy_mode::async);
      FAIL("no exception");
    } catch (const gpubatch::invalid_argument& e) {
      CHECK(e.parameter() == parameter);
      const std::string what = e.what();
      CHECK(what.find("pageable") != std::string::npos);
      if (std::string(parameter) == "src" && dst != memory_space::host) {
        CHECK(what.find("blocks the calling thread") != std::string::npos);
        CHECK(what.find("stage_through") != std::string::npos);
      }
    }
  };
  refused(memory_space::device, memory_space::host, "src");
  refused(memory_space::host, memory_space::device, "dst");
  refused(memory_space::pinned, memory_space::host, "src");
  refused(memory_space::host, memory_space::host, "src");
  CHECK_THROWS_AS(plan_cuda_copy(memory_space::host, memory_space::host, copy_mode::staged),
                  gpubatch::invalid_argument);

  const auto h2d = plan_cuda_copy(memory_space::device, memory_space::pinned, copy_mode::async);
  CHECK(h2d.kind == cudaMemcpyHostToDevice);
  CHECK_FALSE(h2d.stage_source);
  const auto d2h = plan_cuda_copy(memory_space::pinned, memory_space::device, copy_mode::async);
  CHECK(d2h.kind == cudaMemcpyDeviceToHost);
  CHECK(plan_cuda_copy(memory_space::device, memory_space::device, copy_mode::async).kind ==
        cudaMemcpyDeviceToDevice);
  CHECK(plan_cuda_copy(memory_space::pinned, memory_space::pinned, copy_mode::async).kind ==
        cudaMemcpyHostToHost);
  CHECK(plan_cuda_copy(memory_space::managed, memory_space::pinned, copy_mode::async).kind ==
        cudaMemcpyDefault);

  const auto staged_in = plan_cuda_copy(memory_space::device, memory_space::host, copy_mode::staged);
  CHECK(staged_in.stage_source);
  CHECK_FALSE(staged_in.stage_destination);
  CHECK(staged_in.kind == cudaMemcpyHostToDevice);
  const auto staged_out = plan_cuda_copy(memory_space::host, memory_space::device, copy_mode::staged);
  CHECK(staged_out.stage_destination);
  CHECK(staged_out.kind == cudaMemcpyDeviceToHost);
  const auto sync = plan_cuda_copy(memory_space::device, memory_space::host, copy_mode::synchronous);
  CHECK_FALSE(sync.stage_source);
  CHECK(sync.kind == cudaMemcpyHostToDevice);
  CHECK(plan_cuda_copy(memory_space::host, memory_space::host, copy_mode::synchronous).host_only);
}

TEST_CASE("the CUDA backend refuses a pageable source before touching the device",
          "[transfer][plan]") {
  // No device is needed: the refusal is decided on the host, before any CUDA call.
  std::vector<float> pageable(16, 1.0F);
  float fake_device_memory[16] = {};
  const gpubatch::span<float> device_side(fake_device_memory, 16, memory_space::device);
  try {
    gpubatch::copy_async(gpubatch::on(nullptr), device_side, pageable);
    FAIL("no exception");
  } catch (const gpubatch::invalid_argument& e) {
    CHECK(e.parameter() == "src");
    CHECK(std::string(e.what()).find("pageable") != std::string::npos);
  }
  CHECK(fake_device_memory[0] == 0.0F);
}

TEST_CASE("the host backend refuses device memory", "[transfer][plan]") {
  float a[4] = {1, 2, 3, 4};
  float b[4] = {};
  try {
    gpubatch::copy_async(gpubatch::on_host, gpubatch::span<float>(b, 4, memory_space::device),
                         gpubatch::span<const float>(a, 4));
    FAIL("no exception");
  } catch (const gpubatch::invalid_argument& e) {
    CHECK(e.parameter() == "dst");
  }
  CHECK(b[0] == 0.0F);
}

TEST_CASE("copy regions merge whatever is contiguous on both sides", "[transfer][plan]") {
  std::byte buffer[1];
  const auto matrices = [&](std::size_t width, std::size_t height, std::size_t pitch,
                            std::size_t count, std::size_t stride) {
    return copy_region{buffer, width, height, pitch, count, stride, memory_space::host};
  };
  // Packed on both sides: one 1-D copy.
  auto d = matrices(12, 5, 12, 4, 60);
  auto s = matrices(12, 5, 12, 4, 60);
  gpubatch::detail::simplify(d, s);
  CHECK(d.count == 1);
  CHECK(d.height == 1);
  CHECK(d.width == 240);
  // Padded lines, evenly spaced matrices: one 2-D copy of all lines.
  d = matrices(12, 5, 16, 4, 80);
  s = matrices(12, 5, 12, 4, 60);
  gpubatch::detail::simplify(d, s);
  CHECK(d.count == 1);
  CHECK(d.height == 20);
  CHECK(d.width == 12);
  // A gap between matrices on one side: one contiguous copy per matrix.
  d = matrices(12, 5, 12, 4, 64);
  s = matrices(12, 5, 12, 4, 60);
  gpubatch::detail::simplify(d, s);
  CHECK(d.count == 4);
  CHECK(d.height == 1);
  CHECK(d.width == 60);
  CHECK(s.stride == 60);
  // A broadcast source stays one plane repeated.
  d = matrices(12, 5, 12, 3, 60);
  s = matrices(12, 5, 12, 3, 0);
  gpubatch::detail::simplify(d, s);
  CHECK(d.count == 3);
  CHECK(s.stride == 0);
}

TEST_CASE("host_fence: pending until signalled, carries the failure", "[transfer][fence]") {
  const gpubatch::host_fence done;
  CHECK(done.ready());
  CHECK_NOTHROW(done.wait());
  const auto fence = gpubatch::host_fence::pending();
  CHECK_FALSE(fence.ready());
  CHECK_FALSE(fence.wait_for(std::chrono::milliseconds(5)));
  std::thread worker([fence] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    fence.signal(std::make_exception_ptr(std::runtime_error("copy failed")));
  });
  CHECK(fence.wait_for(gpubatch::test::wait_limit));
  worker.join();
  CHECK(fence.ready());
  CHECK_THROWS_WITH(fence.wait(), "copy failed");
  fence.signal();  // the first signal wins
  CHECK(fence.failure() != nullptr);
  int queue = 0;
  CHECK(gpubatch::host_fence::pending(&queue).same_order(gpubatch::host_fence::pending(&queue)));
  CHECK_FALSE(gpubatch::host_fence::pending().same_order(gpubatch::host_fence::pending()));
}

TEST_CASE("register_host on the host backend pins nothing and validates", "[transfer][register]") {
  std::vector<int> v(8, 1);
  const auto registration = gpubatch::register_host(gpubatch::on_host, v);
  CHECK_FALSE(registration.registered());
  CHECK(registration.space() == memory_space::host);
  int* const null = nullptr;
  CHECK_THROWS_AS(gpubatch::register_host(gpubatch::on_host, null, 4), gpubatch::invalid_argument);
  CHECK_NOTHROW(gpubatch::register_host(gpubatch::on_host, null, 0));
}

TEST_CASE("the pipeline builds and runs with NVTX compiled out", "[transfer][nvtx]") {
#if !defined(GPUBATCH_DISABLE_NVTX) || defined(NVTX_VERSION)
  FAIL("NVTX is still included");
#endif
  const auto input = gpubatch::test::random_values<int>(100, 2, -9, 9);
  std::vector<long> output(100, -1);
  gpubatch::pipeline_options options;
  options.chunk_items = 7;
  const auto report = gpubatch::run_pipeline(
      gpubatch::on_host, gpubatch::item_shape{1, 1}, input, output,
      [](gpubatch::host_exec, const gpubatch::pipeline_chunk<int, long>& c) {
        for (std::size_t i = 0; i < c.items; ++i) c.output[i] = 2L * c.input[i];
      },
      options);
  CHECK(report.chunks == 15);
  for (std::size_t i = 0; i < input.size(); ++i) CHECK(output[i] == 2L * input[i]);
}
