// The convolution test engine shared by every conv test TU and both backends: builds random
// inputs in a logical (NCHW / KCRS) order, stores them in the layout under test, runs
// gpubatch::conv2d (shared filters, per-sample filters, or a grouped batch), and compares
// against a float64 direct reference by relative norm. Outputs are poisoned (NaN, or a sentinel
// for integers) before each run with beta = 0, so an element never written fails.
#pragma once

#include <gpubatch/conv.hpp>
#include <gpubatch/conv_filters.hpp>

#include "../support/catch.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "../support/inputs.hpp"

namespace gpubatch::test {

/// One layer: input N x C x H x W, K filters of R x S, parameters.
struct conv_case {
  std::string name;
  index_t n, c, h, w, k, r, s;
  conv2d_params params{};

  [[nodiscard]] tensor4d_shape x_shape() const { return {n, c, h, w}; }
  [[nodiscard]] tensor4d_shape w_shape() const { return {k, c / params.groups, r, s}; }
  [[nodiscard]] tensor4d_shape y_shape() const {
    return conv2d_output_shape(x_shape(), w_shape(), params);
  }
};

inline std::string describe(const conv_case& cc) {
  const conv2d_params& p = cc.params;
  return cc.name + ": " + std::to_string(cc.n) + "x" + std::to_string(cc.c) + "x" +
         std::to_string(cc.h) + "x" + std::to_string(cc.w) + " * " + std::to_string(cc.k) + "x" +
         std::to_string(cc.r) + "x" + std::to_string(cc.s) + " pad " +
         std::to_string(p.pad_h_begin) + "," + std::to_string(p.pad_h_end) + "," +
         std::to_string(p.pad_w_begin) + "," + std::to_string(p.pad_w_end) + " stride " +
         std::to_string(p.stride_h) + "," + std::to_string(p.stride_w) + " dilation " +
         std::to_string(p.dilation_h) + "," + std::to_string(p.dilation_w) + " groups " +
         std::to_string(p.groups);
}

/// Filters of one set for every sample, one set per sample, or one set prepared once by
/// packed_conv2d_filters.
enum class filter_form { shared, per_sample, packed };

inline const char* to_string(filter_form f) {
  return f == filter_form::shared       ? "shared filters"
         : f == filter_form::per_sample ? "per-sample filters"
                                        : "packed filters";
}

/// Offset of logical element (n, c, h, w) of a packed tensor of `shape` stored in `order`.
inline index_t offset_in(tensor_layout order, const tensor4d_shape& shape, index_t n, index_t c,
                         index_t h, index_t w) {
  return order == tensor_layout::nchw ? ((n * shape.c + c) * shape.h + h) * shape.w + w
                                      : ((n * shape.h + h) * shape.w + w) * shape.c + c;
}

/// Logical (NCHW-ordered) values re-stored in `order`.
template <class T>
std::vector<T> store_as(tensor_layout order, const tensor4d_shape& shape,
                        const std::vector<T>& logical) {
  std::vector<T> out(logical.size());
  index_t i = 0;
  for (index_t n = 0; n < shape.n; ++n)
    for (index_t c = 0; c < shape.c; ++c)
      for (index_t h = 0; h < shape.h; ++h)
        for (index_t w = 0; w < shape.w; ++w) {
          out[static_cast<std::size_t>(offset_in(order, shape, n, c, h, w))] =
              logical[static_cast<std::size_t>(i++)];
        }
  return out;
}

/// Stored values read back into logical order, as double.
template <class T>
std::vector<double> load_from(tensor_layout order, const tensor4d_shape& shape,
                              const std::vector<T>& stored) {
  std::vector<double> out(stored.size());
  index_t i = 0;
  for (index_t n = 0; n < shape.n; ++n)
    for (index_t c = 0; c < shape.c; ++c)
      for (index_t h = 0; h < shape.h; ++h)
        for (index_t w = 0; w < shape.w; ++w) {
          out[static_cast<std::size_t>(i++)] =
              convert<double>(stored[static_cast<std::size_t>(offset_in(order, shape, n, c, h, w))]);
        }
  return out;
}


/// The float64 direct convolution of logical x (N x C x H x W) with logical filters (`sets`
/// sets of K x C/g x R x S; set n for sample n when sets > 1): N x K x P x Q, before alpha.
inline std::vector<double> reference_conv(const conv_case& cc, const std::vector<double>& x,
                                          const std::vector<double>& w, index_t sets) {
  const tensor4d_shape out = cc.y_shape();
  const conv2d_params& p = cc.params;
  const index_t cg = cc.c / p.groups, kg = cc.k / p.groups;
  std::vector<double> y(static_cast<std::size_t>(out.size()), 0.0);
  for (index_t n = 0; n < cc.n; ++n) {
    const double* filters = w.data() + (sets > 1 ? n : 0) * cc.k * cg * cc.r * cc.s;
    for (index_t k = 0; k < cc.k; ++k) {
      const index_t g = k / kg;
      for (index_t op = 0; op < out.h; ++op) {
        for (index_t oq = 0; oq < out.w; ++oq) {
          double sum = 0;
          for (index_t c = 0; c < cg; ++c) {
            for (index_t r = 0; r < cc.r; ++r) {
              const index_t ih = op * p.stride_h - p.pad_h_begin + r * p.dilation_h;
              if (ih < 0 || ih >= cc.h) continue;
              for (index_t s = 0; s < cc.s; ++s) {
                const index_t iw = oq * p.stride_w - p.pad_w_begin + s * p.dilation_w;
                if (iw < 0 || iw >= cc.w) continue;
                sum += x[static_cast<std::size_t>(((n * cc.c + g * cg + c) * cc.h + ih) * cc.w + iw)] *
                       filters[((k * cg + c) * cc.r + r) * cc.s + s];
              }
            }
          }
          y[static_cast<std::size_t>(((n * cc.k + k) * out.h + op) * out.w + oq)] = sum;
        }
      }
    }
  }
  return y;
}

/// Requires one sample's outputs from a batched call to equal the same sample's computed alone,
/// element for element, or both to be NaN; returns how many are NaN alone.
inline index_t require_same_as_alone(const float* batched, const std::vector<float>& alone,
                                     index_t sample) {
  index_t nans = 0;
  for (std::size_t e = 0; e < alone.size(); ++e) {
    const float got = batched[e], want = alone[e];
    nans += std::isnan(want) ? 1 : 0;
    INFO("sample " << sample << ", element " << e << ": " << got << " batched, " << want << " alone");
    REQUIRE(((std::isnan(got) && std::isnan(want)) || got == want));
  }
  return nans;
}

/// Compares logical outputs; NaN (an unwritten, poisoned element) counts as infinitely wrong.
inline void compare(const std::vector<double>& got, const std::vector<double>& expected,
                    double tolerance, const tensor4d_shape& shape) {
  REQUIRE(got.size() == expected.size());
  double err2 = 0, ref2 = 0, worst = -1;
  std::size_t worst_at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double diff = std::isnan(got[i]) ? std::numeric_limits<double>::infinity()
                                           : got[i] - expected[i];
    if (std::abs(diff) > worst) {
      worst = std::abs(diff);
      worst_at = i;
    }
    err2 += diff * diff;
    ref2 += expected[i] * expected[i];
  }
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  if (got.empty()) return;  // an empty tensor (a dimension of 0): nothing to locate or compare
  const auto at = static_cast<index_t>(worst_at);
  const index_t pq = shape.h * shape.w;
  INFO("relative norm error " << rel << ", worst |diff| " << worst << " at (n, k, p, q) = ("
                              << at / (shape.c * pq) << ", " << (at / pq) % shape.c << ", "
                              << (at % pq) / shape.w << ", " << at % shape.w << ")");
  CHECK(rel <= tolerance);
}

/// The inputs of one case, in logical order, reproducible from its shape.
template <class TX, class TY>
struct conv_data {
  std::vector<TX> x, w;
  std::vector<TY> y0;  ///< initial y (beta != 0), logical order
  index_t sets;

  conv_data(const conv_case& cc, filter_form form, double beta) {
    const std::uint64_t seed = static_cast<std::uint64_t>(
        cc.n * 7919 + cc.c * 104729 + cc.h * 131 + cc.w * 17 + cc.k * 1000003 + cc.r * 3 + cc.s);
    sets = form == filter_form::per_sample ? cc.n : 1;
    x = random_inputs<TX>(static_cast<std::size_t>(cc.x_shape().size()), seed);
    w = random_inputs<TX>(static_cast<std::size_t>(cc.w_shape().size() * sets), seed + 1);
    const auto y_count = static_cast<std::size_t>(cc.y_shape().size());
    if (beta == 0.0) {
      y0.assign(y_count, poison_value<TY>());
    } else {
      using compute = compute_type_t<TX>;
      const auto initial = random_inputs<TX>(y_count, seed + 2);
      y0.resize(y_count);
      for (std::size_t i = 0; i < y_count; ++i) y0[i] = convert<TY>(convert<compute>(initial[i]));
    }
  }

  /// alpha * conv + beta * y0, then the epilogue, all in float64.
  template <class Epilogue>
  std::vector<double> expected(const conv_case& cc, double alpha, double beta,
                               const Epilogue& epilogue, index_t batch_of_problem = -1) const {
    std::vector<double> xd(x.size()), wd(w.size());
    for (std::size_t i = 0; i < x.size(); ++i) xd[i] = convert<double>(x[i]);
    for (std::size_t i = 0; i < w.size(); ++i) wd[i] = convert<double>(w[i]);
    std::vector<double> y = reference_conv(cc, xd, wd, sets);
    const tensor4d_shape out = cc.y_shape();
    const index_t pq = out.h * out.w;
    for (std::size_t i = 0; i < y.size(); ++i) {
      const auto e = static_cast<index_t>(i);
      const index_t n = e / (out.c * pq), k = (e / pq) % out.c, pixel = e % pq;
      double v = alpha * y[i];
      if (beta != 0.0) v += beta * convert<double>(y0[i]);
      // Grouped batches: batch = the problem, row = n * P * Q + pixel (conv.hpp).
      y[i] = batch_of_problem < 0 ? epilogue(v, n, pixel, k)
                                  : epilogue(v, batch_of_problem, n * pq + pixel, k);
    }
    return y;
  }
};

/// Integer convolutions take integer scalars.
template <class TX>
void integral_scalars(double& alpha, double& beta) {
  if constexpr (std::is_integral_v<compute_type_t<TX>>) {
    alpha = std::round(alpha * 2);
    beta = std::round(beta * 2);
  }
}

/// A case's inputs and initial output in Backend's memory, stored in `order`, with views; x
/// and y start `shift` elements into their buffers (1: off every vector boundary).
template <class Backend, class TX, class TY>
struct conv_tensors {
  tensor4d_shape ws, ys;
  index_t shift;
  device_buffer<TX> dx, dw;
  device_buffer<TY> dy;
  tensor4d_view<const TX> x, w;
  tensor4d_view<TY> y;

  conv_tensors(const conv_case& cc, tensor_layout order, const conv_data<TX, TY>& data,
               index_t shift_by = 0)
      : ws{cc.w_shape().n * data.sets, cc.w_shape().c, cc.w_shape().h, cc.w_shape().w},
        ys(cc.y_shape()),
        shift(shift_by),
        dx(data.x.size() + static_cast<std::size_t>(shift), Backend::exec()),
        dw(data.w.size(), Backend::exec()),
        dy(data.y0.size() + static_cast<std::size_t>(shift), Backend::exec()),
        x(dx.data() + shift, cc.n, cc.c, cc.h, cc.w, order, Backend::space),
        w(dw.data(), ws.n, ws.c, ws.h, ws.w, order, Backend::space),
        y(dy.data() + shift, ys.n, ys.c, ys.h, ys.w, order, Backend::space) {
    Backend::from_host(dx.data() + shift, store_as(order, cc.x_shape(), data.x));
    Backend::from_host(dw.data(), store_as(order, ws, data.w));
    Backend::from_host(dy.data() + shift, store_as(order, ys, data.y0));
  }
  /// y in logical order.
  std::vector<double> output(tensor_layout order) const {
    return load_from(order, ys,
                     Backend::to_host(dy.data() + shift, static_cast<std::size_t>(ys.size())));
  }
};

/// One case with x and y one element past their buffers' start (no vector alignment), beta
/// 0.5: the paths that need aligned tensors must see that they are not.
template <class Backend, class TX, class TY>
void check_conv_unaligned(const conv_case& cc, tensor_layout order) {
  using compute = compute_type_t<TX>;
  double alpha = 1.0, beta = 0.5;
  integral_scalars<TX>(alpha, beta);
  INFO(describe(cc) << ", " << gpubatch::to_string(order) << ", x and y one element off, "
                    << Backend::name);
  const conv_data<TX, TY> data(cc, filter_form::shared, beta);
  const conv_tensors<Backend, TX, TY> t(cc, order, data, 1);
  conv2d(Backend::exec(), cc.params, static_cast<compute>(alpha), t.x, t.w,
         static_cast<compute>(beta), t.y);
  compare(t.output(order), data.expected(cc, alpha, beta, epilogue::identity{}),
          output_tolerance<TY>(), t.ys);
}

/// Runs one case on Backend in `order` and checks it; returns the output in logical order.
/// `reference_epilogue` (if given) is the host-memory twin of `epilogue` for the reference.
/// `Policy` is passed through to the convolution; with `workspace_bytes`, the workspace size
/// is queried, a workspace of that size allocated and passed, and its size reported there;
/// `allow_tf32` lets f32 run on TF32 tensor cores (CUDA backend), checked to TF32 precision.
template <class Backend, class TX, class TY, class Epilogue = epilogue::identity,
          class Policy = void>
std::vector<double> check_conv(const conv_case& cc, tensor_layout order,
                               filter_form form = filter_form::shared, double alpha = 1.0,
                               double beta = 0.0, Epilogue epilogue = {},
                               const Epilogue* reference_epilogue = nullptr,
                               std::size_t* workspace_bytes = nullptr, bool allow_tf32 = false) {
  using compute = compute_type_t<TX>;
  integral_scalars<TX>(alpha, beta);
  INFO(describe(cc) << ", " << gpubatch::to_string(order) << ", " << to_string(form)
                    << ", alpha " << alpha << ", beta " << beta << ", " << Backend::name);
  const auto exec = Backend::exec();
  const conv_data<TX, TY> data(cc, form, beta);
  const conv_tensors<Backend, TX, TY> t(cc, order, data);
  const tensor4d_shape ys = t.ys;
  const auto &vx = t.x, &vw = t.w;
  const auto& vy = t.y;
  const auto a = static_cast<compute>(alpha);
  const auto b = static_cast<compute>(beta);
  conv2d_options options;
  options.allow_tf32 = allow_tf32;
  device_buffer<std::byte> workspace(0, exec);
  if (workspace_bytes != nullptr) {
    *workspace_bytes = conv2d_workspace_size<Policy>(exec, cc.params, vx, vw, vy);
    workspace = device_buffer<std::byte>(*workspace_bytes, exec);
    options.workspace = workspace.data();
    options.workspace_bytes = workspace.size();
  }
  if (form == filter_form::shared) {
    conv2d<Policy>(exec, cc.params, a, vx, vw, b, vy, epilogue, options);
  } else {
    conv2d_per_sample<Policy>(exec, cc.params, a, vx, vw, b, vy, epilogue, options);
  }
  const std::vector<double> got = t.output(order);
  const Epilogue& ref_epi = reference_epilogue != nullptr ? *reference_epilogue : epilogue;
  // TF32 rounds inputs to 11 significant bits (unit roundoff 4.9e-4), like f16.
  const bool tf32 = allow_tf32 && std::is_same_v<TX, float> && Backend::space == memory_space::device;
  compare(got, data.expected(cc, alpha, beta, ref_epi), tf32 ? 2e-3 : output_tolerance<TY>(), ys);
  return got;
}

/// Per-sample filters in one call equal a loop of single-sample convolutions.
template <class Backend, class TX, class TY>
void check_per_sample_equals_loop(const conv_case& cc, tensor_layout order) {
  using compute = compute_type_t<TX>;
  INFO(describe(cc) << ", " << gpubatch::to_string(order) << ", " << Backend::name);
  const auto exec = Backend::exec();
  const conv_data<TX, TY> data(cc, filter_form::per_sample, 0.0);
  const tensor4d_shape xs = cc.x_shape(), ws1 = cc.w_shape(), ys = cc.y_shape();
  device_buffer<TX> dx(data.x.size(), exec), dw(data.w.size(), exec);
  device_buffer<TY> batched(data.y0.size(), exec), looped(data.y0.size(), exec);
  Backend::from_host(dx.data(), store_as(order, xs, data.x));
  Backend::from_host(dw.data(), store_as(order, tensor4d_shape{ws1.n * cc.n, ws1.c, ws1.h, ws1.w}, data.w));
  Backend::from_host(batched.data(), data.y0);  // poison
  Backend::from_host(looped.data(), data.y0);
  conv2d_per_sample(exec, cc.params, compute(1), tensor4d_view<const TX>(dx.data(), cc.n, cc.c, cc.h, cc.w, order, Backend::space),
                    tensor4d_view<const TX>(dw.data(), ws1.n * cc.n, ws1.c, ws1.h, ws1.w, order, Backend::space), compute(0),
                    tensor4d_view<TY>(batched.data(), ys.n, ys.c, ys.h, ys.w, order, Backend::space));
  // Packed tensors: sample n's slices are contiguous in NCHW and NHWC alike.
  for (index_t n = 0; n < cc.n; ++n) {
    conv2d(exec, cc.params, compute(1),
           tensor4d_view<const TX>(dx.data() + n * xs.c * xs.h * xs.w, 1, cc.c, cc.h, cc.w, order, Backend::space),
           tensor4d_view<const TX>(dw.data() + n * ws1.size(), ws1.n, ws1.c, ws1.h, ws1.w, order, Backend::space), compute(0),
           tensor4d_view<TY>(looped.data() + n * ys.c * ys.h * ys.w, 1, ys.c, ys.h, ys.w, order, Backend::space));
  }
  const auto got = load_from(order, ys, Backend::to_host(batched.data(), data.y0.size()));
  const auto loop = load_from(order, ys, Backend::to_host(looped.data(), data.y0.size()));
  compare(got, loop, output_tolerance<TY>(), ys);
  compare(got, data.expected(cc, 1.0, 0.0, epilogue::identity{}), output_tolerance<TY>(), ys);
}

/// Two calls on the same tensors, the filters overwritten in place between them (and y
/// poisoned again): each call must compute with the filters as they are when it runs. A
/// backend that keeps filters prepared by an earlier call must not take them for these.
template <class Backend, class TX, class TY>
void check_filters_rewritten_between_calls(const conv_case& cc, tensor_layout order,
                                           filter_form form) {
  using compute = compute_type_t<TX>;
  INFO(describe(cc) << ", " << gpubatch::to_string(order) << ", " << to_string(form)
                    << ", filters rewritten between calls, " << Backend::name);
  const auto exec = Backend::exec();
  conv_data<TX, TY> data(cc, form, 0.0);
  conv_tensors<Backend, TX, TY> t(cc, order, data);
  for (int call = 0; call < 2; ++call) {
    if (call == 1) {
      data.w = random_inputs<TX>(data.w.size(), 4243);
      Backend::from_host(t.dw.data(), store_as(order, t.ws, data.w));
      Backend::from_host(t.dy.data(), std::vector<TY>(data.y0.size(), poison_value<TY>()));
    }
    if (form == filter_form::per_sample) {
      conv2d_per_sample(exec, cc.params, compute(1), t.x, t.w, compute(0), t.y);
    } else {
      conv2d(exec, cc.params, compute(1), t.x, t.w, compute(0), t.y);
    }
    INFO("call " << call + 1);
    compare(t.output(order), data.expected(cc, 1.0, 0.0, epilogue::identity{}),
            output_tolerance<TY>(), t.ys);
  }
}

/// Filters packed once (packed_conv2d_filters) give the results of the filters they were made
/// from, in two calls on one object (alpha and beta, then beta = 0 over a poisoned output), and
/// are a snapshot: the original filters are overwritten with other values after packing.
template <class Backend, class TX, class TY>
void check_packed_filters(const conv_case& cc, tensor_layout order) {
  using compute = compute_type_t<TX>;
  double alpha = 0.75, beta = 0.5;
  integral_scalars<TX>(alpha, beta);
  INFO(describe(cc) << ", " << gpubatch::to_string(order) << ", packed filters, " << Backend::name);
  const auto exec = Backend::exec();
  const conv_data<TX, TY> data(cc, filter_form::shared, beta);
  conv_tensors<Backend, TX, TY> t(cc, order, data);
  const packed_conv2d_filters<TX> packed(exec, cc.params, t.w);
  if (const auto* host = gpubatch::detail::conv::packed_filters_access::host(packed)) {
    // The micro-kernel loads the strips as whole vectors: none may straddle a cache line.
    CHECK(reinterpret_cast<std::uintptr_t>(host->strips.get()) %
              gpubatch::detail::host_gemm::buffer_alignment ==
          0);
  }
  Backend::from_host(t.dw.data(), random_inputs<TX>(data.w.size(), 4242));  // not what was packed
  conv2d(exec, cc.params, static_cast<compute>(alpha), t.x, packed, static_cast<compute>(beta), t.y);
  compare(t.output(order), data.expected(cc, alpha, beta, epilogue::identity{}),
          output_tolerance<TY>(), t.ys);
  Backend::from_host(t.dy.data(), std::vector<TY>(data.y0.size(), poison_value<TY>()));
  conv2d(exec, cc.params, compute(1), t.x, packed, compute(0), t.y);
  compare(t.output(order), data.expected(cc, 1.0, 0.0, epilogue::identity{}),
          output_tolerance<TY>(), t.ys);
}

/// One grouped call over differently shaped problems (each its own filters), each checked.
/// Problem `beyond` (if any) is left out of the bounds: the CUDA backend must skip it whole,
/// leaving its output as it was (the host backend, which ignores bounds, computes it).
template <class Backend, class TX, class TY, class Epilogue = epilogue::identity>
void check_grouped(const std::vector<conv_case>& cases, tensor_layout order, double alpha = 1.0,
                   double beta = 0.0, Epilogue epilogue = {}, std::ptrdiff_t beyond = -1) {
  using compute = compute_type_t<TX>;
  integral_scalars<TX>(alpha, beta);
  INFO("grouped batch of " << cases.size() << ", " << gpubatch::to_string(order) << ", "
                           << Backend::name << ", beta " << beta);
  const auto exec = Backend::exec();
  std::vector<conv_data<TX, TY>> data;
  std::vector<TX> hx, hw;
  std::vector<TY> hy;
  std::vector<std::size_t> ox, ow, oy;
  for (const conv_case& cc : cases) {
    data.emplace_back(cc, filter_form::shared, beta);
    ox.push_back(hx.size());
    ow.push_back(hw.size());
    oy.push_back(hy.size());
    const auto sx = store_as(order, cc.x_shape(), data.back().x);
    const auto sw = store_as(order, cc.w_shape(), data.back().w);
    const auto sy = store_as(order, cc.y_shape(), data.back().y0);
    hx.insert(hx.end(), sx.begin(), sx.end());
    hw.insert(hw.end(), sw.begin(), sw.end());
    hy.insert(hy.end(), sy.begin(), sy.end());
  }
  device_buffer<TX> dx(hx.size(), exec), dw(hw.size(), exec);
  device_buffer<TY> dy(hy.size(), exec);
  Backend::from_host(dx.data(), hx);
  Backend::from_host(dw.data(), hw);
  Backend::from_host(dy.data(), hy);
  std::vector<conv2d_problem<TX, TX, TY>> problems;
  grouped_conv2d_bounds bounds;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const conv_case& cc = cases[i];
    const tensor4d_shape ys = cc.y_shape();
    problems.push_back({cc.n, cc.c, cc.h, cc.w, cc.k, cc.r, cc.s, cc.params, dx.data() + ox[i],
                        dw.data() + ow[i], dy.data() + oy[i]});
    if (static_cast<std::ptrdiff_t>(i) == beyond) continue;
    bounds.max_output_pixels = std::max(bounds.max_output_pixels, ys.n * ys.h * ys.w);
    bounds.max_k_per_group = std::max(bounds.max_k_per_group, cc.k / cc.params.groups);
    bounds.max_groups = std::max(bounds.max_groups, cc.params.groups);
  }
  device_buffer<conv2d_problem<TX, TX, TY>> dp(problems.size(), exec);
  Backend::from_host(dp.data(), problems);
  conv2d_grouped(exec, order, static_cast<compute>(alpha), dp.data(),
                 static_cast<index_t>(problems.size()), static_cast<compute>(beta), epilogue,
                 bounds);
  const std::vector<TY> result = Backend::to_host(dy.data(), hy.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const conv_case& cc = cases[i];
    INFO("problem " << i << ": " << describe(cc));
    const tensor4d_shape ys = cc.y_shape();
    const std::vector<TY> mine(result.begin() + static_cast<std::ptrdiff_t>(oy[i]),
                               result.begin() + static_cast<std::ptrdiff_t>(oy[i] + static_cast<std::size_t>(ys.size())));
    if (static_cast<std::ptrdiff_t>(i) == beyond && Backend::space == memory_space::device) {
      const std::vector<TY> before(hy.begin() + static_cast<std::ptrdiff_t>(oy[i]),
                                   hy.begin() + static_cast<std::ptrdiff_t>(oy[i]) +
                                       static_cast<std::ptrdiff_t>(ys.size()));
      CHECK(std::memcmp(mine.data(), before.data(), before.size() * sizeof(TY)) == 0);
      continue;
    }
    compare(load_from(order, ys, mine),
            data[i].expected(cc, alpha, beta, epilogue, static_cast<index_t>(i)),
            output_tolerance<TY>(), ys);
  }
}

// ---------------------------------------------------------------------------------------------
// Layers

inline conv2d_params pad(index_t ph, index_t pw) { return conv2d_params{}.with_padding(ph, pw); }

/// ResNet-50 and MobileNetV2 layers (real channel counts, small spatial sizes and batches to
/// keep the float64 reference fast), and odd shapes: every path of both backends.
inline std::vector<conv_case> network_layers() {
  return {
      // ResNet-50
      {"resnet50 conv1 7x7/2", 2, 3, 29, 29, 64, 7, 7, pad(3, 3).with_stride(2, 2)},
      {"resnet50 res2 1x1 256->64", 2, 256, 9, 9, 64, 1, 1},
      {"resnet50 res2 3x3 64", 2, 64, 11, 11, 64, 3, 3, pad(1, 1)},
      {"resnet50 res3 3x3/2 128", 2, 128, 9, 9, 128, 3, 3, pad(1, 1).with_stride(2, 2)},
      {"resnet50 res4 1x1/2 256->512", 1, 256, 7, 7, 512, 1, 1, conv2d_params{}.with_stride(2, 2)},
      {"resnet50 res5 3x3 512", 1, 512, 3, 3, 512, 3, 3, pad(1, 1)},
      // MobileNetV2
      {"mobilenetv2 expand 1x1 16->96", 2, 16, 15, 15, 96, 1, 1},
      {"mobilenetv2 depthwise 3x3/2 96", 2, 96, 15, 15, 96, 3, 3, pad(1, 1).with_stride(2, 2).with_groups(96)},
      {"mobilenetv2 depthwise 3x3 144", 2, 144, 10, 10, 144, 3, 3, pad(1, 1).with_groups(144)},
      {"mobilenetv2 project 1x1 144->24", 2, 144, 10, 10, 24, 1, 1},
  };
}

inline std::vector<conv_case> odd_layers() {
  return {
      {"5x5 odd sizes", 2, 5, 13, 11, 7, 5, 5, pad(2, 2)},
      {"1x7 and 7x1", 1, 8, 9, 12, 12, 1, 7, conv2d_params{}.with_padding(0, 0, 3, 3)},
      {"7x1", 1, 8, 12, 9, 12, 7, 1, conv2d_params{}.with_padding(3, 3, 0, 0)},
      {"asymmetric padding, 3x2, stride 2x3", 2, 6, 12, 17, 10, 3, 2,
       conv2d_params{}.with_padding(2, 0, 1, 3).with_stride(2, 3)},
      {"dilation 2", 1, 16, 13, 13, 16, 3, 3, pad(2, 2).with_dilation(2, 2)},
      {"dilation 3x2, stride 1x2, 2x4", 2, 9, 14, 15, 11, 2, 4,
       conv2d_params{}.with_padding(1, 2, 0, 1).with_stride(1, 2).with_dilation(3, 2)},
      {"groups 8 (ResNeXt)", 1, 64, 8, 8, 64, 3, 3, pad(1, 1).with_groups(8)},
      {"groups 4, 2 outputs per group", 2, 8, 9, 7, 8, 3, 3, pad(1, 1).with_groups(4)},
      {"groups 2", 2, 16, 7, 9, 24, 3, 3, pad(0, 1).with_groups(2)},
      {"depthwise, channel multiplier 2", 2, 8, 11, 10, 16, 3, 3, pad(1, 1).with_groups(8)},
      {"depthwise 5x5 stride 2 asymmetric", 1, 12, 13, 12, 12, 5, 5,
       conv2d_params{}.with_padding(2, 1, 1, 2).with_stride(2, 2).with_groups(12)},
      {"single input channel", 2, 1, 9, 9, 20, 3, 3, pad(1, 1)},
      {"filter as large as the padded input", 2, 6, 4, 4, 9, 5, 5, conv2d_params{}.with_padding(1, 0, 1, 0)},
      {"1x1 input", 3, 32, 1, 1, 20, 1, 1},
      {"7x7 stride 3", 1, 4, 20, 20, 8, 7, 7, conv2d_params{}.with_stride(3, 3)},
      {"K > 256, reduction > 256", 1, 40, 6, 6, 300, 3, 3, pad(1, 1)},
      // NHWC layers whose groups have 16 channels or more: the host reads taps in place
      {"groups 2 of 24 channels, stride 2x1, asymmetric padding", 2, 48, 13, 11, 40, 3, 3,
       conv2d_params{}.with_padding(2, 0, 1, 1).with_stride(2, 1).with_groups(2)},
      {"300 channels (reduction chunks), dilation 2x1", 1, 300, 7, 9, 33, 3, 2,
       conv2d_params{}.with_padding(2, 1).with_dilation(2, 1)},
      {"1x1 stride 2 over 17 channels", 2, 17, 9, 10, 36, 1, 1, conv2d_params{}.with_stride(2, 2)},
      // Depthwise NHWC rows wide enough for the host's 8-column blocks, a channel tail
      {"depthwise 40 channels, 31 wide, dilation 2, asymmetric padding", 2, 40, 7, 31, 40, 3, 3,
       conv2d_params{}.with_padding(1, 2, 2, 0).with_dilation(2, 2).with_groups(40)},
      {"depthwise 24 channels, 29 wide, stride 2", 1, 24, 6, 29, 24, 3, 3,
       pad(1, 1).with_stride(2, 2).with_groups(24)},
      // Depthwise NHWC rows in the host's 7-column tiles of 3, 5 and 7 taps: partial tiles,
      // padding on both sides of one tile, an odd channel vector and a channel tail
      {"depthwise 5x5, 33 channels, 23 wide", 1, 33, 4, 23, 33, 5, 5, pad(2, 2).with_groups(33)},
      {"depthwise 7x7, 48 channels, stride 2, 19 wide", 1, 48, 5, 19, 48, 7, 7,
       pad(3, 3).with_stride(2, 2).with_groups(48)},
      {"depthwise 3x3, 32 channels, 4 wide, padding 0 left and 2 right", 2, 32, 3, 4, 32, 3, 3,
       conv2d_params{}.with_padding(1, 1, 0, 2).with_groups(32)},
      // NHWC batches whose samples fill the host's micro-tile strips (24: a multiple of 6 and
      // 8), read sample-minor: taps in the padding skipped, lines of several filter rows,
      // reduction chunks, one tap per line (groups), outputs that read only padding
      {"24 samples, 3x3 over 5x7", 24, 16, 5, 7, 32, 3, 3, pad(1, 1)},
      {"24 samples, 1x11 over 48 channels, stride 1x2, asymmetric padding", 24, 48, 2, 6, 40, 1, 11,
       conv2d_params{}.with_padding(0, 0, 5, 4).with_stride(1, 2)},
      {"24 samples, groups 2 of 16 channels, dilation 2", 24, 32, 6, 6, 32, 3, 3,
       pad(2, 2).with_dilation(2, 2).with_groups(2)},
      {"24 samples, 1x1 with padding", 24, 16, 3, 3, 32, 1, 1, pad(1, 1)},
      // Sample-minor layers whose samples of x and y lie a multiple of 4 KiB apart (f32) and
      // whose filters are small: with AVX-512 (8-row strips), column strips in pairs over
      // half-strips of rows (an odd strip count leaves one single), filter rows as runs,
      // padding skipped, sums accumulated over taps (groups: one tap per line)
      {"8 samples, 1x1 64 -> 64 over 4x4", 8, 64, 4, 4, 64, 1, 1},
      {"8 samples, 1x1 32 -> 96 over 4x8", 8, 32, 4, 8, 96, 1, 1},
      {"8 samples, 3x2 8 -> 64 over 8x16", 8, 8, 8, 16, 64, 3, 2, pad(1, 1)},
      {"8 samples, 2x2 groups 2 of 16 -> 64 over 4x8", 8, 32, 4, 8, 128, 2, 2,
       conv2d_params{}.with_padding(1, 0, 1, 0).with_groups(2)},
      {"many rows", 2, 8, 17, 17, 16, 3, 3, pad(1, 1)},
  };
}

/// Fixed-seed random layers: any filter shape, stride, padding, dilation and grouping.
inline std::vector<conv_case> random_layers(std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto uniform = [&](index_t lo, index_t hi) {
    return std::uniform_int_distribution<index_t>(lo, hi)(rng);
  };
  std::vector<conv_case> cases;
  while (cases.size() < count) {
    conv_case cc;
    cc.name = "random " + std::to_string(cases.size());
    const index_t groups = uniform(0, 2) == 0 ? 1 : uniform(1, 6);
    const index_t cg = uniform(0, 3) == 0 ? 1 : uniform(1, 12);
    cc.c = groups * cg;
    cc.k = groups * uniform(1, 12);
    cc.n = uniform(1, 3);
    cc.r = uniform(1, 5);
    cc.s = uniform(1, 5);
    cc.params = conv2d_params{}
                    .with_padding(uniform(0, 2), uniform(0, 2), uniform(0, 2), uniform(0, 2))
                    .with_stride(uniform(1, 3), uniform(1, 3))
                    .with_dilation(uniform(1, 2), uniform(1, 2))
                    .with_groups(groups);
    const index_t eh = cc.params.dilation_h * (cc.r - 1) + 1;
    const index_t ew = cc.params.dilation_w * (cc.s - 1) + 1;
    cc.h = std::max<index_t>(1, eh - cc.params.pad_h_begin - cc.params.pad_h_end + uniform(0, 10));
    cc.w = std::max<index_t>(1, ew - cc.params.pad_w_begin - cc.params.pad_w_end + uniform(0, 10));
    cases.push_back(cc);
  }
  return cases;
}

}  // namespace gpubatch::test
