// Device groups on the host backend: three host workers stand in for three GPUs, in checked
// mode, so what passes here places its data as a CUDA group needs it.
#include "../support/host_backend.hpp"

#include <gpubatch/multi_device.hpp>

#include <chrono>
#include <thread>

namespace {
gpubatch::device_group<gpubatch::host_exec> make_group() {
  return gpubatch::host_workers(3, gpubatch::on_host_checked);
}
gpubatch::host_exec pinned_exec() { return gpubatch::on_host; }
}  // namespace

#include "multi_device.inc"

TEST_CASE("host group: a slow member takes less of the batch, and nobody waits at the end",
          "[multi_device]") {
  const auto group = gpubatch::host_workers(2);
  const std::size_t items = 400;
  // Member 1 is ten times slower per item than member 0.
  const auto report = gpubatch::for_each_share(
      group, items, [](gpubatch::host_exec, const gpubatch::group_member& member,
                       gpubatch::item_range range) {
        const auto per_item = std::chrono::microseconds(member.index == 0 ? 100 : 1000);
        std::this_thread::sleep_for(per_item * static_cast<long>(range.count));
      });
  INFO("member 0: " << report.members[0].items << " items in " << report.members[0].seconds
                    << " s; member 1: " << report.members[1].items << " items in "
                    << report.members[1].seconds << " s");
  CHECK(report.members[0].items + report.members[1].items == items);
  CHECK(report.members[0].items > 3 * report.members[1].items);
  // An even split would keep member 1 busy 0.2 s; the shares keep the run near 0.4 / 11 s.
  CHECK(report.seconds < 0.15);
}

TEST_CASE("host group: checked mode refuses device-role operands, as a CUDA group does",
          "[multi_device]") {
  const auto group = make_group();
  gpubatch::device_buffer<float> on_device(16, gpubatch::on_host);
  std::vector<float> host(16, 1.0F);
  gpubatch::test::require_invalid("a", [&] {
    (void)gpubatch::gemm(group, op::none, op::none, 1.0F,
                         gpubatch::matrix_batch_view<const float>::packed(on_device.data(), 2, 2, 4),
                         gpubatch::matrix_batch_view<const float>::packed(host.data(), 2, 2, 4),
                         0.0F, gpubatch::matrix_batch_view<float>::packed(host.data(), 2, 2, 4));
  });
  // A bias in ordinary host memory is one no GPU could read.
  std::vector<float> c(16);
  gpubatch::test::require_invalid("epilogue.bias", [&] {
    try {
      (void)gpubatch::gemm(group, op::none, op::none, 1.0F,
                           gpubatch::matrix_batch_view<const float>::packed(host.data(), 2, 2, 4),
                           gpubatch::matrix_batch_view<const float>::packed(host.data(), 2, 2, 4),
                           0.0F, gpubatch::matrix_batch_view<float>::packed(c.data(), 2, 2, 4),
                           gpubatch::epilogue::bias_row<float>{host.data(), 0});
    } catch (const gpubatch::multi_device_error& e) {
      e.rethrow_cause();
    }
  });
}
