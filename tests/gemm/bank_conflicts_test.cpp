// Shared-memory bank conflicts of the SIMT kernels, counted on the host from the kernels' own
// index math (tiny_block.hpp, simt_tile.hpp, warp_tiling.hpp and the convolution's use of them):
// for every warp and every shared-memory instruction, the lanes' byte addresses and access width
// go through tests/support/bank_conflicts.hpp, and the worst conflict degree must stay within
// what docs/design.md states.
// - tiny GEMM kernel, accumulation reads of A and B: 1 (conflict-free) for every shape up to
//   32 x 32, any K, 4- and 8-byte compute types, uniform and ragged blocks, except f64's B
//   reads with 17 to 31 columns: 2; its staging stores: B 1, A at most 2 (1 for odd K chunks);
// - SIMT tiled GEMM, staging stores of A (transposed into [BK][BM]) and B, for both operand
//   orders and both load widths: at most 2; its fragment reads: 1;
// - SIMT implicit-GEMM convolution, staging stores of the gathered A and of B: at most 2.
#include <gpubatch/conv_policy.hpp>
#include <gpubatch/detail/gemm/simt_tile.hpp>
#include <gpubatch/detail/gemm/tiny_block.hpp>
#include <gpubatch/detail/gemm/warp_tiling.hpp>
#include <gpubatch/gemm_policy.hpp>

#include "../support/bank_conflicts.hpp"
#include "../support/catch.hpp"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

using gpubatch::index_t;
using gpubatch::test::conflict_degree;
using gpubatch::test::warp_access;
namespace simt = gpubatch::detail::simt;
namespace tiny = gpubatch::detail::tiny;

namespace {

// ---------------------------------------------------------------------------------------------
// Tiny GEMM kernel

/// What the block table needs of a problem.
struct tiny_problem {
  index_t m, n, k;
};

using tiny_policy = gpubatch::default_gemm_policy<float, 90, gpubatch::size_class::tiny>::type;
using tiny_table = tiny::block_table<tiny_problem, tiny_policy::problems_per_block>;

/// Worst conflict degrees of the accumulation's A and B reads.
struct read_degrees {
  int a = 0, b = 0;
};

/// Worst conflict degrees of the accumulation's A and B reads (accumulate_chunk: one read of each
/// per K index q, by every thread with an output there) over every warp of one block holding
/// `problems`, for staged elements of `bytes` bytes.
read_degrees worst_tiny_reads(const std::vector<tiny_problem>& problems, index_t kc, int bytes) {
  tiny_table table{};
  for (std::size_t l = 0; l < problems.size(); ++l) table.problem[l] = problems[l];
  tiny::finish_table(static_cast<int>(problems.size()), kc, table);
  constexpr int threads = tiny_policy::threads;
  read_degrees worst;
  for (int warp = 0; warp < threads / 32; ++warp) {
    for (int r = 0; r < tiny_policy::accumulators_per_thread; ++r) {
      tiny::owned_output own[32];
      for (int lane = 0; lane < 32; ++lane) {
        own[lane] = tiny::output_of(table, warp * 32 + lane + static_cast<index_t>(r) * threads);
      }
      if (own[0].local < 0) break;  // outputs are dealt in order: none left for this warp
      for (index_t q = 0; q < kc; ++q) {
        warp_access a(bytes), b(bytes);
        for (int lane = 0; lane < 32; ++lane) {
          const tiny::owned_output& o = own[lane];
          if (o.local < 0 || q >= tiny::chunk_depth(table.problem[o.local], 0, kc)) continue;
          a.address[static_cast<std::size_t>(lane)] =
              tiny::a_offset(table, o.local, o.row, q) * bytes;
          b.address[static_cast<std::size_t>(lane)] =
              tiny::b_offset(table, o.local, q, o.col) * bytes;
        }
        worst.a = std::max(worst.a, conflict_degree(a));
        worst.b = std::max(worst.b, conflict_degree(b));
      }
    }
  }
  return worst;
}

/// Worst conflict degrees of stage_chunk's A and B stores over every warp of one block: thread t
/// stores slots t, t + threads, ... of the walks a_slot and b_slot describe, for staged elements
/// of `bytes` bytes.
read_degrees worst_tiny_stores(const std::vector<tiny_problem>& problems, index_t kc, int bytes) {
  tiny_table table{};
  for (std::size_t l = 0; l < problems.size(); ++l) table.problem[l] = problems[l];
  tiny::finish_table(static_cast<int>(problems.size()), kc, table);
  constexpr int threads = tiny_policy::threads;
  const index_t rows = table.a_begin[table.problems] / table.a_pitch;
  const index_t cols = table.b_pitch;
  read_degrees worst;
  for (int warp = 0; warp < threads / 32; ++warp) {
    for (index_t step = 0; step * threads < std::max(rows, cols) * kc; ++step) {
      warp_access a(bytes), b(bytes);
      for (int lane = 0; lane < 32; ++lane) {
        const index_t idx = warp * 32 + lane + step * threads;
        if (idx < rows * kc) {
          int local = 0;
          const tiny::staged_slot at = tiny::a_slot(table, idx, kc, local);
          if (at.second < tiny::chunk_depth(table.problem[at.local], 0, kc)) {
            a.address[static_cast<std::size_t>(lane)] =
                tiny::a_offset(table, at.local, at.first, at.second) * bytes;
          }
        }
        if (idx < kc * cols) {
          const tiny::staged_slot at = tiny::b_slot(table, idx);
          if (at.first < tiny::chunk_depth(table.problem[at.local], 0, kc)) {
            b.address[static_cast<std::size_t>(lane)] =
                tiny::b_offset(table, at.local, at.first, at.second) * bytes;
          }
        }
      }
      worst.a = std::max(worst.a, conflict_degree(a));
      worst.b = std::max(worst.b, conflict_degree(b));
    }
  }
  return worst;
}

/// Problems per block as the dispatch plans them on sm_80 (the tightest cap).
index_t tiny_problems_per_block(tiny::block_bounds bounds, int bytes) {
  const index_t cap = tiny::shared_cap(167936, 1024, tiny_policy::min_blocks_per_sm);
  return tiny::plan_launch(bounds, 1 << 20, tiny_policy::tile_k, tiny_policy::threads,
                           tiny_policy::accumulators_per_thread, tiny_policy::problems_per_block,
                           tiny::table_bytes<tiny_table>(), bytes, cap)
      .problems_per_block;
}

// ---------------------------------------------------------------------------------------------
// SIMT tiled GEMM and implicit-GEMM convolution

/// Worst conflict degree of the staging stores of one operand tile (simt::store_chunks) with chunks
/// of `Width` elements along the operand's contiguous dimension.
template <int Rows, int Cols, int Threads, int Width, class Compute>
int worst_tile_stores(bool cols_contiguous, bool transpose_into_shared) {
  constexpr int bytes = static_cast<int>(sizeof(Compute));
  constexpr int elements = Rows * Cols / Threads;
  // A chunk along a staged line is one Width-element store, any other element one store each.
  const bool whole = Width > 1 && cols_contiguous != transpose_into_shared;
  const int step = whole ? Width : 1;
  int worst = 0;
  for (int warp = 0; warp < Threads / 32; ++warp) {
    for (int r = 0; r < elements; r += step) {
      warp_access store(step * bytes);
      for (int lane = 0; lane < 32; ++lane) {
        const simt::tile_position at =
            simt::position_of<Rows, Cols, Threads, Width>(cols_contiguous, warp * 32 + lane, r);
        store.address[static_cast<std::size_t>(lane)] =
            simt::staged_offset<Rows, Cols, Compute>(transpose_into_shared, at) * bytes;
      }
      worst = std::max(worst, conflict_degree(store));
    }
  }
  return worst;
}

/// Worst conflict degree of multiply_stage's fragment reads.
template <class Policy, class Compute>
int worst_fragment_reads() {
  using tiling = simt::warp_tiling<Policy::tile_m, Policy::tile_n, Policy::threads,
                                   Policy::accumulators_per_thread, simt::vector_width<Compute>>;
  constexpr int bytes = static_cast<int>(sizeof(Compute));
  int worst = 0;
  for (int warp = 0; warp < Policy::threads / 32; ++warp) {
    for (int p = 0; p < Policy::tile_k; ++p) {
      for (int i = 0; i < tiling::tm; i += tiling::vector_m) {
        warp_access read(tiling::vector_m * bytes);
        for (int lane = 0; lane < 32; ++lane) {
          read.address[static_cast<std::size_t>(lane)] =
              simt::a_fragment_offset<tiling, Policy::tile_m, Compute>(
                  tiling::origin(warp * 32 + lane), p, i) *
              bytes;
        }
        worst = std::max(worst, conflict_degree(read));
      }
      for (int j = 0; j < tiling::tn; j += tiling::vector_n) {
        warp_access read(tiling::vector_n * bytes);
        for (int lane = 0; lane < 32; ++lane) {
          read.address[static_cast<std::size_t>(lane)] =
              simt::b_fragment_offset<tiling, Policy::tile_n, Compute>(
                  tiling::origin(warp * 32 + lane), p, j) *
              bytes;
        }
        worst = std::max(worst, conflict_degree(read));
      }
    }
  }
  return worst;
}

/// Worst staging store of the SIMT GEMM with `Policy`: A ([BM x BK] transposed) and B ([BK x BN])
/// in either order, with the 16-byte chunks an operand of the compute type is loaded in and with
/// single elements (converting operands).
template <class Policy, class Compute>
int worst_gemm_stores() {
  constexpr int BM = Policy::tile_m, BN = Policy::tile_n, BK = Policy::tile_k;
  constexpr int T = Policy::threads;
  using a_tile = simt::operand_tile<BM, BK, T, Compute, Compute>;
  using b_tile = simt::operand_tile<BK, BN, T, Compute, Compute>;
  int worst = 0;
  for (const bool cols_contiguous : {true, false}) {
    CAPTURE(cols_contiguous);
    const int a_wide = cols_contiguous
                           ? worst_tile_stores<BM, BK, T, a_tile::cols_width, Compute>(true, true)
                           : worst_tile_stores<BM, BK, T, a_tile::rows_width, Compute>(false, true);
    const int b_wide =
        cols_contiguous ? worst_tile_stores<BK, BN, T, b_tile::cols_width, Compute>(true, false)
                        : worst_tile_stores<BK, BN, T, b_tile::rows_width, Compute>(false, false);
    const int a_narrow = worst_tile_stores<BM, BK, T, 1, Compute>(cols_contiguous, true);
    const int b_narrow = worst_tile_stores<BK, BN, T, 1, Compute>(cols_contiguous, false);
    CAPTURE(a_wide, b_wide, a_narrow, b_narrow);
    worst = std::max({worst, a_wide, b_wide, a_narrow, b_narrow});
  }
  return worst;
}

/// Worst staging store of the SIMT convolution with `Policy`: A gathered along K (NHWC) or along
/// the rows (NCHW), B along K or along the filters, one element per store.
template <class Policy, class Compute>
int worst_conv_stores() {
  constexpr int BM = Policy::tile_m, BN = Policy::tile_n, BK = Policy::tile_k;
  constexpr int T = Policy::threads;
  int worst = 0;
  for (const bool k_fast : {true, false}) {
    // implicit_gemm_kernel: A at position_of<BM, BK, T, 1>(a_k_fast), B at
    // position_of<BK, BN, T, 1>(!b_k_fast), both element-wise.
    worst = std::max(worst, worst_tile_stores<BM, BK, T, 1, Compute>(k_fast, true));
    worst = std::max(worst, worst_tile_stores<BK, BN, T, 1, Compute>(!k_fast, false));
  }
  return worst;
}

template <class T, gpubatch::size_class Size>
using gemm_default = typename gpubatch::default_gemm_policy<T, 90, Size>::type;
template <class T, gpubatch::size_class Size>
using conv_default = typename gpubatch::default_conv2d_policy<T, 90, Size, false>::type;

/// A ragged grouped block of `ppb` problems within `bounds`: on every third trial some problems
/// are empty (no outputs, no staging, as fetch_problem leaves an unusable one), the rest lie
/// anywhere within the bounds.
std::vector<tiny_problem> ragged_block(const tiny::block_bounds& bounds, index_t ppb, int trial,
                                       std::mt19937& rng) {
  std::vector<tiny_problem> block;
  const auto upto = [&](index_t hi) {
    return std::uniform_int_distribution<index_t>(trial % 3 == 0 ? 0 : 1, hi)(rng);
  };
  for (index_t l = 0; l < ppb; ++l) {
    block.push_back({upto(bounds.max_m), upto(bounds.max_n), upto(bounds.max_k)});
    if (block.back().m == 0 || block.back().n == 0 || block.back().k == 0) {
      block.back() = {0, 0, 0};
    }
  }
  return block;
}

}  // namespace

TEST_CASE("bank conflicts: the counting model", "[gemm][banks]") {
  warp_access a(4);
  for (int lane = 0; lane < 32; ++lane) a.address[static_cast<std::size_t>(lane)] = lane * 4;
  CHECK(conflict_degree(a) == 1);  // 32 words, 32 banks
  for (int lane = 0; lane < 32; ++lane) a.address[static_cast<std::size_t>(lane)] = lane * 128;
  CHECK(conflict_degree(a) == 32);  // one bank, 32 words
  for (int lane = 0; lane < 32; ++lane) a.address[static_cast<std::size_t>(lane)] = 64;
  CHECK(conflict_degree(a) == 1);  // broadcast
  for (int lane = 0; lane < 32; ++lane)
    a.address[static_cast<std::size_t>(lane)] = (lane % 2) * 128;
  CHECK(conflict_degree(a) == 2);
  warp_access d(8);
  for (int lane = 0; lane < 32; ++lane) d.address[static_cast<std::size_t>(lane)] = lane * 8;
  CHECK(conflict_degree(d) == 1);  // two half-warp wavefronts, each conflict-free
  for (int lane = 0; lane < 32; ++lane) d.address[static_cast<std::size_t>(lane)] = lane * 16;
  CHECK(conflict_degree(d) == 2);
  warp_access v(16);
  for (int lane = 0; lane < 32; ++lane) v.address[static_cast<std::size_t>(lane)] = lane * 16;
  CHECK(conflict_degree(v) == 1);  // four quarter-warp wavefronts
  for (int lane = 0; lane < 32; ++lane) v.address[static_cast<std::size_t>(lane)] = lane * 64;
  CHECK(conflict_degree(v) == 4);
  v.address.fill(-1);
  CHECK(conflict_degree(v) == 0);
}

TEST_CASE("bank conflicts: tiny GEMM reads are conflict-free for shapes up to 32 x 32",
          "[gemm][banks][tiny]") {
  bool f64_two_way = false;
  for (const int bytes : {4, 8}) {  // f32, f16, bf16 (f32), int8 (int32); f64
    for (const index_t k : {1, 2, 3, 8, 31, 64}) {
      const index_t kc = std::min<index_t>(k, tiny_policy::tile_k);
      for (index_t m = 1; m <= 32; ++m) {
        for (index_t n = 1; n <= 32; ++n) {
          CAPTURE(bytes, m, n, k);
          const index_t ppb = tiny_problems_per_block({m, n, k}, bytes);
          const std::vector<tiny_problem> block(static_cast<std::size_t>(ppb), {m, n, k});
          const read_degrees worst = worst_tiny_reads(block, kc, bytes);
          REQUIRE(worst.a == 1);
          // A half warp of 8-byte reads inside one problem with 16 < n < 32 columns wraps around
          // its row: columns x and x + 16 share a bank, unavoidably, as any layout of 17 to 31
          // columns on 16 eight-byte slots must put two within 16 of each other.
          if (bytes == 8 && n > 16 && n < 32) {
            REQUIRE(worst.b <= 2);
            f64_two_way = f64_two_way || worst.b == 2;
          } else {
            REQUIRE(worst.b == 1);
          }
        }
      }
    }
  }
  CHECK(f64_two_way);  // the model does see that case
}

TEST_CASE("bank conflicts: tiny GEMM reads of ragged grouped blocks are conflict-free",
          "[gemm][banks][tiny]") {
  std::mt19937 rng(7);
  for (const tiny::block_bounds bounds :
       {tiny::block_bounds{32, 32, 64}, tiny::block_bounds{8, 8, 32}, tiny::block_bounds{4, 16, 5},
        tiny::block_bounds{1, 3, 17}, tiny::block_bounds{5, 1, 32}}) {
    for (const int bytes : {4, 8}) {
      const index_t ppb = tiny_problems_per_block(bounds, bytes);
      const index_t kc = std::min<index_t>(bounds.max_k, tiny_policy::tile_k);
      for (int trial = 0; trial < 50; ++trial) {
        const std::vector<tiny_problem> block = ragged_block(bounds, ppb, trial, rng);
        CAPTURE(bounds.max_m, bounds.max_n, bounds.max_k, bytes, trial);
        const read_degrees worst = worst_tiny_reads(block, kc, bytes);
        REQUIRE(worst.a <= 1);
        REQUIRE(worst.b <= (bytes == 8 && bounds.max_n > 16 ? 2 : 1));
      }
    }
  }
}

TEST_CASE("bank conflicts: SIMT GEMM staging stores at most 2-way, fragment reads free",
          "[gemm][banks][simt]") {
  using gpubatch::size_class;
  SECTION("f32 medium") {
    CHECK(worst_gemm_stores<gemm_default<float, size_class::medium>, float>() <= 2);
    CHECK(worst_fragment_reads<gemm_default<float, size_class::medium>, float>() == 1);
  }
  SECTION("f32 large") {
    CHECK(worst_gemm_stores<gemm_default<float, size_class::large>, float>() <= 2);
    CHECK(worst_fragment_reads<gemm_default<float, size_class::large>, float>() == 1);
  }
  SECTION("int32 medium (int8 on SIMT)") {
    CHECK(worst_gemm_stores<gemm_default<float, size_class::medium>, std::int32_t>() <= 2);
  }
  SECTION("f64 medium") {
    CHECK(worst_gemm_stores<gemm_default<double, size_class::medium>, double>() <= 2);
    CHECK(worst_fragment_reads<gemm_default<double, size_class::medium>, double>() == 1);
  }
  SECTION("f64 large") {
    CHECK(worst_gemm_stores<gemm_default<double, size_class::large>, double>() <= 2);
    CHECK(worst_fragment_reads<gemm_default<double, size_class::large>, double>() == 1);
  }
}

TEST_CASE("bank conflicts: SIMT convolution staging stores at most 2-way", "[conv][banks][simt]") {
  using gpubatch::size_class;
  CHECK(worst_conv_stores<conv_default<float, size_class::medium>, float>() <= 2);
  CHECK(worst_conv_stores<conv_default<float, size_class::large>, float>() <= 2);
  CHECK(worst_conv_stores<conv_default<double, size_class::medium>, double>() <= 2);
  CHECK(worst_conv_stores<conv_default<double, size_class::large>, double>() <= 2);
}

TEST_CASE("bank conflicts: tiny GEMM staging stores at most 2-way", "[gemm][banks][tiny]") {
  // B's slots are consecutive along a walk of (q, block column): conflict-free. A's rows hold kc of
  // their kc | 1 slots, so a warp's run of (row, q) skips one slot per row: 2-way at most.
  for (const int bytes : {4, 8}) {
    for (const index_t k : {1, 2, 3, 8, 31, 64}) {
      const index_t kc = std::min<index_t>(k, tiny_policy::tile_k);
      for (index_t m = 1; m <= 32; ++m) {
        for (index_t n = 1; n <= 32; ++n) {
          CAPTURE(bytes, m, n, k);
          const index_t ppb = tiny_problems_per_block({m, n, k}, bytes);
          const std::vector<tiny_problem> block(static_cast<std::size_t>(ppb), {m, n, k});
          const read_degrees worst = worst_tiny_stores(block, kc, bytes);
          REQUIRE(worst.a <= (kc % 2 == 0 ? 2 : 1));
          REQUIRE(worst.b == 1);
        }
      }
    }
  }
  std::mt19937 rng(11);
  for (const tiny::block_bounds bounds :
       {tiny::block_bounds{32, 32, 64}, tiny::block_bounds{8, 8, 32}, tiny::block_bounds{4, 16, 5},
        tiny::block_bounds{1, 3, 17}}) {
    for (const int bytes : {4, 8}) {
      const index_t ppb = tiny_problems_per_block(bounds, bytes);
      const index_t kc = std::min<index_t>(bounds.max_k, tiny_policy::tile_k);
      for (int trial = 0; trial < 50; ++trial) {
        const std::vector<tiny_problem> block = ragged_block(bounds, ppb, trial, rng);
        CAPTURE(bounds.max_m, bounds.max_n, bounds.max_k, bytes, trial);
        const read_degrees worst = worst_tiny_stores(block, kc, bytes);
        REQUIRE(worst.a <= 2);
        REQUIRE(worst.b <= 1);
      }
    }
  }
}
