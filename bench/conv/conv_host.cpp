// Host convolution: gpubatch's host backend against oneDNN's forward convolution and against
// im2col + OpenBLAS sgemm (the classic CPU formulation), on the same layers and the same data:
// ResNet-50 and MobileNetV2's depthwise layers at batch 8, f32, in both layouts.
//
//   conv2d_f32_nchw.host   gpubatch::conv2d(on_host)  vs  per sample and group: im2col into
//                          (C/g * R * S) x (P * Q), then sgemm W_g (K/g x C/g*R*S) * cols
//   conv2d_f32_nhwc.host   gpubatch::conv2d(on_host)  vs  oneDNN's convolution_forward
//                          (inference, direct), src and dst in nhwc, the weights in the format
//                          oneDNN picks (format_tag::any), reordered from KRSC once, untimed;
//                          and vs per sample and group: im2col into (P * Q) x (R * S * C/g),
//                          then sgemm cols * W_g^T
//   conv2d_f32_nhwc_packed_filters.host
//                          gpubatch::conv2d(on_host) with gpubatch::packed_conv2d_filters made
//                          once, untimed (as oneDNN's weights are reordered once)  vs  oneDNN as
//                          above
//
// The baselines run across every core: oneDNN's threads; the OpenMP threads for im2col and
// OpenBLAS's for sgemm. The x axis ("layer") indexes resnet50_layers() then the depthwise
// layers (groups = channels); each run is labelled with the layer's name. Before timing, every
// baseline's output is compared with gpubatch's on the same data; a difference beyond rounding
// turns the run into an error instead of a time. After its timing, oneDNN's benchmark also times
// pairs of back-to-back calls, gpubatch's (as its group calls it) and its own, and reports the
// median ratio of their times as the counter paired_ratio (gpubatch::bench::set_paired_ratio).
// Without oneDNN (GPUBATCH_BENCH_ONEDNN) or OpenBLAS (GPUBATCH_BENCH_OPENBLAS) that baseline is
// not built.
#include "conv/layers.hpp"
#include "support/harness.hpp"

#include <gpubatch/conv.hpp>
#include <gpubatch/conv_filters.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <stdexcept>
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
using gpubatch::tensor_layout;

/// What this executable's host kernels were compiled for (-march=native here), in the JSON
/// context.
const bool host_isa_described = bench::detail::describe_host_vector_isa();

constexpr index_t batch = 8;

const std::vector<conv_layer>& host_layers() {
  static const std::vector<conv_layer> layers = [] {
    std::vector<conv_layer> all = bench::resnet50_layers();
    const auto& dw = bench::mobilenetv2_depthwise_layers();
    all.insert(all.end(), dw.begin(), dw.end());
    return all;
  }();
  return layers;
}

/// The same pseudo-random inputs for every implementation.
struct layer_data {
  const conv_layer& layer;
  tensor4d_shape xs, ws, ys;
  std::vector<float> x, w, y;

  explicit layer_data(const conv_layer& l)
      : layer(l), xs(l.x_shape(batch)), ws(l.w_shape()), ys(l.y_shape(batch)) {
    x.resize(static_cast<std::size_t>(xs.size()));
    w.resize(static_cast<std::size_t>(ws.size()));
    y.resize(static_cast<std::size_t>(ys.size()));
    unsigned state = 12345u;
    const auto next = [&state] {
      state = state * 1664525u + 1013904223u;
      return static_cast<float>(state >> 8) / 16777216.0F - 0.5F;
    };
    for (float& v : x) v = next();
    for (float& v : w) v = next();
  }
};

/// Throws unless y, as a baseline left it, equals gpubatch's output on the same x and w up to
/// rounding: |y - y_gpubatch| <= 16 (C/g R S) eps / 4 (every product is at most 1/4 in
/// magnitude, so the rounding of a sum of C/g R S of them stays far below that).
[[maybe_unused]] void check_against_gpubatch(const layer_data& d, tensor_layout order,
                                             const std::string& baseline) {
  std::vector<float> want(d.y.size());
  const gpubatch::tensor4d_view<const float> x(d.x.data(), d.xs.n, d.xs.c, d.xs.h, d.xs.w, order);
  const gpubatch::tensor4d_view<const float> w(d.w.data(), d.ws.n, d.ws.c, d.ws.h, d.ws.w, order);
  const gpubatch::tensor4d_view<float> y(want.data(), d.ys.n, d.ys.c, d.ys.h, d.ys.w, order);
  gpubatch::conv2d(gpubatch::on_host, d.layer.params, 1.0F, x, w, 0.0F, y);
  const double terms = static_cast<double>(d.ws.c * d.ws.h * d.ws.w);
  const double tolerance = 4.0 * terms * std::numeric_limits<float>::epsilon();
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double diff = std::abs(static_cast<double>(d.y[i]) - static_cast<double>(want[i]));
    if (!(diff <= tolerance)) {  // also catches NaN
      throw std::runtime_error(baseline + " differs from gpubatch at element " + std::to_string(i) +
                               ": " + std::to_string(d.y[i]) + " vs " + std::to_string(want[i]));
    }
  }
}

void finish(benchmark::State& state, const conv_layer& l) {
  state.SetLabel(l.name);
  bench::set_rates(state, l.flops(batch), l.bytes(batch, sizeof(float)));
}

/// `packed_filters`: the filters prepared once (packed_conv2d_filters), outside the timing.
void conv_host_gpubatch(benchmark::State& state, tensor_layout order, bool packed_filters) {
  bench::run_host_benchmark(state, [&] {
    layer_data d(host_layers()[static_cast<std::size_t>(state.range(0))]);
    const gpubatch::tensor4d_view<const float> x(d.x.data(), d.xs.n, d.xs.c, d.xs.h, d.xs.w, order);
    const gpubatch::tensor4d_view<const float> w(d.w.data(), d.ws.n, d.ws.c, d.ws.h, d.ws.w, order);
    const gpubatch::tensor4d_view<float> y(d.y.data(), d.ys.n, d.ys.c, d.ys.h, d.ys.w, order);
    std::optional<gpubatch::packed_conv2d_filters<float>> packed;
    if (packed_filters) packed.emplace(gpubatch::on_host, d.layer.params, w);
    const auto run = [&] {
      if (packed) {
        gpubatch::conv2d(gpubatch::on_host, d.layer.params, 1.0F, x, *packed, 0.0F, y);
      } else {
        gpubatch::conv2d(gpubatch::on_host, d.layer.params, 1.0F, x, w, 0.0F, y);
      }
    };
    run();  // warm-up: scratch buffers, first touch of y
    if (packed_filters) check_against_gpubatch(d, order, "gpubatch with packed filters");
    for (auto _ : state) {
      run();
      benchmark::DoNotOptimize(d.y.data());
    }
    finish(state, d.layer);
  });
}

#if GPUBATCH_BENCH_OPENBLAS
/// im2col of sample n, group g, as Caffe writes it (no per-element division). NCHW:
/// cols[(c * R + r) * S + s][p * Q + q], the KCRS order of the filters; NHWC:
/// cols[p * Q + q][(r * S + s) * C/g + c], the KRSC order.
void im2col(const layer_data& d, tensor_layout order, index_t n, index_t g, float* cols) {
  const conv_layer& l = d.layer;
  const gpubatch::conv2d_params& p = l.params;
  const index_t cg = d.ws.c, out_h = d.ys.h, out_w = d.ys.w, pixels = out_h * out_w;
  const index_t window = l.r * l.s, gemm_k = cg * window;
  if (order == tensor_layout::nchw) {
    const float* const x = d.x.data() + (n * l.c + g * cg) * l.h * l.w;
    const auto rows = static_cast<std::ptrdiff_t>(gemm_k);
    GPUBATCH_OMP_PARALLEL_FOR
    for (std::ptrdiff_t kk = 0; kk < rows; ++kk) {
      const index_t c = kk / window, r = (kk % window) / l.s, s = kk % l.s;
      const float* const plane = x + c * l.h * l.w;
      float* out = cols + kk * pixels;
      for (index_t op = 0; op < out_h; ++op, out += out_w) {
        const index_t ih = op * p.stride_h - p.pad_h_begin + r * p.dilation_h;
        const index_t shift = s * p.dilation_w - p.pad_w_begin;
        for (index_t oq = 0; oq < out_w; ++oq) {
          const index_t iw = oq * p.stride_w + shift;
          out[oq] = (ih >= 0 && ih < l.h && iw >= 0 && iw < l.w) ? plane[ih * l.w + iw] : 0.0F;
        }
      }
    }
  } else {
    const float* const x = d.x.data() + n * l.h * l.w * l.c + g * cg;
    const auto rows = static_cast<std::ptrdiff_t>(pixels);
    GPUBATCH_OMP_PARALLEL_FOR
    for (std::ptrdiff_t pq = 0; pq < rows; ++pq) {
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
}

void conv_host_openblas(benchmark::State& state, tensor_layout order) {
  bench::run_host_benchmark(state, [&] {
    layer_data d(host_layers()[static_cast<std::size_t>(state.range(0))]);
    const conv_layer& l = d.layer;
    const index_t groups = l.params.groups, cg = d.ws.c, kg = l.k / groups;
    const index_t pixels = d.ys.h * d.ys.w, gemm_k = cg * l.r * l.s;
    std::vector<float> cols(static_cast<std::size_t>(gemm_k * pixels));
    const auto run = [&] {
      for (index_t n = 0; n < batch; ++n) {
        for (index_t g = 0; g < groups; ++g) {
          im2col(d, order, n, g, cols.data());
          const float* const wg = d.w.data() + g * kg * gemm_k;
          if (order == tensor_layout::nchw) {  // y_n,g (K/g x PQ) = W_g * cols
            float* const yg = d.y.data() + (n * l.k + g * kg) * pixels;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(kg),
                        static_cast<int>(pixels), static_cast<int>(gemm_k), 1.0F, wg,
                        static_cast<int>(gemm_k), cols.data(), static_cast<int>(pixels), 0.0F, yg,
                        static_cast<int>(pixels));
          } else {  // y_n[:, g] (PQ x K/g, ld K) = cols * W_g^T
            float* const yg = d.y.data() + n * pixels * l.k + g * kg;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(pixels),
                        static_cast<int>(kg), static_cast<int>(gemm_k), 1.0F, cols.data(),
                        static_cast<int>(gemm_k), wg, static_cast<int>(gemm_k), 0.0F, yg,
                        static_cast<int>(l.k));
          }
        }
      }
    };
    run();
    check_against_gpubatch(d, order, "im2col + OpenBLAS");
    for (auto _ : state) {
      run();
      benchmark::DoNotOptimize(d.y.data());
    }
    finish(state, l);
  });
}
#endif

#if GPUBATCH_BENCH_ONEDNN
/// The oneDNN release and the instruction set its kernels use, in the JSON context.
const bool onednn_described = [] {
  const dnnl_version_t* v = dnnl::version();
  benchmark::AddCustomContext("onednn_version", std::to_string(v->major) + "." +
                                                    std::to_string(v->minor) + "." +
                                                    std::to_string(v->patch));
  const char* isa = "other";
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx: isa = "avx512_core_amx"; break;
    case dnnl::cpu_isa::avx512_core_bf16: isa = "avx512_core_bf16"; break;
    case dnnl::cpu_isa::avx512_core_vnni: isa = "avx512_core_vnni"; break;
    case dnnl::cpu_isa::avx512_core: isa = "avx512_core"; break;
    case dnnl::cpu_isa::avx2_vnni: isa = "avx2_vnni"; break;
    case dnnl::cpu_isa::avx2: isa = "avx2"; break;
    default: break;
  }
  benchmark::AddCustomContext("onednn_cpu_isa", isa);
  return true;
}();

/// oneDNN's forward convolution on NHWC tensors: the primitive is created and the weights
/// reordered from gpubatch's KRSC (oneDNN's ohwi, or gohwi with groups) to the format oneDNN
/// chose for this layer before the timing; each iteration is one execute().
void conv_host_onednn(benchmark::State& state, bool packed_filters) {
  bench::run_host_benchmark(state, [&] {
    layer_data d(host_layers()[static_cast<std::size_t>(state.range(0))]);
    const conv_layer& l = d.layer;
    const gpubatch::conv2d_params& p = l.params;
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(engine);
    const index_t g = p.groups;
    const dnnl::memory::dims weight_dims =
        g > 1 ? dnnl::memory::dims{g, l.k / g, d.ws.c, l.r, l.s}
              : dnnl::memory::dims{l.k, d.ws.c, l.r, l.s};
    const dnnl::memory::desc src_desc({d.xs.n, d.xs.c, d.xs.h, d.xs.w}, dt::f32, tag::nhwc);
    const dnnl::memory::desc dst_desc({d.ys.n, d.ys.c, d.ys.h, d.ys.w}, dt::f32, tag::nhwc);
    const dnnl::memory::desc weights_any(weight_dims, dt::f32, tag::any);
    const dnnl::convolution_forward::primitive_desc pd(
        dnnl::convolution_forward::desc(
            dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_desc,
            weights_any, dst_desc, {p.stride_h, p.stride_w},
            {p.dilation_h - 1, p.dilation_w - 1},  // oneDNN counts the gaps
            {p.pad_h_begin, p.pad_w_begin}, {p.pad_h_end, p.pad_w_end}),
        engine);
    dnnl::memory user_weights({weight_dims, dt::f32, g > 1 ? tag::gohwi : tag::ohwi}, engine,
                              d.w.data());
    dnnl::memory weights(pd.weights_desc(), engine);
    dnnl::reorder(user_weights, weights).execute(stream, user_weights, weights);
    dnnl::memory src(src_desc, engine, d.x.data());
    dnnl::memory dst(dst_desc, engine, d.y.data());
    const dnnl::convolution_forward prim(pd);
    const auto run = [&] {
      prim.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
      stream.wait();
    };
    run();  // warm-up, and the output the check reads
    check_against_gpubatch(d, tensor_layout::nhwc, "oneDNN");
    for (auto _ : state) {
      run();
      benchmark::DoNotOptimize(d.y.data());
    }
    finish(state, l);
    state.SetLabel(std::string(l.name) + " " + pd.impl_info_str());  // e.g. brg:avx512_core
    // gpubatch's call as its group times it, in pairs with oneDNN's (set_paired_ratio).
    const auto order = tensor_layout::nhwc;
    const gpubatch::tensor4d_view<const float> x(d.x.data(), d.xs.n, d.xs.c, d.xs.h, d.xs.w, order);
    const gpubatch::tensor4d_view<const float> w(d.w.data(), d.ws.n, d.ws.c, d.ws.h, d.ws.w, order);
    const gpubatch::tensor4d_view<float> y(d.y.data(), d.ys.n, d.ys.c, d.ys.h, d.ys.w, order);
    std::optional<gpubatch::packed_conv2d_filters<float>> packed;
    if (packed_filters) packed.emplace(gpubatch::on_host, p, w);
    const auto gpubatch_call = [&] {
      if (packed) {
        gpubatch::conv2d(gpubatch::on_host, p, 1.0F, x, *packed, 0.0F, y);
      } else {
        gpubatch::conv2d(gpubatch::on_host, p, 1.0F, x, w, 0.0F, y);
      }
    };
    gpubatch_call();  // its scratch buffers, before the first pair
    bench::set_paired_ratio(state, gpubatch_call, run);
  });
}
#endif

void register_all() {
  const struct {
    const char* group;
    tensor_layout order;
    bool packed_filters;
  } groups[] = {{"conv2d_f32_nchw.host", tensor_layout::nchw, false},
                {"conv2d_f32_nhwc.host", tensor_layout::nhwc, false},
                {"conv2d_f32_nhwc_packed_filters.host", tensor_layout::nhwc, true}};
  for (const auto& g : groups) {
    const tensor_layout order = g.order;
    const bool packed = g.packed_filters;
    auto* subject = benchmark::RegisterBenchmark(
        bench::name(g.group, bench::subject).c_str(),
        [order, packed](benchmark::State& s) { conv_host_gpubatch(s, order, packed); });
    subject->ArgName("layer")->UseRealTime()->Unit(benchmark::kMillisecond);
    bench::layer_args(subject, host_layers());
#if GPUBATCH_BENCH_OPENBLAS
    if (!packed) {
      auto* baseline = benchmark::RegisterBenchmark(
          bench::name(g.group, "openblas_im2col").c_str(),
          [order](benchmark::State& s) { conv_host_openblas(s, order); });
      baseline->ArgName("layer")->UseRealTime()->Unit(benchmark::kMillisecond);
      bench::layer_args(baseline, host_layers());
    }
#endif
#if GPUBATCH_BENCH_ONEDNN
    if (order == tensor_layout::nhwc) {
      auto* onednn = benchmark::RegisterBenchmark(
          bench::name(g.group, "onednn").c_str(),
          [packed](benchmark::State& s) { conv_host_onednn(s, packed); });
      onednn->ArgName("layer")->UseRealTime()->Unit(benchmark::kMillisecond);
      bench::layer_args(onednn, host_layers());
    }
#endif
  }
}

[[maybe_unused]] const bool registered = (register_all(), true);

}  // namespace
