/// @file detail/gemm/warp_tiling.hpp
/// @brief How the threads of a SIMT tiled kernel (GEMM and implicit-GEMM convolution) share the
/// block's C tile, and the inner product over one staged K tile: the part of the SIMT main loop
/// that is pure index math and arithmetic, shared with the host tests.
///
/// The block tile (BM x BN) is split into warp tiles, one per warp; a warp's 32 lanes form a
/// lanes_m x lanes_n grid over its warp tile, and each lane holds TM x TN accumulators. A lane's
/// rows come in groups of `vector_m` consecutive rows, one group per lanes_m * vector_m rows of
/// the warp tile (columns likewise), so that each group is one 16-byte shared-memory read and the
/// lanes of a warp read adjacent 16-byte pieces: no bank conflicts, and 4x fewer shared-memory
/// instructions per multiply-add than element-wise fragment reads (f32).
#pragma once

#include <gpubatch/config.hpp>

#include <cstdint>
#include <cstring>

GPUBATCH_NAMESPACE_BEGIN
namespace detail::simt {

/// Elements of `Compute` in 16 bytes (1 when 16 bytes do not hold a whole number of them).
template <class Compute>
inline constexpr int elements_in_16_bytes =
    sizeof(Compute) <= 16 && 16 % sizeof(Compute) == 0 ? static_cast<int>(16 / sizeof(Compute))
                                                       : 1;

/// Elements between consecutive K rows of a staged operand tile whose rows hold `Extent`
/// elements (A staged [BK][BM], B [BK][BN]): 16 bytes of padding after each row. Without it
/// every K row starts on the same bank, and the stores that cross K rows (a row-major A, which
/// the stage transposes; a column-major B; the convolution's gathers along K) hit one bank per
/// row: 16-way for a 16-deep tile loaded element by element, 4-way loaded in 16-byte chunks.
/// With it row k starts 4k words further along the banks, which leaves at most 2-way conflicts
/// for those stores, while each row stays 16-byte aligned for the fragment reads, whose
/// addresses remain compile-time offsets (docs/design.md, the degrees measured).
/// (Rounded up to whole 16-byte pieces first, so every row and the B tile after A's start
/// 16-byte aligned for tiles of any shape.)
template <class Compute, int Extent>
inline constexpr int stage_pitch =
    ((Extent + elements_in_16_bytes<Compute> - 1) / elements_in_16_bytes<Compute> + 1) *
    elements_in_16_bytes<Compute>;

/// Elements of one pipeline stage: A's BK rows, then B's.
template <class Compute, int BM, int BN, int BK>
inline constexpr int stage_elements = (stage_pitch<Compute, BM> + stage_pitch<Compute, BN>) * BK;

/// Columns of a thread's register tile: the largest power of two whose square fits.
GPUBATCH_HOST_DEVICE constexpr int register_tile_cols(int accumulators) {
  int cols = 1;
  while ((cols * 2) * (cols * 2) <= accumulators) cols *= 2;
  return cols;
}

/// Where a lane's tile starts in the block tile.
struct lane_origin {
  int row;
  int col;
};

/// Thread arrangement of a SIMT block tile.
/// @tparam BM, BN the block tile (powers of two, as gemm_policy requires)
/// @tparam Threads threads per block (a multiple of 32)
/// @tparam Accumulators C elements per thread (BM * BN / Threads)
/// @tparam Vector elements of one 16-byte shared-memory read (1: element-wise reads)
template <int BM, int BN, int Threads, int Accumulators, int Vector>
struct warp_tiling {
  static constexpr int warp_size = 32;
  static_assert(Threads % warp_size == 0, "gpubatch: SIMT blocks are whole warps");
  static_assert(BM * BN == Threads * Accumulators,
                "gpubatch: the policy's C tile must divide evenly among its threads");

  /// A thread's register tile: TM rows x TN columns, as square as the count allows.
  static constexpr int tn = register_tile_cols(Accumulators);
  static constexpr int tm = Accumulators / tn;
  static_assert(tm * tn == Accumulators && BM % tm == 0 && BN % tn == 0,
                "gpubatch: the policy's tile does not map onto its threads");
  /// Threads along each dimension of the block tile.
  static constexpr int threads_m = BM / tm;
  static constexpr int threads_n = BN / tn;

 private:
  // Lane grid: the squarest warp tile (fewest shared-memory reads per multiply-add), the wider
  // one on a tie (longer runs of C columns per store). threads_m * threads_n = Threads is a
  // power-of-two multiple of 32, so some split always fits.
  static constexpr int choose_lanes_m() {
    int best = 0;
    int best_gap = 0;
    for (int lm = 1; lm <= warp_size; lm *= 2) {
      const int ln = warp_size / lm;
      if (threads_m % lm != 0 || threads_n % ln != 0) continue;
      const int wm = lm * tm, wn = ln * tn;
      const int gap = wm > wn ? wm - wn : wn - wm;
      if (best == 0 || gap < best_gap || (gap == best_gap && wm < best * tm)) {
        best = lm;
        best_gap = gap;
      }
    }
    return best;
  }

 public:
  static constexpr int lanes_m = choose_lanes_m();
  static_assert(lanes_m > 0, "gpubatch: no warp arrangement fits the policy's tile");
  static constexpr int lanes_n = warp_size / lanes_m;
  static constexpr int warps_m = threads_m / lanes_m;
  static constexpr int warps_n = threads_n / lanes_n;
  static constexpr int warp_tile_m = lanes_m * tm;
  static constexpr int warp_tile_n = lanes_n * tn;

  /// Consecutive rows (columns) read as one piece: a 16-byte vector when the register tile
  /// holds whole vectors, else one element.
  static constexpr int vector_m = Vector > 1 && tm % Vector == 0 ? Vector : 1;
  static constexpr int vector_n = Vector > 1 && tn % Vector == 0 ? Vector : 1;

  /// Origin of thread `thread`'s first row and column in the block tile.
  GPUBATCH_HOST_DEVICE static constexpr lane_origin origin(int thread) {
    const int warp = thread / warp_size, lane = thread % warp_size;
    return {(warp / warps_n) * warp_tile_m + (lane / lanes_n) * vector_m,
            (warp % warps_n) * warp_tile_n + (lane % lanes_n) * vector_n};
  }
  /// Offset of register row i from the thread's origin row.
  GPUBATCH_HOST_DEVICE static constexpr int row(int i) {
    return (i / vector_m) * (lanes_m * vector_m) + i % vector_m;
  }
  /// Offset of register column j from the thread's origin column.
  GPUBATCH_HOST_DEVICE static constexpr int col(int j) {
    return (j / vector_n) * (lanes_n * vector_n) + j % vector_n;
  }
};

/// Reads `Width` consecutive elements from `src` into `dst`: one vector load on the device
/// (src is Width-element aligned, which warp_tiling guarantees for shared-memory fragments).
template <int Width, class T>
GPUBATCH_HOST_DEVICE void read_piece(const T* src, T* dst) {
#if GPUBATCH_DEVICE_CODE
  struct alignas(sizeof(T) * Width) piece {
    T v[Width];
  };
#if defined(GPUBATCH_EMULATION)
  ::gpubatch_emu::vector_access(src, sizeof(piece));  // faults where the hardware would
#endif
  const piece p = *reinterpret_cast<const piece*>(src);
#pragma unroll
  for (int e = 0; e < Width; ++e) dst[e] = p.v[e];
#else
  for (int e = 0; e < Width; ++e) dst[e] = src[e];
#endif
}

// Register arrays stay in registers only when every index is a compile-time constant after
// unrolling; only the device pass understands (and needs) the pragma.
#if defined(__CUDA_ARCH__)
#define GPUBATCH_WARP_TILING_UNROLL _Pragma("unroll")
#else
#define GPUBATCH_WARP_TILING_UNROLL
#endif

/// Writes `Width` consecutive elements of `src` to `dst`: one vector store on the device (dst
/// is Width-element aligned).
template <int Width, class T>
GPUBATCH_HOST_DEVICE void write_piece(const T* src, T* dst) {
#if GPUBATCH_DEVICE_CODE
  struct alignas(sizeof(T) * Width) piece {
    T v[Width];
  };
  piece p;
#pragma unroll
  for (int e = 0; e < Width; ++e) p.v[e] = src[e];
#if defined(GPUBATCH_EMULATION)
  ::gpubatch_emu::vector_access(dst, sizeof(piece));
#endif
  *reinterpret_cast<piece*>(dst) = p;
#else
  for (int e = 0; e < Width; ++e) dst[e] = src[e];
#endif
}

/// Writes `Width` consecutive elements of `src` to global memory at `dst` (aligned to the
/// piece's size) with one vector store. 16 bytes go as st.global.v4.b32: nvcc split both a
/// struct of f16 elements and a plain uint4 assignment into narrower stores.
template <int Width, class T>
GPUBATCH_HOST_DEVICE void write_global_piece(const T* src, T* dst) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) * Width == 16) {
    unsigned bits[4];
    memcpy(bits, src, sizeof bits);
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "r"(bits[0]),
                 "r"(bits[1]), "r"(bits[2]), "r"(bits[3])
                 : "memory");
    return;
  }
#endif
  write_piece<Width>(src, dst);  // the emulated device checks the alignment
}

/// Whether `p` is aligned to a piece of `Width` elements (a vector access of that many).
template <int Width, class T>
GPUBATCH_HOST_DEVICE bool piece_aligned(const T* p) {
  return reinterpret_cast<std::uintptr_t>(p) % (sizeof(T) * Width) == 0;
}

/// Shared-memory element offset of the piece lane `at` reads for A register row i (resp. B
/// register column j) at K row p: the addresses multiply_stage reads, for the host tests.
template <class Tiling, int BM, class Compute>
GPUBATCH_HOST_DEVICE constexpr int a_fragment_offset(lane_origin at, int p, int i) {
  return p * stage_pitch<Compute, BM> + at.row + Tiling::row(i);
}
template <class Tiling, int BN, class Compute>
GPUBATCH_HOST_DEVICE constexpr int b_fragment_offset(lane_origin at, int p, int j) {
  return p * stage_pitch<Compute, BN> + at.col + Tiling::col(j);
}

/// acc += this thread's part of one staged K tile: A staged [BK][BM] at a_s, B [BK][BN] at b_s,
/// each K row stage_pitch elements apart.
template <class Tiling, int BM, int BN, int BK, class Compute>
GPUBATCH_HOST_DEVICE void multiply_stage(const Compute* a_s, const Compute* b_s, lane_origin at,
                                         Compute (&acc)[Tiling::tm][Tiling::tn]) {
  constexpr int TM = Tiling::tm, TN = Tiling::tn;
  constexpr int VM = Tiling::vector_m, VN = Tiling::vector_n;
  GPUBATCH_WARP_TILING_UNROLL
  for (int p = 0; p < BK; ++p) {
    Compute a_frag[TM], b_frag[TN];
    GPUBATCH_WARP_TILING_UNROLL
    for (int i = 0; i < TM; i += VM) {
      read_piece<VM>(a_s + a_fragment_offset<Tiling, BM, Compute>(at, p, i), a_frag + i);
    }
    GPUBATCH_WARP_TILING_UNROLL
    for (int j = 0; j < TN; j += VN) {
      read_piece<VN>(b_s + b_fragment_offset<Tiling, BN, Compute>(at, p, j), b_frag + j);
    }
    GPUBATCH_WARP_TILING_UNROLL
    for (int i = 0; i < TM; ++i)
      GPUBATCH_WARP_TILING_UNROLL
      for (int j = 0; j < TN; ++j) acc[i][j] += a_frag[i] * b_frag[j];
  }
}

#undef GPUBATCH_WARP_TILING_UNROLL

}  // namespace detail::simt
GPUBATCH_NAMESPACE_END
