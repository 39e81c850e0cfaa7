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

/// @brief The default implicit-GEMM policy of a convolution with element type `T` on
/// architecture `Arch` for a size class: the GEMM's defaults, so both are tuned in one place —
/// the tensor-core policy for f16, bf16 and int8 (and for f32 when TF32 is allowed), the SIMT
/// policy otherwise. Specialise it, or pass a policy to conv2d, to tune convolutions alone.
template <class T, int Arch, size_class Size>
struct default_conv2d_policy {
  static constexpr size_class size = Size == size_class::tiny ? size_class::medium : Size;
  static constexpr bool tensor_cores =
      std::is_same_v<T, half> || std::is_same_v<T, bfloat16> || std::is_same_v<T, std::int8_t>;
  using type = typename std::conditional_t<tensor_cores, default_tensor_core_policy<T, Arch, size>,
                                           default_gemm_policy<T, Arch, size>>::type;
};

}  // namespace gpubatch
