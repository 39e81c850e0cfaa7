// gpubatch end to end: batched inference over a batch larger than one chunk.
//
// A synthetic batch of 32 x 32 RGB images (NHWC, generated in-process) sits in pinned host memory.
// A streaming pipeline moves it through the best available backend chunk by chunk, overlapping
// copies in, compute and copies out. The compute stage is a small network built from gpubatch's
// operations: a 3x3 stride-2 convolution (3 -> 16 channels) with bias and ReLU fused, then a
// classifier head, a GEMM with a fused bias, to 10 logits per image. A sample of the results is
// checked against a float64 reference, and the throughput is printed.
//
//   batched_inference [--batch N] [--chunk C] [--no-progress]
//     N images (default 16384); C images per chunk (default: chosen so there are several chunks)
#include <gpubatch/gpubatch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

using gpubatch::index_t;

// The network's shape.
constexpr index_t image = 32, in_channels = 3;
constexpr index_t features = 16, filter = 3, stride = 2;
constexpr index_t out_size = image / stride;                       // 16 x 16 after the stride-2 conv
constexpr index_t feature_len = out_size * out_size * features;    // 4096 features per image
constexpr index_t classes = 10;
constexpr index_t image_len = image * image * in_channels;
const gpubatch::conv2d_params conv = gpubatch::conv2d_params{}.with_padding(0, 1, 0, 1).with_stride(stride, stride);

struct options {
  std::size_t batch = 16384;
  std::size_t chunk = 0;
  bool progress = true;
};

options parse(int argc, char** argv) {
  options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--batch" || arg == "--chunk") && i + 1 < argc) {
      const long long value = std::atoll(argv[++i]);
      if (value < 1) throw gpubatch::invalid_argument(arg, std::string(argv[i]) + " is not a positive count");
      (arg == "--batch" ? opt.batch : opt.chunk) = static_cast<std::size_t>(value);
    } else if (arg == "--no-progress") {
      opt.progress = false;
    } else {
      std::fprintf(stderr, "usage: %s [--batch N] [--chunk C] [--no-progress]\n", argv[0]);
      std::exit(arg == "--help" ? 0 : 2);
    }
  }
  return opt;
}

/// The network's parameters, in host memory (for the reference) and in the backend's memory.
template <class Exec>
struct model {
  std::vector<float> conv_w, conv_b, head_w, head_b;  // KRSC filters, bias, 4096 x 10, bias
  gpubatch::device_buffer<float> d_conv_w, d_conv_b, d_head_w, d_head_b;

  explicit model(Exec exec)
      : conv_w(random(features * filter * filter * in_channels, 1, 0.3F)),
        conv_b(random(features, 2, 0.1F)),
        head_w(random(feature_len * classes, 3, 0.02F)),
        head_b(random(classes, 4, 0.1F)),
        d_conv_w(upload(exec, conv_w)), d_conv_b(upload(exec, conv_b)),
        d_head_w(upload(exec, head_w)), d_head_b(upload(exec, head_b)) {}

  static std::vector<float> random(index_t n, unsigned seed, float scale) {
    std::mt19937 engine(seed);
    std::uniform_real_distribution<float> dist(-scale, scale);
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& x : v) x = dist(engine);
    return v;
  }
  static gpubatch::device_buffer<float> upload(Exec exec, const std::vector<float>& v) {
    gpubatch::device_buffer<float> buffer(v.size(), exec);
    gpubatch::copy(exec, gpubatch::span<float>(buffer), gpubatch::span<const float>(v.data(), v.size(), gpubatch::memory_space::host));
    return buffer;
  }

  /// The compute stage: features = relu(conv(x) + b), logits = features * W + b.
  void operator()(Exec exec, const gpubatch::pipeline_chunk<float, float>& chunk) const {
    const auto n = static_cast<index_t>(chunk.items);
    const gpubatch::tensor4d_view<const float> x(chunk.input, n, in_channels, image, image, gpubatch::tensor_layout::nhwc);
    const gpubatch::tensor4d_view<const float> w(d_conv_w.data(), features, in_channels, filter, filter, gpubatch::tensor_layout::nhwc, d_conv_w.space());
    const gpubatch::span<float> scratch = chunk.workspace_as<float>();  // feature_len per image
    const gpubatch::tensor4d_view<float> y(scratch.data(), n, features, out_size, out_size, gpubatch::tensor_layout::nhwc, scratch.space());
    gpubatch::conv2d(exec, conv, 1.0F, x, w, 0.0F, y,
                     gpubatch::epilogue::then(gpubatch::epilogue::bias_col<float>{d_conv_b.data()}, gpubatch::epilogue::relu{}));
    // The head: one (n x 4096) * (4096 x 10) GEMM over the chunk's images.
    const gpubatch::matrix_batch_view<const float> a(scratch.data(), n, feature_len, feature_len, 0, 1, gpubatch::layout::row_major, scratch.space());
    const auto b = gpubatch::matrix_batch_view<const float>::packed(d_head_w, feature_len, classes, 1);
    const auto c = gpubatch::matrix_batch_view<float>::packed(chunk.output, n, classes, 1);
    gpubatch::gemm(exec, gpubatch::op::none, gpubatch::op::none, 1.0F, a, b, 0.0F, c,
                   gpubatch::epilogue::bias_col<float>{d_head_b.data()});
  }

  /// Float64 reference logits of one image.
  std::vector<double> reference(const float* img) const {
    std::vector<double> feat(static_cast<std::size_t>(feature_len));
    for (index_t p = 0; p < out_size; ++p)
      for (index_t q = 0; q < out_size; ++q)
        for (index_t k = 0; k < features; ++k) {
          double sum = conv_b[k];
          for (index_t r = 0; r < filter; ++r)
            for (index_t s = 0; s < filter; ++s) {
              const index_t h = p * stride + r, wi = q * stride + s;  // padding only at the end
              if (h >= image || wi >= image) continue;
              for (index_t ch = 0; ch < in_channels; ++ch)
                sum += double(img[(h * image + wi) * in_channels + ch]) * conv_w[((k * filter + r) * filter + s) * in_channels + ch];
            }
          feat[(p * out_size + q) * features + k] = std::max(sum, 0.0);
        }
    std::vector<double> logits(static_cast<std::size_t>(classes));
    for (index_t j = 0; j < classes; ++j) {
      double sum = head_b[j];
      for (index_t f = 0; f < feature_len; ++f) sum += feat[f] * head_w[f * classes + j];
      logits[j] = sum;
    }
    return logits;
  }
};

/// A one-line progress bar, redrawn in place when stderr is a terminal.
struct progress_bar {
  bool enabled;
  void operator()(std::size_t done, std::size_t total) const {
    if (!enabled) return;
    const int width = 40;
    const int filled = static_cast<int>(width * done / std::max<std::size_t>(total, 1));
    std::fprintf(stderr, "\r[%s%s] %3d%% %zu/%zu", std::string(filled, '#').c_str(),
                 std::string(width - filled, ' ').c_str(), static_cast<int>(100 * done / std::max<std::size_t>(total, 1)), done, total);
    if (done == total) std::fputc('\n', stderr);
  }
};

template <class Exec>
int run(Exec exec, const options& opt) {
  if constexpr (gpubatch::is_host_exec_v<Exec>) {
    // The CUDA backend's memory rules on the host as well: what runs here runs on a GPU.
    exec.cuda_memory_rules = true;
  }
  const model<Exec> net(exec);
  const std::size_t n = opt.batch;

  // The input batch: synthetic images in pinned memory, so copies run without staging.
  gpubatch::pinned_buffer<float> images(n * image_len, exec);
  std::mt19937 engine(2026);
  std::uniform_real_distribution<float> pixel(0.0F, 1.0F);
  for (float& v : images) v = pixel(engine);
  gpubatch::pinned_buffer<float> logits(n * classes, exec);
  std::fill(logits.begin(), logits.end(), std::nanf(""));  // poison: a missed item shows

  const gpubatch::item_shape shape{image_len, classes, gpubatch::workspace_of<float>(feature_len)};
  gpubatch::pipeline_options popt;
  popt.chunk_items = opt.chunk != 0 ? opt.chunk : std::max<std::size_t>(1, std::min<std::size_t>(2048, (n + 3) / 4));
  gpubatch::pipeline<float, float, Exec> pipe(exec, shape, popt);
  const gpubatch::chunk_plan plan = pipe.plan(n);
  std::printf("backend: %s, %zu images of %lldx%lldx%lld in %zu chunks of %zu\n",
              gpubatch::is_cuda_exec_v<Exec> ? "cuda" : "host", n, (long long)image, (long long)image,
              (long long)in_channels, plan.chunks, plan.chunk_items);

  const progress_bar bar{opt.progress && isatty(STDERR_FILENO) != 0};
  const gpubatch::pipeline_report report =
      pipe.run(gpubatch::span<const float>(images), gpubatch::span<float>(logits), net, std::ref(bar));

  // Check a sample of images, first and last included, against the float64 reference.
  double worst = 0;
  for (std::size_t s = 0; s < 16; ++s) {
    const std::size_t item = s == 15 ? n - 1 : (s * 7919) % n;
    const std::vector<double> expected = net.reference(images.data() + item * image_len);
    for (index_t j = 0; j < classes; ++j) {
      const double got = logits[item * classes + static_cast<std::size_t>(j)];
      worst = std::max(worst, std::isnan(got) ? INFINITY : std::abs(got - expected[j]) / (1.0 + std::abs(expected[j])));
    }
  }
  const bool ok = worst <= 1e-4;
  const double moved = double(n) * (image_len + classes) * sizeof(float);
  std::printf("results: %s (16 sampled images, worst relative error %.2e)\n", ok ? "ok" : "MISMATCH", worst);
  std::printf("throughput: %.0f images/s, %.2f GB/s moved (%.3f s)\n", double(n) / report.seconds,
              moved / report.seconds / 1e9, report.seconds);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const options opt = parse(argc, argv);
    // One code path for both machines: the GPU when this file's kernels run on it, else the CPU.
    std::printf("%s\n", gpubatch::to_string(gpubatch::best_available_choice()).c_str());
    return gpubatch::with_best_available([&](auto exec) { return run(exec, opt); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "batched_inference: %s\n", e.what());
    return 1;
  }
}
