/// @file conv_policy.hpp
/// @brief The convolution's compile-time policy and run-time heuristic. A convolution runs as an
/// implicit GEMM (M = output pixels, N = output channels per group, K = C/groups * R * S), so it
/// is tuned with the same gemm_policy (or tensor_core_policy): thread-block tile, warps, stages,
/// and how a batch is split across launches. Depthwise layers (one input channel per group) take a dedicated kernel.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/gemm_policy.hpp>
#include <gpubatch/numeric.hpp>
#include <gpubatch/views.hpp>

#include <cstdint>
#include <type_traits>

namespace gpubatch {

/// @brief The size class of a convolution's implicit GEMM, for the run-time heuristic.
///
/// @param gemm_m output pixels one launch problem covers (N * P * Q, or P * Q per sample with
///        per-sample filters)
/// @param gemm_n output channels per group
/// @param gemm_k reduction length, C / groups * R * S
/// The GEMM's "tiny" class (several whole problems per block) does not apply: a convolution's
/// problems share their input, so tiny ones take the medium tile.
GPUBATCH_HOST_DEVICE constexpr size_class classify_conv2d(index_t gemm_m, index_t gemm_n,
                                                          index_t gemm_k) {
  const size_class s = classify_gemm(gemm_m, gemm_n, gemm_k);
  return s == size_class::tiny ? size_class::medium : s;
}

namespace detail {
/// `Policy` with a TileN of `TileN` and `MinBlocksPerSm` blocks per SM (its register budget).
template <class Policy, int TileN, int MinBlocksPerSm>
struct rebudget;
template <int M, int N, int K, int W, int S, int P, std::int64_t L, int B, int TileN,
          int MinBlocksPerSm>
struct rebudget<gemm_policy<M, N, K, W, S, P, L, B>, TileN, MinBlocksPerSm> {
  using type = gemm_policy<M, TileN, K, W, S, P, L, MinBlocksPerSm>;
};
template <int M, int N, int K, int W, int S, std::int64_t L, int B, int TileN,
          int MinBlocksPerSm>
struct rebudget<tensor_core_policy<M, N, K, W, S, L, B>, TileN, MinBlocksPerSm> {
  using type = tensor_core_policy<M, TileN, K, W, S, L, MinBlocksPerSm>;
};
}  // namespace detail

/// @brief The default implicit-GEMM policy of a convolution with element type `T` on
/// architecture `Arch` for a size class: the GEMM's tiles, so both are tuned in one place — the
/// tensor-core tile for f16, bf16 and int8 (and for f32 when TF32 is allowed: TensorCores =
/// true), the SIMT tile otherwise — with the convolution's own blocks per SM. The implicit GEMM
/// gathers its A tile through the filter and image geometry, which the GEMM's register budget
/// has no room for (held to it, the kernels spill hundreds of bytes): the tensor-core medium
/// tile is budgeted for 3 blocks of 128 threads (168 registers; TF32 for 2, 255 registers: its
/// f32 fragments take twice the registers, and the grouped NCHW gather spilled at 168), every
/// other tile for 1 block.
/// The SIMT large tile is 128 x 64 rather than 128 x 128: with 64 accumulators per thread and
/// the gather's addressing, f64 and grouped f32 spilled even at 255 registers. Specialise it, or pass a policy to conv2d,
/// to tune convolutions alone.
template <class T, int Arch, size_class Size,
          bool TensorCores = std::is_same_v<T, half> || std::is_same_v<T, bfloat16> ||
                             std::is_same_v<T, std::int8_t>>
struct default_conv2d_policy {
  static constexpr size_class size = Size == size_class::tiny ? size_class::medium : Size;
  static constexpr bool tensor_cores = TensorCores;
  using gemm_type =
      typename std::conditional_t<tensor_cores, default_tensor_core_policy<T, Arch, size>,
                                  default_gemm_policy<T, Arch, size>>::type;
  static constexpr bool simt_large = !tensor_cores && size == size_class::large;
  static constexpr int medium_tensor_core_blocks = std::is_same_v<T, float> ? 2 : 3;
  using type = typename detail::rebudget<
      gemm_type, simt_large ? 64 : gemm_type::tile_n,
      tensor_cores && size == size_class::medium ? medium_tensor_core_blocks : 1>::type;
};

}  // namespace gpubatch
