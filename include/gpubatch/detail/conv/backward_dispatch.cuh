/// @file detail/conv/backward_dispatch.cuh
/// @brief CUDA dispatch of the convolution backward passes: backward data and backward filter
/// as implicit GEMMs on the SIMT kernel (with the GEMM's SIMT policy for the accumulate type,
/// or a forced one), their reduction split across blocks through the caller's workspace (by
/// device size, or in the fixed chunks of a deterministic pass), strided backward data one
/// stride phase at a time; the bias gradient and per-sample norms on their own kernels.
/// Included only by nvcc translation units.
#pragma once

#include <gpubatch/conv_problem.hpp>
#include <gpubatch/detail/conv/backward_kernels.cuh>
#include <gpubatch/detail/conv/backward_problem.hpp>
#include <gpubatch/detail/conv/dispatch.cuh>
#include <gpubatch/error.hpp>
#include <gpubatch/gemm_policy.hpp>
#include <gpubatch/launch.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>

GPUBATCH_NAMESPACE_BEGIN
namespace detail::cuda_conv {

/// Calls f(policy_tag<P>{}) with the forced policy or the default SIMT convolution policy of the
/// accumulate type for the architecture and size class.
template <class Policy, class Compute, class F>
void with_backward_policy(int arch, size_class size, F&& f) {
  if constexpr (!std::is_void_v<Policy>) {
    static_assert(!Policy::tensor_cores,
                  "gpubatch: the convolution backward passes run on SIMT cores; force a "
                  "gemm_policy, not a tensor_core_policy");
    (void)arch, (void)size;
    f(policy_tag<Policy>{});
  } else {
    const auto pick = [&](auto arch_tag) {
      constexpr int A = decltype(arch_tag)::value;
      if (size == size_class::large) {
        f(policy_tag<typename default_conv2d_policy<Compute, A, size_class::large, false>::type>{});
      } else {
        f(policy_tag<typename default_conv2d_policy<Compute, A, size_class::medium, false>::type>{});
      }
    };
    if (arch >= 90) {
      pick(std::integral_constant<int, 90>{});
    } else {
      pick(std::integral_constant<int, 80>{});
    }
  }
}

/// Most slices a backward reduction is split into: the filter gradient has few output tiles
/// (K/g x C/g*R*S) and a reduction of N * P * Q, so it needs more slices than a forward layer to
/// fill a GPU (64 is also the most a deterministic pass uses).
inline constexpr index_t backward_most_slices = 64;

/// The split of a backward implicit GEMM batch: the fixed chunks of a deterministic pass (the
/// caller checked the workspace holds them), or a device-sized split when a workspace is
/// offered and large enough, or none.
template <class Policy, class Compute, class Batch>
split_k<Compute> backward_split(const Batch& batch, const conv2d_backward_options& options) {
  const index_t m = batch.gemm_m(), n = batch.gemm_n(), k = batch.gemm_k();
  if (options.deterministic) {
    const index_t chunks = conv::deterministic_chunks(k);
    if (chunks <= 1) {
      return no_split<Compute>();
    }
    return {chunks, conv::deterministic_chunk(k), static_cast<Compute*>(options.workspace),
            batch.count()};
  }
  if (options.workspace == nullptr) {
    return no_split<Compute>();
  }
  split_k<Compute> split =
      plan_split<Policy, Compute>(m, n, k, batch.count(), sm_count(), backward_most_slices);
  const std::size_t bytes =
      split.count > 1 ? static_cast<std::size_t>(split.count * split.problems * m * n) *
                            sizeof(Compute)
                      : 0;
  if (split.count <= 1 || bytes > options.workspace_bytes) {
    return no_split<Compute>();
  }
  split.workspace = static_cast<Compute*>(options.workspace);
  return split;
}

/// Workspace bytes a backward batch would use on this device without `deterministic`.
template <class Policy, class Compute, class Batch>
std::size_t backward_workspace_bytes(const Batch& batch) {
  const index_t m = batch.gemm_m(), n = batch.gemm_n(), k = batch.gemm_k();
  std::size_t bytes = 0;
  const int sms = sm_count();
  with_backward_policy<Policy, Compute>(cuda_gemm::code_arch(), classify_conv2d(m, n, k),
                                        [&](auto tag) {
    using P = typename decltype(tag)::type;
    const split_k<Compute> split =
        plan_split<P, Compute>(m, n, k, batch.count(), sms, backward_most_slices);
    if (split.count > 1) {
      bytes = static_cast<std::size_t>(split.count * split.problems * m * n) * sizeof(Compute);
    }
  });
  return bytes;
}

/// Whether backward data runs one stride phase at a time (conv::phase_dgrad_batch): a strided
/// layer, except in a deterministic pass, whose documented order is the plain GEMM's.
inline bool dgrad_by_phase(const conv::conv2d_geometry& geo, const conv2d_backward_options& options) {
  return (geo.stride_h > 1 || geo.stride_w > 1) && !options.deterministic;
}

/// Calls f(phase) for every stride phase of a layer with pixels (see conv::stride_phase).
template <class F>
void for_each_stride_phase(const conv::conv2d_geometry& geo, F&& f) {
  for (index_t a = 0; a < geo.stride_h; ++a) {
    for (index_t b = 0; b < geo.stride_w; ++b) {
      const conv::stride_phase phase = conv::make_stride_phase(geo, a, b);
      if (phase.pixels() > 0) {
        f(phase);
      }
    }
  }
}

/// Workspace bytes backward data would use on this device without `deterministic`: the most
/// any of its launches splits with (the phases of a strided layer run one after another on the
/// stream, each reusing the workspace).
template <class Policy, class Compute, class TDY, class TW, class TDX>
std::size_t backward_workspace_bytes(const conv::dgrad_batch<TDY, TW, TDX>& batch) {
  if (!dgrad_by_phase(batch.geo, conv2d_backward_options{})) {
    return backward_workspace_bytes<Policy, Compute, conv::dgrad_batch<TDY, TW, TDX>>(batch);
  }
  std::size_t bytes = 0;
  for_each_stride_phase(batch.geo, [&](const conv::stride_phase& phase) {
    if (phase.taps() > 0) {
      const conv::phase_dgrad_batch<TDY, TW, TDX> part(batch, phase);
      bytes = std::max(bytes, backward_workspace_bytes<Policy, Compute>(part));
    }
  });
  return bytes;
}

/// Filter taps the depthwise filter-gradient kernel keeps in registers (7 x 7); larger depthwise
/// filters take the implicit GEMM.
inline constexpr int depthwise_max_taps = 49;

/// Filter rows and columns the sliced depthwise filter-gradient kernel keeps in registers (7 x 7).
inline constexpr index_t depthwise_sliced_max_extent = 7;

/// Input channels per group up to which backward data runs as direct loops rather than the
/// implicit GEMM (as on the host): a dgrad GEMM N = C/g this narrow fills at most 4 of the SIMT
/// tile's 64 columns (the stem's 3: 4.7%), and gathers the tile's rows once per column tile
/// whatever N is, the zeros between strides included.
inline constexpr index_t direct_dgrad_max_channels = 4;

/// The sliced depthwise filter gradient (depthwise_wgrad_sliced_kernel), its slices added by
/// the split-K reduction kernel, whose [slice][group][kg][R * S] layout is the workspace's
/// [slice][K][R * S].
template <class TX, class TDY, class TDW, class Compute>
void launch_depthwise_wgrad_sliced(cudaStream_t stream, const conv::wgrad_batch<TX, TDY, TDW>& batch,
                                   const conv::depthwise_wgrad_slices& slices, Compute* workspace,
                                   Compute alpha, Compute beta) {
  constexpr int threads = 256;
  const dim3 grid(static_cast<unsigned>(slices.chunks), static_cast<unsigned>(slices.slices));
  const dim3 block(static_cast<unsigned>(slices.lanes_c), static_cast<unsigned>(slices.lanes_p));
  const launch_config config{grid, block, 0, stream};
  // Registers for the taps the filter has: up to 3 x 3, 5 x 5 or 7 x 7.
  const index_t extent = std::max(batch.geo.r, batch.geo.s);
  if (extent <= 3) {
    launch(depthwise_wgrad_sliced_kernel<threads, 3, TX, TDY, TDW, Compute>, config, batch,
           slices, workspace, alpha, beta);
  } else if (extent <= 5) {
    launch(depthwise_wgrad_sliced_kernel<threads, 5, TX, TDY, TDW, Compute>, config, batch,
           slices, workspace, alpha, beta);
  } else {
    launch(depthwise_wgrad_sliced_kernel<threads, depthwise_sliced_max_extent, TX, TDY, TDW,
                                         Compute>,
           config, batch, slices, workspace, alpha, beta);
  }
  GPUBATCH_CUDA_TRY(cudaGetLastError());
  if (slices.slices > 1) {
    const split_k<Compute> split{slices.slices, slices.per_slice, workspace, batch.count()};
    launch_split_reduce(stream, batch, split, batch.gemm_m(), batch.gemm_n(), alpha, beta,
                        epilogue::identity{});
  }
}

/// Depthwise layers (one input channel per group) on their own kernels, and backward data of
/// layers with at most direct_dgrad_max_channels input channels per group, unless a policy is
/// forced or a deterministic pass asks for the implicit GEMM's fixed chunks (whose order is the
/// one documented). Returns whether it launched.
template <class Policy, class TDY, class TW, class TDX, class Compute, class Epilogue>
bool launch_depthwise_backward(cudaStream_t stream, const conv::dgrad_batch<TDY, TW, TDX>& batch,
                               Compute alpha, Compute beta, const Epilogue& epilogue,
                               const conv2d_backward_options& options) {
  // A deterministic pass keeps the documented chunked order of the implicit GEMM; the kernel
  // finds tap positions in 32-bit arithmetic, so the padded extents must fit.
  const conv::conv2d_geometry& geo = batch.geo;
  constexpr index_t int_max = 0x7fffffff;
  const bool fits_int = geo.h + geo.pad_h < int_max && geo.w + geo.pad_w < int_max &&
                        geo.r * geo.dilation_h < int_max && geo.s * geo.dilation_w < int_max &&
                        geo.stride_h < int_max && geo.stride_w < int_max;
  if (!std::is_void_v<Policy> || geo.cg() > direct_dgrad_max_channels || options.deterministic ||
      !fits_int) {
    return false;
  }
  // An NHWC depthwise layer of stride 1: dx is the forward depthwise convolution of dy with
  // every filter turned 180 degrees, on the tiled forward kernel, which turns the taps as it
  // stages them.
  if (geo.nhwc() && geo.cg() == 1 && geo.kg() == 1) {
    if (const std::optional<conv::conv2d_geometry> forward = conv::dgrad_as_fprop(geo)) {
      const conv::fprop_batch<TDY, TW, TDX> as_forward{*forward, batch.dy, batch.w, batch.dx,
                                                       batch.per_sample};
      if (launch_depthwise_tiled(stream, as_forward, alpha, beta, epilogue, true)) return true;
    }
  }
  constexpr int threads = 256;
  const index_t total = batch.geo.n * batch.geo.c * batch.geo.h * batch.geo.w;
  const index_t blocks = std::min<index_t>(ceil_div(total, threads), index_t{1} << 20);
  launch(depthwise_dgrad_kernel<threads, TDY, TW, TDX, Compute, Epilogue>,
         launch_config{static_cast<unsigned>(blocks), threads, 0, stream}, batch, alpha, beta,
         epilogue);
  GPUBATCH_CUDA_TRY(cudaGetLastError());
  return true;
}

/// The sliced depthwise filter gradient's division of `batch`, where it applies: an NHWC layer
/// summed over its samples (per-sample gradients keep a block per filter), filters at most
/// 7 x 7, with pixels, within the kernel's index math. Its slices need
/// conv::depthwise_wgrad_slices::workspace_elements.
template <class TX, class TDY, class TDW>
std::optional<conv::depthwise_wgrad_slices> depthwise_wgrad_slicing(
    const conv::wgrad_batch<TX, TDY, TDW>& batch) {
  const conv::conv2d_geometry& geo = batch.geo;
  if (!geo.nhwc() || batch.per_sample || geo.cg() != 1 || geo.r > depthwise_sliced_max_extent ||
      geo.s > depthwise_sliced_max_extent) {
    return std::nullopt;
  }
  const conv::depthwise_wgrad_slices slices =
      conv::make_depthwise_wgrad_slices(geo, batch.samples, 256, sm_count());
  if (slices.total <= 0 || !slices.fits(geo)) return std::nullopt;
  return slices;
}

/// Workspace bytes of a filter gradient: the sliced depthwise kernel's partial sums where it
/// applies, else the implicit GEMM's split.
template <class Policy, class Compute, class TX, class TDY, class TDW>
std::size_t backward_workspace_bytes(const conv::wgrad_batch<TX, TDY, TDW>& batch) {
  if (std::is_void_v<Policy>) {
    if (const auto slices = depthwise_wgrad_slicing(batch)) {
      return static_cast<std::size_t>(slices->workspace_elements(batch.geo)) * sizeof(Compute);
    }
  }
  return backward_workspace_bytes<Policy, Compute, conv::wgrad_batch<TX, TDY, TDW>>(batch);
}

template <class Policy, class TX, class TDY, class TDW, class Compute, class Epilogue>
bool launch_depthwise_backward(cudaStream_t stream, const conv::wgrad_batch<TX, TDY, TDW>& batch,
                               Compute alpha, Compute beta, const Epilogue&,
                               const conv2d_backward_options& options) {
  // A deterministic pass keeps the documented chunked order of the implicit GEMM.
  if (!std::is_void_v<Policy> || batch.geo.cg() != 1 || options.deterministic ||
      batch.geo.r * batch.geo.s > depthwise_max_taps) {
    return false;
  }
  // NHWC with the workspace the query reports: channels across a block's lanes, the pixels
  // sliced across blocks (a block per filter reads x and dy a channel at a time, one element
  // of every 32-byte sector it fetches).
  if (const auto slices = depthwise_wgrad_slicing(batch)) {
    const auto bytes = static_cast<std::size_t>(slices->workspace_elements(batch.geo)) * sizeof(Compute);
    if (bytes == 0 || (options.workspace != nullptr && bytes <= options.workspace_bytes)) {
      launch_depthwise_wgrad_sliced(stream, batch, *slices,
                                    static_cast<Compute*>(options.workspace), alpha, beta);
      return true;
    }
  }
  constexpr int threads = 256;
  const index_t blocks = (batch.per_sample ? batch.samples : 1) * batch.geo.k;
  if (blocks > 0x7fffffff) {
    return false;
  }
  // Registers for the taps the filter has: 3 x 3, 5 x 5, or up to 7 x 7.
  const launch_config config{static_cast<unsigned>(blocks), threads, 0, stream};
  const index_t taps = batch.geo.r * batch.geo.s;
  if (taps <= 9) {
    launch(depthwise_wgrad_kernel<threads, 9, TX, TDY, TDW, Compute>, config, batch, alpha, beta);
  } else if (taps <= 25) {
    launch(depthwise_wgrad_kernel<threads, 25, TX, TDY, TDW, Compute>, config, batch, alpha, beta);
  } else {
    launch(depthwise_wgrad_kernel<threads, depthwise_max_taps, TX, TDY, TDW, Compute>, config,
           batch, alpha, beta);
  }
  GPUBATCH_CUDA_TRY(cudaGetLastError());
  return true;
}

/// A backward implicit GEMM batch on the SIMT kernel (dgrad_batch, phase_dgrad_batch or
/// wgrad_batch), its reduction split as backward_split says.
template <class Policy, class Batch, class Compute, class Epilogue>
void launch_backward_gemm(cudaStream_t stream, const Batch& batch, Compute alpha, Compute beta,
                          const Epilogue& epilogue, const conv2d_backward_options& options) {
  const index_t m = batch.gemm_m(), n = batch.gemm_n(), k = batch.gemm_k();
  with_backward_policy<Policy, Compute>(cuda_gemm::code_arch(), classify_conv2d(m, n, k),
                                        [&](auto tag) {
    using P = typename decltype(tag)::type;
    launch_implicit<P>(stream, batch, m, n, backward_split<P, Compute>(batch, options), alpha,
                       beta, epilogue);
  });
}

/// Backward data or backward filter (a dgrad_batch or wgrad_batch).
template <class Policy, class Batch, class Compute, class Epilogue>
void dispatch_backward(cudaStream_t stream, const Batch& batch, Compute alpha, Compute beta,
                       const Epilogue& epilogue, const conv2d_backward_options& options) {
  if (launch_depthwise_backward<Policy>(stream, batch, alpha, beta, epilogue, options)) {
    return;
  }
  launch_backward_gemm<Policy>(stream, batch, alpha, beta, epilogue, options);
}

/// Backward data: a strided layer one stride phase at a time (dgrad_by_phase), each phase's
/// GEMM over the taps that reach it alone; a phase no tap reaches stores beta * dx through the
/// epilogue.
template <class Policy, class TDY, class TW, class TDX, class Compute, class Epilogue>
void dispatch_backward(cudaStream_t stream, const conv::dgrad_batch<TDY, TW, TDX>& batch,
                       Compute alpha, Compute beta, const Epilogue& epilogue,
                       const conv2d_backward_options& options) {
  if (launch_depthwise_backward<Policy>(stream, batch, alpha, beta, epilogue, options)) {
    return;
  }
  if (!dgrad_by_phase(batch.geo, options)) {
    launch_backward_gemm<Policy>(stream, batch, alpha, beta, epilogue, options);
    return;
  }
  for_each_stride_phase(batch.geo, [&](const conv::stride_phase& phase) {
    const conv::phase_dgrad_batch<TDY, TW, TDX> part(batch, phase);
    if (phase.taps() == 0) {
      launch_split_reduce(stream, part, split_k<Compute>{0, 0, nullptr, part.count()},
                          part.gemm_m(), part.gemm_n(), alpha, beta, epilogue);
    } else {
      launch_backward_gemm<Policy>(stream, part, alpha, beta, epilogue, options);
    }
  });
}

/// The bias gradient: one block per output.
template <class TDY, class TB, class Compute>
void launch_bias_gradient(cudaStream_t stream, const conv::conv2d_geometry& geo, const TDY* dy,
                          TB* db, bool per_sample, Compute alpha, Compute beta) {
  constexpr int threads = 256;
  const index_t outputs = (per_sample ? geo.n : 1) * geo.k;
  if (outputs > 0x7fffffff) {
    throw invalid_argument("db", "too many outputs for one grid (" + std::to_string(outputs) + ")");
  }
  launch(bias_gradient_kernel<threads, TDY, TB, Compute>,
         launch_config{static_cast<unsigned>(outputs), threads, 0, stream}, geo, dy, db,
         per_sample, alpha, beta);
  GPUBATCH_CUDA_TRY(cudaGetLastError());
}

/// Per-sample squared norms of the filter gradient: as many samples' gradients per round as
/// the workspace holds (the caller checked it holds one), computed there and reduced.
template <class TX, class TDY, class Compute>
void launch_per_sample_norms(cudaStream_t stream, const conv::conv2d_geometry& geo, const TX* x,
                             const TDY* dy, Compute* norms,
                             const conv2d_backward_options& options) {
  const index_t per_set = geo.filter_set_size();
  const index_t fit =
      static_cast<index_t>(options.workspace_bytes / (static_cast<std::size_t>(per_set) * sizeof(Compute)));
  const index_t round = std::min<index_t>({fit, geo.n, 65535});
  auto* const gradients = static_cast<Compute*>(options.workspace);
  for (index_t first = 0; first < geo.n; first += round) {
    const index_t count = std::min(round, geo.n - first);
    const conv::wgrad_batch<TX, TDY, Compute> batch(geo, x, dy, gradients, true, first, count);
    conv2d_backward_options plain;  // the workspace holds the gradients, not split partials
    dispatch_backward<void>(stream, batch, Compute(1), Compute(0), epilogue::identity{}, plain);
    constexpr int threads = 256;
    launch(squared_norms_kernel<threads, Compute>,
           launch_config{static_cast<unsigned>(count), threads, 0, stream}, gradients, per_set,
           norms, first);
    GPUBATCH_CUDA_TRY(cudaGetLastError());
  }
}

/// The geometry of a layer with filters `shape` (K x C/g x R x S) and `groups` whose filters
/// are all that matters (one pixel per filter tap, stride 1, no padding), for turning them.
inline conv::conv2d_geometry filter_layer(const tensor4d_shape& shape, index_t groups,
                                          tensor_layout order) {
  return conv::make_geometry(1, shape.c * groups, shape.h, shape.w, shape.n, shape.h, shape.w,
                             conv2d_params{}.with_groups(groups), order);
}

/// Writes to `out` a layer's filters `w` (`shape`, `groups`, `order`) turned for backward data
/// as a forward convolution of dy, on `stream` (turn_filters_kernel). The forward filters'
/// layout depends on the filters alone, so they serve every x extent, padding and dilation.
template <class T>
void launch_turn_filters(cudaStream_t stream, const tensor4d_shape& shape, index_t groups,
                         tensor_layout order, const T* w, T* out) {
  const conv::conv2d_geometry layer = filter_layer(shape, groups, order);
  const conv::conv2d_geometry forward = *conv::dgrad_as_fprop(layer);  // no padding: always
  constexpr int threads = 256;
  const index_t total = forward.k * forward.gemm_k();
  if (total == 0) {
    return;
  }
  const index_t blocks = std::min<index_t>(ceil_div(total, threads), index_t{1} << 20);
  launch(turn_filters_kernel<threads, T>, launch_config{static_cast<unsigned>(blocks), threads, 0, stream},
         layer, forward, w, out);
  GPUBATCH_CUDA_TRY(cudaGetLastError());
}

}  // namespace detail::cuda_conv
GPUBATCH_NAMESPACE_END
