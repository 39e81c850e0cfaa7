/// @file epilogue.hpp
/// @brief Epilogues: element-wise functors fused into GEMM and convolution kernels, applied to
/// `alpha * accumulator + beta * C` before the result is converted and stored.
///
/// An epilogue is any trivially copyable type with
/// `template <class T> T operator()(T value, index_t batch, index_t row, index_t col) const`,
/// callable from host and device code (GPUBATCH_HOST_DEVICE). `value` is in the operation's
/// compute type (float for f32/f16/bf16 inputs, double for f64, int32_t for int8); (batch, row,
/// col) is the element's position in the output batch. User functors plug in the same way.
///
/// For convolution, `row` is the flattened output pixel (p * Q + q) of sample `batch` and `col`
/// the output channel, so `bias_col` is the per-output-channel bias.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/views.hpp>

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace gpubatch::epilogue {

/// @brief Stores `alpha * acc + beta * C` unchanged.
struct identity {
  template <class T>
  GPUBATCH_HOST_DEVICE T operator()(T value, index_t, index_t, index_t) const {
    return value;
  }
};

/// @brief max(value, 0).
struct relu {
  template <class T>
  GPUBATCH_HOST_DEVICE T operator()(T value, index_t, index_t, index_t) const {
    return value > T(0) ? value : T(0);
  }
};

/// @brief GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
struct gelu_tanh {
  template <class T>
  GPUBATCH_HOST_DEVICE T operator()(T value, index_t, index_t, index_t) const {
    if constexpr (std::is_integral_v<T>) {
      const double x = static_cast<double>(value);
      return static_cast<T>(0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))));
    } else {
      using std::tanh;  // float and double overloads on the host; CUDA's on the device
      const T x = value;
      return T(0.5) * x * (T(1) + tanh(T(0.7978845608028654) * (x + T(0.044715) * x * x * x)));
    }
  }
};

/// @brief Adds a bias per output row: `value + bias[batch * batch_stride + row]`.
/// A batch stride of 0 shares one bias vector across the batch.
/// @tparam B the bias element type; it is converted to the compute type
template <class B>
struct bias_row {
  const B* bias;
  index_t batch_stride = 0;
  template <class T>
  GPUBATCH_HOST_DEVICE T operator()(T value, index_t batch, index_t row, index_t) const {
    return value + static_cast<T>(bias[batch * batch_stride + row]);
  }
};

/// @brief Adds a bias per output column: `value + bias[batch * batch_stride + col]` (the
/// per-output-channel bias of a linear or convolution layer).
/// @tparam B the bias element type; it is converted to the compute type
template <class B>
struct bias_col {
  const B* bias;
  index_t batch_stride = 0;
  template <class T>
  GPUBATCH_HOST_DEVICE T operator()(T value, index_t batch, index_t, index_t col) const {
    return value + static_cast<T>(bias[batch * batch_stride + col]);
  }
};

/// @brief Adds a residual: `value + residual(batch, row, col)`, e.g. a skip connection.
/// @tparam R the residual element type; the view must have the output's shape
template <class R>
struct residual_add {
  matrix_batch_view<const R> residual;
  template <class T>
  GPUBATCH_HOST_DEVICE T operator()(T value, index_t batch, index_t row, index_t col) const {
    return value + static_cast<T>(residual(batch, row, col));
  }
};

/// @brief The backward of a fused ReLU: `value * (forward(batch, row, col) > 0)`, given the
/// layer's forward output (ReLU's output is positive exactly where its input was). Fused into
/// a backward pass, it turns the gradient of a layer's output into that of its pre-activation.
/// @tparam R the forward output's element type; the view must have the output's shape
template <class R>
struct relu_backward {
  matrix_batch_view<const R> forward;
  template <class T>
  GPUBATCH_HOST_DEVICE T operator()(T value, index_t batch, index_t row, index_t col) const {
    return static_cast<T>(forward(batch, row, col)) > T(0) ? value : T(0);
  }
};

/// @brief The backward of gelu_tanh: `value * gelu_tanh'(x)`, where x is the pre-activation
/// (the value before the activation, which GELU's output does not determine: keep it from the
/// forward pass, e.g. by running the forward with the identity epilogue and the activation
/// separately, or recompute it).
/// @tparam R the pre-activation's element type; the view must have the output's shape
template <class R>
struct gelu_tanh_backward {
  matrix_batch_view<const R> preactivation;
  template <class T>
  GPUBATCH_HOST_DEVICE T operator()(T value, index_t batch, index_t row, index_t col) const {
    static_assert(!std::is_integral_v<T>, "gpubatch::epilogue::gelu_tanh_backward needs a "
                                          "floating-point compute type");
    using std::tanh;
    const T x = static_cast<T>(preactivation(batch, row, col));
    const T c = T(0.7978845608028654);
    const T t = tanh(c * (x + T(0.044715) * x * x * x));
    const T slope = T(0.5) * (T(1) + t) +
                    T(0.5) * x * (T(1) - t * t) * c * (T(1) + T(3 * 0.044715) * x * x);
    return value * slope;
  }
};

/// @brief Applies `first`, then `second`: e.g. `chain<bias_col<float>, relu>` is bias + ReLU.
template <class First, class Second>
struct chain {
  First first;
  Second second;
  template <class T>
  GPUBATCH_HOST_DEVICE T operator()(T value, index_t batch, index_t row, index_t col) const {
    return second(first(value, batch, row, col), batch, row, col);
  }
};

/// @brief Composes epilogues left to right: `then(bias_col<float>{b}, relu{})`.
template <class First, class Second>
[[nodiscard]] constexpr chain<First, Second> then(First first, Second second) {
  return {first, second};
}

/// @brief Bias followed by an activation, the common fused layer tail.
template <class Bias, class Activation>
using bias_activation = chain<Bias, Activation>;

}  // namespace gpubatch::epilogue
