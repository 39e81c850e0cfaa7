// Device groups on the CUDA backend: every visible device (two emulated H100s in the emulated
// run), with operands in host memory and the epilogues' data in pinned memory.
#include "../support/cuda_backend.hpp"

#include <gpubatch/multi_device.hpp>

#include <chrono>
#include <exception>
#include <thread>

namespace {
gpubatch::device_group<gpubatch::cuda_exec> make_group() { return gpubatch::cuda_devices(); }
using gpubatch::test::test_backend;
gpubatch::cuda_exec pinned_exec() { return test_backend::exec(); }
}  // namespace

#include "multi_device.inc"

TEST_CASE("CUDA group: devices are checked when the group is built", "[multi_device]") {
  int count = 0;
  GPUBATCH_CUDA_TRY(cudaGetDeviceCount(&count));
  gpubatch::test::require_invalid("devices", [] { (void)gpubatch::cuda_devices(std::vector<int>{}); });
  gpubatch::test::require_invalid("devices", [] { (void)gpubatch::cuda_devices({0, 0}); });
  gpubatch::test::require_invalid("devices", [&] { (void)gpubatch::cuda_devices({count}); });
  gpubatch::test::require_invalid("devices", [] { (void)gpubatch::cuda_devices({-1}); });
  const auto group = gpubatch::cuda_devices();
  REQUIRE(group.size() == static_cast<std::size_t>(count));
  int multiprocessors = 0;
  GPUBATCH_CUDA_TRY(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, 0));
  CHECK(group[0].device == 0);
  CHECK(group[0].weight == static_cast<double>(multiprocessors));
}

TEST_CASE("CUDA group: device memory operands are refused", "[multi_device]") {
  const auto group = make_group();
  gpubatch::device_buffer<float> on_device(16, test_backend::exec());
  std::vector<float> host(16, 1.0F);
  gpubatch::test::require_invalid("a", [&] {
    (void)gpubatch::gemm(group, op::none, op::none, 1.0F,
                         gpubatch::matrix_batch_view<const float>::packed(on_device.data(), 2, 2, 4),
                         gpubatch::matrix_batch_view<const float>::packed(host.data(), 2, 2, 4),
                         0.0F, gpubatch::matrix_batch_view<float>::packed(host.data(), 2, 2, 4));
  });
  test_backend::synchronize();
}

TEST_CASE("CUDA group: a share holds no more than fits in its device's memory", "[multi_device]") {
  const auto group = make_group();
  const index_t count = 40;
  const auto a = random_inputs<float>(8 * 8 * count, 1), b = random_inputs<float>(8 * 8 * count, 2);
  const std::size_t per_problem = 3 * 8 * 8 * sizeof(float);
  // The cap follows device 0's free memory when the run starts, which another process on the
  // same GPU changes at will: an attempt counts only when free memory was the same before and
  // after it (a failed one is retried after a pause).
  constexpr int attempts = 50;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    std::vector<float> c(8 * 8 * count, poison_value<float>());
    std::size_t free_bytes = 0, free_after = 0, total_bytes = 0;
    GPUBATCH_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
    // Leave room for one matrix of each operand (a share spans that much beyond its problems)
    // and 4 problems: device 0 takes shares of at most 4.
    gpubatch::split_options options;
    options.headroom_fraction = 0.0;
    options.headroom_bytes = free_bytes - (per_problem + 4 * per_problem + 100);
    gpubatch::split_report report;
    std::exception_ptr failure;
    try {
      report = gpubatch::gemm(
          group, op::none, op::none, 1.0F, gpubatch::matrix_batch_view<const float>::packed(a.data(), 8, 8, count),
          gpubatch::matrix_batch_view<const float>::packed(b.data(), 8, 8, count), 0.0F,
          gpubatch::matrix_batch_view<float>::packed(c.data(), 8, 8, count), gpubatch::epilogue::identity{},
          {}, options);
    } catch (const gpubatch::error&) {
      failure = std::current_exception();
    }
    GPUBATCH_CUDA_TRY(cudaMemGetInfo(&free_after, &total_bytes));
    if (free_after != free_bytes) {  // another process allocated or freed meanwhile
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (failure) std::rethrow_exception(failure);
    // Device 0's share cap is 4 problems (others have their own free memory, at least as much).
    CHECK(report.members[0].shares >= (report.members[0].items + 3) / 4);
    std::size_t done = 0;
    for (const auto& m : report.members) done += m.items;
    CHECK(done == static_cast<std::size_t>(count));
    std::size_t unwritten = 0;
    for (const float v : c) unwritten += std::isnan(v) ? 1 : 0;
    CHECK(unwritten == 0);
    return;
  }
  FAIL("device 0's free memory changed during each of " << attempts
                                                        << " attempts: nothing was checked");
}
