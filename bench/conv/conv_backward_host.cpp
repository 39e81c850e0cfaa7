// Host convolution backward: gpubatch's host backend against oneDNN's backward primitives and
// against im2col + OpenBLAS sgemm, on the same layers and data (ResNet-50 layers and two
// MobileNetV2 depthwise layers at batch 8, f32, NHWC); and per-sample filter gradients against
// a loop of single-sample calls and against unfold + GEMM (the Opacus formulation).
//
//   conv2d_backward_data_f32_nhwc.host    dx from dy and w
//       gpubatch         conv2d_backward_data(on_host)
//       onednn           convolution_backward_data, weights reordered to its format untimed
//       openblas_col2im  per sample and group: sgemm dcols (PQ x RSC/g) = dy_g * W_g, then
//                        col2im scatter-adds dcols into dx
//   conv2d_backward_data_f32_nhwc_packed_filters.host
//       gpubatch         conv2d_backward_data(on_host) with gpubatch::packed_conv2d_filters
//                        made for filter_passes::backward_data outside the timing
//       onednn           as above
//   conv2d_backward_filter_f32_nhwc.host  dw from x and dy, summed over the batch
//       gpubatch         conv2d_backward_filter(on_host)
//       onednn           convolution_backward_weights (the reorder of its result untimed)
//       openblas_im2col  per sample and group: im2col, then sgemm dW_g += dy_g^T * cols
//   conv2d_backward_filter_per_sample_f32_nhwc.host  N gradients, small layers at batch 32
//       gpubatch         conv2d_backward_filter_per_sample(on_host), one call
//       gpubatch_loop    N calls of conv2d_backward_filter on one sample each
//       gpubatch_norms   conv2d_backward_filter_per_sample_norms (squared norms only)
//       openblas_unfold  unfold the whole batch (N x PQ x RSC, as torch.nn.functional.unfold),
//                        then one sgemm per sample
//     Each reports "extra_bytes": memory beyond inputs and outputs (the unfolded batch, the
//     norms form's workspace of one gradient; the per-sample forms store N gradients).
//
// The baselines run across every core (oneDNN's and OpenBLAS's threads, OpenMP for the
// im2col/col2im loops), as gpubatch does. Without oneDNN or OpenBLAS their baselines are not
// built (GPUBATCH_BENCH_ONEDNN / GPUBATCH_BENCH_OPENBLAS). oneDNN's benchmarks also report
// "paired_ratio": gpubatch's call and oneDNN's, back to back on the same data
// (gpubatch::bench::set_paired_ratio).
#include "conv/layers.hpp"
#include "support/harness.hpp"

#include <gpubatch/conv_backward.hpp>
#include <gpubatch/conv_filters.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#if GPUBATCH_BENCH_OPENBLAS
#include "support/openblas.hpp"

#include <cblas.h>
#endif
#if GPUBATCH_BENCH_ONEDNN
#include <dnnl.hpp>
#endif

namespace {

namespace bench = gpubatch::bench;
using bench::conv_layer;
using gpubatch::index_t;
using gpubatch::tensor4d_shape;

/// What this executable's host kernels were compiled for (-march=native here), in the JSON
/// context.
const bool host_isa_described = bench::detail::describe_host_vector_isa();

constexpr auto nhwc = gpubatch::tensor_layout::nhwc;

constexpr index_t batch = 8;
constexpr index_t per_sample_batch = 32;

/// ResNet-50 layers of every kind (stem, 1x1, 3x3, strided) and two depthwise layers.
const std::vector<conv_layer>& backward_layers() {
  static const std::vector<conv_layer> layers = [] {
    const auto& r = bench::resnet50_layers();
    const auto& d = bench::mobilenetv2_depthwise_layers();
    return std::vector<conv_layer>{r[0], r[1], r[2], r[4], r[5], r[8], r[11], d[2], d[6]};
  }();
  return layers;
}

const std::vector<conv_layer>& per_sample_layers() { return bench::per_sample_gradient_layers(); }

/// The same pseudo-random inputs for every implementation: x, w and dy.
struct layer_data {
  const conv_layer& layer;
  index_t n;
  tensor4d_shape xs, ws, ys;
  std::vector<float> x, w, dy, out;

  layer_data(const conv_layer& l, index_t samples)
      : layer(l), n(samples), xs(l.x_shape(samples)), ws(l.w_shape()), ys(l.y_shape(samples)) {
    x.resize(static_cast<std::size_t>(xs.size()));
    w.resize(static_cast<std::size_t>(ws.size()));
    dy.resize(static_cast<std::size_t>(ys.size()));
    unsigned state = 12345u;
    const auto next = [&state] {
      state = state * 1664525u + 1013904223u;
      return static_cast<float>(state >> 8) / 16777216.0F - 0.5F;
    };
    for (float& v : x) v = next();
    for (float& v : w) v = next();
    for (float& v : dy) v = next();
  }
  gpubatch::tensor4d_view<const float> x_view() const { return {x.data(), xs.n, xs.c, xs.h, xs.w, nhwc}; }
  gpubatch::tensor4d_view<const float> w_view() const { return {w.data(), ws.n, ws.c, ws.h, ws.w, nhwc}; }
  gpubatch::tensor4d_view<const float> dy_view() const { return {dy.data(), ys.n, ys.c, ys.h, ys.w, nhwc}; }
};

enum class pass { data, filter };

void finish(benchmark::State& state, const layer_data& d, double extra_bytes = -1) {
  state.SetLabel(d.layer.name);
  // Both passes do the forward pass's multiply-adds and move the same three tensors.
  bench::set_rates(state, d.layer.flops(d.n), d.layer.bytes(d.n, sizeof(float)));
  if (extra_bytes >= 0) state.counters["extra_bytes"] = extra_bytes;
}

template <class Run>
void time_host(benchmark::State& state, float* written, Run&& run) {
  run();  // warm-up: scratch buffers, first touch of the output
  for (auto _ : state) {
    run();
    benchmark::DoNotOptimize(written);
    benchmark::ClobberMemory();
  }
}

/// One gpubatch call of the pass on d's inputs, writing `out` (sized by the caller: dx or dw);
/// with `packed_filters`, backward data from filters prepared here, before any call is timed.
auto gpubatch_pass(const layer_data& d, pass which, float* out, bool packed_filters = false) {
  std::shared_ptr<const gpubatch::packed_conv2d_filters<float>> packed;
  if (packed_filters) {
    packed = std::make_shared<const gpubatch::packed_conv2d_filters<float>>(
        gpubatch::on_host, d.layer.params, d.w_view(), gpubatch::filter_passes::backward_data);
  }
  return [&d, which, out, packed] {
    const auto& p = d.layer.params;
    if (which == pass::data) {
      const gpubatch::tensor4d_view<float> dx(out, d.xs.n, d.xs.c, d.xs.h, d.xs.w, nhwc);
      if (packed) {
        gpubatch::conv2d_backward_data(gpubatch::on_host, p, 1.0F, d.dy_view(), *packed, 0.0F, dx);
      } else {
        gpubatch::conv2d_backward_data(gpubatch::on_host, p, 1.0F, d.dy_view(), d.w_view(), 0.0F,
                                       dx);
      }
    } else {
      const gpubatch::tensor4d_view<float> dw(out, d.ws.n, d.ws.c, d.ws.h, d.ws.w, nhwc);
      gpubatch::conv2d_backward_filter(gpubatch::on_host, p, 1.0F, d.x_view(), d.dy_view(), 0.0F, dw);
    }
  };
}

void backward_gpubatch(benchmark::State& state, pass which, bool packed_filters) {
  bench::run_host_benchmark(state, [&] {
    layer_data d(backward_layers()[static_cast<std::size_t>(state.range(0))], batch);
    d.out.resize(which == pass::data ? d.x.size() : d.w.size());
    time_host(state, d.out.data(), gpubatch_pass(d, which, d.out.data(), packed_filters));
    finish(state, d);
  });
}

#if GPUBATCH_BENCH_OPENBLAS
/// im2col of sample n, group g, NHWC: cols[p * Q + q][(r * S + s) * C/g + c], the KRSC order.
void im2col(const layer_data& d, index_t n, index_t g, float* cols) {
  const conv_layer& l = d.layer;
  const gpubatch::conv2d_params& p = l.params;
  const index_t cg = d.ws.c, out_w = d.ys.w, pixels = d.ys.h * out_w, gemm_k = cg * l.r * l.s;
  const float* const x = d.x.data() + n * l.h * l.w * l.c + g * cg;
  GPUBATCH_OMP_PARALLEL_FOR
  for (std::ptrdiff_t pq = 0; pq < static_cast<std::ptrdiff_t>(pixels); ++pq) {
    const index_t op = pq / out_w, oq = pq % out_w;
    float* out = cols + pq * gemm_k;
    for (index_t r = 0; r < l.r; ++r) {
      const index_t ih = op * p.stride_h - p.pad_h_begin + r * p.dilation_h;
      for (index_t s = 0; s < l.s; ++s, out += cg) {
        const index_t iw = oq * p.stride_w - p.pad_w_begin + s * p.dilation_w;
        if (ih >= 0 && ih < l.h && iw >= 0 && iw < l.w) {
          std::copy(x + (ih * l.w + iw) * l.c, x + (ih * l.w + iw) * l.c + cg, out);
        } else {
          std::fill(out, out + cg, 0.0F);
        }
      }
    }
  }
}

/// col2im of sample n, group g: adds every dcols entry to the input element it came from.
/// Parallel over input rows, each gathering the output pixels that touch it, so no two threads
/// add to one element.
void col2im(const layer_data& d, index_t n, index_t g, const float* dcols, float* dx) {
  const conv_layer& l = d.layer;
  const gpubatch::conv2d_params& p = l.params;
  const index_t cg = d.ws.c, out_h = d.ys.h, out_w = d.ys.w, gemm_k = cg * l.r * l.s;
  float* const base = dx + n * l.h * l.w * l.c + g * cg;
  GPUBATCH_OMP_PARALLEL_FOR
  for (std::ptrdiff_t ih = 0; ih < static_cast<std::ptrdiff_t>(l.h); ++ih) {
    for (index_t r = 0; r < l.r; ++r) {
      const index_t th = ih + p.pad_h_begin - r * p.dilation_h;
      if (th < 0 || th % p.stride_h != 0 || th / p.stride_h >= out_h) continue;
      const index_t op = th / p.stride_h;
      for (index_t oq = 0; oq < out_w; ++oq) {
        const float* src = dcols + (op * out_w + oq) * gemm_k + r * l.s * cg;
        for (index_t s = 0; s < l.s; ++s, src += cg) {
          const index_t iw = oq * p.stride_w - p.pad_w_begin + s * p.dilation_w;
          if (iw < 0 || iw >= l.w) continue;
          float* const dst = base + (ih * l.w + iw) * l.c;
          for (index_t c = 0; c < cg; ++c) dst[c] += src[c];
        }
      }
    }
  }
}

void backward_openblas(benchmark::State& state, pass which) {
  bench::run_host_benchmark(state, [&] {
    layer_data d(backward_layers()[static_cast<std::size_t>(state.range(0))], batch);
    const conv_layer& l = d.layer;
    const index_t groups = l.params.groups, cg = d.ws.c, kg = l.k / groups;
    const index_t pixels = d.ys.h * d.ys.w, gemm_k = cg * l.r * l.s;
    std::vector<float> cols(static_cast<std::size_t>(gemm_k * pixels));
    d.out.resize(which == pass::data ? d.x.size() : d.w.size());
    const auto run = [&] {
      if (which == pass::data) std::fill(d.out.begin(), d.out.end(), 0.0F);
      for (index_t n = 0; n < batch; ++n) {
        for (index_t g = 0; g < groups; ++g) {
          const float* const dyg = d.dy.data() + n * pixels * l.k + g * kg;  // PQ x K/g, ld K
          if (which == pass::data) {  // dcols (PQ x RSC/g) = dy_g * W_g
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(pixels),
                        static_cast<int>(gemm_k), static_cast<int>(kg), 1.0F, dyg,
                        static_cast<int>(l.k), d.w.data() + g * kg * gemm_k,
                        static_cast<int>(gemm_k), 0.0F, cols.data(), static_cast<int>(gemm_k));
            col2im(d, n, g, cols.data(), d.out.data());
          } else {  // dW_g (K/g x RSC/g) += dy_g^T * cols
            im2col(d, n, g, cols.data());
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(kg),
                        static_cast<int>(gemm_k), static_cast<int>(pixels), 1.0F, dyg,
                        static_cast<int>(l.k), cols.data(), static_cast<int>(gemm_k),
                        n == 0 ? 0.0F : 1.0F, d.out.data() + g * kg * gemm_k,
                        static_cast<int>(gemm_k));
          }
        }
      }
    };
    time_host(state, d.out.data(), run);
    finish(state, d);
  });
}
#endif

#if GPUBATCH_BENCH_ONEDNN
/// A oneDNN backward primitive for one layer, its operands in NHWC / KRSC where the caller
/// sees them and the weights in whatever format oneDNN picks (reordered outside the timing).
struct onednn_layer {
  using tag = dnnl::memory::format_tag;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::memory::desc src, weights_any, dst;
  dnnl::memory::dims strides, dilates, pad_l, pad_r;
  dnnl::convolution_forward::primitive_desc forward;
  tag user_weights;

  explicit onednn_layer(const layer_data& d) {
    const conv_layer& l = d.layer;
    const auto& p = l.params;
    using dt = dnnl::memory::data_type;
    const index_t g = p.groups;
    const dnnl::memory::dims weight_dims =
        g > 1 ? dnnl::memory::dims{g, l.k / g, d.ws.c, l.r, l.s}
              : dnnl::memory::dims{l.k, d.ws.c, l.r, l.s};
    user_weights = g > 1 ? tag::gohwi : tag::ohwi;
    src = {{d.xs.n, d.xs.c, d.xs.h, d.xs.w}, dt::f32, tag::nhwc};
    dst = {{d.ys.n, d.ys.c, d.ys.h, d.ys.w}, dt::f32, tag::nhwc};
    weights_any = {weight_dims, dt::f32, tag::any};
    strides = {p.stride_h, p.stride_w};
    dilates = {p.dilation_h - 1, p.dilation_w - 1};  // oneDNN counts the gaps
    pad_l = {p.pad_h_begin, p.pad_w_begin};
    pad_r = {p.pad_h_end, p.pad_w_end};
    forward = dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                        dnnl::algorithm::convolution_direct, src, weights_any,
                                        dst, strides, dilates, pad_l, pad_r),
        engine);
  }
  dnnl::memory user_weight_memory(float* data) const {
    return dnnl::memory({weights_any.dims(), dnnl::memory::data_type::f32, user_weights}, engine,
                        data);
  }
};

/// `packed_filters`: pairs oneDNN's call with gpubatch's from packed filters.
void backward_onednn(benchmark::State& state, pass which, bool packed_filters) {
  bench::run_host_benchmark(state, [&] {
    layer_data d(backward_layers()[static_cast<std::size_t>(state.range(0))], batch);
    onednn_layer o(d);
    dnnl::memory src(o.src, o.engine, d.x.data());
    dnnl::memory diff_dst(o.dst, o.engine, d.dy.data());
    std::function<void()> run;  // one call of the pass's primitive
    if (which == pass::data) {
      d.out.resize(d.x.size());
      const dnnl::convolution_backward_data::primitive_desc pd(
          dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, o.src,
                                                o.weights_any, o.dst, o.strides, o.dilates,
                                                o.pad_l, o.pad_r),
          o.engine, o.forward);
      dnnl::memory user_w = o.user_weight_memory(d.w.data());
      dnnl::memory weights(pd.weights_desc(), o.engine);
      dnnl::reorder(user_w, weights).execute(o.stream, user_w, weights);
      dnnl::memory diff_src(o.src, o.engine, d.out.data());
      const dnnl::convolution_backward_data prim(pd);
      // Handles by value: the paired phase calls it after this block.
      run = [&o, prim, diff_dst, weights, diff_src] {
        prim.execute(o.stream, {{DNNL_ARG_DIFF_DST, diff_dst},
                                {DNNL_ARG_WEIGHTS, weights},
                                {DNNL_ARG_DIFF_SRC, diff_src}});
        o.stream.wait();
      };
      time_host(state, d.out.data(), run);
    } else {
      d.out.resize(d.w.size());
      const dnnl::convolution_backward_weights::primitive_desc pd(
          dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, o.src,
                                                   o.weights_any, o.dst, o.strides, o.dilates,
                                                   o.pad_l, o.pad_r),
          o.engine, o.forward);
      dnnl::memory diff_weights(pd.diff_weights_desc(), o.engine);
      const dnnl::convolution_backward_weights prim(pd);
      run = [&o, prim, src, diff_dst, diff_weights] {
        prim.execute(o.stream, {{DNNL_ARG_SRC, src},
                                {DNNL_ARG_DIFF_DST, diff_dst},
                                {DNNL_ARG_DIFF_WEIGHTS, diff_weights}});
        o.stream.wait();
      };
      time_host(state, d.out.data(), run);
      dnnl::memory user_dw = o.user_weight_memory(d.out.data());
      dnnl::reorder(diff_weights, user_dw).execute(o.stream, diff_weights, user_dw);
      o.stream.wait();
    }
    finish(state, d);
    // gpubatch's call as its benchmark times it, in pairs with oneDNN's (set_paired_ratio), into
    // an output of its own so that oneDNN's result stays as it left it.
    std::vector<float> gpubatch_out(d.out.size());
    const auto gpubatch_call = gpubatch_pass(d, which, gpubatch_out.data(), packed_filters);
    gpubatch_call();  // its scratch buffers, before the first pair
    bench::set_paired_ratio(state, gpubatch_call, run);
  });
}
#endif

// ---------------------------------------------------------------------------------------------
// Per-sample filter gradients.

enum class per_sample_impl { one_call, loop, norms, unfold };

void per_sample(benchmark::State& state, per_sample_impl impl) {
  bench::run_host_benchmark(state, [&] {
    layer_data d(per_sample_layers()[static_cast<std::size_t>(state.range(0))], per_sample_batch);
    const auto& p = d.layer.params;
    const index_t set = d.ws.size();
    const index_t n = d.n;
    double extra = 0;
    if (impl == per_sample_impl::one_call) {
      d.out.resize(static_cast<std::size_t>(set * n));
      const gpubatch::tensor4d_view<float> dw(d.out.data(), n * d.ws.n, d.ws.c, d.ws.h, d.ws.w, nhwc);
      time_host(state, d.out.data(), [&] {
        gpubatch::conv2d_backward_filter_per_sample(gpubatch::on_host, p, 1.0F, d.x_view(),
                                                    d.dy_view(), 0.0F, dw);
      });
    } else if (impl == per_sample_impl::loop) {
      d.out.resize(static_cast<std::size_t>(set * n));
      const index_t x_per = d.xs.size() / n, y_per = d.ys.size() / n;
      time_host(state, d.out.data(), [&] {
        for (index_t i = 0; i < n; ++i) {
          const gpubatch::tensor4d_view<const float> x(d.x.data() + i * x_per, 1, d.xs.c, d.xs.h, d.xs.w, nhwc);
          const gpubatch::tensor4d_view<const float> dy(d.dy.data() + i * y_per, 1, d.ys.c, d.ys.h, d.ys.w, nhwc);
          const gpubatch::tensor4d_view<float> dw(d.out.data() + i * set, d.ws.n, d.ws.c, d.ws.h, d.ws.w, nhwc);
          gpubatch::conv2d_backward_filter(gpubatch::on_host, p, 1.0F, x, dy, 0.0F, dw);
        }
      });
    } else if (impl == per_sample_impl::norms) {
      d.out.resize(static_cast<std::size_t>(n));
      const std::size_t bytes = gpubatch::conv2d_backward_filter_norms_workspace_size<float>(d.ws, 1);
      std::vector<float> workspace(bytes / sizeof(float));
      gpubatch::conv2d_backward_options options;
      options.workspace = workspace.data();
      options.workspace_bytes = bytes;
      extra = static_cast<double>(bytes);
      time_host(state, d.out.data(), [&] {
        gpubatch::conv2d_backward_filter_per_sample_norms(gpubatch::on_host, p, d.x_view(), d.ws,
                                                          d.dy_view(), d.out.data(), options);
      });
    } else {
#if GPUBATCH_BENCH_OPENBLAS
      d.out.resize(static_cast<std::size_t>(set * n));
      const index_t pixels = d.ys.h * d.ys.w, gemm_k = set / d.layer.k;
      std::vector<float> unfolded(static_cast<std::size_t>(n * pixels * gemm_k));
      extra = static_cast<double>(unfolded.size() * sizeof(float));
      time_host(state, d.out.data(), [&] {
        for (index_t i = 0; i < n; ++i) im2col(d, i, 0, unfolded.data() + i * pixels * gemm_k);
        for (index_t i = 0; i < n; ++i) {  // dW_i (K x RSC) = dy_i^T * cols_i
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(d.layer.k),
                      static_cast<int>(gemm_k), static_cast<int>(pixels), 1.0F,
                      d.dy.data() + i * pixels * d.layer.k, static_cast<int>(d.layer.k),
                      unfolded.data() + i * pixels * gemm_k, static_cast<int>(gemm_k), 0.0F,
                      d.out.data() + i * set, static_cast<int>(gemm_k));
        }
      });
#endif
    }
    finish(state, d, extra);
  });
}

void register_all() {
  const auto add = [](const std::string& group, const std::string& impl,
                      const std::vector<conv_layer>& layers, auto body) {
    auto* b = benchmark::RegisterBenchmark(bench::name(group, impl).c_str(), body);
    b->ArgName("layer")->UseRealTime()->Unit(benchmark::kMillisecond);
    bench::layer_args(b, layers);
  };
  const struct {
    const char* group;
    pass which;
    bool packed_filters;
  } passes[] = {{"conv2d_backward_data_f32_nhwc.host", pass::data, false},
                {"conv2d_backward_data_f32_nhwc_packed_filters.host", pass::data, true},
                {"conv2d_backward_filter_f32_nhwc.host", pass::filter, false}};
  for (const auto& g : passes) {
    const pass which = g.which;
    const bool packed = g.packed_filters;
    add(g.group, bench::subject, backward_layers(),
        [which, packed](benchmark::State& s) { backward_gpubatch(s, which, packed); });
#if GPUBATCH_BENCH_ONEDNN
    add(g.group, "onednn", backward_layers(),
        [which, packed](benchmark::State& s) { backward_onednn(s, which, packed); });
#endif
#if GPUBATCH_BENCH_OPENBLAS
    if (!packed) {
      add(g.group, which == pass::data ? "openblas_col2im" : "openblas_im2col",
          backward_layers(), [which](benchmark::State& s) { backward_openblas(s, which); });
    }
#endif
  }
  const std::string group = "conv2d_backward_filter_per_sample_f32_nhwc.host";
  add(group, bench::subject, per_sample_layers(),
      [](benchmark::State& s) { per_sample(s, per_sample_impl::one_call); });
  add(group, "gpubatch_loop", per_sample_layers(),
      [](benchmark::State& s) { per_sample(s, per_sample_impl::loop); });
  add(group, "gpubatch_norms", per_sample_layers(),
      [](benchmark::State& s) { per_sample(s, per_sample_impl::norms); });
#if GPUBATCH_BENCH_OPENBLAS
  add(group, "openblas_unfold", per_sample_layers(),
      [](benchmark::State& s) { per_sample(s, per_sample_impl::unfold); });
#endif
}

[[maybe_unused]] const bool registered = (register_all(), true);

}  // namespace
