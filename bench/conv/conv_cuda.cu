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
using gpubatch::index_t;
using gpubatch::tensor4d_shape;
using gpubatch::tensor_layout;

void cudnn_try(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuDNN: ") + cudnnGetErrorString(status) + " in " + call);
  }
}
#define BENCH_CUDNN_TRY(call) cudnn_try((call), #call)

template <class T>
cudnnDataType_t cudnn_type() {
  if constexpr (std::is_same_v<T, gpubatch::half>) {
    return CUDNN_DATA_HALF;
  } else if constexpr (std::is_same_v<T, gpubatch::bfloat16>) {
    return CUDNN_DATA_BFLOAT16;
  } else {
    return CUDNN_DATA_FLOAT;
  }
}

/// A cuDNN handle on the benchmark's stream and the descriptors of one NHWC layer.
class cudnn_layer {
 public:
  cudnn_layer(const conv_layer& l, index_t n, cudnnDataType_t type, cudaStream_t stream) {
    BENCH_CUDNN_TRY(cudnnCreate(&handle_));
    BENCH_CUDNN_TRY(cudnnSetStream(handle_, stream));
    BENCH_CUDNN_TRY(cudnnCreateTensorDescriptor(&x_));
    BENCH_CUDNN_TRY(cudnnCreateTensorDescriptor(&y_));
    BENCH_CUDNN_TRY(cudnnCreateTensorDescriptor(&bias_));
    BENCH_CUDNN_TRY(cudnnCreateFilterDescriptor(&w_));
    BENCH_CUDNN_TRY(cudnnCreateConvolutionDescriptor(&conv_));
    BENCH_CUDNN_TRY(cudnnCreateActivationDescriptor(&relu_));
    const tensor4d_shape xs = l.x_shape(n), ws = l.w_shape(), ys = l.y_shape(n);
    const auto i = [](index_t v) { return static_cast<int>(v); };
    BENCH_CUDNN_TRY(cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NHWC, type, i(xs.n), i(xs.c), i(xs.h), i(xs.w)));
    BENCH_CUDNN_TRY(cudnnSetTensor4dDescriptor(y_, CUDNN_TENSOR_NHWC, type, i(ys.n), i(ys.c), i(ys.h), i(ys.w)));
    BENCH_CUDNN_TRY(cudnnSetTensor4dDescriptor(bias_, CUDNN_TENSOR_NHWC, type, 1, i(ys.c), 1, 1));
    BENCH_CUDNN_TRY(cudnnSetFilter4dDescriptor(w_, type, CUDNN_TENSOR_NHWC, i(ws.n), i(ws.c), i(ws.h), i(ws.w)));
    const gpubatch::conv2d_params& p = l.params;  // the layers pad symmetrically
    BENCH_CUDNN_TRY(cudnnSetConvolution2dDescriptor(conv_, i(p.pad_h_begin), i(p.pad_w_begin),
                                                    i(p.stride_h), i(p.stride_w), i(p.dilation_h),
                                                    i(p.dilation_w), CUDNN_CROSS_CORRELATION,
                                                    CUDNN_DATA_FLOAT));
    BENCH_CUDNN_TRY(cudnnSetConvolutionGroupCount(conv_, i(p.groups)));
    BENCH_CUDNN_TRY(cudnnSetConvolutionMathType(
        conv_, type == CUDNN_DATA_FLOAT ? CUDNN_DEFAULT_MATH : CUDNN_TENSOR_OP_MATH));
    BENCH_CUDNN_TRY(cudnnSetActivationDescriptor(relu_, CUDNN_ACTIVATION_RELU,
                                                 CUDNN_NOT_PROPAGATE_NAN, 0.0));
  }
  cudnn_layer(const cudnn_layer&) = delete;
  cudnn_layer& operator=(const cudnn_layer&) = delete;
  ~cudnn_layer() {
    cudnnDestroyActivationDescriptor(relu_);
    cudnnDestroyConvolutionDescriptor(conv_);
    cudnnDestroyFilterDescriptor(w_);
    cudnnDestroyTensorDescriptor(bias_);
    cudnnDestroyTensorDescriptor(y_);
    cudnnDestroyTensorDescriptor(x_);
    cudnnDestroy(handle_);
  }

  /// The fastest algorithm cuDNN measures for this layer, and its workspace.
  cudnnConvolutionFwdAlgoPerf_t fastest() const {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0;
    BENCH_CUDNN_TRY(cudnnFindConvolutionForwardAlgorithm(
        handle_, x_, w_, conv_, y_, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
    for (int k = 0; k < returned; ++k) {
      if (perf[k].status == CUDNN_STATUS_SUCCESS) return perf[k];  // sorted fastest first
    }
    throw std::runtime_error("cuDNN found no forward algorithm for this layer");
  }

  std::size_t workspace_bytes(cudnnConvolutionFwdAlgo_t algo) const {
    std::size_t bytes = 0;
    BENCH_CUDNN_TRY(cudnnGetConvolutionForwardWorkspaceSize(handle_, x_, w_, conv_, y_, algo, &bytes));
    return bytes;
  }

  void forward(cudnnConvolutionFwdAlgo_t algo, const void* x, const void* w, void* y,
               void* workspace, std::size_t workspace_bytes) const {
    const float one = 1.0F, zero = 0.0F;
    BENCH_CUDNN_TRY(cudnnConvolutionForward(handle_, &one, x_, x, w_, w, conv_, algo, workspace,
                                            workspace_bytes, &zero, y_, y));
  }

  void forward_bias_relu(cudnnConvolutionFwdAlgo_t algo, const void* x, const void* w,
                         const void* bias, void* y, void* workspace,
                         std::size_t workspace_bytes) const {
    const float one = 1.0F, zero = 0.0F;  // alpha2 = 0: z (= y) is not added
    BENCH_CUDNN_TRY(cudnnConvolutionBiasActivationForward(
        handle_, &one, x_, x, w_, w, conv_, algo, workspace, workspace_bytes, &zero, y_, y, bias_,
        bias, relu_, y_, y));
  }

 private:
  cudnnHandle_t handle_ = nullptr;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr, bias_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnActivationDescriptor_t relu_ = nullptr;
};

/// Pseudo-random values in [-0.5, 0.5), the same for every implementation.
template <class T>
std::vector<T> host_values(index_t count, unsigned seed) {
  std::vector<T> values(static_cast<std::size_t>(count));
  unsigned state = seed;
  for (T& v : values) {
    state = state * 1664525u + 1013904223u;
    v = gpubatch::convert<T>(static_cast<float>(state >> 8) / 16777216.0F - 0.5F);
  }
  return values;
}

/// x, w and y of one layer on the device, rotating together past 2x L2.
template <class T>
struct device_layer {
  tensor4d_shape xs, ws, ys;
  bench::rotating_buffers x, w, y;

  device_layer(const conv_layer& l, index_t n, index_t filter_sets, cudaStream_t stream)
      : xs(l.x_shape(n)),
        ws(l.w_shape()),
        ys(l.y_shape(n)),
        x(bytes(xs.size()), gpubatch::on(stream), copies(l, n, filter_sets)),
        w(bytes(ws.size() * filter_sets), gpubatch::on(stream), copies(l, n, filter_sets)),
        y(bytes(ys.size()), gpubatch::on(stream), copies(l, n, filter_sets)) {
    x.upload(host_values<T>(xs.size(), 1u).data());
    w.upload(host_values<T>(ws.size() * filter_sets, 2u).data());
  }
  static std::size_t bytes(index_t elements) {
    return static_cast<std::size_t>(elements) * sizeof(T);
  }
  static std::size_t copies(const conv_layer& l, index_t n, index_t filter_sets) {
    return bench::rotating_buffers::copies_to_exceed_l2(
        bytes(l.x_shape(n).size() + l.w_shape().size() * filter_sets + l.y_shape(n).size()));
  }
  gpubatch::tensor4d_view<const T> x_view(const void* p) const {
    return {static_cast<const T*>(p), xs.n, xs.c, xs.h, xs.w, tensor_layout::nhwc,
            gpubatch::memory_space::device};
  }
  gpubatch::tensor4d_view<const T> w_view(const void* p, index_t sets = 1) const {
    return {static_cast<const T*>(p), ws.n * sets, ws.c, ws.h, ws.w, tensor_layout::nhwc,
            gpubatch::memory_space::device};
  }
  gpubatch::tensor4d_view<T> y_view(void* p) const {
    return {static_cast<T*>(p), ys.n, ys.c, ys.h, ys.w, tensor_layout::nhwc,
            gpubatch::memory_space::device};
  }
};

const conv_layer& layer_of(const benchmark::State& state, const std::vector<conv_layer>& layers) {
  return layers.at(static_cast<std::size_t>(state.range(1)));
}

void finish(benchmark::State& state, const conv_layer& l, index_t n, std::size_t element,
            index_t filter_sets = 1) {
  state.SetLabel(l.name);
  const double extra_filters =
      static_cast<double>((filter_sets - 1) * l.w_shape().size()) * static_cast<double>(element);
  bench::set_rates(state, l.flops(n), l.bytes(n, element) + extra_filters);
}

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
