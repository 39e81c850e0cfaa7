/// @file conv_problem.hpp
/// @brief Plain descriptions used by the convolution entry points: the parameters of a 2-D
/// convolution (padding, stride, dilation, groups), the output-shape helper, one problem of a
/// grouped batch, its size bounds, and convolution options.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/views.hpp>

#include <cstddef>
#include <string>

namespace gpubatch {

/// @brief Parameters of a 2-D convolution: zero padding per side (asymmetric allowed), stride
/// and dilation per axis, and the number of groups. The defaults describe a plain convolution
/// (no padding, stride 1, dilation 1, one group).
///
/// Build one with the `with_*` helpers, which return a modified copy:
/// `conv2d_params{}.with_padding(1, 1).with_stride(2, 2).with_groups(32)`.
struct conv2d_params {
  index_t pad_h_begin = 0;  ///< zero rows added above the input
  index_t pad_h_end = 0;    ///< zero rows added below the input
  index_t pad_w_begin = 0;  ///< zero columns added left of the input
  index_t pad_w_end = 0;    ///< zero columns added right of the input
  index_t stride_h = 1;     ///< vertical step between output rows, in input rows (>= 1)
  index_t stride_w = 1;     ///< horizontal step between output columns (>= 1)
  index_t dilation_h = 1;   ///< vertical spacing of filter taps (>= 1; 1 = dense)
  index_t dilation_w = 1;   ///< horizontal spacing of filter taps (>= 1)
  index_t groups = 1;       ///< channel groups; C and K must be multiples; C for depthwise

  /// @brief The same padding on both sides of each axis.
  [[nodiscard]] constexpr conv2d_params with_padding(index_t pad_h, index_t pad_w) const {
    return with_padding(pad_h, pad_h, pad_w, pad_w);
  }
  /// @brief Padding per side: top, bottom, left, right.
  [[nodiscard]] constexpr conv2d_params with_padding(index_t top, index_t bottom, index_t left,
                                                     index_t right) const {
    conv2d_params p = *this;
    p.pad_h_begin = top;
    p.pad_h_end = bottom;
    p.pad_w_begin = left;
    p.pad_w_end = right;
    return p;
  }
  /// @brief Stride per axis.
  [[nodiscard]] constexpr conv2d_params with_stride(index_t vertical, index_t horizontal) const {
    conv2d_params p = *this;
    p.stride_h = vertical;
    p.stride_w = horizontal;
    return p;
  }
  /// @brief Dilation per axis.
  [[nodiscard]] constexpr conv2d_params with_dilation(index_t vertical,
                                                      index_t horizontal) const {
    conv2d_params p = *this;
    p.dilation_h = vertical;
    p.dilation_w = horizontal;
    return p;
  }
  /// @brief Number of groups (C for a depthwise convolution).
  [[nodiscard]] constexpr conv2d_params with_groups(index_t count) const {
    conv2d_params p = *this;
    p.groups = count;
    return p;
  }
};

/// @brief Logical extents of a 4-D tensor, whatever its storage order: batch, channels, height,
/// width. For filters: output channels K, input channels per group C/groups, R, S.
struct tensor4d_shape {
  index_t n = 0;
  index_t c = 0;
  index_t h = 0;
  index_t w = 0;

  /// @brief Number of elements.
  [[nodiscard]] constexpr index_t size() const noexcept { return n * c * h * w; }
  [[nodiscard]] constexpr bool operator==(const tensor4d_shape& o) const noexcept {
    return n == o.n && c == o.c && h == o.h && w == o.w;
  }
  [[nodiscard]] constexpr bool operator!=(const tensor4d_shape& o) const noexcept {
    return !(*this == o);
  }
};

/// @brief The shape of a tensor view.
template <class T>
[[nodiscard]] tensor4d_shape shape_of(const tensor4d_view<T>& view) noexcept {
  return {view.n(), view.c(), view.h(), view.w()};
}

/// @brief "N x C x H x W" for messages.
[[nodiscard]] inline std::string to_string(const tensor4d_shape& s) {
  return std::to_string(s.n) + " x " + std::to_string(s.c) + " x " + std::to_string(s.h) +
         " x " + std::to_string(s.w);
}

/// @brief Output extent of one axis: floor((in + pad_begin + pad_end - dilation * (filter - 1)
/// - 1) / stride) + 1. Arguments must be valid (conv2d_output_shape checks them).
GPUBATCH_HOST_DEVICE constexpr index_t conv2d_output_extent(index_t input, index_t pad_begin,
                                                            index_t pad_end, index_t filter,
                                                            index_t stride, index_t dilation) {
  return (input + pad_begin + pad_end - dilation * (filter - 1) - 1) / stride + 1;
}

/// @brief The output shape N x K x P x Q of convolving an input of shape `x` (N x C x H x W)
/// with filters of shape `w` (K x C/groups x R x S).
/// @throws invalid_argument naming the parameter: a negative or zero stride or dilation
///         ("params.stride_h", ...), negative padding ("params.pad_h_begin", ...), groups < 1
///         ("params.groups"), C not divisible by groups ("x"), K not divisible by groups or
///         filters that do not have C/groups channels ("w"), a dilated filter larger than the
///         padded input ("w"), negative extents ("x", "w")
[[nodiscard]] inline tensor4d_shape conv2d_output_shape(const tensor4d_shape& x,
                                                        const tensor4d_shape& w,
                                                        const conv2d_params& params) {
  const auto positive = [](const char* name, index_t value) {
    if (value < 1) {
      throw invalid_argument(name, std::to_string(value) + " must be at least 1");
    }
  };
  const auto nonnegative = [](const char* name, index_t value) {
    if (value < 0) {
      throw invalid_argument(name, std::to_string(value) + " is negative");
    }
  };
  positive("params.stride_h", params.stride_h);
  positive("params.stride_w", params.stride_w);
  positive("params.dilation_h", params.dilation_h);
  positive("params.dilation_w", params.dilation_w);
  positive("params.groups", params.groups);
  nonnegative("params.pad_h_begin", params.pad_h_begin);
  nonnegative("params.pad_h_end", params.pad_h_end);
  nonnegative("params.pad_w_begin", params.pad_w_begin);
  nonnegative("params.pad_w_end", params.pad_w_end);
  if (x.n < 0 || x.c < 0 || x.h < 0 || x.w < 0) {
    throw invalid_argument("x", "negative extent in " + to_string(x));
  }
  if (w.n < 0 || w.c < 0 || w.h < 0 || w.w < 0) {
    throw invalid_argument("w", "negative extent in " + to_string(w));
  }
  if (x.c % params.groups != 0) {
    throw invalid_argument("x", "C = " + std::to_string(x.c) +
                                    " input channels are not divisible by groups = " +
                                    std::to_string(params.groups));
  }
  if (w.n % params.groups != 0) {
    throw invalid_argument("w", "K = " + std::to_string(w.n) +
                                    " output channels are not divisible by groups = " +
                                    std::to_string(params.groups));
  }
  if (w.c != x.c / params.groups) {
    throw invalid_argument("w", "filters have " + std::to_string(w.c) +
                                    " channels, but C / groups = " + std::to_string(x.c) + " / " +
                                    std::to_string(params.groups) + " = " +
                                    std::to_string(x.c / params.groups));
  }
  if (w.h < 1 || w.w < 1) {
    throw invalid_argument("w", "empty filter window " + std::to_string(w.h) + " x " +
                                    std::to_string(w.w));
  }
  const index_t padded_h = x.h + params.pad_h_begin + params.pad_h_end;
  const index_t padded_w = x.w + params.pad_w_begin + params.pad_w_end;
  const index_t extent_h = params.dilation_h * (w.h - 1) + 1;
  const index_t extent_w = params.dilation_w * (w.w - 1) + 1;
  if (extent_h > padded_h || extent_w > padded_w) {
    throw invalid_argument("w", "the dilated filter covers " + std::to_string(extent_h) + " x " +
                                    std::to_string(extent_w) + " but the padded input is only " +
                                    std::to_string(padded_h) + " x " + std::to_string(padded_w));
  }
  return {x.n, w.n,
          conv2d_output_extent(x.h, params.pad_h_begin, params.pad_h_end, w.h, params.stride_h,
                               params.dilation_h),
          conv2d_output_extent(x.w, params.pad_w_begin, params.pad_w_end, w.w, params.stride_w,
                               params.dilation_w)};
}

/// @brief One convolution of a grouped batch: its own extents, parameters and pointers. Tensors
/// are packed in the batch's layout (NCHW with KCRS filters, or NHWC with KRSC filters); the
/// output is N x K x P x Q with P, Q from conv2d_output_extent. For the CUDA backend an array of
/// these lives in device memory; for the host backend, in host memory.
template <class TX, class TW, class TY>
struct conv2d_problem {
  index_t n = 0;  ///< samples
  index_t c = 0;  ///< input channels
  index_t h = 0;  ///< input height
  index_t w = 0;  ///< input width
  index_t k = 0;  ///< output channels
  index_t r = 0;  ///< filter height
  index_t s = 0;  ///< filter width
  conv2d_params params{};
  const TX* x = nullptr;        ///< input, N x C x H x W
  const TW* weights = nullptr;  ///< filters, K x C/groups x R x S
  TY* y = nullptr;              ///< output, N x K x P x Q
};

/// @brief Upper bounds over the problems of a grouped convolution. The CUDA backend sizes its
/// grid from them instead of reading the descriptors back (which would synchronise); it requires
/// them. The host backend reads the descriptors directly and ignores them.
struct grouped_conv2d_bounds {
  index_t max_output_pixels = 0;  ///< max over problems of N * P * Q
  index_t max_k_per_group = 0;    ///< max over problems of K / groups
  index_t max_groups = 0;         ///< max over problems of groups
};

/// @brief Options that do not change what a convolution computes, only how.
struct conv2d_options {
  /// f32 only: run on TF32 tensor cores (inputs rounded to a 10-bit mantissa, f32
  /// accumulation). The host backend always computes in f32.
  bool allow_tf32 = false;
  /// Device memory the CUDA backend may use to split the reduction across blocks (split-K)
  /// when a layer has too few output tiles to fill the device; conv2d_workspace_size() says how
  /// much helps. Null (the default): no workspace is used and none is needed.
  void* workspace = nullptr;
  /// Bytes at `workspace`.
  std::size_t workspace_bytes = 0;
};

/// @brief Options of the convolution backward passes: only how they compute, never what.
///
/// Every backward pass is run-to-run deterministic (no atomics: split reductions go through the
/// workspace and are summed in a fixed order). `deterministic` also fixes that order
/// independently of the device, the policy and the launch split (fixed chunks of the reduction,
/// see conv2d_backward_filter), so results are bitwise equal on any GPU; it then needs the
/// workspace the *_workspace_size queries report, on both backends alike.
struct conv2d_backward_options {
  /// Reduce in an order that depends on the problem alone (needs the reported workspace).
  bool deterministic = false;
  /// Device memory the CUDA backend may use to split a long reduction across blocks (and must,
  /// with `deterministic`); also the per-sample gradient buffer of
  /// conv2d_backward_filter_per_sample_norms. Null: no split.
  void* workspace = nullptr;
  /// Bytes at `workspace`.
  std::size_t workspace_bytes = 0;
};

}  // namespace gpubatch
