// The GEMM logic both backends share: operand strides, launch splitting, the size classes and
// the epilogue store.
#include <gpubatch/conv_policy.hpp>
#include <gpubatch/gemm.hpp>

#include "../support/catch.hpp"

#include <cmath>
#include <limits>

using gpubatch::index_t;
using gpubatch::layout;
using gpubatch::op;
namespace detail = gpubatch::detail;

TEST_CASE("operand strides cover every layout and transpose", "[gemm][shared]") {
  // op(X)(i, j) must land where X's own indexing puts element (i, j) or (j, i).
  const index_t ld = 7;
  for (const layout order : {layout::row_major, layout::col_major}) {
    for (const op o : {op::none, op::transpose}) {
      const detail::strides2 s = detail::operand_strides(order, o, ld);
      for (index_t i = 0; i < 3; ++i) {
        for (index_t j = 0; j < 4; ++j) {
          const index_t r = o == op::none ? i : j, c = o == op::none ? j : i;
          const index_t stored = order == layout::row_major ? r * ld + c : r + c * ld;
          REQUIRE(i * s.row + j * s.col == stored);
        }
      }
    }
  }
}

TEST_CASE("launch splitting covers the batch exactly once", "[gemm][shared]") {
  for (const index_t groups : {index_t{0}, index_t{1}, index_t{65535}, index_t{65536}, index_t{200001}}) {
    const index_t per_launch = 65535;
    const index_t launches = detail::launch_count(groups, per_launch);
    index_t next = 0;
    for (index_t l = 0; l < launches; ++l) {
      const detail::launch_slice slice = detail::slice_of_launch(groups, per_launch, l);
      REQUIRE(slice.first == next);
      REQUIRE(slice.count >= 1);
      REQUIRE(slice.count <= per_launch);
      next += slice.count;
    }
    CHECK(next == groups);
  }
}

TEST_CASE("size classes", "[gemm][shared]") {
  STATIC_REQUIRE(gpubatch::classify_gemm(32, 32, 64) == gpubatch::size_class::tiny);
  STATIC_REQUIRE(gpubatch::classify_gemm(33, 8, 8) == gpubatch::size_class::medium);
  STATIC_REQUIRE(gpubatch::classify_gemm(8, 8, 65) == gpubatch::size_class::medium);
  STATIC_REQUIRE(gpubatch::classify_gemm(512, 512, 64) == gpubatch::size_class::medium);
  STATIC_REQUIRE(gpubatch::classify_gemm(513, 512, 64) == gpubatch::size_class::large);
}

TEST_CASE("default policies are valid and fit in shared memory", "[gemm][shared]") {
  using tiny = gpubatch::default_gemm_policy<float, 90, gpubatch::size_class::tiny>::type;
  using large = gpubatch::default_gemm_policy<double, 80, gpubatch::size_class::large>::type;
  STATIC_REQUIRE(tiny::problems_per_block >= 1);
  STATIC_REQUIRE(large::shared_bytes<double>() <= 163 * 1024);  // sm_80's per-block maximum
  STATIC_REQUIRE(large::threads * large::accumulators_per_thread == large::tile_m * large::tile_n);
}

TEST_CASE("a policy's blocks per SM set its register budget", "[gemm][shared]") {
  // 64 Ki registers shared by blocks x threads threads, in steps of 8, at most 255.
  STATIC_REQUIRE(detail::register_budget(256, 2) == 128);
  STATIC_REQUIRE(detail::register_budget(128, 3) == 168);  // 170.6, rounded down to 8
  STATIC_REQUIRE(detail::register_budget(256, 1) == 255);
  STATIC_REQUIRE(detail::register_budget(1024, 1) == 64);
  STATIC_REQUIRE(gpubatch::gemm_policy<64, 64, 16, 8, 2>::min_blocks_per_sm == 1);
  STATIC_REQUIRE(gpubatch::gemm_policy<64, 64, 16, 8, 2, 1, 65535, 2>::max_registers == 128);
  STATIC_REQUIRE(gpubatch::tensor_core_policy<64, 64, 32, 4, 3, 65535, 4>::max_registers == 128);
  using medium = gpubatch::default_gemm_policy<float, 90, gpubatch::size_class::medium>::type;
  using conv_medium =
      gpubatch::default_conv2d_policy<gpubatch::half, 90, gpubatch::size_class::medium>::type;
  STATIC_REQUIRE(medium::min_blocks_per_sm == 2);
  STATIC_REQUIRE(conv_medium::tensor_cores && conv_medium::max_registers == 168);
}

TEST_CASE("the epilogue store reads C only when beta is nonzero", "[gemm][shared]") {
  float c = std::numeric_limits<float>::quiet_NaN();
  detail::store_output(c, 2.0F, 1.5F, 0.0F, gpubatch::epilogue::identity{}, 0, 0, 0);
  CHECK(c == 3.0F);
  detail::store_output(c, 2.0F, 1.0F, 2.0F, gpubatch::epilogue::relu{}, 0, 0, 0);
  CHECK(c == 8.0F);
  gpubatch::half h = gpubatch::convert<gpubatch::half>(1.0F);
  detail::store_output(h, -4.0F, 1.0F, 1.0F, gpubatch::epilogue::relu{}, 0, 0, 0);
  CHECK(gpubatch::convert<float>(h) == 0.0F);
}
