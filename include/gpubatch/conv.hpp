/// @file conv.hpp
/// @brief Batched 2-D convolution forward on both backends:
/// y = epilogue(alpha * conv(x, w) + beta * y) for a batch of samples, with shared filters,
/// per-sample filters, or a grouped batch of differently shaped convolutions.
///
/// Tensors: x is N x C x H x W, w is K x C/groups x R x S, y is N x K x P x Q (P, Q from
/// conv2d_output_shape). NCHW inputs take KCRS filters and NHWC inputs KRSC filters
/// (tensor4d_view with tensor_layout::nchw or nhwc); y has the layout of x. Zero padding per side,
/// stride, dilation, groups and depthwise (groups = C) are in conv2d_params.
///
/// Types (x, w -> accumulate -> y): f32 -> f32 -> f32 (TF32 by opt-in); f16 -> f32 -> f16 or
/// f32; bf16 -> f32 -> bf16 or f32; int8 -> int32 -> int32; f64 -> f64 -> f64. Alpha, beta and
/// the epilogue work in the accumulate type. Epilogues are those of GEMM (epilogue.hpp): for
/// convolution `batch` is the sample, `row` the output pixel p * Q + q and `col` the output
/// channel, so epilogue::bias_col is the per-output-channel bias.
///
/// With beta = 0, y is never read (it may be uninitialised). N = 0, K = 0 or C = 0 is a no-op
/// that touches nothing.
///
/// Backends: the host runs depthwise and few-channel layers as direct loops and the rest as an
/// implicit GEMM on the host GEMM micro-kernel (OpenMP across samples, groups and tiles). CUDA
/// runs an implicit-GEMM SIMT kernel on the GEMM tile machinery (gathering im2col elements on
/// the fly, NCHW and NHWC alike, no layout pass) and a dedicated depthwise kernel; it needs no
/// workspace, and uses one for split-K when given (conv2d_workspace_size).
#pragma once

#include <gpubatch/conv_policy.hpp>
#include <gpubatch/conv_problem.hpp>
#include <gpubatch/detail/conv/host.hpp>
#include <gpubatch/detail/epilogue/validate.hpp>
#include <gpubatch/detail/conv/problem.hpp>
#include <gpubatch/detail/conv/validate.hpp>
#include <gpubatch/epilogue.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/numeric.hpp>
#include <gpubatch/views.hpp>

#include <cstddef>
#include <string>
#include <type_traits>

#if GPUBATCH_CUDA_COMPILER
#include <gpubatch/detail/conv/dispatch.cuh>
#endif

GPUBATCH_NAMESPACE_BEGIN

namespace detail::conv {
using detail::scalar_t;

/// `prepacked` (host backend, uniform batches): the strips a packed_conv2d_filters holds.
template <class Policy, class Exec, class Batch, class Compute, class Epilogue>
void run(Exec exec, const Batch& batch, Compute alpha, Compute beta, const Epilogue& epilogue,
         const conv2d_options& options,
         const host_conv::gemm_filters<Compute>* prepacked = nullptr) {
  if constexpr (is_cuda_exec_v<Exec>) {
    (void)prepacked;  // the CUDA kernels read the filters where they lie
#if GPUBATCH_CUDA_COMPILER
    cuda_conv::dispatch<Policy>(exec.stream(), batch, alpha, beta, epilogue, options);
#endif
  } else if constexpr (Batch::uniform) {
    (void)options;  // no workspace and no TF32 on the host: it always computes in f32
    host_conv::run(exec, batch, alpha, beta, epilogue, prepacked);
  } else {
    (void)options;
    (void)prepacked;
    host_conv::run(exec, batch, alpha, beta, epilogue);
  }
}

template <class Policy, class Exec, class TX, class TW, class TY, class Epilogue>
void conv2d_uniform(Exec exec, const conv2d_params& params, scalar_t<TX> alpha,
                    const tensor4d_view<TX>& x, const tensor4d_view<TW>& w, scalar_t<TX> beta,
                    const tensor4d_view<TY>& y, const Epilogue& epilogue,
                    const conv2d_options& options, bool per_sample,
                    const host_conv::gemm_filters<scalar_t<TX>>* prepacked = nullptr) {
  static_assert(is_execution_v<Exec>, "gpubatch::conv2d: the first argument must be an execution "
                                      "argument (gpubatch::on_host or gpubatch::on(stream))");
  require_cuda_compiler<Exec>();
  check_types<TX, TW, TY, Epilogue>();
  using X = std::remove_const_t<TX>;
  using W = std::remove_const_t<TW>;
  const conv2d_geometry geo = check_conv2d(exec, params, x, w, y, per_sample);
  check_workspace(exec, options);
  if (geo.n == 0 || geo.k == 0 || geo.c == 0) {
    return;
  }
  const fprop_batch<X, W, TY> batch{geo, x.data(), w.data(), y.data(), per_sample};
  check_epilogue(exec, epilogue, "epilogue");
  run<Policy>(exec, batch, alpha, beta, epilogue, options, prepacked);
}
}  // namespace detail::conv

/// @brief Batched 2-D convolution forward: y = epilogue(alpha * conv(x, w) + beta * y), every
/// sample with the same filters.
///
/// @tparam Policy a gemm_policy to force for the CUDA implicit-GEMM kernel (also for depthwise
///         layers, which otherwise take their own kernel); `void` (the default) lets the
///         run-time heuristic pick among the compiled defaults (default_conv2d_policy). Ignored
///         by the host backend.
/// @param exec gpubatch::on_host or gpubatch::on(stream)
/// @param params padding, stride, dilation and groups
/// @param alpha, beta scalars in the accumulate type
/// @param x input, N x C x H x W, NCHW or NHWC
/// @param w filters, K x C/groups x R x S: KCRS (tensor_layout::nchw) with an NCHW input, KRSC
///        (tensor_layout::nhwc) with an NHWC input
/// @param y output, N x K x P x Q in the layout of x
/// @param epilogue applied to every element before it is stored (see epilogue.hpp)
/// @param options TF32 opt-in, and an optional split-K workspace (CUDA)
/// @throws invalid_argument naming the parameter: a stride or dilation below 1, negative padding
///         or groups below 1 ("params.stride_h", ...), C not divisible by groups ("x"), K not
///         divisible by groups, filters without C/groups channels, a dilated filter larger than
///         the padded input or filters in the wrong layout ("w"), an output of the wrong shape or
///         layout ("y"), a tensor in memory the backend cannot access ("x", "w", "y"), a null
///         workspace with a nonzero size ("options.workspace")
/// @throws cuda_error if a launch fails
template <class Policy = void, class Exec, class TX, class TW, class TY,
          class Epilogue = epilogue::identity>
void conv2d(Exec exec, const conv2d_params& params, detail::conv::scalar_t<TX> alpha,
            const tensor4d_view<TX>& x, const tensor4d_view<TW>& w,
            detail::conv::scalar_t<TX> beta, const tensor4d_view<TY>& y, Epilogue epilogue = {},
            const conv2d_options& options = {}) {
  detail::conv::conv2d_uniform<Policy>(exec, params, alpha, x, w, beta, y, epilogue, options,
                                       false);
}

/// @brief Batched convolution with per-sample filters: sample n of x is convolved with its own
/// filter set, in one launch (what a loop of single convolutions would compute).
///
/// `w` holds N * K filters back to back, K x C/groups x R x S each set: sample n's filter k is
/// filter n * K + k. Everything else is as for conv2d; K is taken from y.
/// @throws invalid_argument as conv2d, and "w" if it does not hold N * K filters
template <class Policy = void, class Exec, class TX, class TW, class TY,
          class Epilogue = epilogue::identity>
void conv2d_per_sample(Exec exec, const conv2d_params& params, detail::conv::scalar_t<TX> alpha,
                       const tensor4d_view<TX>& x, const tensor4d_view<TW>& w,
                       detail::conv::scalar_t<TX> beta, const tensor4d_view<TY>& y,
                       Epilogue epilogue = {}, const conv2d_options& options = {}) {
  detail::conv::conv2d_uniform<Policy>(exec, params, alpha, x, w, beta, y, epilogue, options,
                                       true);
}

/// @brief Grouped convolution: every problem its own extents, parameters, filters and pointers,
/// all tensors packed in `order` (NCHW with KCRS filters, or NHWC with KRSC filters).
///
/// The epilogue sees `batch` = the problem's index, `row` = n * P * Q + p * Q + q (its sample and
/// pixel) and `col` = the output channel.
///
/// On the CUDA backend `problems` is in device memory and the call does not synchronise: the
/// grid is sized from `bounds`, which must hold upper bounds of every problem's N * P * Q,
/// K / groups and groups: a problem outside them is skipped whole, its output untouched, as
/// gemm_grouped skips its own. On the host backend `problems` is in host memory, each problem
/// is validated, and `bounds` is ignored.
///
/// @param problems `count` problem descriptors
/// @throws invalid_argument naming the parameter: a negative count, a null descriptor array,
///         missing bounds (CUDA), or (host) a bad problem, named by its index ("problems[3]")
template <class Policy = void, class Exec, class TX, class TW, class TY,
          class Epilogue = epilogue::identity>
void conv2d_grouped(Exec exec, tensor_layout order, detail::conv::scalar_t<TX> alpha,
                    const conv2d_problem<TX, TW, TY>* problems, index_t count,
                    detail::conv::scalar_t<TX> beta, Epilogue epilogue = {},
                    grouped_conv2d_bounds bounds = {}, const conv2d_options& options = {}) {
  static_assert(is_execution_v<Exec>, "gpubatch::conv2d_grouped: the first argument must be an "
                                      "execution argument (gpubatch::on_host or gpubatch::on(stream))");
  detail::require_cuda_compiler<Exec>();
  detail::conv::check_types<TX, TW, TY, Epilogue>();
  detail::require_nonnegative("count", count);
  detail::conv::check_workspace(exec, options);
  if (count == 0) {
    return;
  }
  if (problems == nullptr) {
    throw invalid_argument("problems", "null descriptor array for " + std::to_string(count) +
                                           " problems");
  }
  detail::require_accessible(exec, "problems", memory_space::unknown, problems);
  if (is_cuda_exec_v<Exec> || detail::applies_cuda_rules(exec)) {
    if (bounds.max_output_pixels <= 0 || bounds.max_k_per_group <= 0 || bounds.max_groups <= 0) {
      throw invalid_argument("bounds", "the CUDA backend needs positive upper bounds on N * P * "
                                       "Q, K / groups and groups (got " +
                                           std::to_string(bounds.max_output_pixels) + ", " +
                                           std::to_string(bounds.max_k_per_group) + ", " +
                                           std::to_string(bounds.max_groups) + ")");
    }
  }
  if constexpr (is_host_exec_v<Exec>) {
    for (index_t i = 0; i < count; ++i) {
      detail::conv::check_grouped_problem(problems[i], i);
    }
  }
  const detail::conv::grouped_fprop_batch<TX, TW, TY> batch{problems, count, order, bounds};
  detail::check_epilogue(exec, epilogue, "epilogue");
  detail::conv::run<Policy>(exec, batch, alpha, beta, epilogue, options);
}

/// @brief Bytes of workspace with which conv2d (or conv2d_per_sample, when `w` holds N * K
/// filters) would split its reduction across blocks on this device: 0 when splitting would not
/// help, and always 0 on the host backend. Passing less (or none) is allowed: the convolution
/// then runs without split-K. Pass the same arguments and Policy as to the convolution.
/// @throws invalid_argument as conv2d
template <class Policy = void, class Exec, class TX, class TW, class TY>
[[nodiscard]] std::size_t conv2d_workspace_size(Exec exec, const conv2d_params& params,
                                                const tensor4d_view<TX>& x,
                                                const tensor4d_view<TW>& w,
                                                const tensor4d_view<TY>& y) {
  static_assert(is_execution_v<Exec>, "gpubatch::conv2d_workspace_size: the first argument must "
                                      "be an execution argument");
  detail::require_cuda_compiler<Exec>();
  detail::conv::check_types<TX, TW, TY, epilogue::identity>();
  const bool per_sample = w.n() != y.c();
  const detail::conv::conv2d_geometry geo =
      detail::conv::check_conv2d(exec, params, x, w, y, per_sample);
  if constexpr (is_cuda_exec_v<Exec>) {
#if GPUBATCH_CUDA_COMPILER
    using X = std::remove_const_t<TX>;
    using W = std::remove_const_t<TW>;
    if (geo.n == 0 || geo.k == 0 || geo.c == 0) {
      return 0;
    }
    const detail::conv::fprop_batch<X, W, TY> batch{geo, x.data(), w.data(), y.data(), per_sample};
    return detail::cuda_conv::workspace_bytes<Policy>(batch);
#else
    (void)exec;
    (void)geo;
    return 0;
#endif
  } else {
    (void)exec;
    (void)geo;
    return 0;
  }
}

GPUBATCH_NAMESPACE_END
