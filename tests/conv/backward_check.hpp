// The convolution backward test engine shared by every backward test TU and both backends:
// random inputs in logical (NCHW / KCRS) order stored in the layout under test, outputs
// poisoned (beta = 0) or random (beta != 0), and float64 references written from the
// definitions: backward data as the adjoint of the direct convolution (scatter of every
// dy * w product to the input it came from), backward filter and bias as direct sums.
#pragma once

#include "conv_check.hpp"

#include <gpubatch/conv_backward.hpp>

#include <cstring>
#include <stdexcept>
#include <string>

namespace gpubatch::test {

/// How a filter-gradient call is made.
enum class wgrad_form { summed, per_sample };

/// The float64 backward references, in logical order, before alpha and beta.
struct backward_reference {
  const conv_case& cc;

  template <class Body>
  void for_each_tap(Body&& body) const {  // body(n, k, c_global, c_in_group, p, q, r, s, h, w)
    const tensor4d_shape out = cc.y_shape();
    const conv2d_params& p = cc.params;
    const index_t cg = cc.c / p.groups, kg = cc.k / p.groups;
    for (index_t n = 0; n < cc.n; ++n)
      for (index_t k = 0; k < cc.k; ++k)
        for (index_t op = 0; op < out.h; ++op)
          for (index_t oq = 0; oq < out.w; ++oq)
            for (index_t c = 0; c < cg; ++c)
              for (index_t r = 0; r < cc.r; ++r) {
                const index_t ih = op * p.stride_h - p.pad_h_begin + r * p.dilation_h;
                if (ih < 0 || ih >= cc.h) continue;
                for (index_t s = 0; s < cc.s; ++s) {
                  const index_t iw = oq * p.stride_w - p.pad_w_begin + s * p.dilation_w;
                  if (iw < 0 || iw >= cc.w) continue;
                  body(n, k, (k / kg) * cg + c, c, op, oq, r, s, ih, iw);
                }
              }
  }

  /// dx from dy and filters (`sets` sets: set n for sample n when sets > 1).
  std::vector<double> dgrad(const std::vector<double>& dy, const std::vector<double>& w,
                            index_t sets) const {
    const tensor4d_shape out = cc.y_shape();
    const index_t cg = cc.c / cc.params.groups;
    std::vector<double> dx(static_cast<std::size_t>(cc.x_shape().size()), 0.0);
    for_each_tap([&](index_t n, index_t k, index_t cgl, index_t c, index_t op, index_t oq,
                     index_t r, index_t s, index_t ih, index_t iw) {
      const double* filters = w.data() + (sets > 1 ? n : 0) * cc.k * cg * cc.r * cc.s;
      dx[static_cast<std::size_t>(((n * cc.c + cgl) * cc.h + ih) * cc.w + iw)] +=
          dy[static_cast<std::size_t>(((n * cc.k + k) * out.h + op) * out.w + oq)] *
          filters[((k * cg + c) * cc.r + r) * cc.s + s];
    });
    return dx;
  }

  /// dw (one set, or one per sample) from x and dy.
  std::vector<double> wgrad(const std::vector<double>& x, const std::vector<double>& dy,
                            bool per_sample) const {
    const tensor4d_shape out = cc.y_shape();
    const index_t cg = cc.c / cc.params.groups;
    const index_t set = cc.k * cg * cc.r * cc.s;
    std::vector<double> dw(static_cast<std::size_t>(set * (per_sample ? cc.n : 1)), 0.0);
    for_each_tap([&](index_t n, index_t k, index_t cgl, index_t c, index_t op, index_t oq,
                     index_t r, index_t s, index_t ih, index_t iw) {
      dw[static_cast<std::size_t>((per_sample ? n : 0) * set + ((k * cg + c) * cc.r + r) * cc.s + s)] +=
          dy[static_cast<std::size_t>(((n * cc.k + k) * out.h + op) * out.w + oq)] *
          x[static_cast<std::size_t>(((n * cc.c + cgl) * cc.h + ih) * cc.w + iw)];
    });
    return dw;
  }

  /// db (one set, or one per sample) from dy.
  std::vector<double> bias(const std::vector<double>& dy, bool per_sample) const {
    const tensor4d_shape out = cc.y_shape();
    const index_t pq = out.h * out.w;
    std::vector<double> db(static_cast<std::size_t>(cc.k * (per_sample ? cc.n : 1)), 0.0);
    for (index_t n = 0; n < cc.n; ++n)
      for (index_t k = 0; k < cc.k; ++k)
        for (index_t e = 0; e < pq; ++e)
          db[static_cast<std::size_t>((per_sample ? n * cc.k : 0) + k)] +=
              dy[static_cast<std::size_t>((n * cc.k + k) * pq + e)];
    return db;
  }
};

template <class T>
std::vector<double> as_double(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = convert<double>(v[i]);
  return out;
}

/// Initial contents of an output: poison for beta = 0, else random values.
template <class TG, class TX>
std::vector<TG> initial_output(std::size_t count, double beta, std::uint64_t seed) {
  if (beta == 0.0) return std::vector<TG>(count, poison_value<TG>());
  const auto values = random_inputs<TX>(count, seed);
  std::vector<TG> out(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = convert<TG>(convert<double>(values[i]));
  return out;
}

inline std::uint64_t seed_of(const conv_case& cc) {
  return static_cast<std::uint64_t>(cc.n * 7919 + cc.c * 104729 + cc.h * 131 + cc.w * 17 +
                                    cc.k * 1000003 + cc.r * 3 + cc.s + 12345);
}

/// Backward data of one case on Backend; returns dx in logical order.
/// With `query_workspace`, the call gets the workspace conv2d_backward_data_workspace_size
/// reports for `options`.
template <class Backend, class T, class TG>
std::vector<double> check_dgrad(const conv_case& cc, tensor_layout order, filter_form form,
                                double alpha = 1.0, double beta = 0.0,
                                conv2d_backward_options options = {},
                                bool query_workspace = false) {
  INFO("dgrad " << describe(cc) << ", " << gpubatch::to_string(order) << ", " << to_string(form)
                << ", alpha " << alpha << ", beta " << beta << ", " << Backend::name);
  using compute = compute_type_t<T>;
  const auto exec = Backend::exec();
  const std::uint64_t seed = seed_of(cc);
  const index_t sets = form == filter_form::per_sample ? cc.n : 1;
  tensor4d_shape ws = cc.w_shape();
  ws.n *= sets;
  const tensor4d_shape ys = cc.y_shape(), xs = cc.x_shape();
  const auto dy = random_inputs<T>(static_cast<std::size_t>(ys.size()), seed);
  const auto w = random_inputs<T>(static_cast<std::size_t>(ws.size()), seed + 1);
  const auto dx0 = initial_output<TG, T>(static_cast<std::size_t>(xs.size()), beta, seed + 2);
  device_buffer<T> d_dy(dy.size(), exec), d_w(w.size(), exec);
  device_buffer<TG> d_dx(dx0.size(), exec);
  Backend::from_host(d_dy.data(), store_as(order, ys, dy));
  Backend::from_host(d_w.data(), store_as(order, ws, w));
  Backend::from_host(d_dx.data(), store_as(order, xs, dx0));
  const tensor4d_view<const T> vdy(d_dy.data(), ys.n, ys.c, ys.h, ys.w, order, Backend::space);
  const tensor4d_view<const T> vw(d_w.data(), ws.n, ws.c, ws.h, ws.w, order, Backend::space);
  const tensor4d_view<TG> vdx(d_dx.data(), xs.n, xs.c, xs.h, xs.w, order, Backend::space);
  device_buffer<std::byte> workspace(0, exec);
  if (query_workspace) {
    const std::size_t bytes = conv2d_backward_data_workspace_size(exec, cc.params, vdy, vw, vdx, options);
    workspace = device_buffer<std::byte>(bytes, exec);
    options.workspace = bytes > 0 ? workspace.data() : nullptr;
    options.workspace_bytes = bytes;
  }
  if (form == filter_form::shared) {
    conv2d_backward_data(exec, cc.params, static_cast<compute>(alpha), vdy, vw,
                         static_cast<compute>(beta), vdx, epilogue::identity{}, options);
  } else if (form == filter_form::packed) {
    // Prepared for both passes; then the original filters are overwritten: the object must
    // compute from its snapshot.
    const packed_conv2d_filters<T> packed(exec, cc.params, vw,
                                          filter_passes::forward_and_backward_data);
    Backend::from_host(d_w.data(), random_inputs<T>(w.size(), seed + 3));
    conv2d_backward_data(exec, cc.params, static_cast<compute>(alpha), vdy, packed,
                         static_cast<compute>(beta), vdx, epilogue::identity{}, options);
  } else {
    conv2d_backward_data_per_sample(exec, cc.params, static_cast<compute>(alpha), vdy, vw,
                                    static_cast<compute>(beta), vdx, epilogue::identity{},
                                    options);
  }
  const auto got = load_from(order, xs, Backend::to_host(d_dx.data(), dx0.size()));
  std::vector<double> expected = backward_reference{cc}.dgrad(as_double(dy), as_double(w), sets);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    expected[i] = alpha * expected[i] + (beta != 0.0 ? beta * convert<double>(dx0[i]) : 0.0);
  }
  compare(got, expected, output_tolerance<TG>(), xs);
  return got;
}

/// Backward filter of one case on Backend; returns dw in logical order (N sets per sample).
template <class Backend, class T, class TG, class Policy = void>
std::vector<double> check_wgrad(const conv_case& cc, tensor_layout order, wgrad_form form,
                                double alpha = 1.0, double beta = 0.0,
                                conv2d_backward_options options = {},
                                bool query_workspace = false) {
  INFO("wgrad " << describe(cc) << ", " << gpubatch::to_string(order) << ", "
                << (form == wgrad_form::summed ? "summed" : "per sample") << ", alpha " << alpha
                << ", beta " << beta << ", deterministic " << options.deterministic << ", "
                << Backend::name);
  using compute = compute_type_t<T>;
  const auto exec = Backend::exec();
  const std::uint64_t seed = seed_of(cc);
  const bool per_sample = form == wgrad_form::per_sample;
  tensor4d_shape ws = cc.w_shape();
  ws.n *= per_sample ? cc.n : 1;
  const tensor4d_shape ys = cc.y_shape(), xs = cc.x_shape();
  const auto x = random_inputs<T>(static_cast<std::size_t>(xs.size()), seed + 3);
  const auto dy = random_inputs<T>(static_cast<std::size_t>(ys.size()), seed + 4);
  const auto dw0 = initial_output<TG, T>(static_cast<std::size_t>(ws.size()), beta, seed + 5);
  device_buffer<T> d_x(x.size(), exec), d_dy(dy.size(), exec);
  device_buffer<TG> d_dw(dw0.size(), exec);
  Backend::from_host(d_x.data(), store_as(order, xs, x));
  Backend::from_host(d_dy.data(), store_as(order, ys, dy));
  Backend::from_host(d_dw.data(), store_as(order, ws, dw0));
  const tensor4d_view<const T> vx(d_x.data(), xs.n, xs.c, xs.h, xs.w, order, Backend::space);
  const tensor4d_view<const T> vdy(d_dy.data(), ys.n, ys.c, ys.h, ys.w, order, Backend::space);
  const tensor4d_view<TG> vdw(d_dw.data(), ws.n, ws.c, ws.h, ws.w, order, Backend::space);
  device_buffer<std::byte> workspace(0, exec);
  if (query_workspace) {
    const std::size_t bytes =
        conv2d_backward_filter_workspace_size<Policy>(exec, cc.params, vx, vdy, vdw, options);
    workspace = device_buffer<std::byte>(bytes, exec);
    options.workspace = bytes > 0 ? workspace.data() : nullptr;
    options.workspace_bytes = bytes;
  }
  if (per_sample) {
    conv2d_backward_filter_per_sample<Policy>(exec, cc.params, static_cast<compute>(alpha), vx,
                                              vdy, static_cast<compute>(beta), vdw, options);
  } else {
    conv2d_backward_filter<Policy>(exec, cc.params, static_cast<compute>(alpha), vx, vdy,
                                   static_cast<compute>(beta), vdw, options);
  }
  const auto got = load_from(order, ws, Backend::to_host(d_dw.data(), dw0.size()));
  std::vector<double> expected = backward_reference{cc}.wgrad(as_double(x), as_double(dy), per_sample);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    expected[i] = alpha * expected[i] + (beta != 0.0 ? beta * convert<double>(dw0[i]) : 0.0);
  }
  compare(got, expected, output_tolerance<TG>(), ws);
  return got;
}

/// Bias gradient (summed or per sample) of one case on Backend.
template <class Backend, class T, class TG>
void check_bias(const conv_case& cc, tensor_layout order, bool per_sample, double alpha,
                double beta) {
  INFO("bias " << describe(cc) << ", " << gpubatch::to_string(order) << ", per sample "
               << per_sample << ", " << Backend::name);
  using compute = compute_type_t<T>;
  const auto exec = Backend::exec();
  const tensor4d_shape ys = cc.y_shape();
  const auto dy = random_inputs<T>(static_cast<std::size_t>(ys.size()), seed_of(cc) + 6);
  const index_t count = cc.k * (per_sample ? cc.n : 1);
  const auto db0 = initial_output<TG, T>(static_cast<std::size_t>(count), beta, seed_of(cc) + 7);
  device_buffer<T> d_dy(dy.size(), exec);
  device_buffer<TG> d_db(db0.size(), exec);
  Backend::from_host(d_dy.data(), store_as(order, ys, dy));
  Backend::from_host(d_db.data(), db0);
  const tensor4d_view<const T> vdy(d_dy.data(), ys.n, ys.c, ys.h, ys.w, order, Backend::space);
  if (per_sample) {
    conv2d_backward_bias_per_sample(exec, static_cast<compute>(alpha), vdy,
                                    static_cast<compute>(beta), d_db.data());
  } else {
    conv2d_backward_bias(exec, static_cast<compute>(alpha), vdy, static_cast<compute>(beta),
                         d_db.data());
  }
  const auto got = as_double(Backend::to_host(d_db.data(), db0.size()));
  std::vector<double> expected = backward_reference{cc}.bias(as_double(dy), per_sample);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    expected[i] = alpha * expected[i] + (beta != 0.0 ? beta * convert<double>(db0[i]) : 0.0);
  }
  compare(got, expected, output_tolerance<TG>(), {1, count, 1, 1});
}

/// Per-sample squared norms against the reference gradients, with a workspace of
/// `samples_per_round` samples.
template <class Backend, class T>
void check_norms(const conv_case& cc, tensor_layout order, index_t samples_per_round) {
  INFO("norms " << describe(cc) << ", " << gpubatch::to_string(order) << ", "
                << samples_per_round << " per round, " << Backend::name);
  using compute = compute_type_t<T>;
  const auto exec = Backend::exec();
  const tensor4d_shape ys = cc.y_shape(), xs = cc.x_shape();
  const auto x = random_inputs<T>(static_cast<std::size_t>(xs.size()), seed_of(cc) + 3);
  const auto dy = random_inputs<T>(static_cast<std::size_t>(ys.size()), seed_of(cc) + 4);
  device_buffer<T> d_x(x.size(), exec), d_dy(dy.size(), exec);
  device_buffer<compute> d_norms(static_cast<std::size_t>(cc.n), exec);
  Backend::from_host(d_x.data(), store_as(order, xs, x));
  Backend::from_host(d_dy.data(), store_as(order, ys, dy));
  Backend::from_host(d_norms.data(), std::vector<compute>(static_cast<std::size_t>(cc.n),
                                                          poison_value<compute>()));
  const std::size_t bytes =
      conv2d_backward_filter_norms_workspace_size<T>(cc.w_shape(), samples_per_round);
  device_buffer<std::byte> workspace(bytes, exec);
  conv2d_backward_options options;
  options.workspace = workspace.data();
  options.workspace_bytes = bytes;
  const tensor4d_view<const T> vx(d_x.data(), xs.n, xs.c, xs.h, xs.w, order, Backend::space);
  const tensor4d_view<const T> vdy(d_dy.data(), ys.n, ys.c, ys.h, ys.w, order, Backend::space);
  conv2d_backward_filter_per_sample_norms(exec, cc.params, vx, cc.w_shape(), vdy, d_norms.data(),
                                          options);
  const auto got = as_double(Backend::to_host(d_norms.data(), static_cast<std::size_t>(cc.n)));
  const auto dw = backward_reference{cc}.wgrad(as_double(x), as_double(dy), true);
  const index_t set = cc.w_shape().size();
  std::vector<double> expected(static_cast<std::size_t>(cc.n), 0.0);
  for (index_t n = 0; n < cc.n; ++n)
    for (index_t e = 0; e < set; ++e) {
      const double v = dw[static_cast<std::size_t>(n * set + e)];
      expected[static_cast<std::size_t>(n)] += v * v;
    }
  compare(got, expected, 2 * output_tolerance<compute>(), {cc.n, 1, 1, 1});
}

/// Layers for the backward passes: every parameter, edge sizes, groups and depthwise, sized
/// for the emulated device.
inline std::vector<conv_case> backward_layers() {
  return {
      {"3x3 pad 1", 2, 3, 7, 7, 5, 3, 3, pad(1, 1)},
      {"edge sizes 1, 3, 17", 3, 17, 5, 6, 17, 3, 3, pad(1, 1)},
      {"1x1", 2, 33, 4, 3, 1, 1, 1},
      {"stride 2, asymmetric padding, 3x2", 2, 6, 12, 11, 10, 3, 2,
       conv2d_params{}.with_padding(2, 0, 1, 3).with_stride(2, 3)},
      {"dilation 3x2, stride 1x2, 2x4", 2, 5, 14, 15, 7, 2, 4,
       conv2d_params{}.with_padding(1, 2, 0, 1).with_stride(1, 2).with_dilation(3, 2)},
      {"7x7 stride 2 pad 3 (stem)", 1, 3, 15, 15, 16, 7, 7, pad(3, 3).with_stride(2, 2)},
      {"groups 2", 2, 8, 7, 9, 12, 3, 3, pad(0, 1).with_groups(2)},
      {"depthwise, multiplier 2, stride 2", 2, 6, 9, 8, 12, 3, 3,
       pad(1, 1).with_stride(2, 2).with_groups(6)},
      {"filter as large as the padded input", 2, 4, 4, 4, 6, 5, 5,
       conv2d_params{}.with_padding(1, 0, 1, 0)},
      {"1x1 input", 3, 8, 1, 1, 5, 1, 1},
      {"depthwise 5x5, stride 2, asymmetric padding", 1, 4, 9, 8, 4, 5, 5,
       conv2d_params{}.with_padding(2, 1, 1, 2).with_stride(2, 2).with_groups(4)},
      {"depthwise 7x7", 2, 3, 9, 9, 3, 7, 7, pad(3, 3).with_groups(3)},
      {"1x1 bottleneck, 16 -> 24, groups 2", 2, 16, 5, 7, 24, 1, 1, conv2d_params{}.with_groups(2)},
      {"3x3 stride 2, 24 -> 20", 2, 24, 9, 10, 20, 3, 3, pad(1, 1).with_stride(2, 2)},
      {"asymmetric padding, dilation 2x1, groups 2, 12 -> 10", 2, 12, 9, 11, 10, 3, 3,
       conv2d_params{}.with_padding(3, 1, 0, 2).with_dilation(2, 1).with_groups(2)},
      {"padding beyond the taps' reach, 9 -> 7", 1, 9, 6, 7, 7, 2, 3,
       conv2d_params{}.with_padding(0, 2, 1, 3)},
      {"depthwise 3x3, 35 channels, dilation 2", 2, 35, 10, 13, 35, 3, 3,
       pad(2, 2).with_dilation(2, 2).with_groups(35)},
      {"depthwise 5x5, stride 2, 20 channels", 1, 20, 11, 14, 20, 5, 5,
       pad(2, 1).with_stride(2, 2).with_groups(20)},
      {"depthwise 4x2, 17 channels", 2, 17, 8, 12, 17, 4, 2,
       conv2d_params{}.with_padding(2, 1, 1, 0).with_groups(17)},
      // 3x3 depthwise at stride 1 and 2 with whole blocks of 16 channels and a partial one:
      // the host's register-window filter gradient and 7-column forward tiles (backward data)
      {"depthwise 3x3, 33 channels, 10 wide", 2, 33, 6, 10, 33, 3, 3, pad(1, 1).with_groups(33)},
      {"depthwise 3x3, stride 2, 32 channels, 15 wide", 1, 32, 7, 15, 32, 3, 3,
       pad(1, 1).with_stride(2, 2).with_groups(32)},
      // Stride-1 depthwise with whole channel vectors (8 x 16 bytes of f16, 4 of f32): CUDA's
      // backward data as the tiled forward kernel over dy, filters turned, a vector per thread
      {"depthwise 3x3, 64 channels, 9 wide, asymmetric padding", 2, 64, 6, 9, 64, 3, 3,
       conv2d_params{}.with_padding(1, 0, 2, 1).with_groups(64)},
      // Strided layers with 16 or more output channels per group: stride phases that run as
      // forward convolutions of dy (8 samples: whole sample-minor strips), with phases that
      // have no taps (dilation 2 at stride 2) or whose padding would be negative (bottom padding
      // beyond what a phase reaches) on the phase GEMM beside them.
      {"3x3 stride 2, 8 samples, 24 -> 16", 8, 24, 9, 10, 16, 3, 3, pad(1, 1).with_stride(2, 2)},
      {"5x4 stride 3x2, groups 2, 20 -> 32", 2, 20, 13, 11, 32, 5, 4,
       conv2d_params{}.with_padding(3, 1, 2, 2).with_stride(3, 2).with_groups(2)},
      {"3x3 stride 2, dilation 2, 12 -> 17", 2, 12, 11, 9, 17, 3, 3,
       pad(2, 2).with_stride(2, 2).with_dilation(2, 2)},
      {"3x2 stride 2, bottom padding 2, 7 -> 20", 3, 7, 8, 9, 20, 3, 2,
       conv2d_params{}.with_padding(1, 2, 0, 1).with_stride(2, 2)},
      // A strided 1 x 1 layer (a bottleneck's projection): three of its four stride phases meet
      // no tap, so their dx is beta * dx alone.
      {"1x1 stride 2, 16 -> 24", 2, 16, 7, 8, 24, 1, 1, conv2d_params{}.with_stride(2, 2)},
      // Channels in multiples of 16 on both sides: with packed filters CUDA runs backward data
      // as a forward convolution of dy, on the tensor cores with asynchronous copies (f16, bf16).
      {"3x3 pad 1, 16 -> 32", 2, 16, 6, 7, 32, 3, 3, pad(1, 1)},
  };
}

/// The layer of backward_layers() with this name.
inline conv_case backward_layer(const std::string& name) {
  for (const conv_case& cc : backward_layers()) {
    if (cc.name == name) return cc;
  }
  throw std::invalid_argument("no backward test layer named " + name);
}

/// A layer whose filter-gradient reduction (N * P * Q = 2312) spans two deterministic chunks.
inline conv_case long_reduction_layer() {
  return {"long reduction", 8, 4, 17, 17, 6, 3, 3, pad(1, 1)};
}

}  // namespace gpubatch::test
