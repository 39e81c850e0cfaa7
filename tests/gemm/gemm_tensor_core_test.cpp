// The tensor-core kernels' staging logic, run on the host: every thread of a block stages its
// chunks of one operand tile exactly as the kernel does (with memcpy standing in for cp.async),
// and the shared-memory image must hold every element of op(A) or op(B) in its slot, zero
// outside the operand, with the padding untouched — for every layout, transpose, alignment and
// edge size.
#include <gpubatch/detail/gemm/tensor_core.hpp>
#include <gpubatch/gemm_policy.hpp>

#include "../support/catch.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "../support/bank_conflicts.hpp"
#include "../support/inputs.hpp"

using gpubatch::index_t;
using gpubatch::layout;
using gpubatch::op;
using gpubatch::test::byte_poison;
using gpubatch::test::same_bits;
namespace detail = gpubatch::detail;
namespace tc = gpubatch::detail::tensor_core;

namespace {

/// One operand case: op(X) has `rows` x `k` elements (rows = m for A, n for B).
struct operand_case {
  index_t rows, k;
  layout order;
  op transpose;
  index_t pad;     ///< extra leading-dimension elements
  index_t offset;  ///< elements between the allocation and the matrix (breaks alignment when odd)
};

/// Stages the tile at (tile_row, k0) of one operand, laid out as `Layout`, with every thread of
/// a block, then checks the shared-memory image. Returns how many chunks went through the
/// 16-byte copy.
template <class Policy, class T, class Layout, bool IsA>
int check_staging(const operand_case& oc, index_t tile_row, index_t k0) {
  using G = tc::geometry<Policy, T>;
  constexpr int rows = IsA ? G::bm : G::bn;
  INFO("rows " << oc.rows << " k " << oc.k << " " << gpubatch::to_string(oc.order) << " "
               << gpubatch::to_string(oc.transpose) << " pad " << oc.pad << " offset "
               << oc.offset << " tile (" << tile_row << ", " << k0 << ") "
               << (Layout::k_major ? "K-major" : "M/N-major") << (IsA ? " A" : " B"));
  // Stored X is op^-1 of the (rows x k) operand; A is op(A) = m x k, B is op(B)^T = n x k.
  const bool stored_transposed = oc.transpose == op::transpose;
  const index_t stored_rows = stored_transposed ? oc.k : oc.rows;
  const index_t stored_cols = stored_transposed ? oc.rows : oc.k;
  const index_t minor = oc.order == layout::row_major ? stored_cols : stored_rows;
  const index_t major = oc.order == layout::row_major ? stored_rows : stored_cols;
  const index_t ld = std::max<index_t>(minor + oc.pad, 1);
  // 16-byte-aligned storage, so `offset` alone decides the base alignment.
  std::vector<std::array<unsigned char, 16>> storage(
      static_cast<std::size_t>((oc.offset + major * ld) * index_t{sizeof(T)} / 16 + 2));
  T* const base = reinterpret_cast<T*>(storage.data()) + oc.offset;
  const auto values = gpubatch::test::random_inputs<T>(static_cast<std::size_t>(major * ld), 7);
  std::copy(values.begin(), values.end(), base);

  // The operand as the kernel sees it: A through a_source, B (k x n) through b_source.
  const detail::strides2 s = detail::operand_strides(oc.order, oc.transpose, ld);
  const detail::matrix_ref<const T> x{base, s};
  tc::matrix_source<T> source{};
  if constexpr (IsA) {
    const detail::gemm_instance<T, T, T> p{oc.rows, 1, oc.k, x, {nullptr, {1, 1}}, {nullptr, {1, 1}}};
    source = tc::a_source(p);
  } else {
    // B = op(stored)^T as k x n: its transpose-of-transpose is what a_source would read.
    const detail::strides2 bs{s.col, s.row};
    const detail::gemm_instance<T, T, T> p{1, oc.rows, oc.k, {nullptr, {1, 1}}, {base, bs}, {nullptr, {1, 1}}};
    source = tc::b_source(p);
  }
  const auto expected = [&](index_t r, index_t kk) {
    return r < oc.rows && kk < oc.k ? x(r, kk) : T{};
  };

  std::vector<T> tile(static_cast<std::size_t>(Layout::elements), byte_poison<T>());
  int whole_chunks = 0;
  const auto copy16 = [&](T* dst, const T* src, bool zero) {
    REQUIRE(!zero);  // a matrix's chunks past its edges go element by element
    REQUIRE(tc::aligned16(src));
    REQUIRE(tc::aligned16(dst));
    std::memcpy(static_cast<void*>(dst), static_cast<const void*>(src), 16);
    ++whole_chunks;
  };
  for (int thread = 0; thread < G::threads; ++thread) {
    const tc::operand_stager<Layout, G::threads, tc::matrix_source<T>> stager(source, tile_row,
                                                                              thread);
    stager.stage(source, k0, thread, tile.data(), copy16);
  }
  std::vector<bool> covered(tile.size(), false);
  for (int r = 0; r < rows; ++r) {
    for (int kk = 0; kk < G::bk; ++kk) {
      INFO("row " << r << " kk " << kk);
      const int at = Layout::offset(r, kk);
      REQUIRE(at >= 0);
      REQUIRE(at < Layout::elements);
      REQUIRE(!covered[static_cast<std::size_t>(at)]);
      covered[static_cast<std::size_t>(at)] = true;
      REQUIRE(same_bits(tile[static_cast<std::size_t>(at)], expected(tile_row + r, k0 + kk)));
    }
  }
  for (std::size_t i = 0; i < tile.size(); ++i) {
    if (!covered[i]) REQUIRE(same_bits(tile[i], byte_poison<T>()));  // the pad is never written
  }
  return whole_chunks;
}

template <class Policy, class T, bool IsA, tc::staging S>
using layout_of = tc::operand_layout<T, IsA ? Policy::tile_m : Policy::tile_n, Policy::tile_k, S>;

/// Both operands in both stagings: the image is right whatever the staging.
template <class Policy, class T>
void check_both_operands(const operand_case& oc, index_t tile_row, index_t k0) {
  using tc::staging;
  check_staging<Policy, T, layout_of<Policy, T, true, staging::k_major>, true>(oc, tile_row, k0);
  check_staging<Policy, T, layout_of<Policy, T, true, staging::mn_major>, true>(oc, tile_row, k0);
  check_staging<Policy, T, layout_of<Policy, T, false, staging::k_major>, false>(oc, tile_row, k0);
  check_staging<Policy, T, layout_of<Policy, T, false, staging::mn_major>, false>(oc, tile_row, k0);
}

template <class Policy, class T>
void check_edges() {
  using G = tc::geometry<Policy, T>;
  for (const index_t rows : {index_t{1}, index_t{3}, index_t{17}, index_t{33}, index_t{127}, index_t{G::bm + 5}}) {
    for (const index_t k : {index_t{1}, index_t{3}, index_t{17}, index_t{33}, index_t{127}, index_t{G::bk * 2}}) {
      for (const layout order : {layout::row_major, layout::col_major}) {
        for (const op transpose : {op::none, op::transpose}) {
          // Minimal, misaligned, and padded to whole chunks (so ragged ends are reached by the
          // 16-byte path's bounds check, not its alignment check).
          const bool k_minor = (order == layout::row_major) == (transpose == op::none);
          const index_t minor = k_minor ? k : rows;
          const index_t to_chunk = (G::vector - minor % G::vector) % G::vector;
          for (const auto& [pad, offset] : {std::pair<index_t, index_t>{0, 0}, {1, 1}, {to_chunk, 0}}) {
            const operand_case oc{rows, k, order, transpose, pad, offset};
            // The first tile, and the last tile in both directions (partial where sizes are odd).
            check_both_operands<Policy, T>(oc, 0, 0);
            const index_t last_row = (rows - 1) / G::bm * G::bm;
            const index_t last_k = (k - 1) / G::bk * G::bk;
            if (last_row > 0 || last_k > 0) {
              using tc::staging;
              check_staging<Policy, T, layout_of<Policy, T, true, staging::k_major>, true>(
                  oc, last_row, last_k);
              check_staging<Policy, T, layout_of<Policy, T, true, staging::mn_major>, true>(
                  oc, last_row, last_k);
            }
          }
        }
      }
    }
  }
}

/// Whole chunks the staging the dispatch picks (staging_for) copies of a full, aligned tile of
/// one operand in `order` and `transpose`, and how many the tile has.
template <class Policy, class T, bool IsA>
std::pair<int, int> whole_chunks_as_dispatched(layout order, op transpose) {
  using G = tc::geometry<Policy, T>;
  const index_t rows = IsA ? G::bm : G::bn;
  const operand_case oc{rows, G::bk, order, transpose, 0, 0};
  const detail::strides2 s = detail::operand_strides(order, transpose, 64);
  // A is (rows x k) with strides (row, col); B is read as its transpose.
  // Both operands are (rows x k) with strides (s.row, s.col) here (check_staging's reading).
  const tc::staging picked = tc::staging_for(s.row, s.col);
  const int chunks = static_cast<int>(rows) * G::bk / G::vector;
  if (picked == tc::staging::k_major) {
    return {check_staging<Policy, T, layout_of<Policy, T, IsA, tc::staging::k_major>, IsA>(oc, 0, 0),
            chunks};
  }
  return {check_staging<Policy, T, layout_of<Policy, T, IsA, tc::staging::mn_major>, IsA>(oc, 0, 0),
          chunks};
}

template <class Policy, class T>
void check_every_layout_is_asynchronous() {
  for (const layout order : {layout::row_major, layout::col_major}) {
    for (const op transpose : {op::none, op::transpose}) {
      INFO(gpubatch::to_string(order) << " " << gpubatch::to_string(transpose));
      const auto [a_whole, a_chunks] = whole_chunks_as_dispatched<Policy, T, true>(order, transpose);
      CHECK(a_whole == a_chunks);
      const auto [b_whole, b_chunks] = whole_chunks_as_dispatched<Policy, T, false>(order, transpose);
      CHECK(b_whole == b_chunks);
    }
  }
}

}  // namespace

TEST_CASE("tensor-core chunks tile an operand exactly once", "[gemm][tensor_core]") {
  for (const bool k_contiguous : {true, false}) {
    for (const int rows : {16, 64, 128}) {
      for (const int vector : {4, 8, 16}) {
        const int bk = 64;
        std::set<std::pair<int, int>> seen;
        for (int c = 0; c < rows * bk / vector; ++c) {
          const tc::chunk_position p = tc::chunk_of(c, rows, bk, vector, k_contiguous);
          REQUIRE(p.row >= 0);
          REQUIRE(p.row < rows);
          REQUIRE(p.kk % vector == 0);
          REQUIRE(p.kk < bk);
          REQUIRE(seen.insert({p.row, p.kk}).second);
        }
        CHECK(seen.size() == static_cast<std::size_t>(rows * bk / vector));
      }
    }
  }
}

/// What wmma and the policy's blocks per SM ask of a geometry: every fragment pointer 32-byte
/// aligned, leading dimensions whole 16-byte units, and the shared memory of the blocks per SM
/// the kernel is built for within an sm_80 SM (164 KiB, 1 KiB reserved per block).
template <class G, class T>
void check_geometry() {
  const int blocks_per_sm = G::min_blocks_per_sm;
  INFO("tile " << G::bm << "x" << G::bn << "x" << G::bk << " element size " << sizeof(T)
               << " A " << (G::a_layout::k_major ? "K" : "MN") << "-major, B "
               << (G::b_layout::k_major ? "K" : "MN") << "-major");
  const auto aligned32 = [](int elements) { return elements * static_cast<int>(sizeof(T)) % 32 == 0; };
  CHECK(aligned32(G::a_stage_elements));
  CHECK(aligned32(G::stage_elements));
  CHECK(G::a_layout::ld * sizeof(T) % 16 == 0);
  CHECK(G::b_layout::ld * sizeof(T) % 16 == 0);
  for (int slab = 0; slab < G::slabs; ++slab) {
    for (int row = 0; row < G::bm; row += 16) CHECK(aligned32(G::a_layout::offset(row, slab * G::mma_k)));
    for (int row = 0; row < G::bn; row += 16) CHECK(aligned32(G::b_layout::offset(row, slab * G::mma_k)));
  }
  CHECK(16 * G::c_ld * 4 % 32 == 0);
  CHECK(G::stages >= 2);
  CHECK(blocks_per_sm * (G::shared_bytes + 1024) <= 164 * 1024);
}

template <class T, gpubatch::size_class Size>
void check_default_geometries() {
  using P = typename gpubatch::default_tensor_core_policy<T, 80, Size>::type;
  using tc::staging;
  check_geometry<tc::geometry<P, T, staging::k_major, staging::k_major>, T>();
  check_geometry<tc::geometry<P, T, staging::k_major, staging::mn_major>, T>();
  check_geometry<tc::geometry<P, T, staging::mn_major, staging::k_major>, T>();
  check_geometry<tc::geometry<P, T, staging::mn_major, staging::mn_major>, T>();
}

TEST_CASE("tensor-core geometry of the default policies", "[gemm][tensor_core]") {
  using large_f16 = tc::geometry<gpubatch::default_tensor_core_policy<gpubatch::half, 90, gpubatch::size_class::large>::type, gpubatch::half>;
  STATIC_REQUIRE(large_f16::warps_m * large_f16::warps_n == 8);
  STATIC_REQUIRE(large_f16::fragments_m * 16 * large_f16::warps_m == 128);
  STATIC_REQUIRE(large_f16::fragments_n * 16 * large_f16::warps_n == 128);
  check_default_geometries<gpubatch::half, gpubatch::size_class::medium>();
  check_default_geometries<gpubatch::half, gpubatch::size_class::large>();
  check_default_geometries<gpubatch::bfloat16, gpubatch::size_class::medium>();
  check_default_geometries<gpubatch::bfloat16, gpubatch::size_class::large>();
  check_default_geometries<float, gpubatch::size_class::medium>();
  check_default_geometries<float, gpubatch::size_class::large>();
  check_default_geometries<std::int8_t, gpubatch::size_class::medium>();
  check_default_geometries<std::int8_t, gpubatch::size_class::large>();
  // int8 M/N-major lines are twice their data: the medium tile with both operands so staged
  // keeps 2 stages of 3 to fit 3 blocks per SM; the large tile with an M/N-major operand is
  // built for 1 block per SM (byte-gathered fragments) and keeps its 3 stages.
  using tc::staging;
  using i8_medium = gpubatch::default_tensor_core_policy<std::int8_t, 80, gpubatch::size_class::medium>::type;
  using i8_large = gpubatch::default_tensor_core_policy<std::int8_t, 80, gpubatch::size_class::large>::type;
  STATIC_REQUIRE(tc::geometry<i8_medium, std::int8_t>::stages == 3);
  STATIC_REQUIRE(tc::geometry<i8_medium, std::int8_t, staging::mn_major, staging::mn_major>::stages == 2);
  STATIC_REQUIRE(tc::geometry<i8_large, std::int8_t>::min_blocks_per_sm == 2);
  STATIC_REQUIRE(tc::geometry<i8_large, std::int8_t, staging::k_major, staging::mn_major>::min_blocks_per_sm == 1);
  STATIC_REQUIRE(tc::geometry<i8_large, std::int8_t, staging::mn_major, staging::mn_major>::stages == 3);
}

TEST_CASE("tensor-core staging of f16 operands: every layout, transpose and edge",
          "[gemm][tensor_core]") {
  check_edges<gpubatch::tensor_core_policy<64, 64, 32, 4, 3>, gpubatch::half>();
}

TEST_CASE("tensor-core staging of TF32 operands: every layout, transpose and edge",
          "[gemm][tensor_core]") {
  check_edges<gpubatch::tensor_core_policy<32, 64, 16, 2, 2>, float>();
}

TEST_CASE("tensor-core staging of int8 operands: every layout, transpose and edge",
          "[gemm][tensor_core]") {
  check_edges<gpubatch::tensor_core_policy<64, 32, 64, 4, 2>, std::int8_t>();
}

TEST_CASE("tensor-core staging copies whole 16-byte chunks when it can", "[gemm][tensor_core]") {
  using policy = gpubatch::tensor_core_policy<64, 64, 32, 4, 3>;
  using G = tc::geometry<policy, gpubatch::half>;
  using a_k = layout_of<policy, gpubatch::half, true, tc::staging::k_major>;
  using a_mn = layout_of<policy, gpubatch::half, true, tc::staging::mn_major>;
  using b_k = layout_of<policy, gpubatch::half, false, tc::staging::k_major>;
  // Row-major op(A), aligned, K a multiple of the chunk: every in-bounds chunk is one copy.
  const operand_case aligned{40, 64, layout::row_major, op::none, 8, 0};
  CHECK(check_staging<policy, gpubatch::half, a_k, true>(aligned, 0, 0) ==
        40 * G::bk / G::vector);
  // K = 39: the chunk that straddles K's end is copied element-wise (zero-filled).
  const operand_case ragged{40, 39, layout::row_major, op::none, 1, 0};
  CHECK(check_staging<policy, gpubatch::half, a_k, true>(ragged, 0, 32) == 0);
  CHECK(check_staging<policy, gpubatch::half, a_k, true>(ragged, 0, 0) ==
        40 * G::bk / G::vector);
  // A misaligned base or a leading dimension that is not a whole number of chunks: none.
  const operand_case shifted{40, 64, layout::row_major, op::none, 8, 1};
  CHECK(check_staging<policy, gpubatch::half, a_k, true>(shifted, 0, 0) == 0);
  const operand_case odd_ld{40, 64, layout::row_major, op::none, 1, 0};
  CHECK(check_staging<policy, gpubatch::half, a_k, true>(odd_ld, 0, 0) == 0);
  // Column-major A staged K-major goes element by element; staged M-major (as the dispatch
  // does), every chunk of whole rows is one copy and the 40-row edge's last chunk too.
  const operand_case strided{40, 64, layout::col_major, op::none, 0, 0};
  CHECK(check_staging<policy, gpubatch::half, a_k, true>(strided, 0, 0) == 0);
  CHECK(check_staging<policy, gpubatch::half, a_mn, true>(strided, 0, 0) == 40 * G::bk / G::vector);
  // M-major with a leading dimension that is not a whole number of chunks: none.
  const operand_case strided_odd{40, 64, layout::col_major, op::none, 1, 0};
  CHECK(check_staging<policy, gpubatch::half, a_mn, true>(strided_odd, 0, 0) == 0);
  // 37 rows: the chunk of rows 32..39 straddles the end and goes element by element.
  const operand_case ragged_rows{37, 64, layout::col_major, op::none, 3, 0};
  CHECK(check_staging<policy, gpubatch::half, a_mn, true>(ragged_rows, 0, 0) == 32 * G::bk / G::vector);
  // B copies whole chunks when op(B)^T (n x k) is row-major, i.e. B is K-contiguous.
  CHECK(check_staging<policy, gpubatch::half, b_k, false>(
            {40, 64, layout::row_major, op::none, 0, 0}, 0, 0) == 40 * G::bk / G::vector);
}

TEST_CASE("tensor-core staging: every aligned layout and transpose copies whole chunks",
          "[gemm][tensor_core]") {
  check_every_layout_is_asynchronous<gpubatch::tensor_core_policy<64, 64, 32, 4, 3>, gpubatch::half>();
  check_every_layout_is_asynchronous<gpubatch::tensor_core_policy<32, 64, 16, 2, 2>, float>();
  check_every_layout_is_asynchronous<gpubatch::tensor_core_policy<64, 32, 64, 4, 2>, std::int8_t>();
}

// ---------------------------------------------------------------------------------------------
// Bank conflicts of the tensor-core kernels' shared-memory accesses, counted from their own
// index functions (tests/support/bank_conflicts.hpp): the cp.async stores of both stagings, the
// ldmatrix reads of 16-bit fragments, and the epilogue's reads of the accumulator tile.

namespace {

using gpubatch::test::conflict_degree;
using gpubatch::test::warp_access;

/// Worst degree of the 16-byte stores of one operand tile: chunk c is thread c's (mod the
/// block's threads), so a warp's lanes store consecutive chunks (K-contiguous source).
template <class Layout, class T>
int worst_stage_stores() {
  int worst = 0;
  for (int first = 0; first < Layout::chunks; first += 32) {
    warp_access access(16);
    for (int lane = 0; lane < 32 && first + lane < Layout::chunks; ++lane) {
      const tc::chunk_position at = Layout::chunk(first + lane, true);
      access.address[static_cast<std::size_t>(lane)] =
          Layout::offset(at.row, at.kk) * static_cast<std::int64_t>(sizeof(T));
    }
    worst = std::max(worst, conflict_degree(access));
  }
  return worst;
}

/// Worst degree of the ldmatrix phases of the 16-bit fragments of one operand tile: each 8 x 8
/// matrix is eight 16-byte rows of the tile (K-major: eight rows at one half of a slab row;
/// M/N-major, read transposed: eight reduction indices at one half of a 16-row group).
template <class Layout>
int worst_fragment_reads(int rows) {
  int worst = 0;
  for (int row0 = 0; row0 < rows; row0 += 16) {
    for (int kk0 = 0; kk0 < Layout::slabs * Layout::mma_k; kk0 += Layout::mma_k) {
      for (int matrix = 0; matrix < 4; ++matrix) {
        warp_access access(16);
        for (int j = 0; j < 8; ++j) {
          // Matrix (i, h): rows (or reduction indices) 8i..8i+7, 16-byte half h.
          const int i = matrix % 2, h = matrix / 2;
          const int at = Layout::k_major ? Layout::offset(row0 + 8 * i + j, kk0 + 8 * h)
                                         : Layout::offset(row0 + 8 * h, kk0 + 8 * i + j);
          access.address[static_cast<std::size_t>(j)] = std::int64_t{at} * 2;
        }
        worst = std::max(worst, conflict_degree(access));
      }
    }
  }
  return worst;
}

/// Worst degree of the epilogue's 4-byte reads of the accumulator tile (output_slot).
template <class G>
int worst_output_reads(bool cols_contiguous) {
  int worst = 0;
  for (int first = 0; first < G::bm * G::bn; first += 32) {
    warp_access access(4);
    for (int lane = 0; lane < 32; ++lane) {
      const tc::tile_element at = tc::output_slot<G>(first + lane, cols_contiguous);
      access.address[static_cast<std::size_t>(lane)] = std::int64_t{at.row * G::c_ld + at.col} * 4;
    }
    worst = std::max(worst, conflict_degree(access));
  }
  return worst;
}

/// Worst degree of the epilogue's 16-byte reads of the accumulator tile in runs of `Run`
/// (output_run_slot): the instruction reading quad q of every lane's run.
template <class G, int Run>
int worst_output_run_reads() {
  int worst = 0;
  for (int first = 0; first < G::bm * G::bn / Run; first += 32) {
    for (int q = 0; q < Run / 4; ++q) {
      warp_access access(16);
      for (int lane = 0; lane < 32 && first + lane < G::bm * G::bn / Run; ++lane) {
        const tc::tile_element at = tc::output_run_slot<G, Run>(first + lane);
        access.address[static_cast<std::size_t>(lane)] =
            std::int64_t{at.row * G::c_ld + at.col + 4 * q} * 4;
      }
      worst = std::max(worst, conflict_degree(access));
    }
  }
  return worst;
}

/// Worst degree of the epilogue's shared reads for runs of `Run` down the columns
/// (output_column_run_slot): the instruction reading element j of every lane's run.
template <class G, int Run>
int worst_output_column_run_reads() {
  int worst = 0;
  for (int first = 0; first < G::bm * G::bn / Run; first += 32) {
    for (int j = 0; j < Run; ++j) {
      warp_access access(4);
      for (int lane = 0; lane < 32 && first + lane < G::bm * G::bn / Run; ++lane) {
        const tc::tile_element at = tc::output_column_run_slot<G, Run>(first + lane);
        access.address[static_cast<std::size_t>(lane)] =
            std::int64_t{(at.row + j) * G::c_ld + at.col} * 4;
      }
      worst = std::max(worst, conflict_degree(access));
    }
  }
  return worst;
}

template <class T, gpubatch::size_class Size>
void check_banks() {
  using P = typename gpubatch::default_tensor_core_policy<T, 80, Size>::type;
  using tc::staging;
  using G = tc::geometry<P, T>;
  INFO("element size " << sizeof(T) << " tile " << G::bm << "x" << G::bn << "x" << G::bk);
  using a_k = tc::operand_layout<T, G::bm, G::bk, staging::k_major>;
  using a_mn = tc::operand_layout<T, G::bm, G::bk, staging::mn_major>;
  using b_k = tc::operand_layout<T, G::bn, G::bk, staging::k_major>;
  using b_mn = tc::operand_layout<T, G::bn, G::bk, staging::mn_major>;
  CHECK(worst_stage_stores<a_k, T>() == 1);
  CHECK(worst_stage_stores<b_k, T>() == 1);
  // int8 lines keep each 16 rows in a 32-byte group: a phase's 8 chunks span 256 bytes of a
  // 128-row line (2-way); of a 64-row line, 128 bytes of two lines whose pad shifts the banks.
  const int mn_stores = sizeof(T) == 1 && G::bm > 64 ? 2 : 1;
  CHECK(worst_stage_stores<a_mn, T>() == mn_stores);
  CHECK(worst_stage_stores<b_mn, T>() == mn_stores);
  if constexpr (sizeof(T) == 2) {
    CHECK(worst_fragment_reads<a_k>(G::bm) == 1);
    CHECK(worst_fragment_reads<b_k>(G::bn) == 1);
    CHECK(worst_fragment_reads<a_mn>(G::bm) == 1);
    CHECK(worst_fragment_reads<b_mn>(G::bn) == 1);
  }
  CHECK(worst_output_reads<G>(true) == 1);
  CHECK(worst_output_reads<G>(false) == 1);
  // Runs of 4-, 2- and 1-byte outputs (f32 or int32, f16 or bf16, int8).
  CHECK(worst_output_run_reads<G, 4>() == 1);
  CHECK(worst_output_run_reads<G, 8>() == 1);
  CHECK(worst_output_run_reads<G, 16>() == 1);
  CHECK(worst_output_column_run_reads<G, 4>() == 1);
  CHECK(worst_output_column_run_reads<G, 8>() == 1);
  CHECK(worst_output_column_run_reads<G, 16>() == 1);
}

}  // namespace

namespace {

/// Every run of the accumulator tile is handed to exactly one slot, and a warp's runs of one row
/// are consecutive columns (whole 32-byte sectors of the output).
template <class G, int Run>
void check_output_runs() {
  INFO("tile " << G::bm << "x" << G::bn << ", runs of " << Run);
  std::vector<int> seen(static_cast<std::size_t>(G::bm * G::bn), 0);
  for (int e = 0; e < G::bm * G::bn / Run; ++e) {
    const tc::tile_element at = tc::output_run_slot<G, Run>(e);
    REQUIRE(at.row >= 0);
    REQUIRE(at.row < G::bm);
    REQUIRE(at.col % Run == 0);
    REQUIRE(at.col + Run <= G::bn);
    for (int j = 0; j < Run; ++j) ++seen[static_cast<std::size_t>(at.row * G::bn + at.col + j)];
    if (e % 32 != 0) {
      const tc::tile_element before = tc::output_run_slot<G, Run>(e - 1);
      if (before.row == at.row) CHECK(at.col == before.col + Run);
    }
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
}

/// Every run down a column of the accumulator tile is handed to exactly one slot, and a warp's
/// lanes take consecutive columns of the same rows.
template <class G, int Run>
void check_output_column_runs() {
  INFO("tile " << G::bm << "x" << G::bn << ", runs of " << Run << " down the columns");
  std::vector<int> seen(static_cast<std::size_t>(G::bm * G::bn), 0);
  for (int e = 0; e < G::bm * G::bn / Run; ++e) {
    const tc::tile_element at = tc::output_column_run_slot<G, Run>(e);
    REQUIRE(at.col >= 0);
    REQUIRE(at.col < G::bn);
    REQUIRE(at.row % Run == 0);
    REQUIRE(at.row + Run <= G::bm);
    for (int j = 0; j < Run; ++j) ++seen[static_cast<std::size_t>((at.row + j) * G::bn + at.col)];
    if (e % 32 != 0) {
      const tc::tile_element before = tc::output_column_run_slot<G, Run>(e - 1);
      if (before.row == at.row) CHECK(at.col == before.col + 1);
    }
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
}

template <class T>
void check_output_runs_of_all_tiles() {
  using medium = tc::geometry<typename gpubatch::default_tensor_core_policy<
                                  T, 80, gpubatch::size_class::medium>::type,
                              T>;
  using large = tc::geometry<typename gpubatch::default_tensor_core_policy<
                                 T, 80, gpubatch::size_class::large>::type,
                             T>;
  using small16 = tc::geometry<typename gpubatch::default_small_tensor_core_policy<T, 80, 16>::type, T>;
  using small32 = tc::geometry<typename gpubatch::default_small_tensor_core_policy<T, 80, 32>::type, T>;
  check_output_runs<medium, 4>();
  check_output_runs<medium, 8>();
  check_output_runs<medium, 16>();
  check_output_runs<large, 4>();
  check_output_runs<large, 8>();
  check_output_runs<large, 16>();
  check_output_runs<small16, 4>();
  check_output_runs<small16, 8>();
  check_output_runs<small16, 16>();
  check_output_runs<small32, 8>();
  check_output_column_runs<medium, 4>();
  check_output_column_runs<medium, 8>();
  check_output_column_runs<medium, 16>();
  check_output_column_runs<large, 8>();
  check_output_column_runs<small16, 8>();
  check_output_column_runs<small16, 16>();
  check_output_column_runs<small32, 8>();
  // The 16-column tile's warps take two row blocks, 16 x (16 + 4) words apart: 2-way.
  CHECK(worst_output_column_run_reads<small16, 8>() <= 2);
  CHECK(worst_output_column_run_reads<small32, 8>() == 1);
  // The small tiles' rows are one or two warps' runs wide: at most 2-way.
  CHECK(worst_output_run_reads<small16, 8>() <= 2);
  CHECK(worst_output_run_reads<small32, 8>() == 1);
}

}  // namespace

TEST_CASE("tensor-core epilogue runs cover the tile once", "[gemm][tensor_core]") {
  check_output_runs_of_all_tiles<gpubatch::half>();
  check_output_runs_of_all_tiles<float>();
  check_output_runs_of_all_tiles<std::int8_t>();
}

TEST_CASE("tensor-core shared-memory accesses are free of bank conflicts", "[gemm][tensor_core]") {
  check_banks<gpubatch::half, gpubatch::size_class::medium>();
  check_banks<gpubatch::half, gpubatch::size_class::large>();
  check_banks<gpubatch::bfloat16, gpubatch::size_class::medium>();
  check_banks<gpubatch::bfloat16, gpubatch::size_class::large>();
  check_banks<float, gpubatch::size_class::medium>();
  check_banks<float, gpubatch::size_class::large>();
  check_banks<std::int8_t, gpubatch::size_class::medium>();
  check_banks<std::int8_t, gpubatch::size_class::large>();
}
