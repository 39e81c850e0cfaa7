// CUDA convolution backward: gpubatch against cuDNN on the same layers and data, f32, NHWC.
//
//   conv2d_backward_data_f32_nhwc.cuda    gpubatch::conv2d_backward_data  vs
//                                         cudnnConvolutionBackwardData
//   conv2d_backward_filter_f32_nhwc.cuda  gpubatch::conv2d_backward_filter  vs
//                                         cudnnConvolutionBackwardFilter
//       ResNet-50 layers and two MobileNetV2 depthwise layers at batch 32; cuDNN with the fastest
//       algorithm its Find call measures (workspace allowed) on FP32 FMA units (CUDNN_FMA_MATH:
//       no TF32), the arithmetic gpubatch's SIMT backward kernels use; gpubatch with the
//       split-K workspace its query asks for.
//   conv2d_backward_filter_per_sample_f32_nhwc.cuda  gpubatch::conv2d_backward_filter_per_sample
//       (N gradients, one launch)  vs  the loop of N single-sample cudnnConvolutionBackwardFilter
//       calls it replaces (cuDNN has no per-sample filter gradient); batch 32
//
// Arguments: ("batch", "layer"); each run is labelled with the layer's name.
#include "conv/cudnn_layer.hpp"
#include "conv/layers.hpp"
#include "support/harness.hpp"

#include <gpubatch/conv_backward.hpp>

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace {

namespace bench = gpubatch::bench;
using bench::conv_layer;
using gpubatch::index_t;
using T = float;

enum class pass { data, filter };

const std::vector<conv_layer>& layers() {
  static const std::vector<conv_layer> all = [] {
    std::vector<conv_layer> v = bench::resnet50_layers();
    const auto& dw = bench::mobilenetv2_depthwise_layers();
    v.push_back(dw[2]);
    v.push_back(dw[6]);
    return v;
  }();
  return all;
}

const std::vector<conv_layer>& per_sample_layers() { return bench::per_sample_gradient_layers(); }

/// The layer's x, w and dy (in the y buffers) with values; the pass overwrites dx or dw.
struct backward_layer : bench::device_layer<T> {
  backward_layer(const conv_layer& l, index_t n, index_t filter_sets, cudaStream_t stream)
      : bench::device_layer<T>(l, n, filter_sets, stream) {
    bench::device_values<T>(y, static_cast<std::size_t>(ys.size()), 3u);
  }
};

void backward_gpubatch(benchmark::State& state, pass which) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    const index_t n = state.range(0);
    const conv_layer& l = bench::layer_of(state, layers());
    backward_layer d(l, n, 1, stream.get());
    const auto exec = stream.exec();
    const auto dy = [&] { return gpubatch::tensor4d_view<const T>(d.y_view(d.y.next())); };
    const auto writable_x = [&] {
      return gpubatch::tensor4d_view<T>(static_cast<T*>(d.x.next()), d.xs.n, d.xs.c, d.xs.h,
                                        d.xs.w, gpubatch::tensor_layout::nhwc,
                                        gpubatch::memory_space::device);
    };
    const auto writable_w = [&] {
      return gpubatch::tensor4d_view<T>(static_cast<T*>(d.w.next()), d.ws.n, d.ws.c, d.ws.h,
                                        d.ws.w, gpubatch::tensor_layout::nhwc,
                                        gpubatch::memory_space::device);
    };
    const std::size_t bytes =
        which == pass::data
            ? gpubatch::conv2d_backward_data_workspace_size(exec, l.params, dy(),
                                                            d.w_view(d.w.next()), writable_x())
            : gpubatch::conv2d_backward_filter_workspace_size(exec, l.params, d.x_view(d.x.next()),
                                                              dy(), writable_w());
    gpubatch::device_buffer<std::byte> workspace(bytes, exec);
    gpubatch::conv2d_backward_options options;
    options.workspace = bytes > 0 ? workspace.data() : nullptr;
    options.workspace_bytes = bytes;
    bench::time_on_device(state, stream.get(), [&] {
      if (which == pass::data) {
        gpubatch::conv2d_backward_data(exec, l.params, 1.0F, dy(), d.w_view(d.w.next()), 0.0F,
                                       writable_x(), gpubatch::epilogue::identity{}, options);
      } else {
        gpubatch::conv2d_backward_filter(exec, l.params, 1.0F, d.x_view(d.x.next()), dy(), 0.0F,
                                         writable_w(), options);
      }
    });
    bench::finish(state, l, n, sizeof(T));
  });
}

void backward_cudnn(benchmark::State& state, pass which) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    const index_t n = state.range(0);
    const conv_layer& l = bench::layer_of(state, layers());
    backward_layer d(l, n, 1, stream.get());
    const bench::cudnn_layer cudnn(l, n, bench::cudnn_type<T>(), stream.get(), /*fma_only=*/true);
    if (which == pass::data) {
      const auto best = cudnn.fastest_backward_data();
      gpubatch::device_buffer<std::byte> workspace(best.memory, stream.exec());
      bench::time_on_device(state, stream.get(), [&] {
        cudnn.backward_data(best.algo, d.w.next(), d.y.next(), d.x.next(), workspace.data(),
                            best.memory);
      });
    } else {
      const auto best = cudnn.fastest_backward_filter();
      gpubatch::device_buffer<std::byte> workspace(best.memory, stream.exec());
      bench::time_on_device(state, stream.get(), [&] {
        cudnn.backward_filter(best.algo, d.x.next(), d.y.next(), d.w.next(), workspace.data(),
                              best.memory);
      });
    }
    bench::finish(state, l, n, sizeof(T));
  });
}

void per_sample_gpubatch(benchmark::State& state) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    const index_t n = state.range(0);
    const conv_layer& l = bench::layer_of(state, per_sample_layers());
    backward_layer d(l, n, n, stream.get());
    bench::time_on_device(state, stream.get(), [&] {
      gpubatch::conv2d_backward_filter_per_sample(
          stream.exec(), l.params, 1.0F, d.x_view(d.x.next()),
          gpubatch::tensor4d_view<const T>(d.y_view(d.y.next())), 0.0F,
          gpubatch::tensor4d_view<T>(static_cast<T*>(d.w.next()), n * d.ws.n, d.ws.c, d.ws.h,
                                     d.ws.w, gpubatch::tensor_layout::nhwc,
                                     gpubatch::memory_space::device));
    });
    bench::finish(state, l, n, sizeof(T), n);
  });
}

void per_sample_cudnn_loop(benchmark::State& state) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    const index_t n = state.range(0);
    const conv_layer& l = bench::layer_of(state, per_sample_layers());
    backward_layer d(l, n, n, stream.get());
    const bench::cudnn_layer cudnn(l, 1, bench::cudnn_type<T>(), stream.get(), /*fma_only=*/true);
    const auto best = cudnn.fastest_backward_filter();
    gpubatch::device_buffer<std::byte> workspace(best.memory, stream.exec());
    const auto x_sample = l.x_shape(1).size(), y_sample = l.y_shape(1).size();
    const auto filters = l.w_shape().size();
    bench::time_on_device(state, stream.get(), [&] {
      const T* const x = static_cast<const T*>(d.x.next());
      const T* const dy = static_cast<const T*>(d.y.next());
      T* const dw = static_cast<T*>(d.w.next());
      for (index_t s = 0; s < n; ++s) {
        cudnn.backward_filter(best.algo, x + s * x_sample, dy + s * y_sample, dw + s * filters,
                              workspace.data(), best.memory);
      }
    });
    bench::finish(state, l, n, sizeof(T), n);
  });
}

template <class F>
void add(const std::string& group, const char* impl, F f, const std::vector<conv_layer>& ls,
         std::int64_t batch) {
  auto* b = benchmark::RegisterBenchmark(bench::name(group, impl).c_str(), f);
  b->ArgNames({"batch", "layer"})->UseManualTime()->Unit(benchmark::kMicrosecond);
  bench::layer_args(b, ls, {batch});
}

void register_all() {
  const struct {
    const char* group;
    pass which;
  } passes[] = {{"conv2d_backward_data_f32_nhwc.cuda", pass::data},
                {"conv2d_backward_filter_f32_nhwc.cuda", pass::filter}};
  for (const auto& p : passes) {
    const pass which = p.which;
    add(p.group, bench::subject, [which](benchmark::State& s) { backward_gpubatch(s, which); },
        layers(), 32);
    add(p.group, "cudnn", [which](benchmark::State& s) { backward_cudnn(s, which); }, layers(), 32);
  }
  add("conv2d_backward_filter_per_sample_f32_nhwc.cuda", bench::subject, per_sample_gpubatch,
      per_sample_layers(), 32);
  add("conv2d_backward_filter_per_sample_f32_nhwc.cuda", "cudnn_loop", per_sample_cudnn_loop,
      per_sample_layers(), 32);
}

[[maybe_unused]] const bool registered = (register_all(), true);

}  // namespace
