/// @file detail/gemm/simt_tile.hpp
/// @brief What the SIMT tiled GEMM kernel shares with the host tests: how one K step's operand
/// tile is split among the threads of a block, which parts of it are fetched with one 16-byte
/// load, and where each fetched element lands in shared memory.
///
/// A thread owns `Rows * Cols / Threads` elements of a tile, grouped into chunks along the
/// operand's contiguous dimension; chunk c of the tile goes to thread c % Threads, so consecutive
/// threads read consecutive pieces of memory (coalesced loads). Chunks are 16 bytes wide when the
/// tile shape allows it (operand read as the compute type, whole chunks per thread and per line)
/// and one element wide otherwise, which is the element-wise walk the kernel has always done.
/// A 16-byte chunk is one vector load when the operand allows it (unit contiguous stride,
/// 16-byte aligned base and leading dimension) and the chunk lies wholly inside the matrix;
/// every other chunk is read element by element with zero fill, so nothing outside the matrix
/// is ever read and no load is misaligned.
///
/// Nothing here touches memory directly: reads go through a loader (global memory on the device,
/// an instrumented reader in the tests), so the very code the kernel runs can be checked on the
/// host for every layout, alignment and edge.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/detail/gemm/warp_tiling.hpp>
#include <gpubatch/numeric.hpp>

#include <cstdint>
#include <type_traits>

// Register arrays stay in registers only when every index is a compile-time constant after
// unrolling. Only the device pass understands the pragma (host compilers, nvcc's host pass
// included, would warn about it) and only the device pass needs it.
#if defined(__CUDA_ARCH__)
#define GPUBATCH_SIMT_TILE_UNROLL _Pragma("unroll")
#else
#define GPUBATCH_SIMT_TILE_UNROLL
#endif

GPUBATCH_NAMESPACE_BEGIN
namespace detail::simt {

/// Elements of `Compute` in one 16-byte load (1 when 16 bytes do not hold a whole number of
/// them, which leaves such types on the element-wise path).
template <class Compute>
inline constexpr int vector_width = elements_in_16_bytes<Compute>;

/// Whether `p` is 16-byte aligned.
template <class T>
GPUBATCH_HOST_DEVICE bool aligned16(const T* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

/// How one operand of one problem is walked; the same for every tile and thread of a block, so
/// the choice costs no divergence.
struct operand_plan {
  bool cols_contiguous;  ///< chunks run along columns (stride.col == 1), else along rows
  bool vectorized;       ///< whole chunks are single 16-byte loads (alignment and type allow)
};

/// Position of one element within a tile.
struct tile_position {
  int row;
  int col;
};

/// Where register `r` of `thread` sits in a Rows x Cols tile when chunks are `Width` elements
/// wide: chunk (thread + (r / Width) * Threads), element r % Width of it. Consecutive chunks
/// walk the contiguous dimension first, so a warp's loads cover one contiguous run per line;
/// with Width = 1 this is the plain element-wise walk.
template <int Rows, int Cols, int Threads, int Width>
GPUBATCH_HOST_DEVICE constexpr tile_position position_of(bool cols_contiguous, int thread, int r) {
  const int chunk = thread + (r / Width) * Threads;
  const int e = r % Width;
  if (cols_contiguous) {
    constexpr int per_line = Cols / Width > 0 ? Cols / Width : 1;
    return {chunk / per_line, (chunk % per_line) * Width + e};
  }
  constexpr int per_line = Rows / Width > 0 ? Rows / Width : 1;
  return {(chunk % per_line) * Width + e, chunk / per_line};
}

/// Loads this thread's chunks of width `Width` (see position_of). A chunk is one
/// `loader.vector` call when `vectorized`, the tile's chunks start on 16-byte boundaries and
/// the chunk lies wholly inside the matrix; any other chunk is read element by element through
/// `loader.element`, zero outside the matrix. Addresses are formed only for elements inside it.
template <int Rows, int Cols, int Threads, int Width, class Compute, class T, class Loader>
GPUBATCH_HOST_DEVICE void load_chunks(bool cols_contiguous, bool vectorized,
                                      const matrix_ref<const T>& src, index_t rows_total,
                                      index_t cols_total, index_t row0, index_t col0, int thread,
                                      Compute (&regs)[Rows * Cols / Threads],
                                      const Loader& loader) {
  constexpr int elements = Rows * Cols / Threads;
  static_assert(elements % Width == 0, "gpubatch: a thread's share must be whole chunks");
  const index_t lines_total = cols_contiguous ? rows_total : cols_total;
  const index_t along_total = cols_contiguous ? cols_total : rows_total;
  const index_t step = cols_contiguous ? src.stride.col : src.stride.row;
  // Tile origins are multiples of the tile in the kernels; checked anyway (once per tile) so a
  // misplaced origin costs speed, never a misaligned vector load.
  [[maybe_unused]] const bool whole_ok =
      Width > 1 && vectorized && (cols_contiguous ? col0 : row0) % Width == 0;
  GPUBATCH_SIMT_TILE_UNROLL
  for (int q = 0; q < elements / Width; ++q) {
    const tile_position at =
        position_of<Rows, Cols, Threads, Width>(cols_contiguous, thread, q * Width);
    const index_t gi = row0 + at.row, gj = col0 + at.col;
    const bool line_inside = (cols_contiguous ? gi : gj) < lines_total;
    const index_t along = cols_contiguous ? gj : gi;
    const index_t offset = gi * src.stride.row + gj * src.stride.col;
    if constexpr (Width > 1) {
      if (whole_ok && line_inside && along + Width <= along_total) {
        loader.vector(&regs[q * Width], src.data + offset);
        continue;
      }
    }
    GPUBATCH_SIMT_TILE_UNROLL
    for (int e = 0; e < Width; ++e) {
      regs[q * Width + e] = line_inside && along + e < along_total
                                ? loader.element(src.data + (offset + e * step))
                                : Compute(0);
    }
  }
}

/// Shared-memory element offset of tile element `at` in a tile staged [Cols][Rows] (transposed)
/// or [Rows][Cols], each staged line stage_pitch elements long.
template <int Rows, int Cols, class Compute>
GPUBATCH_HOST_DEVICE constexpr int staged_offset(bool transpose_into_shared, tile_position at) {
  return transpose_into_shared ? at.col * stage_pitch<Compute, Rows> + at.row
                               : at.row * stage_pitch<Compute, Cols> + at.col;
}

/// Stores registers loaded with chunks of width `Width` (see position_of) into shared memory. A
/// chunk that runs along a staged line is one 16-byte store; one that crosses lines (the
/// transposing store) is stored element by element, each store of the warp spread over the banks
/// by the stage's padding.
template <int Rows, int Cols, int Threads, int Width, class Compute>
GPUBATCH_HOST_DEVICE void store_chunks(bool cols_contiguous, bool transpose_into_shared,
                                       Compute* dst, int thread,
                                       const Compute (&regs)[Rows * Cols / Threads]) {
  if constexpr (Width > 1) {
    if (cols_contiguous != transpose_into_shared) {
      GPUBATCH_SIMT_TILE_UNROLL
      for (int r = 0; r < Rows * Cols / Threads; r += Width) {
        const tile_position at =
            position_of<Rows, Cols, Threads, Width>(cols_contiguous, thread, r);
        write_piece<Width>(&regs[r],
                           dst + staged_offset<Rows, Cols, Compute>(transpose_into_shared, at));
      }
      return;
    }
  }
  GPUBATCH_SIMT_TILE_UNROLL
  for (int r = 0; r < Rows * Cols / Threads; ++r) {
    const tile_position at = position_of<Rows, Cols, Threads, Width>(cols_contiguous, thread, r);
    dst[staged_offset<Rows, Cols, Compute>(transpose_into_shared, at)] = regs[r];
  }
}

/// A Rows x Cols tile of an operand of element type T, staged as `Compute` by `Threads`
/// threads: the plan, the loads into registers and the store into shared memory, which must
/// agree on the chunk width and so live together.
template <int Rows, int Cols, int Threads, class Compute, class T>
struct operand_tile {
  static_assert((Rows * Cols) % Threads == 0,
                "gpubatch: an operand tile must divide evenly among the block's threads");
  /// Elements each thread loads.
  static constexpr int elements = Rows * Cols / Threads;
  /// Elements of one vector chunk.
  static constexpr int vector = vector_width<Compute>;
  /// A converting load cannot be one vector load of the compute type; a chunk must be a whole
  /// number of elements of each thread's share and of the contiguous extent, or chunks would be
  /// split between threads or lines.
  static constexpr bool chunkable = std::is_same_v<std::remove_const_t<T>, Compute> &&
                                    vector > 1 && elements % vector == 0;
  /// Chunk widths when the columns (resp. the rows) are the contiguous dimension; 1 when that
  /// direction has no vector path for this tile shape.
  static constexpr int cols_width = chunkable && Cols % vector == 0 ? vector : 1;
  static constexpr int rows_width = chunkable && Rows % vector == 0 ? vector : 1;

  /// Plans the tiles of operand `src` (rows_total x cols_total). A 16-byte load needs every
  /// chunk start aligned: the base and the leading dimension (the non-contiguous stride) must be
  /// 16-byte multiples, the latter only when more than one line of the operand exists.
  GPUBATCH_HOST_DEVICE static operand_plan plan(const matrix_ref<const T>& src,
                                                index_t rows_total, index_t cols_total) {
    const bool cols_contiguous = src.stride.col == 1;
    const int width = cols_contiguous ? cols_width : rows_width;
    const index_t unit = cols_contiguous ? src.stride.col : src.stride.row;
    const index_t ld = cols_contiguous ? src.stride.row : src.stride.col;
    const index_t lines = cols_contiguous ? rows_total : cols_total;
    const bool vectorized = width > 1 && unit == 1 && aligned16(src.data) &&
                            (lines <= 1 || (ld * static_cast<index_t>(sizeof(T))) % 16 == 0);
    return {cols_contiguous, vectorized};
  }

  /// Loads this thread's share of the tile at (row0, col0) of `src`. `loader.vector(Compute*
  /// dst, const T* p)` reads `vector` elements from a 16-byte aligned `p`;
  /// `loader.element(const T* p)` reads one element as Compute.
  template <class Loader>
  GPUBATCH_HOST_DEVICE static void load(const operand_plan& plan, const matrix_ref<const T>& src,
                                        index_t rows_total, index_t cols_total, index_t row0,
                                        index_t col0, int thread, Compute (&regs)[elements],
                                        const Loader& loader) {
    // One instantiation when both directions share a width: the direction is then a select,
    // not two copies of the loads competing for registers.
    if constexpr (cols_width == rows_width) {
      load_chunks<Rows, Cols, Threads, cols_width>(plan.cols_contiguous, plan.vectorized, src,
                                                   rows_total, cols_total, row0, col0, thread,
                                                   regs, loader);
    } else if (plan.cols_contiguous) {
      load_chunks<Rows, Cols, Threads, cols_width>(true, plan.vectorized, src, rows_total,
                                                   cols_total, row0, col0, thread, regs, loader);
    } else {
      load_chunks<Rows, Cols, Threads, rows_width>(false, plan.vectorized, src, rows_total,
                                                   cols_total, row0, col0, thread, regs, loader);
    }
  }

  /// Stores registers filled by load (with the same plan) into a shared-memory tile laid out
  /// [Cols][Rows] when `transpose_into_shared` (A: K-major, so the inner product walks m
  /// contiguously) or [Rows][Cols] otherwise, lines stage_pitch elements apart.
  GPUBATCH_HOST_DEVICE static void store(const operand_plan& plan, bool transpose_into_shared,
                                         Compute* dst, int thread,
                                         const Compute (&regs)[elements]) {
    if constexpr (cols_width == rows_width) {
      store_chunks<Rows, Cols, Threads, cols_width>(plan.cols_contiguous, transpose_into_shared,
                                                    dst, thread, regs);
    } else if (plan.cols_contiguous) {
      store_chunks<Rows, Cols, Threads, cols_width>(true, transpose_into_shared, dst, thread,
                                                    regs);
    } else {
      store_chunks<Rows, Cols, Threads, rows_width>(false, transpose_into_shared, dst, thread,
                                                    regs);
    }
  }
};

}  // namespace detail::simt
GPUBATCH_NAMESPACE_END

#undef GPUBATCH_SIMT_TILE_UNROLL
