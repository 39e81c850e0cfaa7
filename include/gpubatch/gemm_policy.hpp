/// @file gemm_policy.hpp
/// @brief The compile-time batching policy of the GEMM (and convolution) kernels: thread-block
/// tile, warps, pipeline stages, problems per block and how a batch is split across launches;
/// the constexpr selector of defaults; and the run-time size classes that pick among them.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/detail/gemm/warp_tiling.hpp>
#include <gpubatch/numeric.hpp>
#include <gpubatch/views.hpp>

#include <cstdint>
#include <type_traits>

namespace gpubatch {

namespace detail {
/// Registers per thread with which `blocks` blocks of `threads` threads fit one multiprocessor's
/// 64 Ki: allocated in steps of 8, at most 255.
constexpr int register_budget(int threads, int blocks) {
  const int registers = 65536 / (threads * blocks) / 8 * 8;
  return registers > 255 ? 255 : registers;
}

/// Element types whose uniform tiny batches default to the small tiles (measured against the
/// tiny kernel; see default_small_tile_policy).
template <class T>
inline constexpr bool small_tile_default_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, half> ||
    std::is_same_v<T, bfloat16>;
}  // namespace detail

/// @brief A GEMM tuning policy. Every member is a compile-time constant; an invalid
/// combination fails to compile with a message that says what is wrong.
///
/// @tparam TileM, TileN, TileK the thread-block tile: rows and columns of C, depth of one
///         K step staged in shared memory
/// @tparam Warps warps per thread block
/// @tparam Stages shared-memory pipeline stages (1 = no prefetch, 2 = double buffering, ...)
/// @tparam ProblemsPerBlock problems one block computes (several tiny problems per block)
/// @tparam MaxBlocksPerLaunch upper bound on the problems of one tiled-kernel launch for a
///         uniform GEMM batch (strided or pointer-array) or a convolution; larger batches are
///         split across launches on the same stream. Tiny problems, and grouped batches (whose
///         tiles a grid of resident blocks walks), always take one launch.
/// @tparam MinBlocksPerSm blocks of this policy one streaming multiprocessor is designed to hold
///         at once. It sets the kernels' register budget, 64 Ki registers shared by
///         MinBlocksPerSm * threads threads (max_registers), which the kernels ask of the compiler
///         (`__launch_bounds__`) and the kernel audit (scripts/kernel-audit) checks: a budget the
///         code cannot meet shows up as spills there, not as a silent loss of occupancy.
template <int TileM, int TileN, int TileK, int Warps, int Stages, int ProblemsPerBlock = 1,
          std::int64_t MaxBlocksPerLaunch = 65535, int MinBlocksPerSm = 1>
struct gemm_policy {
  static_assert(TileM > 0 && (TileM & (TileM - 1)) == 0,
                "gpubatch::gemm_policy: TileM must be a positive power of two");
  static_assert(TileN > 0 && (TileN & (TileN - 1)) == 0,
                "gpubatch::gemm_policy: TileN must be a positive power of two");
  static_assert(TileK > 0 && (TileK & (TileK - 1)) == 0,
                "gpubatch::gemm_policy: TileK must be a positive power of two");
  static_assert(Warps >= 1 && Warps * 32 <= 1024,
                "gpubatch::gemm_policy: Warps must be 1 to 32 (at most 1024 threads per block)");
  static_assert((TileM * TileN) % (Warps * 32) == 0,
                "gpubatch::gemm_policy: every thread must own the same number of C elements: "
                "TileM * TileN must be a multiple of Warps * 32");
  static_assert(Stages >= 1 && Stages <= 8, "gpubatch::gemm_policy: Stages must be 1 to 8");
  static_assert(ProblemsPerBlock >= 1, "gpubatch::gemm_policy: ProblemsPerBlock must be >= 1");
  static_assert(MaxBlocksPerLaunch >= 1 && MaxBlocksPerLaunch <= 65535,
                "gpubatch::gemm_policy: MaxBlocksPerLaunch must be 1 to 65535 (grid.y limit)");
  static_assert(MinBlocksPerSm >= 1 && MinBlocksPerSm * Warps * 32 <= 2048,
                "gpubatch::gemm_policy: MinBlocksPerSm must be at least 1 and its blocks' "
                "threads at most 2048 (what one multiprocessor holds)");

  static constexpr int tile_m = TileM;
  static constexpr int tile_n = TileN;
  static constexpr int tile_k = TileK;
  static constexpr int warps = Warps;
  static constexpr int threads = Warps * 32;
  static constexpr int stages = Stages;
  static constexpr int problems_per_block = ProblemsPerBlock;
  static constexpr std::int64_t max_blocks_per_launch = MaxBlocksPerLaunch;
  static constexpr int min_blocks_per_sm = MinBlocksPerSm;
  /// Registers a thread may use so that min_blocks_per_sm blocks fit one multiprocessor's 64 Ki
  /// (allocated in steps of 8 per thread, at most 255).
  static constexpr int max_registers = detail::register_budget(Warps * 32, MinBlocksPerSm);
  /// Whether the policy drives the tensor-core kernel (see tensor_core_policy).
  static constexpr bool tensor_cores = false;
  /// C elements each thread accumulates in registers.
  static constexpr int accumulators_per_thread = TileM * TileN / (Warps * 32);

  /// Shared memory one block stages, for compute type `Compute`: each stage's A and B tiles,
  /// with 16 bytes of padding after each of their K rows (against bank conflicts).
  template <class Compute>
  static constexpr std::int64_t shared_bytes() {
    return std::int64_t{Stages} * ProblemsPerBlock *
           detail::simt::stage_elements<Compute, TileM, TileN, TileK> *
           static_cast<std::int64_t>(sizeof(Compute));
  }
};

/// @brief A tensor-core GEMM policy (f16, bf16, int8, and f32 with gemm_options::allow_tf32;
/// sm_80 and later): warp-level MMA on 16 x 16 fragments fed by a `Stages`-deep cp.async
/// pipeline. The warps form a near-square grid over the TileM x TileN tile, each warp owning a
/// whole number of 16 x 16 fragments. TileK must be a multiple of the MMA depth (16 for f16,
/// bf16 and int8; 8 for TF32), checked when the policy meets its element type.
template <int TileM, int TileN, int TileK, int Warps, int Stages,
          std::int64_t MaxBlocksPerLaunch = 65535, int MinBlocksPerSm = 1>
struct tensor_core_policy
    : gemm_policy<TileM, TileN, TileK, Warps, Stages, 1, MaxBlocksPerLaunch, MinBlocksPerSm> {
  static_assert(TileM >= 16 && TileN >= 16,
                "gpubatch::tensor_core_policy: TileM and TileN must be at least 16 (one fragment)");
  static_assert((Warps & (Warps - 1)) == 0,
                "gpubatch::tensor_core_policy: Warps must be a power of two");
  static_assert(Stages >= 2,
                "gpubatch::tensor_core_policy: the cp.async pipeline needs at least 2 stages");
  static constexpr bool tensor_cores = true;
};

/// @brief Size classes the run-time heuristic sorts a problem into.
enum class size_class {
  tiny,    ///< m, n <= 32 and k <= 64: several problems per block, operands staged once
  medium,  ///< up to 2^18 outputs per problem: moderate tiles keep enough blocks in flight
  large,   ///< larger: big tiles for data reuse
};

/// @brief The run-time heuristic: a few comparisons on the shape, no host synchronisation and no
/// profiling run.
GPUBATCH_HOST_DEVICE constexpr size_class classify_gemm(index_t m, index_t n, index_t k) {
  if (m <= 32 && n <= 32 && k <= 64) {
    return size_class::tiny;
  }
  return m * n <= (index_t{1} << 18) ? size_class::medium : size_class::large;
}

/// @brief The default policy for element type `T`, target architecture `Arch` (e.g. 80, 90) and
/// a size class. Specialise it, or pass your own policy to gemm, to tune.
template <class T, int Arch, size_class Size>
struct default_gemm_policy {
  // Tiny: 4 warps with 8 accumulators each hold one 32 x 32 problem, or up to 16 smaller ones
  // (16 problems of 8 x 8 fill every accumulator; with 4 problems they would fill a quarter).
  // Medium: 64 x 64 x 16 with 8 warps, 4 x 4 accumulators per thread, double buffered.
  // Large: 128 x 128 x 16 with 8 warps, 8 x 8 accumulators per thread, double buffered; K
  // steps of 8 for f64, whose 64 accumulators already take 128 of the 255 registers a thread
  // may have (16 would spill the prefetch registers).
  // (Untuned starting points; the measurements in docs/benchmarks.md are what they earned.)
  // Blocks per SM (the register budget, see gemm_policy): tiny 4 of 128 threads (128 registers:
  // 8 accumulators, the staging loop and the problem table's addressing); medium 2 of 256 (128:
  // 16 accumulators, 8 prefetch registers, f64 taking two each); large 1 (255: the 8 x 8 tile is
  // built for reuse, not occupancy, and f32 needs about 210).
  static constexpr int large_tile_k = sizeof(T) > 4 ? 8 : 16;
  using type = std::conditional_t<
      Size == size_class::tiny, gemm_policy<32, 32, 32, 4, 1, 16, 65535, 4>,
      std::conditional_t<Size == size_class::medium, gemm_policy<64, 64, 16, 8, 2, 1, 65535, 2>,
                         gemm_policy<128, 128, large_tile_k, 8, 2, 1, 65535, 1>>>;
};

/// @brief The default tensor-core policy for element type `T` (f16, bf16, int8, f32 as TF32),
/// architecture `Arch` and a size class (tiny problems keep the tiny-matrix kernel). Every
/// stage holds 64 bytes of K per row, so the pipeline's shared memory is the same for all types.
template <class T, int Arch, size_class Size>
struct default_tensor_core_policy {
  static constexpr int tile_k = 64 / static_cast<int>(sizeof(T));
  // Medium: 64 x 64 with 4 warps (32 x 32 each) keeps many blocks in flight per problem.
  // Large: 128 x 128 with 8 warps (64 x 32 each) for reuse; 3 stages hide global latency.
  // Blocks per SM (the register budget, see gemm_policy): medium 3 of 128 threads (168
  // registers: the grouped walk's state and the M/N-major operands' transposing fragment loads
  // spilled at 4 blocks' 128), large 2 of 256 (128 registers): the accumulator fragments, the
  // cp.async addressing and the fragments in flight fit, and the pipeline's shared memory lets
  // that many blocks share an SM. TF32's and bf16's large tiles are the exception, 1 block (255
  // registers): held to 128 they spill (TF32's f32 operand fragments take twice the registers;
  // bf16's strided kernel needs about 170); so are int8 large tiles with an M/N-major operand
  // (detail::tensor_core::staged_blocks_per_sm).
  static constexpr int large_blocks =
      std::is_same_v<T, float> || std::is_same_v<T, bfloat16> ? 1 : 2;
  using type = std::conditional_t<Size == size_class::large,
                                  tensor_core_policy<128, 128, tile_k, 8, 3, 65535, large_blocks>,
                                  tensor_core_policy<64, 64, tile_k, 4, 3, 65535, 3>>;
};

/// @brief The default policies of the CUDA dispatch for a uniform batch (strided or
/// pointer-array) of f64, f32, f16 or bf16 in the tiny size class whose problems are at least
/// 8 x 8: one problem per block on a `Tile` x `Tile` tile of the tiled kernels, Tile 16 for
/// problems up to 16 x 16 and 32 above. Chosen from H200 measurements of candidate tiles against
/// the tiny kernel (f32 and f64 on SIMT, f16 on tensor cores; n = 8, 16, 32): 0.14x to 0.91x its
/// time. The tiny kernel keeps smaller problems, grouped batches (whose problems it packs several
/// to a block) and int8 until it is measured; bench/gemm/gemm_cuda.cu times it as a baseline.
/// Tile 16 is 1 warp with 16 blocks per SM, Tile 32 2 warps with 8 (128 registers each, see
/// gemm_policy); a K step is 16 deep, 8 for f64 (64 bytes of a row either way: f64 with 16-deep
/// steps and half the blocks took 1.16x the time at n = 16 and 1.05x at n = 32). f64's 16 x 16
/// tile asks for 12 blocks (168 registers): at 16 (128) ptxas spilled 8 bytes, though that took
/// 0.85x (n = 8) and 0.92x (n = 16) the time of 12 on the H200.
template <class T, int Arch, int Tile>
struct default_small_tile_policy {
  static_assert(Tile == 16 || Tile == 32, "gpubatch: the small tiles are 16 and 32");
  static constexpr int tile_k = sizeof(T) > 4 ? 8 : 16;
  static constexpr int blocks_16 = sizeof(T) > 4 ? 12 : 16;
  using type =
      std::conditional_t<Tile == 16, gemm_policy<16, 16, tile_k, 1, 2, 1, 65535, blocks_16>,
                         gemm_policy<32, 32, tile_k, 2, 2, 1, 65535, 8>>;
};

/// @brief The tensor-core counterpart of default_small_tile_policy (f16, bf16, and f32 as
/// TF32; int8 is defined for forcing, not yet a default): 16 x 16 with 1 warp, 16 blocks per
/// SM, or 32 x 32 with 2 warps, 8 blocks; two stages of 64 bytes of K per row. int8 states half
/// the blocks: its M/N-major staging takes twice the shared memory, which leaves room for 12
/// and 7 of them on sm_80.
template <class T, int Arch, int Tile>
struct default_small_tensor_core_policy {
  static_assert(Tile == 16 || Tile == 32, "gpubatch: the small tiles are 16 and 32");
  static constexpr int tile_k = 64 / static_cast<int>(sizeof(T));
  static constexpr int blocks_16 = sizeof(T) == 1 ? 8 : 16;
  using type =
      std::conditional_t<Tile == 16, tensor_core_policy<16, 16, tile_k, 1, 2, 65535, blocks_16>,
                         tensor_core_policy<32, 32, tile_k, 2, 2, 65535, blocks_16 / 2>>;
};

}  // namespace gpubatch
