/// @file detail/gemm/tensor_core.hpp
/// @brief What the tensor-core kernels share with the host tests: the per-type MMA shape, the
/// shared-memory geometry of a tensor-core policy, how one stage's operand tile is split into
/// 16-byte chunks among the threads, and the operand sources that say where each chunk comes
/// from (a plain or transposed matrix for GEMM; the implicit-GEMM gather for convolution).
///
/// Every operand tile is staged "K-major" in shared memory: `BK / mma_k` slabs, each holding the
/// tile's rows with `mma_k` reduction elements and a 16-byte pad per row (the pad spreads rows
/// over the banks and keeps every fragment 32-byte aligned). A chunk of 16 contiguous bytes
/// along K is copied with one asynchronous 16-byte copy when the source allows it (contiguous,
/// aligned, wholly inside the operand); otherwise element by element, zero outside the operand.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/numeric.hpp>

#include <cstdint>
#include <type_traits>

GPUBATCH_NAMESPACE_BEGIN
namespace detail::tensor_core {

/// The MMA shape the tensor-core kernels use for input element type T (16 x 16 x mma_k tiles)
/// and the accumulate type. f32 runs as TF32 (k = 8); f16, bf16 and int8 use k = 16.
template <class T>
struct mma_traits {
  static constexpr bool supported = false;
};
template <>
struct mma_traits<half> {
  static constexpr bool supported = true;
  static constexpr int mma_k = 16;
};
template <>
struct mma_traits<bfloat16> : mma_traits<half> {};
template <>
struct mma_traits<std::int8_t> : mma_traits<half> {};
template <>
struct mma_traits<float> {
  static constexpr bool supported = true;
  static constexpr int mma_k = 8;
};

/// Whether element type T has a tensor-core path (f32 only when TF32 is allowed at run time).
template <class T>
inline constexpr bool supported_v = mma_traits<std::remove_const_t<T>>::supported;

/// Integer log2 of a power of two.
constexpr int log2_exact(int v) { return v <= 1 ? 0 : 1 + log2_exact(v / 2); }

/// The shared-memory and warp geometry of tensor-core policy `Policy` for element type T.
template <class Policy, class T>
struct geometry {
  static constexpr int bm = Policy::tile_m;
  static constexpr int bn = Policy::tile_n;
  static constexpr int bk = Policy::tile_k;
  static constexpr int threads = Policy::threads;
  static constexpr int stages = Policy::stages;
  static constexpr int mma_k = mma_traits<T>::mma_k;
  /// Elements per 16-byte chunk.
  static constexpr int vector = 16 / static_cast<int>(sizeof(T));
  /// Row pitch of a slab, in elements: mma_k plus 16 bytes of pad.
  static constexpr int ld = mma_k + vector;
  static constexpr int slabs = bk / mma_k;
  /// Warps as a warps_m x warps_n grid, each owning a (warp_m x warp_n) part of the C tile.
  static constexpr int warps_m = 1 << (log2_exact(Policy::warps) / 2);
  static constexpr int warps_n = Policy::warps / warps_m;
  static constexpr int warp_m = bm / warps_m;
  static constexpr int warp_n = bn / warps_n;
  static constexpr int fragments_m = warp_m / 16;
  static constexpr int fragments_n = warp_n / 16;
  static constexpr int a_stage_elements = slabs * bm * ld;
  static constexpr int b_stage_elements = slabs * bn * ld;
  static constexpr int stage_elements = a_stage_elements + b_stage_elements;
  static constexpr int a_chunks = bm * bk / vector;
  static constexpr int b_chunks = bn * bk / vector;
  static constexpr int a_chunks_per_thread = (a_chunks + threads - 1) / threads;
  static constexpr int b_chunks_per_thread = (b_chunks + threads - 1) / threads;
  /// The C tile is staged through shared memory (4-byte accumulators) for the epilogue; the
  /// 4-element pad keeps fragment stores aligned and off one bank.
  static constexpr int c_ld = bn + 4;
  static constexpr std::int64_t pipeline_bytes =
      std::int64_t{stages} * stage_elements * static_cast<std::int64_t>(sizeof(T));
  static constexpr std::int64_t c_bytes = std::int64_t{bm} * c_ld * 4;
  static constexpr std::int64_t shared_bytes = pipeline_bytes > c_bytes ? pipeline_bytes : c_bytes;

  static_assert(mma_traits<T>::supported,
                "gpubatch: tensor-core policies need f16, bf16, int8 or f32 (TF32) elements");
  static_assert(bk % mma_k == 0,
                "gpubatch::tensor_core_policy: TileK must be a multiple of the MMA depth "
                "(16 for f16, bf16 and int8; 8 for TF32)");
  static_assert(bm % (16 * warps_m) == 0 && bn % (16 * warps_n) == 0,
                "gpubatch::tensor_core_policy: each warp's part of the tile must be a whole "
                "number of 16 x 16 fragments");
  static_assert(stages >= 2, "gpubatch::tensor_core_policy: the cp.async pipeline needs 2+ stages");
  static_assert(shared_bytes <= 227 * 1024,
                "gpubatch::tensor_core_policy: the tile needs more shared memory than a block can "
                "have (227 KiB on sm_90); use a smaller tile or fewer stages");

  /// Offset of element (row, kk) of an operand tile with `rows` rows, within one stage.
  GPUBATCH_HOST_DEVICE static constexpr int offset(int rows, int row, int kk) {
    return ((kk / mma_k) * rows + row) * ld + kk % mma_k;
  }
};

/// Position of one 16-byte chunk in an operand tile: row and first reduction index.
struct chunk_position {
  int row;
  int kk;
};

/// Chunk c of a (rows x bk) operand tile cut into `vector`-element chunks. With a K-contiguous
/// source consecutive chunks walk K first (consecutive threads read consecutive 16-byte pieces);
/// otherwise they walk the rows, so the element-wise path reads adjacent addresses across a
/// warp when the rows are what is contiguous.
GPUBATCH_HOST_DEVICE constexpr chunk_position chunk_of(int c, int rows, int bk, int vector,
                                                       bool k_contiguous) {
  return k_contiguous ? chunk_position{c / (bk / vector), (c % (bk / vector)) * vector}
                      : chunk_position{c % rows, (c / rows) * vector};
}

/// Whether `p` is 16-byte aligned.
template <class T>
GPUBATCH_HOST_DEVICE bool aligned16(const T* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

/// One GEMM operand as `rows` x `k` (rows = m for A, n for B): element (r, kk) at
/// data[r * row_stride + kk * k_stride].
template <class T>
struct matrix_source {
  using element_type = T;
  const T* data;
  index_t rows;
  index_t k;
  index_t row_stride;
  index_t k_stride;
  bool vectorizable;  ///< K-contiguous, rows 16-byte aligned: whole chunks copy as one

  struct cursor {
    const T* row;  ///< null when the row is outside the operand
  };

  GPUBATCH_HOST_DEVICE static matrix_source make(const T* data, index_t rows, index_t k,
                                                 index_t row_stride, index_t k_stride) {
    const bool vectorizable =
        k_stride == 1 && aligned16(data) &&
        (rows <= 1 || (row_stride * static_cast<index_t>(sizeof(T))) % 16 == 0);
    return {data, rows, k, row_stride, k_stride, vectorizable};
  }
  GPUBATCH_HOST_DEVICE bool k_contiguous() const { return k_stride == 1; }
  GPUBATCH_HOST_DEVICE cursor row(index_t r) const {
    return {r < rows ? data + r * row_stride : nullptr};
  }
  /// Element (row, kk), or null when it lies outside the operand (it reads as zero).
  GPUBATCH_HOST_DEVICE const T* element(const cursor& c, index_t kk) const {
    return c.row != nullptr && kk < k ? c.row + kk * k_stride : nullptr;
  }
  /// The `vector` elements from (row, kk) on as one aligned, in-bounds piece, or null.
  GPUBATCH_HOST_DEVICE const T* chunk(const cursor& c, index_t kk, int vector) const {
    return vectorizable && c.row != nullptr && kk + vector <= k ? c.row + kk : nullptr;
  }
};

/// op(A) of a GEMM problem (m x k) as a tensor-core operand source.
template <class TA, class TB, class TC>
GPUBATCH_HOST_DEVICE matrix_source<TA> a_source(const gemm_instance<TA, TB, TC>& p) {
  return matrix_source<TA>::make(p.a.data, p.m, p.k, p.a.stride.row, p.a.stride.col);
}

/// op(B) of a GEMM problem, read as its n columns of k elements.
template <class TA, class TB, class TC>
GPUBATCH_HOST_DEVICE matrix_source<TB> b_source(const gemm_instance<TA, TB, TC>& p) {
  return matrix_source<TB>::make(p.b.data, p.n, p.k, p.b.stride.col, p.b.stride.row);
}

/// The A operand of an implicit GEMM (detail/conv/problem.hpp's mapping interface) as a
/// tensor-core operand source: rows resolved once through the mapping's row cursor, elements
/// gathered with a(cursor, kk), a whole chunk copied at once where the mapping guarantees that
/// every aligned run of `vector` reduction indices is one contiguous, 16-byte-aligned piece
/// (NHWC with channels per group a multiple of the chunk).
template <class Mapping, class T>
struct gather_source {
  using element_type = T;
  using cursor = typename Mapping::row_cursor;
  Mapping mapping;
  index_t k;
  bool vectorizable;

  GPUBATCH_HOST_DEVICE static gather_source make(const Mapping& g, int vector) {
    return {g, g.k(), g.a_chunks_contiguous(vector)};
  }
  GPUBATCH_HOST_DEVICE bool k_contiguous() const { return mapping.a_k_contiguous(); }
  GPUBATCH_HOST_DEVICE cursor row(index_t r) const { return mapping.row(r); }
  GPUBATCH_HOST_DEVICE const T* element(const cursor& c, index_t kk) const {
    return kk < k ? mapping.a(c, kk) : nullptr;
  }
  /// Null in the zero padding too: the element-wise path then fills the chunk with zeros.
  GPUBATCH_HOST_DEVICE const T* chunk(const cursor& c, index_t kk, int vector) const {
    return vectorizable && kk + vector <= k ? mapping.a(c, kk) : nullptr;
  }
};

/// One thread's share of staging an operand tile: the chunk positions it copies and the source
/// rows they belong to, resolved once per tile and reused for every K step.
template <class Geometry, int Rows, int ChunksPerThread, class Source>
struct operand_stager {
  static constexpr int chunks = Rows * Geometry::bk / Geometry::vector;
  chunk_position position[ChunksPerThread];
  typename Source::cursor cursor[ChunksPerThread];

  GPUBATCH_HOST_DEVICE operand_stager(const Source& source, index_t tile_row, int thread) {
    const bool k_contiguous = source.k_contiguous();
    for (int i = 0; i < ChunksPerThread; ++i) {
      const int c = thread + i * Geometry::threads;
      position[i] = chunk_of(c < chunks ? c : 0, Rows, Geometry::bk, Geometry::vector,
                             k_contiguous);
      cursor[i] = source.row(tile_row + position[i].row);
    }
  }

  /// Copies this thread's chunks of the K step starting at k0 into the stage at `tile`:
  /// `copy16(dst, src)` for whole chunks, element by element (zero outside) for the rest.
  template <class Copy16>
  GPUBATCH_HOST_DEVICE void stage(const Source& source, index_t k0, int thread,
                                  std::remove_const_t<typename Source::element_type>* tile,
                                  const Copy16& copy16) const {
    using T = std::remove_const_t<typename Source::element_type>;
    for (int i = 0; i < ChunksPerThread; ++i) {
      if (ChunksPerThread * Geometry::threads > chunks && thread + i * Geometry::threads >= chunks) {
        break;
      }
      const chunk_position at = position[i];
      T* const dst = tile + Geometry::offset(Rows, at.row, at.kk);
      const auto* whole = source.chunk(cursor[i], k0 + at.kk, Geometry::vector);
      if (whole != nullptr) {
        copy16(dst, whole);
        continue;
      }
      // The edge path (ragged K, padding, unaligned or K-strided operands): kept rolled so it
      // does not crowd the registers of the common path.
#if defined(__CUDA_ARCH__)
#pragma unroll 1
#endif
      for (int e = 0; e < Geometry::vector; ++e) {
        const auto* p = source.element(cursor[i], k0 + at.kk + e);
        dst[e] = p != nullptr ? *p : T{};
      }
    }
  }
};

}  // namespace detail::tensor_core
GPUBATCH_NAMESPACE_END
