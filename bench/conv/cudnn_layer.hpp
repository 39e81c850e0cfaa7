// cuDNN beside gpubatch in the CUDA convolution benchmarks: a handle and the descriptors of one
// NHWC layer (forward, backward data and backward filter with cuDNN's fastest measured
// algorithm), and the layer's operands on the device, rotating past 2x L2. Included only by
// nvcc-compiled benchmark files.
#pragma once

#include "conv/layers.hpp"
#include "support/device_values.cuh"
#include "support/harness.hpp"

#include <gpubatch/numeric.hpp>
#include <gpubatch/views.hpp>

#include <benchmark/benchmark.h>
#include <cudnn.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace gpubatch::bench {

inline void cudnn_try(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuDNN: ") + cudnnGetErrorString(status) + " in " + call);
  }
}
#define BENCH_CUDNN_TRY(call) cudnn_try((call), #call)

/// The cuDNN library the run loaded (not the one compiled against), in the JSON context: its
/// kernel choices decide what a ratio against it means.
[[maybe_unused]] inline const bool cudnn_described = [] {
  const std::size_t v = cudnnGetVersion();  // major * 10000 + minor * 100 + patch from cuDNN 9
  benchmark::AddCustomContext("cudnn_version", std::to_string(v / 10000) + "." +
                                                   std::to_string(v % 10000 / 100) + "." +
                                                   std::to_string(v % 100));
  return true;
}();

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
  /// `fma_only`: f32 on FP32 FMA units only (CUDNN_FMA_MATH, no TF32 tensor cores), to compare
  /// with gpubatch's SIMT kernels on the same arithmetic.
  cudnn_layer(const conv_layer& l, index_t n, cudnnDataType_t type, cudaStream_t stream,
              bool fma_only = false) {
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
        conv_, type == CUDNN_DATA_FLOAT ? (fma_only ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH)
                                        : CUDNN_TENSOR_OP_MATH));
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

  /// The fastest backward-data algorithm cuDNN measures for this layer, and its workspace.
  cudnnConvolutionBwdDataAlgoPerf_t fastest_backward_data() const {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int returned = 0;
    BENCH_CUDNN_TRY(cudnnFindConvolutionBackwardDataAlgorithm(
        handle_, w_, y_, conv_, x_, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, perf));
    for (int k = 0; k < returned; ++k) {
      if (perf[k].status == CUDNN_STATUS_SUCCESS) return perf[k];
    }
    throw std::runtime_error("cuDNN found no backward-data algorithm for this layer");
  }

  /// The fastest backward-filter algorithm cuDNN measures for this layer, and its workspace.
  cudnnConvolutionBwdFilterAlgoPerf_t fastest_backward_filter() const {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int returned = 0;
    BENCH_CUDNN_TRY(cudnnFindConvolutionBackwardFilterAlgorithm(
        handle_, x_, y_, conv_, w_, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, perf));
    for (int k = 0; k < returned; ++k) {
      if (perf[k].status == CUDNN_STATUS_SUCCESS) return perf[k];
    }
    throw std::runtime_error("cuDNN found no backward-filter algorithm for this layer");
  }

  void backward_data(cudnnConvolutionBwdDataAlgo_t algo, const void* w, const void* dy, void* dx,
                     void* workspace, std::size_t workspace_bytes) const {
    const float one = 1.0F, zero = 0.0F;
    BENCH_CUDNN_TRY(cudnnConvolutionBackwardData(handle_, &one, w_, w, y_, dy, conv_, algo,
                                                 workspace, workspace_bytes, &zero, x_, dx));
  }

  void backward_filter(cudnnConvolutionBwdFilterAlgo_t algo, const void* x, const void* dy,
                       void* dw, void* workspace, std::size_t workspace_bytes) const {
    const float one = 1.0F, zero = 0.0F;
    BENCH_CUDNN_TRY(cudnnConvolutionBackwardFilter(handle_, &one, x_, x, y_, dy, conv_, algo,
                                                   workspace, workspace_bytes, &zero, w_, dw));
  }

 private:
  cudnnHandle_t handle_ = nullptr;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr, bias_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnActivationDescriptor_t relu_ = nullptr;
};

/// Pseudo-random values in [-0.5, 0.5), the same for every implementation (small host-side
/// inputs such as a bias; tensors are made on the device, device_values.cuh).
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
    device_values<T>(x, static_cast<std::size_t>(xs.size()), 1u);
    device_values<T>(w, static_cast<std::size_t>(ws.size() * filter_sets), 2u);
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

inline const conv_layer& layer_of(const benchmark::State& state, const std::vector<conv_layer>& layers) {
  return layers.at(static_cast<std::size_t>(state.range(1)));
}

inline void finish(benchmark::State& state, const conv_layer& l, index_t n, std::size_t element,
            index_t filter_sets = 1) {
  state.SetLabel(l.name);
  const double extra_filters =
      static_cast<double>((filter_sets - 1) * l.w_shape().size()) * static_cast<double>(element);
  bench::set_rates(state, l.flops(n), l.bytes(n, element) + extra_filters);
}

}  // namespace gpubatch::bench
