// A device group whose second device cannot run the code (an sm_75 device for sm_90 kernels:
// GPUBATCH_EMULATED_DEVICES=h100,sm75): the failure names the device and its share, the other
// device stops after its share, and what completed is right; alone, it fails on its first share.
#include "../support/cuda_backend.hpp"

#include <gpubatch/multi_device.hpp>

#include "../support/catch.hpp"
#include "../support/inputs.hpp"

#include <cmath>

TEST_CASE("CUDA group: a device that fails is named, and completed output stays",
          "[multi_device]") {
  using gpubatch::index_t;
  // The failing device is member 0, so its thread starts first, and the batch is far more than
  // device 0 finishes before device 1 has claimed a share (no claim takes over a quarter).
  const auto group = gpubatch::cuda_devices({1, 0});
  const index_t m = 5, n = 6, k = 7, count = 4096;
  const auto a = gpubatch::test::random_inputs<float>(static_cast<std::size_t>(m * k * count), 1);
  const auto b = gpubatch::test::random_inputs<float>(static_cast<std::size_t>(k * n * count), 2);
  std::vector<float> c(static_cast<std::size_t>(m * n * count), gpubatch::test::poison_value<float>());
  try {
    (void)gpubatch::gemm(group, gpubatch::op::none, gpubatch::op::none, 1.0F,
                         gpubatch::matrix_batch_view<const float>::packed(a.data(), m, k, count),
                         gpubatch::matrix_batch_view<const float>::packed(b.data(), k, n, count), 0.0F,
                         gpubatch::matrix_batch_view<float>::packed(c.data(), m, n, count));
    FAIL("expected gpubatch::multi_device_error");
  } catch (const gpubatch::multi_device_error& e) {
    INFO(e.what());
    CHECK(e.device() == 1);
    CHECK(e.member() == 0);
    CHECK_THAT(e.what(), gpubatch::test::Contains("device 1 (member 0) failed on items"));
    CHECK(e.items().count >= 1);
    CHECK_THROWS_AS(e.rethrow_cause(), gpubatch::cuda_error);
    std::size_t checked = 0, wrong = 0, touched = 0;
    for (index_t p = 0; p < count; ++p) {
      bool complete = false;
      for (const auto& r : e.completed()) {
        complete = complete || (static_cast<std::size_t>(p) >= r.first &&
                                static_cast<std::size_t>(p) < r.first + r.count);
      }
      const bool failed = static_cast<std::size_t>(p) >= e.items().first &&
                          static_cast<std::size_t>(p) < e.items().first + e.items().count;
      CHECK_FALSE((complete && failed));
      for (index_t i = 0; i < m; ++i)
        for (index_t j = 0; j < n; ++j) {
          const float got = c[static_cast<std::size_t>((p * m + i) * n + j)];
          if (!complete) {
            touched += std::isnan(got) ? 0 : 1;
            continue;
          }
          double want = 0.0;
          for (index_t q = 0; q < k; ++q)
            want += double(a[static_cast<std::size_t>((p * m + i) * k + q)]) *
                    double(b[static_cast<std::size_t>((p * k + q) * n + j)]);
          wrong += std::abs(got - want) <= 1e-4 * (1.0 + std::abs(want)) ? 0 : 1;
          ++checked;
        }
    }
    CHECK(wrong == 0);
    CHECK(touched == 0);
    CHECK(checked == e.items_completed() * static_cast<std::size_t>(m * n));
  }
}

TEST_CASE("CUDA group: a group of one device that cannot run the code fails on its first share",
          "[multi_device]") {
  const auto group = gpubatch::cuda_devices({1});
  const auto a = gpubatch::test::random_inputs<float>(4 * 4 * 3, 3);
  std::vector<float> c(4 * 4 * 3, gpubatch::test::poison_value<float>());
  try {
    (void)gpubatch::gemm(group, gpubatch::op::none, gpubatch::op::none, 1.0F,
                         gpubatch::matrix_batch_view<const float>::packed(a.data(), 4, 4, 3),
                         gpubatch::matrix_batch_view<const float>::packed(a.data(), 4, 4, 3), 0.0F,
                         gpubatch::matrix_batch_view<float>::packed(c.data(), 4, 4, 3));
    FAIL("expected gpubatch::multi_device_error");
  } catch (const gpubatch::multi_device_error& e) {
    INFO(e.what());
    CHECK(e.device() == 1);
    CHECK(e.items().first == 0);
    CHECK(e.items_completed() == 0);
    CHECK(e.completed().empty());
    std::size_t touched = 0;
    for (const float v : c) touched += std::isnan(v) ? 0 : 1;
    CHECK(touched == 0);
  }
}
