// CUDA convolution: gpubatch against cuDNN on the same layers and the same data, NHWC.
//
//   conv2d_f16_nhwc.cuda          gpubatch::conv2d  vs  cudnnConvolutionForward with the fastest
//   conv2d_bf16_nhwc.cuda         algorithm cudnnFindConvolutionForwardAlgorithm reports
//                                 (workspace allowed); ResNet-50 layers at batch 32 and 256
//   conv2d_bias_relu_f16_nhwc.cuda  gpubatch::conv2d with a bias + ReLU epilogue  vs
//                                 cudnnConvolutionBiasActivationForward (IMPLICIT_PRECOMP_GEMM,
//                                 the algorithm it supports with ReLU); batch 32
//   conv2d_depthwise_f16_nhwc.cuda  MobileNetV2 depthwise layers, batch 32 and 256 (cuDNN with
//                                 groups = C)
//   conv2d_per_sample_f16_nhwc.cuda gpubatch::conv2d_per_sample (every sample its own filters,
//                                 one launch)  vs  the loop of 32 single-sample
//                                 cudnnConvolutionForward calls it replaces
//
// gpubatch gets a split-K workspace when conv2d_workspace_size asks for one, as cuDNN gets its
// workspace. Inputs rotate so that together they exceed 2x L2. Arguments: ("batch", "layer"),
// the layer indexing resnet50_layers() or mobilenetv2_depthwise_layers(); each run is labelled
// with the layer's name.
#include "conv/cudnn_layer.hpp"
#include "conv/layers.hpp"
#include "support/harness.hpp"

#include <gpubatch/conv.hpp>
#include <gpubatch/epilogue.hpp>

#include <benchmark/benchmark.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace {

namespace bench = gpubatch::bench;
using bench::conv_layer;
using bench::cudnn_layer;
using bench::cudnn_type;
using bench::device_layer;
using bench::finish;
using bench::host_values;
using bench::layer_of;
using gpubatch::index_t;
using gpubatch::tensor4d_shape;
using gpubatch::tensor_layout;

// --- plain and depthwise convolution ----------------------------------------------------------

template <class T>
void conv_gpubatch(benchmark::State& state, const std::vector<conv_layer>& layers) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    const index_t n = state.range(0);
    const conv_layer& l = layer_of(state, layers);
    device_layer<T> d(l, n, 1, stream.get());
    const std::size_t bytes = gpubatch::conv2d_workspace_size(
        stream.exec(), l.params, d.x_view(d.x.next()), d.w_view(d.w.next()), d.y_view(d.y.next()));
    gpubatch::device_buffer<std::byte> workspace(bytes, stream.exec());
    gpubatch::conv2d_options options;
    options.workspace = workspace.data();
    options.workspace_bytes = workspace.size();
    bench::time_on_device(state, stream.get(), [&] {
      gpubatch::conv2d(stream.exec(), l.params, 1.0F, d.x_view(d.x.next()), d.w_view(d.w.next()),
                       0.0F, d.y_view(d.y.next()), gpubatch::epilogue::identity{}, options);
    });
    finish(state, l, n, sizeof(T));
  });
}

template <class T>
void conv_cudnn(benchmark::State& state, const std::vector<conv_layer>& layers) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    const index_t n = state.range(0);
    const conv_layer& l = layer_of(state, layers);
    device_layer<T> d(l, n, 1, stream.get());
    const cudnn_layer cudnn(l, n, cudnn_type<T>(), stream.get());
    const cudnnConvolutionFwdAlgoPerf_t best = cudnn.fastest();
    gpubatch::device_buffer<std::byte> workspace(best.memory, stream.exec());
    bench::time_on_device(state, stream.get(), [&] {
      cudnn.forward(best.algo, d.x.next(), d.w.next(), d.y.next(), workspace.data(), best.memory);
    });
    finish(state, l, n, sizeof(T));
  });
}

// --- bias + ReLU, fused -----------------------------------------------------------------------

void bias_relu_gpubatch(benchmark::State& state) {
  using T = gpubatch::half;
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    const index_t n = state.range(0);
    const conv_layer& l = layer_of(state, bench::resnet50_layers());
    device_layer<T> d(l, n, 1, stream.get());
    gpubatch::device_buffer<T> bias(static_cast<std::size_t>(l.k), stream.exec());
    GPUBATCH_CUDA_TRY(cudaMemcpyAsync(bias.data(), host_values<T>(l.k, 3u).data(), bias.size_bytes(),
                                      cudaMemcpyHostToDevice, stream.get()));
    stream.synchronize();
    const auto epilogue = gpubatch::epilogue::then(gpubatch::epilogue::bias_col<T>{bias.data()},
                                                   gpubatch::epilogue::relu{});
    const std::size_t bytes = gpubatch::conv2d_workspace_size(
        stream.exec(), l.params, d.x_view(d.x.next()), d.w_view(d.w.next()), d.y_view(d.y.next()));
    gpubatch::device_buffer<std::byte> workspace(bytes, stream.exec());
    gpubatch::conv2d_options options;
    options.workspace = workspace.data();
    options.workspace_bytes = workspace.size();
    bench::time_on_device(state, stream.get(), [&] {
      gpubatch::conv2d(stream.exec(), l.params, 1.0F, d.x_view(d.x.next()), d.w_view(d.w.next()),
                       0.0F, d.y_view(d.y.next()), epilogue, options);
    });
    finish(state, l, n, sizeof(T));
  });
}

void bias_relu_cudnn(benchmark::State& state) {
  using T = gpubatch::half;
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    const index_t n = state.range(0);
    const conv_layer& l = layer_of(state, bench::resnet50_layers());
    device_layer<T> d(l, n, 1, stream.get());
    gpubatch::device_buffer<T> bias(static_cast<std::size_t>(l.k), stream.exec());
    GPUBATCH_CUDA_TRY(cudaMemcpyAsync(bias.data(), host_values<T>(l.k, 3u).data(), bias.size_bytes(),
                                      cudaMemcpyHostToDevice, stream.get()));
    stream.synchronize();
    const cudnn_layer cudnn(l, n, cudnn_type<T>(), stream.get());
    const auto algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
    const std::size_t bytes = cudnn.workspace_bytes(algo);
    gpubatch::device_buffer<std::byte> workspace(bytes, stream.exec());
    bench::time_on_device(state, stream.get(), [&] {
      cudnn.forward_bias_relu(algo, d.x.next(), d.w.next(), bias.data(), d.y.next(),
                              workspace.data(), bytes);
    });
    finish(state, l, n, sizeof(T));
  });
}

// --- per-sample filters -----------------------------------------------------------------------

constexpr index_t per_sample_batch = 32;

/// Layers where per-sample filters are plausible (dynamic / conditional convolution heads).
const std::vector<conv_layer>& per_sample_layers() {
  static const std::vector<conv_layer> layers = [] {
    const auto& r = bench::resnet50_layers();
    const auto& dw = bench::mobilenetv2_depthwise_layers();
    return std::vector<conv_layer>{r[6], r[8], r[9], r[11], dw[4], dw[7]};
  }();
  return layers;
}

void per_sample_gpubatch(benchmark::State& state) {
  using T = gpubatch::half;
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    const index_t n = state.range(0);
    const conv_layer& l = layer_of(state, per_sample_layers());
    device_layer<T> d(l, n, n, stream.get());
    const std::size_t bytes = gpubatch::conv2d_workspace_size(
        stream.exec(), l.params, d.x_view(d.x.next()), d.w_view(d.w.next(), n), d.y_view(d.y.next()));
    gpubatch::device_buffer<std::byte> workspace(bytes, stream.exec());
    gpubatch::conv2d_options options;
    options.workspace = workspace.data();
    options.workspace_bytes = workspace.size();
    bench::time_on_device(state, stream.get(), [&] {
      gpubatch::conv2d_per_sample(stream.exec(), l.params, 1.0F, d.x_view(d.x.next()),
                                  d.w_view(d.w.next(), n), 0.0F, d.y_view(d.y.next()),
                                  gpubatch::epilogue::identity{}, options);
    });
    finish(state, l, n, sizeof(T), n);
  });
}

void per_sample_cudnn_loop(benchmark::State& state) {
  using T = gpubatch::half;
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    const index_t n = state.range(0);
    const conv_layer& l = layer_of(state, per_sample_layers());
    device_layer<T> d(l, n, n, stream.get());
    const cudnn_layer cudnn(l, 1, cudnn_type<T>(), stream.get());  // one sample per call
    const cudnnConvolutionFwdAlgoPerf_t best = cudnn.fastest();
    gpubatch::device_buffer<std::byte> workspace(best.memory, stream.exec());
    const auto x_sample = l.x_shape(1).size(), y_sample = l.y_shape(1).size();
    const auto filters = l.w_shape().size();
    bench::time_on_device(state, stream.get(), [&] {
      const T* const x = static_cast<const T*>(d.x.next());
      const T* const w = static_cast<const T*>(d.w.next());
      T* const y = static_cast<T*>(d.y.next());
      for (index_t s = 0; s < n; ++s) {
        cudnn.forward(best.algo, x + s * x_sample, w + s * filters, y + s * y_sample,
                      workspace.data(), best.memory);
      }
    });
    finish(state, l, n, sizeof(T), n);
  });
}

// --- registration -----------------------------------------------------------------------------

template <class F>
void add(const std::string& group, const char* impl, F f, const std::vector<conv_layer>& layers,
         const std::vector<std::int64_t>& batches) {
  auto* b = benchmark::RegisterBenchmark(bench::name(group, impl).c_str(), f);
  b->ArgNames({"batch", "layer"})->UseManualTime()->Unit(benchmark::kMicrosecond);
  for (const std::int64_t n : batches) bench::layer_args(b, layers, {n});
}

void register_all() {
  const auto& resnet = bench::resnet50_layers();
  const auto& dw = bench::mobilenetv2_depthwise_layers();
  using gpubatch::bfloat16;
  using gpubatch::half;
  add("conv2d_f16_nhwc.cuda", bench::subject,
      [](benchmark::State& s) { conv_gpubatch<half>(s, bench::resnet50_layers()); }, resnet, {32, 256});
  add("conv2d_f16_nhwc.cuda", "cudnn",
      [](benchmark::State& s) { conv_cudnn<half>(s, bench::resnet50_layers()); }, resnet, {32, 256});
  add("conv2d_bf16_nhwc.cuda", bench::subject,
      [](benchmark::State& s) { conv_gpubatch<bfloat16>(s, bench::resnet50_layers()); }, resnet, {32, 256});
  add("conv2d_bf16_nhwc.cuda", "cudnn",
      [](benchmark::State& s) { conv_cudnn<bfloat16>(s, bench::resnet50_layers()); }, resnet, {32, 256});
  add("conv2d_bias_relu_f16_nhwc.cuda", bench::subject, bias_relu_gpubatch, resnet, {32});
  add("conv2d_bias_relu_f16_nhwc.cuda", "cudnn", bias_relu_cudnn, resnet, {32});
  add("conv2d_depthwise_f16_nhwc.cuda", bench::subject,
      [](benchmark::State& s) { conv_gpubatch<half>(s, bench::mobilenetv2_depthwise_layers()); }, dw, {32, 256});
  add("conv2d_depthwise_f16_nhwc.cuda", "cudnn",
      [](benchmark::State& s) { conv_cudnn<half>(s, bench::mobilenetv2_depthwise_layers()); }, dw, {32, 256});
  add("conv2d_per_sample_f16_nhwc.cuda", bench::subject, per_sample_gpubatch, per_sample_layers(),
      {per_sample_batch});
  add("conv2d_per_sample_f16_nhwc.cuda", "cudnn_loop", per_sample_cudnn_loop, per_sample_layers(),
      {per_sample_batch});
}

[[maybe_unused]] const bool registered = (register_all(), true);

}  // namespace
