/// @file detail/conv/validate.hpp
/// @brief Host-side convolution argument checks, run once before anything is launched.
#pragma once

#include <gpubatch/conv_problem.hpp>
#include <gpubatch/detail/conv/problem.hpp>
#include <gpubatch/detail/gemm/validate.hpp>
#include <gpubatch/epilogue.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/numeric.hpp>
#include <gpubatch/views.hpp>

#include <cstdint>
#include <string>
#include <type_traits>

GPUBATCH_NAMESPACE_BEGIN
namespace detail::conv {

template <class TX, class TW, class TY, class Epilogue>
constexpr void check_types() {
  using X = std::remove_const_t<TX>;
  using W = std::remove_const_t<TW>;
  static_assert(std::is_same_v<X, W>,
                "gpubatch::conv2d: x and w must have the same element type");
  static_assert(!std::is_const_v<TY>, "gpubatch::conv2d: y must be writable (not a view of const)");
  static_assert(is_supported_element_v<X>,
                "gpubatch::conv2d: supported element types are float, gpubatch::half, "
                "gpubatch::bfloat16, std::int8_t and double");
  using compute = compute_type_t<X>;
  static_assert(supported_output_v<X, TY>,
                "gpubatch::conv2d: unsupported output type; y may be: float for float inputs; "
                "half or float for half; bfloat16 or float for bfloat16; int32_t for int8; "
                "double for double");
  static_assert(std::is_trivially_copyable_v<Epilogue>,
                "gpubatch::conv2d: the epilogue must be trivially copyable (it is passed to "
                "kernels by value)");
  static_assert(std::is_invocable_r_v<compute, const Epilogue&, compute, index_t, index_t, index_t>,
                "gpubatch::conv2d: the epilogue must be callable as "
                "epilogue(value, batch, row, col) with value in the accumulate type");
}

/// Checks a uniform convolution's views and returns its geometry. With per-sample filters, `w`
/// holds N * K filters (sample n's set first at filter n * K) and K is taken from y.
/// What the caller calls a convolution's three tensors (the backward passes take dx, dy, dw).
struct tensor_names {
  const char* x = "x";
  const char* w = "w";
  const char* y = "y";
};

/// conv2d_output_shape, its exceptions naming the caller's tensors.
inline tensor4d_shape output_shape_named(const tensor4d_shape& x, const tensor4d_shape& w,
                                         const conv2d_params& params, const tensor_names& names) {
  try {
    return conv2d_output_shape(x, w, params);
  } catch (const invalid_argument& e) {
    const std::string parameter = e.parameter();
    if (parameter != "x" && parameter != "w") {
      throw;
    }
    const std::string what = e.what();
    const std::string::size_type cut = what.find("': ");
    throw invalid_argument(parameter == "x" ? names.x : names.w,
                           cut == std::string::npos ? what : what.substr(cut + 3));
  }
}

template <class Exec, class TX, class TW, class TY>
conv2d_geometry check_conv2d(const Exec& exec, const conv2d_params& params, const tensor4d_view<TX>& x,
                             const tensor4d_view<TW>& w, const tensor4d_view<TY>& y,
                             bool per_sample, const tensor_names& names = {}) {
  const char* const filter_order = x.order() == tensor_layout::nchw ? "KCRS (tensor_layout::nchw)"
                                                                    : "KRSC (tensor_layout::nhwc)";
  if (w.order() != x.order()) {
    throw invalid_argument(names.w, std::string(names.x) + " is " + to_string(x.order()) +
                                    ", so the filters must be " + filter_order);
  }
  if (y.order() != x.order()) {
    throw invalid_argument(names.y, std::string("is ") + to_string(y.order()) + " but " +
                                        names.x + " is " + to_string(x.order()) +
                                        "; the output has the layout of the input");
  }
  tensor4d_shape filters = shape_of(w);
  if (per_sample) {
    if (w.n() != x.n() * y.c()) {
      throw invalid_argument(names.w, "per-sample filters: " + std::to_string(w.n()) +
                                      " filters for N = " + std::to_string(x.n()) +
                                      " samples of K = " + std::to_string(y.c()) +
                                      " output channels (expected N * K = " +
                                      std::to_string(x.n() * y.c()) + ")");
    }
    filters.n = y.c();
  }
  const tensor4d_shape out = output_shape_named(shape_of(x), filters, params, names);
  if (shape_of(y) != out) {
    // A backward pass cannot tell which of its shapes is wrong: say which two disagree.
    const std::string source = std::string(names.y) == "y"
                                   ? std::string("the convolution")
                                   : std::string(names.x) + " (" + to_string(shape_of(x)) +
                                         ") convolved with " + names.w;
    throw invalid_argument(names.y, "is " + to_string(shape_of(y)) + " but " + source +
                                        " gives " + to_string(out) + " (N x K x P x Q)");
  }
  if (x.size() > 0) require_accessible(exec, names.x, x.space(), x.data());
  if (w.size() > 0) require_accessible(exec, names.w, w.space(), w.data());
  if (y.size() > 0) require_accessible(exec, names.y, y.space(), y.data());
  return make_geometry(x.n(), x.c(), x.h(), x.w(), filters.n, w.h(), w.w(), params, x.order());
}

/// A workspace, if given, must exist and be reachable by the backend.
template <class Exec>
void check_workspace(const Exec& exec, const conv2d_options& options) {
  if (options.workspace == nullptr) {
    if (options.workspace_bytes > 0) {
      throw invalid_argument("options.workspace", "null pointer for " +
                                                      std::to_string(options.workspace_bytes) +
                                                      " bytes");
    }
    return;
  }
  if (reinterpret_cast<std::uintptr_t>(options.workspace) % 16 != 0) {
    throw invalid_argument("options.workspace", "must be aligned to 16 bytes (cudaMalloc's "
                                                "allocations are)");
  }
  require_accessible(exec, "options.workspace", memory_space::unknown, options.workspace);
}

/// Checks one problem of a grouped batch (host backend: the descriptors are host memory).
template <class TX, class TW, class TY>
void check_grouped_problem(const conv2d_problem<TX, TW, TY>& p, index_t index) {
  const std::string where = "problems[" + std::to_string(index) + "]";
  const index_t groups = p.params.groups;
  try {
    const tensor4d_shape filters{p.k, groups >= 1 ? p.c / groups : p.c, p.r, p.s};
    (void)conv2d_output_shape({p.n, p.c, p.h, p.w}, filters, p.params);
  } catch (const invalid_argument& e) {
    // "gpubatch: invalid argument 'x': C = ..." becomes "problems[i]: x: C = ...".
    const std::string what = e.what();
    const std::string::size_type cut = what.find("': ");
    throw invalid_argument(where, e.parameter() + ": " +
                                      (cut == std::string::npos ? what : what.substr(cut + 3)));
  }
  if (p.n == 0 || p.k == 0 || p.c == 0) {
    return;  // nothing to compute, nothing is touched
  }
  const auto require = [&](const char* name, const void* data) {
    if (data == nullptr) {
      throw invalid_argument(where, std::string(name) + " is null");
    }
  };
  require("x", p.x);
  require("weights", p.weights);
  require("y", p.y);
}

}  // namespace detail::conv
GPUBATCH_NAMESPACE_END
