// The tensor-core kernels' staging logic, run on the host: every thread of a block stages its
// chunks of one operand tile exactly as the kernel does (with memcpy standing in for cp.async),
// and the shared-memory image must hold every element of op(A) or op(B) in its slot, zero
// outside the operand, with the padding untouched — for every layout, transpose, alignment and
// edge size.
#include <gpubatch/detail/gemm/tensor_core.hpp>
#include <gpubatch/gemm_policy.hpp>

#include "../support/catch.hpp"

#include <array>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

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

/// Stages the tile at (tile_row, k0) of one operand with every thread of a block, then checks
/// the shared-memory image. Returns how many chunks went through the 16-byte copy.
template <class Policy, class T, int Rows, int ChunksPerThread, bool IsA>
int check_staging(const operand_case& oc, index_t tile_row, index_t k0) {
  using G = tc::geometry<Policy, T>;
  INFO("rows " << oc.rows << " k " << oc.k << " " << gpubatch::to_string(oc.order) << " "
               << gpubatch::to_string(oc.transpose) << " pad " << oc.pad << " offset "
               << oc.offset << " tile (" << tile_row << ", " << k0 << ")");
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

  std::vector<T> tile(static_cast<std::size_t>(G::slabs * Rows * G::ld), byte_poison<T>());
  int whole_chunks = 0;
  const auto copy16 = [&](T* dst, const T* src) {
    REQUIRE(tc::aligned16(src));
    std::memcpy(static_cast<void*>(dst), static_cast<const void*>(src), 16);
    ++whole_chunks;
  };
  for (int thread = 0; thread < G::threads; ++thread) {
    const tc::operand_stager<G, Rows, ChunksPerThread, tc::matrix_source<T>> stager(source, tile_row,
                                                                                    thread);
    stager.stage(source, k0, thread, tile.data(), copy16);
  }
  for (int r = 0; r < Rows; ++r) {
    for (int slab = 0; slab < G::slabs; ++slab) {
      for (int e = 0; e < G::ld; ++e) {
        const T got = tile[static_cast<std::size_t>((slab * Rows + r) * G::ld + e)];
        if (e < G::mma_k) {
          const int kk = slab * G::mma_k + e;
          INFO("row " << r << " kk " << kk);
          REQUIRE(G::offset(Rows, r, kk) == (slab * Rows + r) * G::ld + e);
          REQUIRE(same_bits(got, expected(tile_row + r, k0 + kk)));
        } else {
          REQUIRE(same_bits(got, byte_poison<T>()));  // the pad is never written
        }
      }
    }
  }
  return whole_chunks;
}

template <class Policy, class T>
void check_both_operands(const operand_case& oc, index_t tile_row, index_t k0) {
  using G = tc::geometry<Policy, T>;
  check_staging<Policy, T, G::bm, G::a_chunks_per_thread, true>(oc, tile_row, k0);
  check_staging<Policy, T, G::bn, G::b_chunks_per_thread, false>(oc, tile_row, k0);
}

template <class Policy, class T>
void check_edges() {
  using G = tc::geometry<Policy, T>;
  for (const index_t rows : {index_t{1}, index_t{3}, index_t{17}, index_t{33}, index_t{127}, index_t{G::bm + 5}}) {
    for (const index_t k : {index_t{1}, index_t{3}, index_t{17}, index_t{33}, index_t{127}, index_t{G::bk * 2}}) {
      for (const layout order : {layout::row_major, layout::col_major}) {
        for (const op transpose : {op::none, op::transpose}) {
          // Minimal, misaligned, and padded to whole chunks (so ragged K ends are reached by
          // the 16-byte path's bounds check, not its alignment check).
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
              check_staging<Policy, T, G::bm, G::a_chunks_per_thread, true>(oc, last_row, last_k);
            }
          }
        }
      }
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

TEST_CASE("tensor-core geometry of the default policies", "[gemm][tensor_core]") {
  using large_f16 = tc::geometry<gpubatch::default_tensor_core_policy<gpubatch::half, 90, gpubatch::size_class::large>::type, gpubatch::half>;
  using medium_i8 = tc::geometry<gpubatch::default_tensor_core_policy<std::int8_t, 80, gpubatch::size_class::medium>::type, std::int8_t>;
  using large_tf32 = tc::geometry<gpubatch::default_tensor_core_policy<float, 80, gpubatch::size_class::large>::type, float>;
  STATIC_REQUIRE(large_f16::warps_m * large_f16::warps_n == 8);
  STATIC_REQUIRE(large_f16::fragments_m * 16 * large_f16::warps_m == 128);
  STATIC_REQUIRE(large_f16::fragments_n * 16 * large_f16::warps_n == 128);
  STATIC_REQUIRE(medium_i8::bk == 64);
  STATIC_REQUIRE(large_tf32::mma_k == 8);
  // sm_80 allows 163 KiB of shared memory per block.
  STATIC_REQUIRE(large_f16::shared_bytes <= 163 * 1024);
  STATIC_REQUIRE(medium_i8::shared_bytes <= 163 * 1024);
  STATIC_REQUIRE(large_tf32::shared_bytes <= 163 * 1024);
  // wmma needs 32-byte aligned fragments: a 16-row block of a slab and each stage start on one.
  STATIC_REQUIRE((16 * large_f16::ld * 2) % 32 == 0);
  STATIC_REQUIRE((large_f16::stage_elements * 2) % 32 == 0);
  STATIC_REQUIRE((16 * large_tf32::ld * 4) % 32 == 0);
  STATIC_REQUIRE((16 * medium_i8::ld) % 32 == 0);
  STATIC_REQUIRE((16 * large_f16::c_ld * 4) % 32 == 0);
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
  // Row-major op(A), aligned, K a multiple of the chunk: every in-bounds chunk is one copy.
  const operand_case aligned{40, 64, layout::row_major, op::none, 8, 0};
  CHECK(check_staging<policy, gpubatch::half, G::bm, G::a_chunks_per_thread, true>(aligned, 0, 0) ==
        40 * G::bk / G::vector);
  // K = 39: the chunk that straddles K's end is copied element-wise (zero-filled).
  const operand_case ragged{40, 39, layout::row_major, op::none, 1, 0};
  CHECK(check_staging<policy, gpubatch::half, G::bm, G::a_chunks_per_thread, true>(ragged, 0, 32) == 0);
  CHECK(check_staging<policy, gpubatch::half, G::bm, G::a_chunks_per_thread, true>(ragged, 0, 0) ==
        40 * G::bk / G::vector);
  // A misaligned base or a leading dimension that is not a whole number of chunks: none.
  const operand_case shifted{40, 64, layout::row_major, op::none, 8, 1};
  CHECK(check_staging<policy, gpubatch::half, G::bm, G::a_chunks_per_thread, true>(shifted, 0, 0) == 0);
  const operand_case odd_ld{40, 64, layout::row_major, op::none, 1, 0};
  CHECK(check_staging<policy, gpubatch::half, G::bm, G::a_chunks_per_thread, true>(odd_ld, 0, 0) == 0);
  // K-strided operands (column-major A) go element by element.
  const operand_case strided{40, 64, layout::col_major, op::none, 0, 0};
  CHECK(check_staging<policy, gpubatch::half, G::bm, G::a_chunks_per_thread, true>(strided, 0, 0) == 0);
  // B copies whole chunks when op(B)^T (n x k) is row-major, i.e. B is K-contiguous.
  CHECK(check_staging<policy, gpubatch::half, G::bn, G::b_chunks_per_thread, false>(
            {40, 64, layout::row_major, op::none, 0, 0}, 0, 0) == 40 * G::bk / G::vector);
}
