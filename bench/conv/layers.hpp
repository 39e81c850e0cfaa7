// The layers the convolution benchmarks measure, shared by the host and CUDA suites: ResNet-50
// (v1.5: the stride sits on the 3x3 of a stage's first block) and the depthwise layers of
// MobileNetV2, at 224 x 224 input resolution.
#pragma once

#include <gpubatch/conv_problem.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gpubatch::bench {

struct conv_layer {
  const char* name;
  index_t c, h, w, k, r, s;
  conv2d_params params;

  [[nodiscard]] tensor4d_shape x_shape(index_t n) const { return {n, c, h, w}; }
  [[nodiscard]] tensor4d_shape w_shape() const { return {k, c / params.groups, r, s}; }
  [[nodiscard]] tensor4d_shape y_shape(index_t n) const {
    return conv2d_output_shape(x_shape(n), w_shape(), params);
  }
  /// Multiply-adds times two.
  [[nodiscard]] double flops(index_t n) const {
    const tensor4d_shape y = y_shape(n);
    return 2.0 * static_cast<double>(y.size()) * static_cast<double>(w_shape().c * r * s);
  }
  /// Compulsory traffic: x and w read once, y written once.
  [[nodiscard]] double bytes(index_t n, std::size_t element) const {
    return static_cast<double>(x_shape(n).size() + w_shape().size() + y_shape(n).size()) *
           static_cast<double>(element);
  }
};

inline conv2d_params same(index_t pad, index_t stride = 1, index_t groups = 1) {
  return conv2d_params{}.with_padding(pad, pad).with_stride(stride, stride).with_groups(groups);
}

/// ResNet-50's distinct convolution shapes (one of each).
inline const std::vector<conv_layer>& resnet50_layers() {
  static const std::vector<conv_layer> layers = {
      {"conv1_7x7s2_3-64", 3, 224, 224, 64, 7, 7, same(3, 2)},
      {"res2_1x1_64-64", 64, 56, 56, 64, 1, 1, same(0)},
      {"res2_3x3_64-64", 64, 56, 56, 64, 3, 3, same(1)},
      {"res2_1x1_64-256", 64, 56, 56, 256, 1, 1, same(0)},
      {"res2_1x1_256-64", 256, 56, 56, 64, 1, 1, same(0)},
      {"res3_3x3s2_128-128", 128, 56, 56, 128, 3, 3, same(1, 2)},
      {"res3_3x3_128-128", 128, 28, 28, 128, 3, 3, same(1)},
      {"res3_1x1_512-128", 512, 28, 28, 128, 1, 1, same(0)},
      {"res4_3x3_256-256", 256, 14, 14, 256, 3, 3, same(1)},
      {"res4_1x1_1024-256", 1024, 14, 14, 256, 1, 1, same(0)},
      {"res4_1x1_256-1024", 256, 14, 14, 1024, 1, 1, same(0)},
      {"res5_3x3_512-512", 512, 7, 7, 512, 3, 3, same(1)},
      {"res5_1x1_512-2048", 512, 7, 7, 2048, 1, 1, same(0)},
  };
  return layers;
}

/// MobileNetV2's depthwise 3 x 3 layers (groups = C).
inline const std::vector<conv_layer>& mobilenetv2_depthwise_layers() {
  static const std::vector<conv_layer> layers = {
      {"dw_112_32", 32, 112, 112, 32, 3, 3, same(1, 1, 32)},
      {"dw_112_96s2", 96, 112, 112, 96, 3, 3, same(1, 2, 96)},
      {"dw_56_144", 144, 56, 56, 144, 3, 3, same(1, 1, 144)},
      {"dw_56_144s2", 144, 56, 56, 144, 3, 3, same(1, 2, 144)},
      {"dw_28_192", 192, 28, 28, 192, 3, 3, same(1, 1, 192)},
      {"dw_14_384", 384, 14, 14, 384, 3, 3, same(1, 1, 384)},
      {"dw_14_576", 576, 14, 14, 576, 3, 3, same(1, 1, 576)},
      {"dw_7_960", 960, 7, 7, 960, 3, 3, same(1, 1, 960)},
  };
  return layers;
}

/// Layers of the size differentially private training takes per-sample gradients of
/// (CIFAR-10-scale networks), for the per-sample filter-gradient benchmarks.
inline const std::vector<conv_layer>& per_sample_gradient_layers() {
  static const std::vector<conv_layer> layers = {
      {"cifar_3x3_3-32", 3, 32, 32, 32, 3, 3, same(1)},
      {"cifar_3x3_32-64", 32, 16, 16, 64, 3, 3, same(1)},
      {"cifar_3x3_64-128", 64, 8, 8, 128, 3, 3, same(1)},
  };
  return layers;
}

/// Registers `layers.size()` values of the "layer" argument (the x axis), after `prefix`
/// arguments, e.g. a batch size.
inline void layer_args(benchmark::internal::Benchmark* b, const std::vector<conv_layer>& layers,
                       const std::vector<std::int64_t>& prefix = {}) {
  std::vector<std::int64_t> args(prefix.size() + 1);
  std::copy(prefix.begin(), prefix.end(), args.begin());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    args.back() = static_cast<std::int64_t>(i);
    b->Args(args);
  }
}

}  // namespace gpubatch::bench
