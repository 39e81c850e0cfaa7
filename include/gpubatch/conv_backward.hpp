/// @file conv_backward.hpp
/// @brief Batched 2-D convolution backward on both backends: the gradient of the input
/// (backward data), of the filters (summed over the batch, or per sample, or only the
/// per-sample squared norms), and of the bias, for every convolution conv2d runs.
///
/// With y = conv(x, w) as in conv.hpp (N x C x H x W input, K x C/groups x R x S filters,
/// N x K x P x Q output, NCHW with KCRS filters or NHWC with KRSC filters) and dy = dL/dy:
///   - conv2d_backward_data:   dx = epilogue(alpha * conv_transpose(dy, w) + beta * dx)
///   - conv2d_backward_filter: dw = alpha * sum over n, p, q of dy (x) x + beta * dw
///   - conv2d_backward_filter_per_sample: the same per sample, dw holding N filter sets
///   - conv2d_backward_filter_per_sample_norms: ||dw_n||^2 per sample, without storing them all
///   - conv2d_backward_bias:   db[k] = alpha * sum over n, p, q of dy(n, k, p, q) + beta * db[k]
/// Padding, stride, dilation, groups and depthwise are those of conv2d_params.
///
/// Types (dy and the other operand -> accumulate -> output): f32 -> f32 -> f32; f16 -> f32 ->
/// f16 or f32; bf16 -> f32 -> bf16 or f32; f64 -> f64 -> f64. int8 has no backward pass.
///
/// Backends: both run the passes as implicit GEMMs over the same index mappings
/// (detail/conv/backward_problem.hpp): nothing is unfolded, so no pass needs memory beyond its
/// output, except where a workspace is asked for. The host runs them on its GEMM micro-kernel
/// (OpenMP over output blocks; depthwise layers and few-channel backward data on direct loops
/// and GEMM + col2im); CUDA on its SIMT implicit-GEMM kernel, splitting long reductions
/// through the workspace, strided backward data one stride phase at a time (over the taps that
/// reach each phase), and depthwise layers (and backward data with at most 4 input channels per
/// group, such as a stem's 3) on their own kernels. Tensor cores serve backward data only with
/// filters packed for it (packed_conv2d_filters): stride-1 layers then run as a forward
/// convolution of dy.
/// Every pass is deterministic run to run on both backends; see conv2d_backward_options for
/// results independent of the GPU.
///
/// Memory of the filter-gradient forms, for N samples and |w| = K * C/groups * R * S weights:
/// conv2d_backward_filter stores |w| values; the per-sample form N * |w|; the norms form N
/// norms, plus a workspace of at least one sample's |w| values of the accumulate type (each
/// further sample's worth lets the CUDA backend compute one more gradient per launch).
#pragma once

#include <gpubatch/conv_policy.hpp>
#include <gpubatch/conv_problem.hpp>
#include <gpubatch/detail/conv/backward_problem.hpp>
#include <gpubatch/detail/conv/host_backward.hpp>
#include <gpubatch/detail/conv/problem.hpp>
#include <gpubatch/detail/conv/validate.hpp>
#include <gpubatch/detail/epilogue/validate.hpp>
#include <gpubatch/epilogue.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/numeric.hpp>
#include <gpubatch/views.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#if GPUBATCH_CUDA_COMPILER
#include <gpubatch/detail/conv/backward_dispatch.cuh>
#endif

GPUBATCH_NAMESPACE_BEGIN

namespace detail::conv {
using detail::scalar_t;

template <class TIn, class TOther, class TOut>
constexpr void check_backward_types() {
  using In = std::remove_const_t<TIn>;
  static_assert(std::is_same_v<In, std::remove_const_t<TOther>>,
                "gpubatch: a convolution backward pass takes operands of one element type");
  static_assert(!std::is_const_v<TOut>,
                "gpubatch: the gradient must be writable (not a view of const)");
  static_assert(std::is_same_v<In, float> || std::is_same_v<In, double> ||
                    std::is_same_v<In, half> || std::is_same_v<In, bfloat16>,
                "gpubatch: the convolution backward passes take float, double, gpubatch::half "
                "or gpubatch::bfloat16");
  static_assert(supported_output_v<In, TOut>,
                "gpubatch: unsupported gradient type; it may be: float for float operands; half "
                "or float for half; bfloat16 or float for bfloat16; double for double");
}

/// The workspace, if given, must be usable; a deterministic pass must be given `required`.
template <class Exec>
void check_backward_workspace(const Exec& exec, const conv2d_backward_options& options,
                              std::size_t required, const char* query) {
  check_workspace(exec, conv2d_options{false, options.workspace, options.workspace_bytes});
  if (options.deterministic && options.workspace_bytes < required) {
    throw invalid_argument("options.workspace",
                           "a deterministic pass of this shape needs " + std::to_string(required) +
                               " bytes (" + query + "), but " +
                               std::to_string(options.workspace_bytes) + " were given");
  }
}

/// The workspace a backward batch asks for: a deterministic pass's fixed chunks (both backends),
/// else what the CUDA backend would split with on this device (0 on the host).
template <class Policy, class Compute, class Exec, class Batch>
std::size_t backward_workspace_size(const Exec& exec, const Batch& batch,
                                    const conv2d_backward_options& options) {
  (void)exec;
  if (options.deterministic) {
    return deterministic_bytes(batch.gemm_m(), batch.gemm_n(), batch.gemm_k(), batch.count(),
                               sizeof(Compute));
  }
  const conv2d_geometry& geo = batch.geo;
  if constexpr (is_cuda_exec_v<Exec>) {
#if GPUBATCH_CUDA_COMPILER
    if (geo.n == 0 || geo.k == 0 || geo.c == 0) return 0;
    return cuda_conv::backward_workspace_bytes<Policy, Compute>(batch);
#else
    (void)geo;
    return 0;
#endif
  } else {
    (void)geo;
    return 0;
  }
}

template <class Policy, class Exec, class TDY, class TW, class TDX, class Epilogue>
void backward_data(Exec exec, const conv2d_params& params, scalar_t<TDY> alpha,
                   const tensor4d_view<TDY>& dy, const tensor4d_view<TW>& w, scalar_t<TDY> beta,
                   const tensor4d_view<TDX>& dx, const Epilogue& epilogue,
                   const conv2d_backward_options& options, bool per_sample,
                   const host_conv::gemm_filters<compute_type_t<TDY>>* turned = nullptr,
                   const std::remove_const_t<TW>* cuda_turned = nullptr) {
  static_assert(is_execution_v<Exec>, "gpubatch::conv2d_backward_data: the first argument must "
                                      "be an execution argument (gpubatch::on_host or "
                                      "gpubatch::on(stream))");
  require_cuda_compiler<Exec>();
  check_backward_types<TDY, TW, TDX>();
  using Compute = compute_type_t<TDY>;
  static_assert(std::is_trivially_copyable_v<Epilogue> &&
                    std::is_invocable_r_v<Compute, const Epilogue&, Compute, index_t, index_t,
                                          index_t>,
                "gpubatch::conv2d_backward_data: the epilogue must be trivially copyable and "
                "callable as epilogue(value, batch, row, col)");
  const conv2d_geometry geo = check_conv2d(exec, params, dx, w, dy, per_sample, {"dx", "w", "dy"});
  using DY = std::remove_const_t<TDY>;
  using W = std::remove_const_t<TW>;
  const dgrad_batch<DY, W, TDX> batch(geo, dy.data(), w.data(), dx.data(), per_sample);
  check_backward_workspace(exec, options,
                           deterministic_bytes(batch.gemm_m(), batch.gemm_n(), batch.gemm_k(),
                                               batch.count(), sizeof(Compute)),
                           "conv2d_backward_data_workspace_size");
  // No dx to write when x has no pixels, though padding may still give dy some (H = 0, P > 0).
  if (geo.n == 0 || geo.k == 0 || geo.c == 0 || geo.h == 0 || geo.w == 0) {
    return;
  }
  check_epilogue(exec, epilogue, "epilogue");
  if constexpr (is_cuda_exec_v<Exec>) {
#if GPUBATCH_CUDA_COMPILER
    // With the filters turned beforehand (packed_conv2d_filters), a stride-1 layer of more
    // than the direct kernel's channels runs as the forward convolution of dy that computes
    // dx, on the forward kernels (tensor cores for f16 and bf16); a deterministic pass keeps
    // the implicit GEMM's documented order.
    if (cuda_turned != nullptr && !per_sample && !options.deterministic &&
        geo.cg() > cuda_conv::direct_dgrad_max_channels) {
      if (const std::optional<conv2d_geometry> forward = dgrad_as_fprop(geo)) {
        const fprop_batch<DY, W, TDX> fb{*forward, dy.data(), cuda_turned, dx.data(), false};
        cuda_conv::dispatch<Policy>(exec.stream(), fb, alpha, beta, epilogue, conv2d_options{});
        return;
      }
    }
    cuda_conv::dispatch_backward<Policy>(exec.stream(), batch, alpha, beta, epilogue, options);
#endif
    (void)turned;  // the host's packing
  } else {
    (void)cuda_turned;
    host_conv::run_dgrad(exec, batch, alpha, beta, epilogue, turned);
  }
}

template <class Policy, class Exec, class TX, class TDY, class TDW>
void backward_filter(Exec exec, const conv2d_params& params, scalar_t<TX> alpha,
                     const tensor4d_view<TX>& x, const tensor4d_view<TDY>& dy, scalar_t<TX> beta,
                     const tensor4d_view<TDW>& dw, const conv2d_backward_options& options,
                     bool per_sample) {
  static_assert(is_execution_v<Exec>, "gpubatch::conv2d_backward_filter: the first argument "
                                      "must be an execution argument (gpubatch::on_host or "
                                      "gpubatch::on(stream))");
  require_cuda_compiler<Exec>();
  check_backward_types<TX, TDY, TDW>();
  using Compute = compute_type_t<TX>;
  const conv2d_geometry geo = check_conv2d(exec, params, x, dw, dy, per_sample, {"x", "dw", "dy"});
  using X = std::remove_const_t<TX>;
  using DY = std::remove_const_t<TDY>;
  const wgrad_batch<X, DY, TDW> batch(geo, x.data(), dy.data(), dw.data(), per_sample);
  check_backward_workspace(exec, options,
                           deterministic_bytes(batch.gemm_m(), batch.gemm_n(), batch.gemm_k(),
                                               batch.count(), sizeof(Compute)),
                           "conv2d_backward_filter_workspace_size");
  if (geo.n == 0 || geo.k == 0 || geo.c == 0) {
    return;
  }
  if constexpr (is_cuda_exec_v<Exec>) {
#if GPUBATCH_CUDA_COMPILER
    cuda_conv::dispatch_backward<Policy>(exec.stream(), batch, alpha, beta, epilogue::identity{},
                                         options);
#endif
  } else {
    host_conv::run_wgrad(exec, batch, alpha, beta);
  }
}

template <class Exec, class TDY, class TB>
void backward_bias(Exec exec, scalar_t<TDY> alpha, const tensor4d_view<TDY>& dy,
                   scalar_t<TDY> beta, TB* db, bool per_sample) {
  static_assert(is_execution_v<Exec>, "gpubatch::conv2d_backward_bias: the first argument must "
                                      "be an execution argument");
  require_cuda_compiler<Exec>();
  check_backward_types<TDY, TDY, TB>();
  using Compute = compute_type_t<TDY>;
  if (dy.n() == 0 || dy.c() == 0) {
    return;
  }
  if (db == nullptr) {
    throw invalid_argument("db", "null pointer for " +
                                     std::to_string((per_sample ? dy.n() : 1) * dy.c()) +
                                     " bias gradients");
  }
  if (dy.size() > 0) require_accessible(exec, "dy", dy.space(), dy.data());
  require_accessible(exec, "db", memory_space::unknown, db);
  // The geometry of a 1 x 1 convolution producing dy: only its output extents and layout count.
  conv2d_geometry geo{};
  geo.n = dy.n();
  geo.k = dy.c();
  geo.p = dy.h();
  geo.q = dy.w();
  geo.groups = 1;
  geo.order = dy.order();
  if constexpr (is_cuda_exec_v<Exec>) {
#if GPUBATCH_CUDA_COMPILER
    cuda_conv::launch_bias_gradient(exec.stream(), geo, dy.data(), db, per_sample,
                                    static_cast<Compute>(alpha), static_cast<Compute>(beta));
#endif
  } else {
    host_conv::bias_gradient(exec, geo, dy.data(), db, per_sample, static_cast<Compute>(alpha),
                             static_cast<Compute>(beta));
  }
}

}  // namespace detail::conv

/// @brief A tensor seen as the batch of matrices a convolution epilogue indexes: matrix n is
/// sample n, row the pixel h * W + w, column the channel. Gives the views of
/// epilogue::residual_add, relu_backward and gelu_tanh_backward for convolution outputs.
template <class T>
[[nodiscard]] matrix_batch_view<const T> conv2d_epilogue_view(const tensor4d_view<T>& t) {
  const index_t pixels = t.h() * t.w();
  if (t.order() == tensor_layout::nhwc) {
    return matrix_batch_view<const T>(t.data(), pixels, t.c(), t.c(), pixels * t.c(), t.n(),
                                      layout::row_major, t.space());
  }
  return matrix_batch_view<const T>(t.data(), pixels, t.c(), pixels, pixels * t.c(), t.n(),
                                    layout::col_major, t.space());
}

/// @brief Gradient of the input: dx = epilogue(alpha * conv_transpose(dy, w) + beta * dx), the
/// adjoint of conv2d with the same parameters and filters.
///
/// @tparam Policy a gemm_policy (SIMT) to force for the CUDA implicit-GEMM kernel; `void` (the
///         default) picks the GEMM default for the accumulate type. Ignored by the host.
/// @param dy gradient of the output, N x K x P x Q, in the layout of dx
/// @param w the forward pass's filters (KCRS with NCHW, KRSC with NHWC)
/// @param dx gradient of the input, N x C x H x W; with beta = 0 it is never read
/// @param epilogue applied before the store with (batch, row, col) = (sample, input pixel
///        h * W + w, input channel): epilogue::relu_backward or gelu_tanh_backward over the
///        previous layer's activations turns dx into the gradient of that layer's
///        pre-activation in the same pass
/// @param options a workspace for split reductions; `deterministic`
/// @throws invalid_argument naming the parameter as conv2d does ("dx", "w", "dy",
///         "params.stride_h", ...), "options.workspace" for a deterministic pass without the
///         workspace it needs, "epilogue" for an epilogue view without data
/// @throws cuda_error if a launch fails
template <class Policy = void, class Exec, class TDY, class TW, class TDX,
          class Epilogue = epilogue::identity>
void conv2d_backward_data(Exec exec, const conv2d_params& params,
                          detail::conv::scalar_t<TDY> alpha, const tensor4d_view<TDY>& dy,
                          const tensor4d_view<TW>& w, detail::conv::scalar_t<TDY> beta,
                          const tensor4d_view<TDX>& dx, Epilogue epilogue = {},
                          const conv2d_backward_options& options = {}) {
  detail::conv::backward_data<Policy>(exec, params, alpha, dy, w, beta, dx, epilogue, options,
                                      false);
}

/// @brief conv2d_backward_data of conv2d_per_sample: `w` holds N * K filters, sample n's set
/// first at filter n * K.
template <class Policy = void, class Exec, class TDY, class TW, class TDX,
          class Epilogue = epilogue::identity>
void conv2d_backward_data_per_sample(Exec exec, const conv2d_params& params,
                                     detail::conv::scalar_t<TDY> alpha,
                                     const tensor4d_view<TDY>& dy, const tensor4d_view<TW>& w,
                                     detail::conv::scalar_t<TDY> beta,
                                     const tensor4d_view<TDX>& dx, Epilogue epilogue = {},
                                     const conv2d_backward_options& options = {}) {
  detail::conv::backward_data<Policy>(exec, params, alpha, dy, w, beta, dx, epilogue, options,
                                      true);
}

/// @brief Gradient of the filters, summed over the batch: dw = alpha * dL/dw + beta * dw, so
/// beta = 1 accumulates micro-batches into one gradient.
///
/// The reduction runs over N * P * Q (samples and output pixels). On CUDA a long one is split
/// across blocks when a workspace is given (conv2d_backward_filter_workspace_size), the slices'
/// sums added in a fixed order. With options.deterministic the reduction is cut into fixed
/// chunks (2048 steps, or more to keep at most 64), each summed in order and then added in
/// order, so the result is bitwise the same on every GPU, policy and run (the host's own
/// order is also fixed, but differs from the GPU's).
/// @param x the forward input, N x C x H x W
/// @param dy gradient of the output, N x K x P x Q, in the layout of x
/// @param dw gradient of the filters, K x C/groups x R x S (KCRS with NCHW, KRSC with NHWC)
/// @throws invalid_argument naming the parameter ("x", "dw", "dy", "params.*",
///         "options.workspace")
template <class Policy = void, class Exec, class TX, class TDY, class TDW>
void conv2d_backward_filter(Exec exec, const conv2d_params& params,
                            detail::conv::scalar_t<TX> alpha, const tensor4d_view<TX>& x,
                            const tensor4d_view<TDY>& dy, detail::conv::scalar_t<TX> beta,
                            const tensor4d_view<TDW>& dw,
                            const conv2d_backward_options& options = {}) {
  detail::conv::backward_filter<Policy>(exec, params, alpha, x, dy, beta, dw, options, false);
}

/// @brief Per-sample gradients of the filters in one call: dw holds N * K filters, sample n's
/// gradient first at filter n * K (the layout of conv2d_per_sample's filters). Each equals
/// conv2d_backward_filter on that sample alone.
template <class Policy = void, class Exec, class TX, class TDY, class TDW>
void conv2d_backward_filter_per_sample(Exec exec, const conv2d_params& params,
                                       detail::conv::scalar_t<TX> alpha,
                                       const tensor4d_view<TX>& x, const tensor4d_view<TDY>& dy,
                                       detail::conv::scalar_t<TX> beta,
                                       const tensor4d_view<TDW>& dw,
                                       const conv2d_backward_options& options = {}) {
  detail::conv::backward_filter<Policy>(exec, params, alpha, x, dy, beta, dw, options, true);
}

/// @brief The squared Frobenius norm of every sample's filter gradient, ||dL_n/dw||^2, for
/// per-sample clipping (DP-SGD) without storing N gradients.
///
/// Gradients are computed into `options.workspace` as many samples at a time as it holds (at
/// least one sample's: conv2d_backward_filter_norms_workspace_size(..., 1)), reduced there in a
/// fixed order, and dropped. The host backend needs no workspace but checks the same size, so
/// a program that runs on one backend runs on the other.
/// @param filters the filters' shape, K x C/groups x R x S (their layout is that of x)
/// @param norms N values of the accumulate type (float, or double for f64)
/// @throws invalid_argument naming the parameter ("x", "filters", "dy", "norms",
///         "options.workspace")
template <class Exec, class TX, class TDY>
void conv2d_backward_filter_per_sample_norms(Exec exec, const conv2d_params& params,
                                             const tensor4d_view<TX>& x,
                                             const tensor4d_shape& filters,
                                             const tensor4d_view<TDY>& dy,
                                             detail::conv::scalar_t<TX>* norms,
                                             const conv2d_backward_options& options) {
  static_assert(is_execution_v<Exec>, "gpubatch::conv2d_backward_filter_per_sample_norms: the "
                                      "first argument must be an execution argument");
  detail::require_cuda_compiler<Exec>();
  detail::conv::check_backward_types<TX, TDY, detail::conv::scalar_t<TX>>();
  using Compute = detail::conv::scalar_t<TX>;
  const detail::conv::tensor_names names{"x", "filters", "dy"};
  if (dy.order() != x.order()) {
    throw invalid_argument("dy", std::string("is ") + to_string(dy.order()) + " but x is " +
                                     to_string(x.order()));
  }
  const tensor4d_shape out = detail::conv::output_shape_named(shape_of(x), filters, params, names);
  if (shape_of(dy) != out) {
    throw invalid_argument("dy", "is " + to_string(shape_of(dy)) + " but the convolution gives " +
                                     to_string(out) + " (N x K x P x Q)");
  }
  const detail::conv::conv2d_geometry geo = detail::conv::make_geometry(
      x.n(), x.c(), x.h(), x.w(), filters.n, filters.h, filters.w, params, x.order());
  detail::conv::check_workspace(exec, conv2d_options{false, options.workspace,
                                                     options.workspace_bytes});
  const std::size_t one = static_cast<std::size_t>(geo.filter_set_size()) * sizeof(Compute);
  if (geo.n == 0) {
    return;
  }
  if (norms == nullptr) {
    throw invalid_argument("norms", "null pointer for " + std::to_string(geo.n) + " norms");
  }
  if (options.workspace_bytes < one) {
    throw invalid_argument("options.workspace",
                           "holds " + std::to_string(options.workspace_bytes) +
                               " bytes; one sample's filter gradient needs " +
                               std::to_string(one) +
                               " (conv2d_backward_filter_norms_workspace_size)");
  }
  if (x.size() > 0) detail::require_accessible(exec, "x", x.space(), x.data());
  if (dy.size() > 0) detail::require_accessible(exec, "dy", dy.space(), dy.data());
  detail::require_accessible(exec, "norms", memory_space::unknown, norms);
  using X = std::remove_const_t<TX>;
  using DY = std::remove_const_t<TDY>;
  if constexpr (is_cuda_exec_v<Exec>) {
#if GPUBATCH_CUDA_COMPILER
    detail::cuda_conv::launch_per_sample_norms<X, DY, Compute>(exec.stream(), geo, x.data(),
                                                                dy.data(), norms, options);
#endif
  } else {
    detail::host_conv::per_sample_squared_norms<Compute, X, DY>(exec, geo, x.data(), dy.data(),
                                                                norms);
  }
}

/// @brief Workspace bytes for conv2d_backward_filter_per_sample_norms to compute
/// `samples_per_round` gradients at a time (1 is the least it accepts). Same on both backends.
template <class TX>
[[nodiscard]] std::size_t conv2d_backward_filter_norms_workspace_size(
    const tensor4d_shape& filters, index_t samples_per_round = 1) {
  detail::conv::check_backward_types<TX, TX, detail::conv::scalar_t<TX>>();
  detail::require_nonnegative("samples_per_round", samples_per_round);
  return static_cast<std::size_t>(filters.size() * samples_per_round) *
         sizeof(detail::conv::scalar_t<TX>);
}

/// @brief Gradient of a per-output-channel bias: db[k] = alpha * (sum of dy(n, k, p, q) over
/// n, p, q) + beta * db[k], K values. Summed in a fixed order on both backends.
/// @param db K values (float for f32, f16 and bf16 may also be half/bfloat16; double for f64),
///        in memory the backend can access
/// @throws invalid_argument "db" for a null pointer, "dy"/"db" for inaccessible memory
template <class Exec, class TDY, class TB>
void conv2d_backward_bias(Exec exec, detail::conv::scalar_t<TDY> alpha,
                          const tensor4d_view<TDY>& dy, detail::conv::scalar_t<TDY> beta, TB* db) {
  detail::conv::backward_bias(exec, alpha, dy, beta, db, false);
}

/// @brief Per-sample bias gradients: db holds N * K values, sample n's at db + n * K.
template <class Exec, class TDY, class TB>
void conv2d_backward_bias_per_sample(Exec exec, detail::conv::scalar_t<TDY> alpha,
                                     const tensor4d_view<TDY>& dy,
                                     detail::conv::scalar_t<TDY> beta, TB* db) {
  detail::conv::backward_bias(exec, alpha, dy, beta, db, true);
}

/// @brief Workspace bytes for conv2d_backward_data: with options.deterministic what it needs
/// (both backends alike); otherwise what lets the CUDA backend split its reduction on this
/// device (0 when splitting would not help, and always 0 on the host).
template <class Policy = void, class Exec, class TDY, class TW, class TDX>
[[nodiscard]] std::size_t conv2d_backward_data_workspace_size(
    Exec exec, const conv2d_params& params, const tensor4d_view<TDY>& dy,
    const tensor4d_view<TW>& w, const tensor4d_view<TDX>& dx,
    const conv2d_backward_options& options = {}) {
  static_assert(is_execution_v<Exec>, "gpubatch::conv2d_backward_data_workspace_size: the "
                                      "first argument must be an execution argument");
  detail::require_cuda_compiler<Exec>();
  detail::conv::check_backward_types<TDY, TW, TDX>();
  using Compute = detail::conv::scalar_t<TDY>;
  const bool per_sample = w.n() != dy.c();
  const auto geo =
      detail::conv::check_conv2d(exec, params, dx, w, dy, per_sample, {"dx", "w", "dy"});
  const detail::conv::dgrad_batch<std::remove_const_t<TDY>, std::remove_const_t<TW>, TDX> batch(
      geo, dy.data(), w.data(), dx.data(), per_sample);
  return detail::conv::backward_workspace_size<Policy, Compute>(exec, batch, options);
}

/// @brief Workspace bytes for conv2d_backward_filter (or the per-sample form, when dw holds
/// N * K filters): as conv2d_backward_data_workspace_size.
template <class Policy = void, class Exec, class TX, class TDY, class TDW>
[[nodiscard]] std::size_t conv2d_backward_filter_workspace_size(
    Exec exec, const conv2d_params& params, const tensor4d_view<TX>& x,
    const tensor4d_view<TDY>& dy, const tensor4d_view<TDW>& dw,
    const conv2d_backward_options& options = {}) {
  static_assert(is_execution_v<Exec>, "gpubatch::conv2d_backward_filter_workspace_size: the "
                                      "first argument must be an execution argument");
  detail::require_cuda_compiler<Exec>();
  detail::conv::check_backward_types<TX, TDY, TDW>();
  using Compute = detail::conv::scalar_t<TX>;
  const bool per_sample = dw.n() != dy.c();
  const auto geo =
      detail::conv::check_conv2d(exec, params, x, dw, dy, per_sample, {"x", "dw", "dy"});
  const detail::conv::wgrad_batch<std::remove_const_t<TX>, std::remove_const_t<TDY>, TDW> batch(
      geo, x.data(), dy.data(), dw.data(), per_sample);
  return detail::conv::backward_workspace_size<Policy, Compute>(exec, batch, options);
}

GPUBATCH_NAMESPACE_END
