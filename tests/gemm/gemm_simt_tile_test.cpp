// The SIMT tiled kernel's operand loads, run on the host: every thread of a block loads its
// share of one operand tile through an instrumented reader (memcpy standing in for the 16-byte
// vector load) and stores it as the kernel does. The shared-memory image must hold every element
// of the operand in its slot, zero outside the operand; no read may leave the operand; and whole
// 16-byte loads must be used exactly where the operand allows them — for the default policies,
// both operands, every layout, transpose, alignment and edge size.
#include <gpubatch/detail/gemm/simt_tile.hpp>
#include <gpubatch/gemm_policy.hpp>

#include "../support/catch.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <set>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../support/inputs.hpp"

using gpubatch::index_t;
using gpubatch::layout;
using gpubatch::op;
using gpubatch::test::byte_poison;
using gpubatch::test::same_bits;
namespace detail = gpubatch::detail;
namespace simt = gpubatch::detail::simt;

namespace {

/// One operand case: op(X) has `rows` x `cols` elements.
struct operand_case {
  index_t rows, cols;
  layout order;
  op transpose;
  index_t pad;     ///< extra leading-dimension elements (holding random values, never to be read)
  index_t offset;  ///< elements between a 16-byte boundary and the matrix
};

/// Reads through the loader interface of simt::operand_tile, flagging any address that is not an
/// element of the operand and counting the 16-byte loads.
template <class Compute, class T>
struct recording_loader {
  const T* base;
  const std::vector<bool>* inside;  ///< per element of the allocation: part of the operand
  int* vector_loads;
  int* element_loads;
  int* bad_reads;

  bool readable(const T* p) const {
    const auto o = p - base;
    return o >= 0 && o < static_cast<std::ptrdiff_t>(inside->size()) &&
           (*inside)[static_cast<std::size_t>(o)];
  }
  Compute element(const T* p) const {
    ++*element_loads;
    if (!readable(p)) {
      ++*bad_reads;
      return Compute(0);
    }
    return gpubatch::convert<Compute>(*p);
  }
  void vector(Compute* dst, const T* p) const {
    ++*vector_loads;
    constexpr int v = simt::vector_width<Compute>;
    bool ok = std::is_same_v<T, Compute> && simt::aligned16(p);
    for (int e = 0; e < v; ++e) ok = ok && readable(p + e);
    if (!ok) {
      ++*bad_reads;
      return;
    }
    std::memcpy(static_cast<void*>(dst), static_cast<const void*>(p), 16);
  }
};

/// What one simulated tile load did.
struct tile_result {
  int vector_loads = 0;
  int expected_vector_loads = 0;
};

/// Loads and stores the tile at (row0, col0) of one operand with every thread of a block, checks
/// the shared-memory image and the reads, and reports the 16-byte loads made and expected.
template <int Rows, int Cols, int Threads, class Compute, class T>
tile_result check_tile(const operand_case& oc, bool transpose_into_shared, index_t row0,
                       index_t col0) {
  INFO("op(X) " << oc.rows << " x " << oc.cols << " " << gpubatch::to_string(oc.order) << " "
                << gpubatch::to_string(oc.transpose) << " pad " << oc.pad << " offset "
                << oc.offset << " tile " << Rows << " x " << Cols << " at (" << row0 << ", "
                << col0 << ")");
  const bool stored_transposed = oc.transpose == op::transpose;
  const index_t stored_rows = stored_transposed ? oc.cols : oc.rows;
  const index_t stored_cols = stored_transposed ? oc.rows : oc.cols;
  const index_t minor = oc.order == layout::row_major ? stored_cols : stored_rows;
  const index_t major = oc.order == layout::row_major ? stored_rows : stored_cols;
  const index_t ld = std::max<index_t>(minor + oc.pad, 1);
  const index_t span = major * ld;
  // 16-byte-aligned storage, so `offset` alone decides the base alignment.
  std::vector<std::array<unsigned char, 16>> storage(
      static_cast<std::size_t>((oc.offset + span) * index_t{sizeof(T)} / 16 + 2));
  T* const base = reinterpret_cast<T*>(storage.data()) + oc.offset;
  const auto values = gpubatch::test::random_inputs<T>(static_cast<std::size_t>(span),
                                                       static_cast<std::uint64_t>(span + row0));
  std::copy(values.begin(), values.end(), base);

  const detail::strides2 s = detail::operand_strides(oc.order, oc.transpose, ld);
  const detail::matrix_ref<const T> x{base, s};
  std::vector<bool> inside(static_cast<std::size_t>(span), false);
  for (index_t i = 0; i < oc.rows; ++i) {
    for (index_t j = 0; j < oc.cols; ++j) inside[static_cast<std::size_t>(i * s.row + j * s.col)] = true;
  }

  // The 16-byte path is expected exactly when the compute type is read as is, the tile's
  // contiguous extent and each thread's share are whole chunks, and every chunk start is
  // aligned; then once per chunk wholly inside the operand.
  constexpr int vector = static_cast<int>(16 / sizeof(Compute));
  const bool cols_contiguous = s.col == 1;
  const int extent = cols_contiguous ? Cols : Rows;
  const index_t lines_total = cols_contiguous ? oc.rows : oc.cols;
  const index_t along_total = cols_contiguous ? oc.cols : oc.rows;
  const index_t line_stride = cols_contiguous ? s.row : s.col;
  const bool vectorizable = std::is_same_v<T, Compute> && extent % vector == 0 &&
                            (Rows * Cols / Threads) % vector == 0 && oc.offset % vector == 0 &&
                            (lines_total <= 1 || line_stride % vector == 0);
  tile_result result;
  if (vectorizable) {
    const index_t line0 = cols_contiguous ? row0 : col0, along0 = cols_contiguous ? col0 : row0;
    const int lines = Rows * Cols / extent;
    for (int l = 0; l < lines && line0 + l < lines_total; ++l) {
      for (int a = 0; a + vector <= extent; a += vector) {
        result.expected_vector_loads += along0 + a + vector <= along_total ? 1 : 0;
      }
    }
  }

  int element_loads = 0, bad_reads = 0;
  const recording_loader<Compute, T> loader{base, &inside, &result.vector_loads, &element_loads,
                                            &bad_reads};
  using tile = simt::operand_tile<Rows, Cols, Threads, Compute, T>;
  const simt::operand_plan plan = tile::plan(x, oc.rows, oc.cols);
  // Staged lines are stage_pitch elements apart (padded against bank conflicts).
  const int staged = transpose_into_shared ? Cols * simt::stage_pitch<Compute, Rows>
                                           : Rows * simt::stage_pitch<Compute, Cols>;
  std::vector<Compute> shared(static_cast<std::size_t>(staged), byte_poison<Compute>());
  for (int thread = 0; thread < Threads; ++thread) {
    Compute regs[Rows * Cols / Threads];
    std::fill(std::begin(regs), std::end(regs), byte_poison<Compute>());
    tile::load(plan, x, oc.rows, oc.cols, row0, col0, thread, regs, loader);
    tile::store(plan, transpose_into_shared, shared.data(), thread, regs);
  }
  CHECK(bad_reads == 0);
  CHECK(plan.vectorized == vectorizable);
  CHECK(result.vector_loads == result.expected_vector_loads);
  // Each vector load stands for `vector` elements; the rest are read one by one, and only
  // elements of the operand are read at all.
  index_t in_tile = 0;
  for (index_t i = row0; i < std::min<index_t>(row0 + Rows, oc.rows); ++i) {
    for (index_t j = col0; j < std::min<index_t>(col0 + Cols, oc.cols); ++j) ++in_tile;
  }
  CHECK(element_loads + result.vector_loads * vector == in_tile);

  int wrong = 0;
  int first_i = -1, first_j = -1;
  for (int i = 0; i < Rows; ++i) {
    for (int j = 0; j < Cols; ++j) {
      const index_t gi = row0 + i, gj = col0 + j;
      const Compute want = gi < oc.rows && gj < oc.cols ? gpubatch::convert<Compute>(x(gi, gj))
                                                        : Compute(0);
      const Compute got = shared[static_cast<std::size_t>(
          simt::staged_offset<Rows, Cols, Compute>(transpose_into_shared, {i, j}))];
      if (!same_bits(got, want)) {
        if (wrong++ == 0) std::tie(first_i, first_j) = std::make_pair(i, j);
      }
    }
  }
  INFO("first wrong slot: tile element (" << first_i << ", " << first_j << ")");
  CHECK(wrong == 0);
  return result;
}

/// Every tile corner (first, last, and the two mixed ones) of one operand.
template <int Rows, int Cols, int Threads, class Compute, class T>
tile_result check_corners(const operand_case& oc, bool transpose_into_shared) {
  const index_t last_row = (oc.rows - 1) / Rows * Rows, last_col = (oc.cols - 1) / Cols * Cols;
  std::set<std::pair<index_t, index_t>> origins{
      {0, 0}, {last_row, last_col}, {0, last_col}, {last_row, 0}};
  tile_result total;
  for (const auto& [row0, col0] : origins) {
    const tile_result r =
        check_tile<Rows, Cols, Threads, Compute, T>(oc, transpose_into_shared, row0, col0);
    total.vector_loads += r.vector_loads;
    total.expected_vector_loads += r.expected_vector_loads;
  }
  return total;
}

/// Both operands of a policy over every size, layout, transpose, leading dimension and base
/// alignment; returns the 16-byte loads made, so callers can see the fast path was taken.
template <class Policy, class Compute, class T>
int check_policy() {
  constexpr int BM = Policy::tile_m, BN = Policy::tile_n, BK = Policy::tile_k;
  constexpr int threads = Policy::threads;
  constexpr int vector = static_cast<int>(16 / sizeof(Compute));
  int vector_loads = 0;
  const index_t sizes[] = {1, 3, 17, 33, 127, 128};
  for (const index_t rows : sizes) {
    for (const index_t cols : sizes) {
      for (const layout order : {layout::row_major, layout::col_major}) {
        for (const op transpose : {op::none, op::transpose}) {
          const bool cols_minor = (order == layout::row_major) == (transpose == op::none);
          const index_t minor = cols_minor ? cols : rows;
          const index_t to_chunk = (vector - minor % vector) % vector;
          // Tight, an odd leading dimension, leading dimensions padded to whole chunks (with
          // and without an extra chunk of padding), each with an aligned and a shifted base.
          for (const index_t pad : {index_t{0}, index_t{1}, to_chunk, to_chunk + vector}) {
            for (const index_t offset : {index_t{0}, index_t{1}}) {
              const operand_case oc{rows, cols, order, transpose, pad, offset};
              // A: op(A) is m x k, staged [BK][BM]; B: op(B) is k x n, staged [BK][BN].
              vector_loads += check_corners<BM, BK, threads, Compute, T>(oc, true).vector_loads;
              vector_loads += check_corners<BK, BN, threads, Compute, T>(oc, false).vector_loads;
            }
          }
        }
      }
    }
  }
  return vector_loads;
}

using medium_policy = gpubatch::default_gemm_policy<float, 90, gpubatch::size_class::medium>::type;
using large_policy = gpubatch::default_gemm_policy<float, 90, gpubatch::size_class::large>::type;

}  // namespace

TEST_CASE("SIMT tile chunks cover a tile exactly once, consecutive threads adjacent",
          "[gemm][simt]") {
  const auto check = [](auto rows_c, auto cols_c, auto threads_c, auto width_c) {
    constexpr int rows = decltype(rows_c)::value, cols = decltype(cols_c)::value;
    constexpr int threads = decltype(threads_c)::value, width = decltype(width_c)::value;
    for (const bool cols_contiguous : {true, false}) {
      INFO(rows << " x " << cols << " threads " << threads << " width " << width
                << (cols_contiguous ? " cols" : " rows") << " contiguous");
      std::set<std::pair<int, int>> seen;
      for (int t = 0; t < threads; ++t) {
        for (int r = 0; r < rows * cols / threads; ++r) {
          const simt::tile_position p =
              simt::position_of<rows, cols, threads, width>(cols_contiguous, t, r);
          REQUIRE(p.row >= 0);
          REQUIRE(p.row < rows);
          REQUIRE(p.col >= 0);
          REQUIRE(p.col < cols);
          REQUIRE(seen.insert({p.row, p.col}).second);
          // Within a chunk the elements run along the contiguous dimension.
          if (r % width != 0) {
            const simt::tile_position prev =
                simt::position_of<rows, cols, threads, width>(cols_contiguous, t, r - 1);
            REQUIRE(prev.row + (cols_contiguous ? 0 : 1) == p.row);
            REQUIRE(prev.col + (cols_contiguous ? 1 : 0) == p.col);
          }
          // Thread t + 1's chunk follows thread t's along the line (coalesced loads).
          if (t + 1 < threads && r % width == 0) {
            const simt::tile_position next =
                simt::position_of<rows, cols, threads, width>(cols_contiguous, t + 1, r);
            const int extent = cols_contiguous ? cols : rows;
            const int along = cols_contiguous ? p.col : p.row;
            if (along + width < extent) {
              REQUIRE(next.row == p.row + (cols_contiguous ? 0 : width));
              REQUIRE(next.col == p.col + (cols_contiguous ? width : 0));
            }
          }
        }
      }
      CHECK(seen.size() == static_cast<std::size_t>(rows * cols));
    }
  };
  using std::integral_constant;
  check(integral_constant<int, 64>{}, integral_constant<int, 16>{}, integral_constant<int, 256>{},
        integral_constant<int, 4>{});
  check(integral_constant<int, 16>{}, integral_constant<int, 128>{},
        integral_constant<int, 256>{}, integral_constant<int, 2>{});
  check(integral_constant<int, 128>{}, integral_constant<int, 16>{},
        integral_constant<int, 256>{}, integral_constant<int, 1>{});
}

TEST_CASE("SIMT tile shapes: 16-byte chunks only where they are whole", "[gemm][simt]") {
  // 64 x 16 over 256 threads: 4 elements each, one float4 or two double2 chunks.
  STATIC_REQUIRE(simt::operand_tile<64, 16, 256, float, float>::cols_width == 4);
  STATIC_REQUIRE(simt::operand_tile<64, 16, 256, float, float>::rows_width == 4);
  STATIC_REQUIRE(simt::operand_tile<16, 64, 256, double, double>::cols_width == 2);
  // A converting load, or a thread share smaller than a chunk, stays element-wise.
  STATIC_REQUIRE(simt::operand_tile<64, 16, 256, float, gpubatch::half>::cols_width == 1);
  STATIC_REQUIRE(simt::operand_tile<64, 16, 256, float, gpubatch::half>::rows_width == 1);
  STATIC_REQUIRE(simt::operand_tile<32, 4, 128, float, float>::cols_width == 1);
  STATIC_REQUIRE(simt::operand_tile<32, 4, 128, float, float>::rows_width == 1);
  // A contiguous extent narrower than a chunk: only the other direction has chunks.
  STATIC_REQUIRE(simt::operand_tile<64, 2, 32, float, float>::cols_width == 1);
  STATIC_REQUIRE(simt::operand_tile<64, 2, 32, float, float>::rows_width == 4);
}

TEST_CASE("SIMT tile loads of a shape with chunks in one direction only", "[gemm][simt]") {
  // 64 x 2 over 32 threads: rows may be chunked, columns (extent 2 < 4 floats) may not;
  // check_tile holds the loads to what each case allows.
  for (const layout order : {layout::row_major, layout::col_major}) {
    for (const index_t rows : {index_t{3}, index_t{64}, index_t{127}}) {
      for (const index_t pad : {index_t{0}, index_t{1}}) {
        const operand_case oc{rows, 5, order, op::none, pad, 0};
        check_tile<64, 2, 32, float, float>(oc, false, 0, 0);
        check_tile<64, 2, 32, float, float>(oc, false, (rows - 1) / 64 * 64, 4);
      }
    }
  }
  // Row-major: the columns are contiguous and too narrow. Column-major, aligned: all of them.
  CHECK(check_tile<64, 2, 32, float, float>({64, 5, layout::row_major, op::none, 3, 0}, false, 0,
                                            0)
            .vector_loads == 0);
  CHECK(check_tile<64, 2, 32, float, float>({64, 5, layout::col_major, op::none, 0, 0}, false, 0,
                                            0)
            .vector_loads == 2 * 64 / 4);
}

TEMPLATE_TEST_CASE("SIMT tile loads of the default medium policy: every layout and edge",
                   "[gemm][simt]", float, double) {
  CHECK(check_policy<medium_policy, TestType, TestType>() > 0);
}

TEMPLATE_TEST_CASE("SIMT tile loads of the default large policy: every layout and edge",
                   "[gemm][simt]", float, double) {
  CHECK(check_policy<large_policy, TestType, TestType>() > 0);
}

TEST_CASE("SIMT tile loads convert half operands element by element", "[gemm][simt]") {
  CHECK(check_policy<medium_policy, float, gpubatch::half>() == 0);
}

TEMPLATE_TEST_CASE("SIMT tile loads use 16-byte loads wherever the operand allows",
                   "[gemm][simt]", float, double) {
  using T = TestType;
  constexpr int BM = medium_policy::tile_m, BK = medium_policy::tile_k;
  constexpr int threads = medium_policy::threads;
  constexpr int vector = static_cast<int>(16 / sizeof(T));
  // Row-major op(A), aligned, whole tiles: every chunk of the tile is one vector load.
  const operand_case aligned{128, 128, layout::row_major, op::none, 0, 0};
  CHECK(check_tile<BM, BK, threads, T, T>(aligned, true, 64, 16).vector_loads ==
        BM * BK / vector);
  // Column-major op(A) (m contiguous) vectorizes along m instead.
  const operand_case by_rows{128, 128, layout::col_major, op::none, 0, 0};
  CHECK(check_tile<BM, BK, threads, T, T>(by_rows, true, 0, 0).vector_loads == BM * BK / vector);
  // K = 127 with an aligned leading dimension: the chunk that straddles K's end is read
  // element-wise and zero-filled, the others are whole.
  const operand_case ragged{128, 127, layout::row_major, op::none, 1, 0};
  CHECK(check_tile<BM, BK, threads, T, T>(ragged, true, 0, 112).vector_loads ==
        BM * (BK / vector - 1));
  // A shifted base or a leading dimension that breaks 16-byte alignment: none at all.
  const operand_case shifted{128, 128, layout::row_major, op::none, 0, 1};
  CHECK(check_tile<BM, BK, threads, T, T>(shifted, true, 0, 0).vector_loads == 0);
  const operand_case odd_ld{128, 128, layout::row_major, op::none, 1, 0};
  CHECK(check_tile<BM, BK, threads, T, T>(odd_ld, true, 0, 0).vector_loads == 0);
  // A single row: its leading dimension never matters.
  const operand_case one_row{1, 128, layout::row_major, op::none, 1, 0};
  CHECK(check_tile<BM, BK, threads, T, T>(one_row, true, 0, 0).vector_loads == BK / vector);
}
