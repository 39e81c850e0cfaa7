// The SIMT tiled kernels' thread arrangement (simt::warp_tiling) and inner product
// (simt::multiply_stage), run on the host: every thread of a block multiplies one staged K tile
// exactly as the kernel does, and the block's accumulators must equal the product of the stage;
// every C element must belong to exactly one thread; shared-memory fragment reads must be aligned
// 16-byte pieces with no bank conflicts, for the default policies and odd user policies alike.
#include <gpubatch/detail/gemm/simt_tile.hpp>
#include <gpubatch/detail/gemm/warp_tiling.hpp>
#include <gpubatch/gemm_policy.hpp>

#include "../support/catch.hpp"

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace simt = gpubatch::detail::simt;

namespace {

template <class Policy, class Compute>
using tiling_of = simt::warp_tiling<Policy::tile_m, Policy::tile_n, Policy::threads,
                                    Policy::accumulators_per_thread,
                                    simt::vector_width<Compute>>;

/// Every thread multiplies the same staged tile (random, exact in binary: small integers) and
/// each block C element is compared with the stage's product.
template <class Policy, class Compute>
void check_product() {
  using tiling = tiling_of<Policy, Compute>;
  constexpr int BM = Policy::tile_m, BN = Policy::tile_n, BK = Policy::tile_k;
  std::mt19937 rng(BM * 131 + BN * 7 + BK);
  std::uniform_int_distribution<int> value(-8, 8);
  constexpr int pa = simt::stage_pitch<Compute, BM>, pb = simt::stage_pitch<Compute, BN>;
  std::vector<Compute> a_s(pa * BK), b_s(BK * pb);  // [BK][BM] and [BK][BN], as staged
  for (auto& v : a_s) v = static_cast<Compute>(value(rng));
  for (auto& v : b_s) v = static_cast<Compute>(value(rng));

  std::vector<int> owners(BM * BN, 0);
  std::vector<Compute> c(BM * BN, Compute(-12345));
  for (int thread = 0; thread < Policy::threads; ++thread) {
    const simt::lane_origin at = tiling::origin(thread);
    Compute acc[tiling::tm][tiling::tn];
    for (auto& row : acc)
      for (auto& v : row) v = Compute(1);  // accumulates on top: proves += rather than =
    simt::multiply_stage<tiling, BM, BN, BK>(a_s.data(), b_s.data(), at, acc);
    for (int i = 0; i < tiling::tm; ++i) {
      for (int j = 0; j < tiling::tn; ++j) {
        const int row = at.row + tiling::row(i), col = at.col + tiling::col(j);
        REQUIRE(row >= 0);
        REQUIRE(row < BM);
        REQUIRE(col >= 0);
        REQUIRE(col < BN);
        ++owners[row * BN + col];
        c[row * BN + col] = acc[i][j];
      }
    }
  }
  for (int row = 0; row < BM; ++row) {
    for (int col = 0; col < BN; ++col) {
      INFO("C element (" << row << ", " << col << ")");
      REQUIRE(owners[row * BN + col] == 1);
      double expected = 1;
      for (int p = 0; p < BK; ++p) {
        expected += static_cast<double>(a_s[p * pa + row]) * static_cast<double>(b_s[p * pb + col]);
      }
      REQUIRE(static_cast<double>(c[row * BN + col]) == expected);
    }
  }
}

/// Shared-memory cost of one warp-wide read: the most distinct 4-byte words any of the 32 banks
/// must deliver. The fewest possible is ceil(distinct words / 32); more is a bank conflict.
struct bank_cost {
  int actual;
  int minimum;
};
bank_cost read_cost(const std::vector<std::int64_t>& byte_addresses, int bytes_each) {
  std::set<std::int64_t> words;
  for (const std::int64_t a : byte_addresses) {
    for (int b = 0; b < bytes_each; b += 4) words.insert((a + b) / 4);
  }
  std::map<int, int> per_bank;
  int worst = 0;
  for (const std::int64_t w : words) worst = std::max(worst, ++per_bank[static_cast<int>(w % 32)]);
  return {worst, static_cast<int>((words.size() + 31) / 32)};
}

/// Every fragment read of every warp: aligned to its piece size and free of bank conflicts.
template <class Policy, class Compute>
void check_fragment_reads() {
  using tiling = tiling_of<Policy, Compute>;
  constexpr int BM = Policy::tile_m, BN = Policy::tile_n;
  constexpr int bytes = static_cast<int>(sizeof(Compute));
  CAPTURE(tiling::lanes_m, tiling::lanes_n, tiling::warps_m, tiling::warps_n, tiling::tm,
          tiling::tn, tiling::vector_m, tiling::vector_n);
  REQUIRE(tiling::warps_m * tiling::warps_n * 32 == Policy::threads);
  REQUIRE(tiling::warps_m * tiling::warp_tile_m == BM);
  REQUIRE(tiling::warps_n * tiling::warp_tile_n == BN);
  // One operand's reads of k row p: `registers` per lane in pieces of `width` elements, the
  // lane's piece at element element_of(lane origin, p, register) of the stage.
  const auto check_reads = [&](const char* operand, int warp, int p, int registers, int width,
                               auto&& element_of) {
    for (int x = 0; x < registers; x += width) {
      std::vector<std::int64_t> addresses;
      for (int lane = 0; lane < 32; ++lane) {
        const std::int64_t element = element_of(tiling::origin(warp * 32 + lane), p, x);
        REQUIRE(element % width == 0);
        addresses.push_back(element * bytes);
      }
      const bank_cost cost = read_cost(addresses, width * bytes);
      INFO(operand << " fragment read, warp " << warp << ", k row " << p << ", register " << x);
      REQUIRE(cost.actual == cost.minimum);
    }
  };
  for (int warp = 0; warp < Policy::threads / 32; ++warp) {
    for (int p = 0; p < Policy::tile_k; ++p) {
      check_reads("A", warp, p, tiling::tm, tiling::vector_m, [](simt::lane_origin at, int k, int i) {
        return std::int64_t{simt::a_fragment_offset<tiling, BM, Compute>(at, k, i)};
      });
      check_reads("B", warp, p, tiling::tn, tiling::vector_n, [](simt::lane_origin at, int k, int j) {
        return std::int64_t{simt::b_fragment_offset<tiling, BN, Compute>(at, k, j)};
      });
    }
  }
}

template <class Policy, class Compute>
void check_policy() {
  check_product<Policy, Compute>();
  check_fragment_reads<Policy, Compute>();
}

template <gpubatch::size_class Size>
using f32_default = typename gpubatch::default_gemm_policy<float, 90, Size>::type;
template <gpubatch::size_class Size>
using f64_default = typename gpubatch::default_gemm_policy<double, 90, Size>::type;

}  // namespace

TEST_CASE("warp tiling: default SIMT policies multiply the stage exactly, conflict-free",
          "[gemm][simt]") {
  SECTION("f32 medium") { check_policy<f32_default<gpubatch::size_class::medium>, float>(); }
  SECTION("f32 large") { check_policy<f32_default<gpubatch::size_class::large>, float>(); }
  SECTION("f64 medium") { check_policy<f64_default<gpubatch::size_class::medium>, double>(); }
  SECTION("f64 large") { check_policy<f64_default<gpubatch::size_class::large>, double>(); }
  SECTION("int32 accumulators (int8 on SIMT)") {
    check_policy<f32_default<gpubatch::size_class::medium>, std::int32_t>();
  }
}

TEST_CASE("warp tiling: user policies of any shape map every C element once", "[gemm][simt]") {
  // Tiny tiles, one warp, skinny and tall tiles, register tiles too narrow for 16-byte pieces.
  check_policy<gpubatch::gemm_policy<32, 32, 8, 1, 2>, float>();    // 32 accumulators: 8 x 4
  check_policy<gpubatch::gemm_policy<32, 32, 32, 4, 1>, float>();   // 8: 4 x 2 (B element-wise)
  check_policy<gpubatch::gemm_policy<16, 16, 16, 8, 2>, float>();   // 1 accumulator per thread
  check_policy<gpubatch::gemm_policy<128, 32, 8, 4, 2>, float>();   // tall
  check_policy<gpubatch::gemm_policy<16, 256, 16, 4, 2>, float>();  // wide
  check_policy<gpubatch::gemm_policy<64, 64, 8, 2, 2>, double>();   // 64: 8 x 8, 4 pieces each
  check_policy<gpubatch::gemm_policy<256, 128, 8, 8, 2>, float>();  // 128: 16 x 8
}

TEST_CASE("warp tiling: default tiles use square warp tiles and 16-byte fragments",
          "[gemm][simt]") {
  using medium = tiling_of<f32_default<gpubatch::size_class::medium>, float>;
  STATIC_REQUIRE(medium::tm == 4);
  STATIC_REQUIRE(medium::tn == 4);
  STATIC_REQUIRE(medium::vector_m == 4);
  STATIC_REQUIRE(medium::vector_n == 4);
  STATIC_REQUIRE(medium::warp_tile_m * 2 == medium::warp_tile_n);  // 16 x 32 (tie: wider)
  using large = tiling_of<f32_default<gpubatch::size_class::large>, float>;
  STATIC_REQUIRE(large::tm == 8);
  STATIC_REQUIRE(large::tn == 8);
  STATIC_REQUIRE(large::vector_m == 4);
  STATIC_REQUIRE(large::warp_tile_m == 32);
  STATIC_REQUIRE(large::warp_tile_n == 64);
  using large64 = tiling_of<f64_default<gpubatch::size_class::large>, double>;
  STATIC_REQUIRE(large64::vector_m == 2);
  STATIC_REQUIRE(large64::vector_n == 2);
}
