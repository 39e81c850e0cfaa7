/// @file conv_filters.hpp
/// @brief Filters prepared once for many convolutions: packed_conv2d_filters copies a layer's
/// filters and, on the host backend, lays them out for its implicit GEMM, so every conv2d (and,
/// when asked, conv2d_backward_data) given the object skips the packing a call with a plain
/// filter view does (the counterpart of oneDNN's weight reorder). What they compute is
/// unchanged.
#pragma once

#include <gpubatch/containers.hpp>
#include <gpubatch/conv.hpp>
#include <gpubatch/conv_backward.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/numeric.hpp>
#include <gpubatch/views.hpp>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>

GPUBATCH_NAMESPACE_BEGIN

template <class T>
class packed_conv2d_filters;

/// @brief The passes packed_conv2d_filters prepares filters for. Each pass prepared holds
/// another copy of the filters on the host backend; the CUDA backend reads its one copy in
/// place for the forward pass and holds a second, turned, for backward data.
enum class filter_passes {
  forward,                    ///< conv2d
  backward_data,              ///< conv2d_backward_data
  forward_and_backward_data,  ///< both: training, between two updates of the filters
};

namespace detail::conv {
/// What conv2d and conv2d_backward_data read from packed filters beyond their public view.
struct packed_filters_access {
  template <class T>
  static const host_conv::gemm_filters<scalar_t<T>>* host(const packed_conv2d_filters<T>& f) {
    return f.host_packed_ ? &f.host_ : nullptr;
  }
  template <class T>
  static const host_conv::gemm_filters<scalar_t<T>>* host_backward_data(
      const packed_conv2d_filters<T>& f) {
    return f.host_dgrad_packed_ ? &f.host_dgrad_ : nullptr;
  }
  /// The CUDA backend's filters turned for backward data as a forward convolution of dy
  /// (conv::dgrad_as_fprop), or null.
  template <class T>
  static const T* cuda_backward_data(const packed_conv2d_filters<T>& f) {
    return f.cuda_turned_ ? f.cuda_turned_->data() : nullptr;
  }
};
}  // namespace detail::conv

/// @brief A convolution layer's filters, copied and prepared once for the backend that will
/// run it, for any number of conv2d or conv2d_backward_data calls with the same filters
/// (inference, or the passes between two weight updates).
///
/// The object holds a snapshot: changing or freeing the original filters after construction
/// changes nothing here, on both backends. On the host backend it also holds the filters in
/// the implicit GEMM's layout for each pass it was made for: for conv2d, layers that are not
/// depthwise and have enough output channels per group; for conv2d_backward_data, stride-1
/// layers with more than 4 input channels per group (other layers prepare the copy on each
/// call, as they do a plain filter view). Each is another copy's worth of memory. The CUDA
/// backend reads its copy in place for conv2d; for conv2d_backward_data it also holds the
/// filters turned (input and output channels swapped, taps reversed), so that stride-1 layers
/// of more than 4 input channels per group run as the forward convolution of dy that computes
/// dx, on the forward kernels (tensor cores for f16 and bf16), except in a deterministic pass.
/// It serves x and y of any extent, batch size and padding, stride and dilation, in the
/// layout it was made from, with the groups it was made for.
///
/// On the CUDA backend the copy is made on exec's stream: use the object on that stream, or
/// order other streams after it.
///
/// @tparam T the filters' element type (float, half, bfloat16, std::int8_t or double)
template <class T>
class packed_conv2d_filters {
  static_assert(!std::is_const_v<T>, "gpubatch::packed_conv2d_filters: name the element type "
                                     "without const");

 public:
  using value_type = T;

  /// @brief Copies and prepares filters `w` (K x C/groups x R x S, KCRS or KRSC) for the
  /// convolutions of `params.groups` groups that `exec`'s backend will run.
  /// @param exec gpubatch::on_host or gpubatch::on(stream): the backend that will use them
  /// @param params only `groups` matters here; every call given the object must have the same
  /// @param w the filters, in memory `exec`'s backend can access
  /// @param passes the passes to prepare them for; any pass may use the object, a pass not
  ///        prepared for packs the filters on each call as with a plain filter view
  /// @throws invalid_argument "params.groups" below 1; "w" if K is not a multiple of groups
  ///         or the filters lie in memory the backend cannot access; "passes" naming a
  ///         backward-data pass for int8 filters, which have none
  /// @throws out_of_memory if the copy cannot be allocated; cuda_error if the copy fails
  template <class Exec>
  packed_conv2d_filters(Exec exec, const conv2d_params& params, const tensor4d_view<const T>& w,
                        filter_passes passes = filter_passes::forward)
      : copy_(static_cast<std::size_t>(checked_size(exec, params, w, passes)), exec),
        shape_{w.n(), w.c(), w.h(), w.w()},
        order_(w.order()),
        groups_(params.groups) {
    detail::require_cuda_compiler<Exec>();
    const std::size_t bytes = static_cast<std::size_t>(w.size()) * sizeof(T);
    if (bytes == 0) {
      return;
    }
    if constexpr (is_cuda_exec_v<Exec>) {
#if GPUBATCH_CUDA_COMPILER
      GPUBATCH_CUDA_TRY(cudaMemcpyAsync(copy_.data(), w.data(), bytes, cudaMemcpyDefault, exec.stream()));
      if constexpr (!std::is_same_v<T, std::int8_t>) {
        if (passes != filter_passes::forward) {
          cuda_turned_.emplace(copy_.size(), exec);
          detail::cuda_conv::launch_turn_filters(exec.stream(), shape_, groups_, order_,
                                                 copy_.data(), cuda_turned_->data());
        }
      }
#endif
    } else {
      std::memcpy(copy_.data(), w.data(), bytes);
      if (passes != filter_passes::backward_data) pack_for_host(exec);
      if constexpr (!std::is_same_v<T, std::int8_t>) {
        if (passes != filter_passes::forward) {
          host_dgrad_packed_ = detail::host_conv::pack_dgrad_filters<compute>(
              exec, shape_.n, shape_.c, shape_.h, shape_.w, groups_, order_, copy_.data(),
              host_dgrad_);
        }
      }
    }
  }

  /// @brief The copy, K x C/groups x R x S in the layout it was made from.
  [[nodiscard]] tensor4d_view<const T> view() const {
    return tensor4d_view<const T>(copy_, shape_.n, shape_.c, shape_.h, shape_.w, order_);
  }
  /// @brief The groups every convolution given these filters must have.
  [[nodiscard]] index_t groups() const noexcept { return groups_; }

 private:
  friend struct detail::conv::packed_filters_access;
  using compute = detail::scalar_t<T>;

  template <class Exec>
  static index_t checked_size(const Exec& exec, const conv2d_params& params,
                              const tensor4d_view<const T>& w, filter_passes passes) {
    if (passes != filter_passes::forward && std::is_same_v<T, std::int8_t>) {
      throw invalid_argument("passes", "int8 filters have no backward-data pass; use "
                                       "filter_passes::forward");
    }
    if (params.groups < 1) {
      throw invalid_argument("params.groups", "must be at least 1 (got " +
                                                  std::to_string(params.groups) + ")");
    }
    if (w.n() % params.groups != 0) {
      throw invalid_argument("w", "K = " + std::to_string(w.n()) +
                                      " filters are not a multiple of groups = " +
                                      std::to_string(params.groups));
    }
    if (w.size() > 0) detail::require_accessible(exec, "w", w.space(), w.data());
    return w.size();
  }

  // The host's implicit GEMM packs a layer's filters by group, whatever x's extents: the
  // geometry here has only what packing reads (K, C, R, S, groups, layout).
  void pack_for_host(host_exec exec) {
    detail::conv::conv2d_geometry geo{};
    geo.n = 1;
    geo.c = shape_.c * groups_;
    geo.h = shape_.h;
    geo.w = shape_.w;
    geo.k = shape_.n;
    geo.r = shape_.h;
    geo.s = shape_.w;
    geo.p = geo.q = 1;
    geo.stride_h = geo.stride_w = geo.dilation_h = geo.dilation_w = 1;
    geo.groups = groups_;
    geo.order = order_;
    if (!detail::host_conv::takes_implicit_gemm<compute>(geo)) {
      return;
    }
    const detail::conv::fprop_batch<T, T, compute> batch{geo, nullptr, copy_.data(), nullptr, false};
    host_ = detail::host_conv::pack_gemm_filters<compute>(exec, batch);
    host_packed_ = true;
  }

  device_buffer<T> copy_;
  tensor4d_shape shape_;
  tensor_layout order_;
  index_t groups_;
  detail::host_conv::gemm_filters<compute> host_{};
  bool host_packed_ = false;
  // A flag beside the packing rather than a std::optional of it: g++ 12 at -O3 (nvcc's host
  // pass) warned that an optional's disengaged arrays may be freed uninitialised.
  detail::host_conv::gemm_filters<compute> host_dgrad_{};
  bool host_dgrad_packed_ = false;
  std::optional<device_buffer<T>> cuda_turned_;
};

template <class Exec, class T>
packed_conv2d_filters(Exec, const conv2d_params&, const tensor4d_view<const T>&)
    -> packed_conv2d_filters<T>;
template <class Exec, class T>
packed_conv2d_filters(Exec, const conv2d_params&, const tensor4d_view<const T>&, filter_passes)
    -> packed_conv2d_filters<T>;

namespace detail::conv {
/// Packed filters serve only the groups they were made for.
template <class T>
void require_packed_groups(const conv2d_params& params, const packed_conv2d_filters<T>& w) {
  if (params.groups != w.groups()) {
    throw invalid_argument("w", "packed for groups = " + std::to_string(w.groups()) +
                                    ", but params.groups = " + std::to_string(params.groups));
  }
}
}  // namespace detail::conv

/// @brief conv2d with filters prepared by packed_conv2d_filters: the same result as conv2d with
/// the filters they were made from, without preparing them again.
/// @throws invalid_argument as conv2d, and "w" if `params.groups` is not the groups the filters
///         were made for, or they were made for the other backend (memory it cannot access)
template <class Policy = void, class Exec, class TX, class T, class TY,
          class Epilogue = epilogue::identity>
void conv2d(Exec exec, const conv2d_params& params, detail::conv::scalar_t<TX> alpha,
            const tensor4d_view<TX>& x, const packed_conv2d_filters<T>& w,
            detail::conv::scalar_t<TX> beta, const tensor4d_view<TY>& y, Epilogue epilogue = {},
            const conv2d_options& options = {}) {
  detail::conv::require_packed_groups(params, w);
  const auto* const prepacked =
      is_host_exec_v<Exec> ? detail::conv::packed_filters_access::host(w) : nullptr;
  detail::conv::conv2d_uniform<Policy>(exec, params, alpha, x, w.view(), beta, y, epilogue,
                                       options, false, prepacked);
}

/// @brief conv2d_backward_data with filters prepared by packed_conv2d_filters: the same result
/// as conv2d_backward_data with the filters they were made from. Filters prepared for
/// filter_passes::backward_data (or forward_and_backward_data) serve stride-1 layers of more
/// than 4 input channels per group: on the host they are not packed again; on CUDA the layer
/// runs as a forward convolution of dy with the turned filters (not in a deterministic pass,
/// whose order is the implicit GEMM's).
/// @throws invalid_argument as conv2d_backward_data, and "w" if `params.groups` is not the
///         groups the filters were made for, or they were made for the other backend
template <class Policy = void, class Exec, class TDY, class T, class TDX,
          class Epilogue = epilogue::identity>
void conv2d_backward_data(Exec exec, const conv2d_params& params,
                          detail::conv::scalar_t<TDY> alpha, const tensor4d_view<TDY>& dy,
                          const packed_conv2d_filters<T>& w, detail::conv::scalar_t<TDY> beta,
                          const tensor4d_view<TDX>& dx, Epilogue epilogue = {},
                          const conv2d_backward_options& options = {}) {
  detail::conv::require_packed_groups(params, w);
  const detail::host_conv::gemm_filters<compute_type_t<TDY>>* turned = nullptr;
  if constexpr (std::is_same_v<compute_type_t<TDY>, detail::scalar_t<T>>) {
    if (is_host_exec_v<Exec>) turned = detail::conv::packed_filters_access::host_backward_data(w);
  }
  const T* const cuda_turned =
      is_cuda_exec_v<Exec> ? detail::conv::packed_filters_access::cuda_backward_data(w) : nullptr;
  detail::conv::backward_data<Policy>(exec, params, alpha, dy, w.view(), beta, dx, epilogue,
                                      options, false, turned, cuda_turned);
}

GPUBATCH_NAMESPACE_END
