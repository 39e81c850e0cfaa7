// gpubatch end to end: training a small convolutional network with SGD, or with DP-SGD.
//
// A synthetic data set (generated in-process from a seed) of 16 x 16 grey images, NHWC, each
// showing one of four shapes at a random place with random brightness and Gaussian noise: a
// horizontal bar, a vertical bar, a filled square or a diagonal line. The network runs every
// step on the best available backend through gpubatch's operations:
//   conv1   3x3, 1 -> 8 channels, padding 1, bias and ReLU fused             16 x 16 x 8
//   conv2   3x3, 8 -> 16 channels, stride 2, padding 1, bias and ReLU fused   8 x 8 x 16
//   pool    global average pooling as a batched GEMM: per sample a broadcast
//           row of 1/64 times the sample's 64 x 16 output                     16
//   linear  16 -> 4 logits, a GEMM with the bias fused                         4
// Only the logits (N x 4) go to the host, for the softmax cross-entropy; the gradient of the
// logits comes back and the backward pass runs on the backend: GEMMs for the linear layer and
// the pooling (ReLU's backward fused as an epilogue over conv2's forward output),
// conv2d_backward_data for conv1's output gradient (ReLU's backward fused again), and
// conv2d_backward_filter / conv2d_backward_bias for the parameters. The SGD step is fused into
// those passes: alpha = -lr / N and beta = 1 with the parameter as the output, so no gradient
// is ever stored. A layer's input gradient is computed before its own weights change.
//
// --dp trains with DP-SGD (per-sample clipping to norm C, Gaussian noise of sigma * C) without
// storing a gradient per sample:
//   1. The backward pass computes every layer's output gradient dy as above, from dlogits.
//   2. The squared norm of each sample's gradient of each parameter group: convolution filters
//      by conv2d_backward_filter_per_sample_norms (whose workspace holds a round of samples'
//      gradients, dropped once reduced); convolution biases by conv2d_backward_bias_per_sample
//      and a batched GEMM of each sample's bias gradient with itself; the linear layer on the
//      host, from small copies: its per-sample weight gradient is the outer product
//      dlogits_n pooled_n^T, of squared norm ||dlogits_n||^2 ||pooled_n||^2 (and its bias
//      adds ||dlogits_n||^2).
//   3. On the host, c_n = min(1, C / ||g_n||). Every parameter's per-sample gradient is linear
//      in that sample's dy (ReLU's masks are fixed by the forward pass), so scaling dlogits_n
//      on the host and each layer's dy_n by c_n on the backend (a batched GEMM by a per-sample
//      1 x 1 matrix) makes the fused update passes sum the clipped gradients.
//   4. Noise N(0, (sigma C)^2) per parameter, drawn on the host, joins the sum in the same
//      update: one GEMM over all parameters, which live in one buffer.
// This shows the mechanics only: no privacy accounting (epsilon) is done, and batches are fixed
// partitions of the data set visited in a new order each epoch, not Poisson samples.
//
// Built as training_mpi (GPUBATCH_TRAINING_MPI, linking gpubatch::mpi) and started by mpirun,
// it trains data-parallel: every rank holds the whole network and data set, takes its shard of
// each batch (gpubatch::mpi::shard), and the same backward passes write its summed gradient
// (alpha = 1, beta = 0) into a gradient buffer instead of updating the weights. allreduce_mean
// averages the R ranks' sums, and every rank applies parameter += (-lr * R / B) * mean: the
// single-process step, -lr / B times the batch's summed gradient, up to the order of the sums.
// Rank 0 prints. --dp stays single-process (one rank): its noise is drawn once per step.
//
//   training [--images N] [--epochs E] [--batch B] [--lr LR] [--seed S] [--dp] [--clip C]
//            [--noise SIGMA] [--no-progress] [--check]
//     N training images (default 4096; 512 test images),
//     E epochs (default 8) of batches of B images (default 64), learning rate LR (default 0.5,
//     1 with --dp), data and initialisation from seed S; DP-SGD with clip norm C (default 1)
//     and noise multiplier SIGMA (default 0.5). The progress bar shows when stdout is a
//     terminal. --check exits nonzero unless the last epoch's loss is at most 60% of the first
//     epoch's and the test accuracy is at least 0.6 (chance: 0.25).
#include <gpubatch/gpubatch.hpp>
#if defined(GPUBATCH_TRAINING_MPI)
#include <gpubatch/mpi.hpp>
#endif

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

using gpubatch::device_buffer;
using gpubatch::index_t;
using gpubatch::layout;
using gpubatch::matrix_batch_view;
using gpubatch::op;
using gpubatch::tensor4d_view;
namespace epilogue = gpubatch::epilogue;

// The data and the network's shape.
constexpr index_t image = 16, in_channels = 1, image_len = image * image * in_channels;
constexpr index_t classes = 4;
constexpr index_t test_size = 512;
constexpr index_t filter = 3, c1 = 8, c2 = 16;
constexpr index_t out2 = gpubatch::conv2d_output_extent(image, 1, 1, filter, 2, 1);  // 8
constexpr index_t pixels1 = image * image, pixels2 = out2 * out2;
const gpubatch::conv2d_params conv1 = gpubatch::conv2d_params{}.with_padding(1, 1);
const gpubatch::conv2d_params conv2 = gpubatch::conv2d_params{}.with_padding(1, 1).with_stride(2, 2);
constexpr gpubatch::tensor4d_shape w1_shape{c1, in_channels, filter, filter};
constexpr gpubatch::tensor4d_shape w2_shape{c2, c1, filter, filter};

// The parameters lie back to back in one buffer (so DP's noise is one operation): offsets.
constexpr index_t w1_at = 0, b1_at = w1_at + w1_shape.size();
constexpr index_t w2_at = b1_at + c1, b2_at = w2_at + w2_shape.size();
constexpr index_t w3_at = b2_at + c2, b3_at = w3_at + c2 * classes;  // w3: c2 x classes
constexpr index_t param_count = b3_at + classes;

// What --check asks of a run.
constexpr double check_loss_ratio = 0.6, check_accuracy = 0.6;

struct options {
  index_t images = 4096;  // training set size
  int epochs = 8;
  index_t batch = 64;
  float lr = 0;  // 0: the default for the mode
  bool dp = false;
  float clip = 1.0F;
  float noise = 0.5F;
  std::uint32_t seed = 1;
  bool progress = true;
  bool check = false;
#if defined(GPUBATCH_TRAINING_MPI)
  const gpubatch::mpi::communicator* world = nullptr;  // the ranks that train together
#endif
};

[[noreturn]] void usage(const char* program, int code) {
  std::fprintf(code == 0 ? stdout : stderr,
               "usage: %s [--images N] [--epochs E] [--batch B] [--lr LR] [--seed S] [--dp] [--clip C] "
               "[--noise SIGMA] [--no-progress] [--check]\n",
               program);
  std::exit(code);
}

/// The value of an option: a positive or non-negative number, whole (and below 2^31) or not.
double number(const std::string& arg, const char* text, bool whole, bool positive) {
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  const bool ok = end != text && *end == '\0' && std::isfinite(value) &&
                  (positive ? value > 0 : value >= 0) &&
                  (!whole || (value == std::floor(value) && value < 2147483648.0));
  if (!ok) {
    throw gpubatch::invalid_argument(arg, std::string(text) + " is not a " +
                                              (positive ? "positive " : "non-negative ") +
                                              (whole ? "whole number" : "number"));
  }
  return value;
}

options parse(int argc, char** argv) {
  options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--images" && has_value) {
      opt.images = static_cast<index_t>(number(arg, argv[++i], true, true));
    } else if (arg == "--epochs" && has_value) {
      opt.epochs = static_cast<int>(number(arg, argv[++i], true, true));
    } else if (arg == "--batch" && has_value) {
      opt.batch = static_cast<index_t>(number(arg, argv[++i], true, true));
    } else if (arg == "--lr" && has_value) {
      opt.lr = static_cast<float>(number(arg, argv[++i], false, true));
    } else if (arg == "--seed" && has_value) {
      opt.seed = static_cast<std::uint32_t>(number(arg, argv[++i], true, false));
    } else if (arg == "--clip" && has_value) {
      opt.clip = static_cast<float>(number(arg, argv[++i], false, true));
    } else if (arg == "--noise" && has_value) {
      opt.noise = static_cast<float>(number(arg, argv[++i], false, false));
    } else if (arg == "--dp") {
      opt.dp = true;
    } else if (arg == "--no-progress") {
      opt.progress = false;
    } else if (arg == "--check") {
      opt.check = true;
    } else {
      usage(argv[0], arg == "--help" ? 0 : 2);
    }
  }
  if (opt.lr == 0) opt.lr = opt.dp ? 1.0F : 0.5F;  // clipped gradients are smaller
  return opt;
}

/// Images (NHWC, count x 16 x 16 x 1) and their labels, in host memory.
struct dataset {
  std::vector<float> images;
  std::vector<int> labels;
};

/// Draws `count` labelled images: the shape of the label at a random place, at a random
/// brightness, plus noise. Classes are drawn at random, so any run of samples mixes them.
dataset make_dataset(index_t count, std::uint32_t seed) {
  std::mt19937 engine(seed);
  const auto uniform = [&engine](index_t lo, index_t hi) {
    return std::uniform_int_distribution<index_t>(lo, hi)(engine);
  };
  std::uniform_real_distribution<float> brightness(0.6F, 1.0F);
  std::normal_distribution<float> noise(0.0F, 0.2F);
  dataset set;
  set.images.assign(static_cast<std::size_t>(count * image_len), 0.0F);
  set.labels.resize(static_cast<std::size_t>(count));
  for (index_t i = 0; i < count; ++i) {
    float* img = set.images.data() + i * image_len;
    const int label = static_cast<int>(uniform(0, classes - 1));
    const float level = brightness(engine);
    const auto dot = [&](index_t row, index_t col) { img[row * image + col] = level; };  // 1 channel
    switch (label) {
      case 0:    // horizontal bar, 2 pixels thick
      case 1: {  // vertical bar
        const index_t length = uniform(7, 12);
        const index_t along = uniform(0, image - length), across = uniform(0, image - 2);
        for (index_t j = 0; j < length; ++j)
          for (index_t t = 0; t < 2; ++t) {
            if (label == 0) {
              dot(across + t, along + j);
            } else {
              dot(along + j, across + t);
            }
          }
        break;
      }
      case 2: {  // filled square
        const index_t side = uniform(4, 6);
        const index_t row = uniform(0, image - side), col = uniform(0, image - side);
        for (index_t r = 0; r < side; ++r)
          for (index_t s = 0; s < side; ++s) dot(row + r, col + s);
        break;
      }
      default: {  // diagonal line, either direction, 2 pixels wide
        const index_t length = uniform(7, 12);
        const index_t row = uniform(0, image - length), col = uniform(0, image - length - 1);
        const bool falling = uniform(0, 1) == 1;
        for (index_t j = 0; j < length; ++j) {
          const index_t at = falling ? col + j : col + length - 1 - j;
          dot(row + j, at);
          dot(row + j, at + 1);
        }
        break;
      }
    }
    for (index_t p = 0; p < image_len; ++p) img[p] += noise(engine);
    set.labels[static_cast<std::size_t>(i)] = label;
  }
  return set;
}

/// Softmax cross-entropy of `n` rows of logits: writes dL_n/dlogits_n = softmax - onehot (the
/// gradient of each sample's own loss), returns the summed loss; counts the correct argmaxes.
double softmax_cross_entropy(const float* logits, const int* labels, index_t n, float* dlogits,
                             index_t& correct) {
  double loss = 0;
  for (index_t i = 0; i < n; ++i) {
    const float* z = logits + i * classes;
    const index_t best = std::max_element(z, z + classes) - z;
    double sum = 0;
    for (index_t j = 0; j < classes; ++j) sum += std::exp(double(z[j]) - z[best]);
    const int label = labels[i];
    loss += std::log(sum) - (double(z[label]) - z[best]);
    correct += best == label ? 1 : 0;
    for (index_t j = 0; j < classes; ++j) {
      const double p = std::exp(double(z[j]) - z[best]) / sum;
      dlogits[i * classes + j] = static_cast<float>(p - (j == label ? 1.0 : 0.0));
    }
  }
  return loss;
}

template <class T>
gpubatch::span<T> host_span(std::vector<T>& v, index_t count) {
  return gpubatch::span<T>(v.data(), static_cast<std::size_t>(count), gpubatch::memory_space::host);
}
template <class T>
gpubatch::span<T> part(device_buffer<T>& buffer, index_t offset, index_t count) {
  return gpubatch::span<T>(buffer).subspan(static_cast<std::size_t>(offset),
                                           static_cast<std::size_t>(count));
}

/// The network, its activations and gradients, in the backend's memory, for batches of up to
/// `capacity` samples.
template <class Exec>
class network {
 public:
  network(Exec exec, index_t capacity, const options& opt)
      : exec_(exec), capacity_(capacity), opt_(opt), engine_(opt.seed + 1),
        params_(static_cast<std::size_t>(param_count), exec),
        pool_(static_cast<std::size_t>(pixels2), exec),
        y1_(size(capacity * pixels1 * c1), exec), y2_(size(capacity * pixels2 * c2), exec),
        pooled_(size(capacity * c2), exec), logits_(size(capacity * classes), exec),
        dlogits_(size(capacity * classes), exec), dpooled_(size(capacity * c2), exec),
        dy2_(size(capacity * pixels2 * c2), exec), dy1_(size(capacity * pixels1 * c1), exec),
        scaled2_(dp(capacity * pixels2 * c2), exec), scaled1_(dp(capacity * pixels1 * c1), exec),
        bias_grads_(dp(capacity * std::max(c1, c2)), exec), norms_(dp(4 * capacity), exec),
        factors_(dp(capacity), exec), noise_(dp(param_count), exec),
        one_(opt.dp || data_parallel(opt) ? 1 : 0, exec),
        workspace_(dp(workspace_floats(capacity)), exec),
        grads_(data_parallel(opt) ? size(param_count) : 0, exec),
        host_logits_(size(capacity * classes)), host_dlogits_(size(capacity * classes)),
        host_norms_(dp(4 * capacity)), host_pooled_(dp(capacity * c2)), host_factors_(dp(capacity)),
        host_noise_(dp(param_count)) {
    // He initialisation: weights N(0, 2 / fan-in), biases 0.
    std::vector<float> init(static_cast<std::size_t>(param_count), 0.0F);
    const auto he = [&](index_t at, index_t count, index_t fan_in) {
      std::normal_distribution<float> dist(0.0F, std::sqrt(2.0F / static_cast<float>(fan_in)));
      for (index_t i = 0; i < count; ++i) init[static_cast<std::size_t>(at + i)] = dist(engine_);
    };
    he(w1_at, w1_shape.size(), in_channels * filter * filter);
    he(w2_at, w2_shape.size(), c1 * filter * filter);
    he(w3_at, c2 * classes, c2);
    gpubatch::copy(exec_, gpubatch::span<float>(params_), host_span(init, param_count));
    // Average pooling's weights: a row (or, for its backward, a column) of 1 / pixels.
    gpubatch::fill(exec_, pool_, 1.0F / static_cast<float>(pixels2));
    gpubatch::fill(exec_, one_, 1.0F);
  }

  /// Sums over the samples a step or an evaluation saw.
  struct tally {
    double loss = 0;
    index_t correct = 0, clipped = 0;
  };

  /// Logits of samples [first, first + n) of `images` into logits_, and host_logits_.
  void forward(const device_buffer<float>& images, index_t first, index_t n) {
    gpubatch::conv2d(exec_, conv1, 1.0F, input(images, first, n), weights(w1_at, w1_shape), 0.0F,
                     tensor(y1_, n, c1, image),
                     epilogue::bias_activation<epilogue::bias_col<float>, epilogue::relu>{
                         epilogue::bias_col<float>{params_.data() + b1_at}, epilogue::relu{}});
    gpubatch::conv2d(exec_, conv2, 1.0F, tensor(y1_, n, c1, image), weights(w2_at, w2_shape), 0.0F,
                     tensor(y2_, n, c2, out2),
                     epilogue::then(epilogue::bias_col<float>{params_.data() + b2_at},
                                    epilogue::relu{}));
    // Average pooling: per sample, [1 x 64] (one row for all: batch stride 0) * [64 x 16].
    gpubatch::gemm(exec_, op::none, op::none, 1.0F, matrices(pool_, 0, 1, pixels2, 0, n),
                   matrices(y2_, 0, pixels2, c2, pixels2 * c2, n), 0.0F,
                   matrices(pooled_, 0, 1, c2, c2, n));
    gpubatch::gemm(exec_, op::none, op::none, 1.0F, matrices(pooled_, 0, n, c2, 0, 1),
                   matrices(params_, w3_at, c2, classes, 0, 1), 0.0F,
                   matrices(logits_, 0, n, classes, 0, 1),
                   epilogue::bias_col<float>{params_.data() + b3_at});
    gpubatch::copy(exec_, host_span(host_logits_, n * classes), part(logits_, 0, n * classes));
  }

  /// One SGD (or DP-SGD) step on samples [first, first + n); with `into_gradients`, the
  /// samples' summed gradient goes to grads_ and the weights stay as they are.
  tally train_step(const device_buffer<float>& images, const std::vector<int>& labels,
                   index_t first, index_t n, bool into_gradients = false) {
    forward(images, first, n);
    tally t;
    t.loss = softmax_cross_entropy(host_logits_.data(), labels.data() + first, n,
                                   host_dlogits_.data(), t.correct);
    gpubatch::copy(exec_, part(dlogits_, 0, n * classes), host_span(host_dlogits_, n * classes));

    // Output gradients, each before the weights it goes through change. The pooling's
    // backward broadcasts dpooled / 64 over the pixels: [64 x 1] * [1 x 16] per sample, with
    // ReLU's backward fused, masked by conv2's forward output; conv1's likewise by its own.
    const auto x = input(images, first, n);
    const auto y1 = tensor(y1_, n, c1, image), y2 = tensor(y2_, n, c2, out2);
    const auto dlogits = matrices(dlogits_, 0, n, classes, 0, 1);
    const auto w3 = matrices(params_, w3_at, c2, classes, 0, 1);
    device_buffer<float>& target = into_gradients ? grads_ : params_;
    const auto pooled = matrices(pooled_, 0, n, c2, 0, 1);
    const matrix_batch_view<float> pool_column(pool_.data(), pixels2, 1, 1, 0, n, layout::row_major,
                                               pool_.space());
    gpubatch::gemm(exec_, op::none, op::transpose, 1.0F, dlogits, w3, 0.0F,
                   matrices(dpooled_, 0, n, c2, 0, 1));
    gpubatch::gemm(exec_, op::none, op::none, 1.0F, pool_column, matrices(dpooled_, 0, 1, c2, c2, n),
                   0.0F, matrices(dy2_, 0, pixels2, c2, pixels2 * c2, n),
                   epilogue::relu_backward<float>{gpubatch::conv2d_epilogue_view(y2)});
    gpubatch::conv2d_backward_data(exec_, conv2, 1.0F, tensor(dy2_, n, c2, out2),
                                   weights(w2_at, w2_shape), 0.0F, tensor(dy1_, n, c1, image),
                                   epilogue::relu_backward<float>{gpubatch::conv2d_epilogue_view(y1)});

    // DP-SGD: the same gradients, each sample's scaled by its clipping factor.
    const auto dy2 = tensor(opt_.dp ? scaled2_ : dy2_, n, c2, out2);
    const auto dy1 = tensor(opt_.dp ? scaled1_ : dy1_, n, c1, image);
    if (opt_.dp) t.clipped = clip(images, first, n);

    // The fused updates: parameter = -lr/N * (gradient summed over the batch) + parameter; or
    // into_gradients: gradient = the sum (alpha = 1, beta = 0).
    const float rate = into_gradients ? 1.0F : -opt_.lr / static_cast<float>(n);
    const float beta = into_gradients ? 0.0F : 1.0F;
    gpubatch::gemm(exec_, op::transpose, op::none, rate, pooled, dlogits, beta,
                   matrices(target, w3_at, c2, classes, 0, 1));
    gpubatch::conv2d_backward_bias(exec_, rate, tensor(dlogits_, n, classes, 1), beta,
                                   target.data() + b3_at);
    gpubatch::conv2d_backward_filter(exec_, conv2, rate, y1, dy2, beta, weights_in(target, w2_at, w2_shape));
    gpubatch::conv2d_backward_bias(exec_, rate, dy2, beta, target.data() + b2_at);
    gpubatch::conv2d_backward_filter(exec_, conv1, rate, x, dy1, beta, weights_in(target, w1_at, w1_shape));
    gpubatch::conv2d_backward_bias(exec_, rate, dy1, beta, target.data() + b1_at);
    if (opt_.dp && opt_.noise > 0) add_noise(rate);
    return t;
  }

#if defined(GPUBATCH_TRAINING_MPI)
  /// A data-parallel SGD step on samples [first, first + n): this rank's shard's summed
  /// gradient, averaged over the ranks, applied on every rank alike. The tally is the batch's.
  tally train_step_data_parallel(const device_buffer<float>& images, const std::vector<int>& labels,
                                 index_t first, index_t n, const gpubatch::mpi::communicator& world) {
    const gpubatch::item_range mine = gpubatch::mpi::shard(static_cast<std::size_t>(n), world);
    tally t;
    if (mine.count > 0) {
      t = train_step(images, labels, first + static_cast<index_t>(mine.first),
                     static_cast<index_t>(mine.count), true);
    } else {
      gpubatch::fill(exec_, grads_, 0.0F);  // a short last batch left this rank no sample
    }
    gpubatch::mpi::allreduce_mean(exec_, gpubatch::span<float>(grads_), world);
    // mean * R = the batch's summed gradient: parameter += -lr / N * sum, one GEMM
    // ([P x 1] * [1 x 1], beta = 1) over the parameters, which lie in one buffer.
    const float rate = -opt_.lr * static_cast<float>(world.size()) / static_cast<float>(n);
    gpubatch::gemm(exec_, op::none, op::none, rate, matrices(grads_, 0, param_count, 1, 0, 1),
                   matrices(one_, 0, 1, 1, 0, 1), 1.0F, matrices(params_, 0, param_count, 1, 0, 1));
    double sums[2] = {t.loss, static_cast<double>(t.correct)};
    GPUBATCH_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, world.get()));
    t.loss = sums[0];
    t.correct = static_cast<index_t>(sums[1]);
    return t;
  }
#endif

  /// Loss and correct predictions over samples [0, count) of a set, in batches.
  tally evaluate(const device_buffer<float>& images, const std::vector<int>& labels, index_t count) {
    tally t;
    for (index_t first = 0; first < count; first += capacity_) {
      const index_t n = std::min(capacity_, count - first);
      forward(images, first, n);
      t.loss += softmax_cross_entropy(host_logits_.data(), labels.data() + first, n,
                                      host_dlogits_.data(), t.correct);
    }
    return t;
  }

 private:
  static std::size_t size(index_t count) { return static_cast<std::size_t>(count); }
  /// Whether the steps are data-parallel across ranks (training_mpi, without --dp).
  static bool data_parallel([[maybe_unused]] const options& opt) {
#if defined(GPUBATCH_TRAINING_MPI)
    return !opt.dp;
#else
    return false;
#endif
  }
  /// Sizes of what only DP-SGD uses: none without it.
  std::size_t dp(index_t count) const { return opt_.dp ? size(count) : 0; }
  /// Room for a round of `capacity` per-sample filter gradients of the larger layer.
  static index_t workspace_floats(index_t capacity) {
    const std::size_t bytes = std::max(
        gpubatch::conv2d_backward_filter_norms_workspace_size<float>(w1_shape, capacity),
        gpubatch::conv2d_backward_filter_norms_workspace_size<float>(w2_shape, capacity));
    return static_cast<index_t>(bytes / sizeof(float));
  }

  /// Samples [first, first + n) of a set of images, N x 1 x 16 x 16.
  static tensor4d_view<const float> input(const device_buffer<float>& images, index_t first, index_t n) {
    return tensor4d_view<const float>(images.data() + first * image_len, n, in_channels, image,
                                      image, gpubatch::tensor_layout::nhwc, images.space());
  }
  /// n square NHWC activations of `channels` x `side` x `side` at the start of a buffer.
  static tensor4d_view<float> tensor(device_buffer<float>& buffer, index_t n, index_t channels,
                                     index_t side) {
    return tensor4d_view<float>(buffer.data(), n, channels, side, side,
                                gpubatch::tensor_layout::nhwc, buffer.space());
  }
  /// A layer's KRSC filters inside the parameter buffer (or the gradient buffer).
  tensor4d_view<float> weights(index_t at, const gpubatch::tensor4d_shape& s) {
    return weights_in(params_, at, s);
  }
  static tensor4d_view<float> weights_in(device_buffer<float>& buffer, index_t at,
                                         const gpubatch::tensor4d_shape& s) {
    return tensor4d_view<float>(buffer.data() + at, s.n, s.c, s.h, s.w,
                                gpubatch::tensor_layout::nhwc, buffer.space());
  }
  /// `count` row-major rows x cols matrices from `offset` of a buffer, `stride` apart.
  static matrix_batch_view<float> matrices(device_buffer<float>& buffer, index_t offset, index_t rows,
                                           index_t cols, index_t stride, index_t count) {
    return matrix_batch_view<float>(buffer.data() + offset, rows, cols, cols, stride, count,
                                    layout::row_major, buffer.space());
  }

  /// Per-sample squared norms of a conv layer's filter and bias gradients, into norms_ at
  /// `at` and `at + n`: the bias's as each sample's bias gradient dotted with itself, a batch
  /// of [1 x K] * [K x 1] GEMMs.
  template <class TX>
  void conv_norms(const gpubatch::conv2d_params& params, const tensor4d_view<TX>& x,
                  const gpubatch::tensor4d_shape& filters, const tensor4d_view<float>& dy,
                  index_t n, index_t at) {
    gpubatch::conv2d_backward_options ws;
    ws.workspace = workspace_.data();
    ws.workspace_bytes = workspace_.size_bytes();
    gpubatch::conv2d_backward_filter_per_sample_norms(exec_, params, x, filters, dy,
                                                      norms_.data() + at, ws);
    const index_t k = dy.c();
    gpubatch::conv2d_backward_bias_per_sample(exec_, 1.0F, dy, 0.0F, bias_grads_.data());
    gpubatch::gemm(exec_, op::none, op::none, 1.0F, matrices(bias_grads_, 0, 1, k, k, n),
                   matrix_batch_view<float>(bias_grads_.data(), k, 1, 1, k, n, layout::row_major,
                                            bias_grads_.space()),
                   0.0F, matrices(norms_, at + n, 1, 1, 1, n));
  }

  /// DP-SGD's clipping: every sample's gradient norm, c_n = min(1, C / norm), dlogits scaled
  /// by c_n on the host and re-uploaded, dy2 and dy1 scaled into scaled2_ and scaled1_.
  /// Returns how many samples were clipped.
  index_t clip(const device_buffer<float>& images, index_t first, index_t n) {
    conv_norms(conv1, input(images, first, n), w1_shape, tensor(dy1_, n, c1, image), n, 0);
    conv_norms(conv2, tensor(y1_, n, c1, image), w2_shape, tensor(dy2_, n, c2, out2), n, 2 * n);
    gpubatch::copy(exec_, host_span(host_norms_, 4 * n), part(norms_, 0, 4 * n));
    gpubatch::copy(exec_, host_span(host_pooled_, n * c2), part(pooled_, 0, n * c2));
    index_t clipped = 0;
    for (index_t i = 0; i < n; ++i) {
      float* dl = host_dlogits_.data() + i * classes;
      const float* p = host_pooled_.data() + i * c2;
      const double dl2 = std::inner_product(dl, dl + classes, dl, 0.0);
      const double p2 = std::inner_product(p, p + c2, p, 0.0);
      double squared = dl2 * (p2 + 1.0);  // the linear layer's weights and bias
      for (index_t g = 0; g < 4; ++g) squared += host_norms_[size(g * n + i)];
      const double norm = std::sqrt(squared);
      const double factor = norm > opt_.clip ? opt_.clip / norm : 1.0;
      clipped += norm > opt_.clip ? 1 : 0;
      host_factors_[size(i)] = static_cast<float>(factor);
      for (index_t j = 0; j < classes; ++j) dl[j] = static_cast<float>(dl[j] * factor);
    }
    gpubatch::copy(exec_, part(dlogits_, 0, n * classes), host_span(host_dlogits_, n * classes));
    gpubatch::copy(exec_, part(factors_, 0, n), host_span(host_factors_, n));
    // Per sample, [1 x 1] (c_n) * [1 x len] (the sample's dy) into the scaled copy.
    const auto scale = [&](device_buffer<float>& dy, device_buffer<float>& out, index_t len) {
      gpubatch::gemm(exec_, op::none, op::none, 1.0F, matrices(factors_, 0, 1, 1, 1, n),
                     matrices(dy, 0, 1, len, len, n), 0.0F, matrices(out, 0, 1, len, len, n));
    };
    scale(dy2_, scaled2_, pixels2 * c2);
    scale(dy1_, scaled1_, pixels1 * c1);
    return clipped;
  }

  /// Adds rate * N(0, (sigma C)^2) to every parameter: [P x 1] noise * [1 x 1] one, beta = 1.
  void add_noise(float rate) {
    std::normal_distribution<float> gauss(0.0F, opt_.noise * opt_.clip);
    for (float& v : host_noise_) v = gauss(engine_);
    gpubatch::copy(exec_, gpubatch::span<float>(noise_), host_span(host_noise_, param_count));
    gpubatch::gemm(exec_, op::none, op::none, rate, matrices(noise_, 0, param_count, 1, 0, 1),
                   matrices(one_, 0, 1, 1, 0, 1), 1.0F, matrices(params_, 0, param_count, 1, 0, 1));
  }

  Exec exec_;
  index_t capacity_;
  options opt_;
  std::mt19937 engine_;  // initialisation, then DP noise
  device_buffer<float> params_, pool_, y1_, y2_, pooled_, logits_, dlogits_, dpooled_, dy2_, dy1_;
  // DP-SGD only (empty otherwise): dy2 and dy1 scaled per sample, per-sample bias gradients of
  // one layer, squared norms (4 groups of N), clip factors, noise, a 1 x 1 one (data-parallel
  // training's too), the norms' workspace; and the host's side.
  device_buffer<float> scaled2_, scaled1_, bias_grads_, norms_, factors_, noise_, one_, workspace_;
  device_buffer<float> grads_;  // data-parallel training only: the gradient, for the allreduce
  std::vector<float> host_logits_, host_dlogits_, host_norms_, host_pooled_, host_factors_, host_noise_;
};

/// A one-line progress bar, redrawn in place when stdout is a terminal.
struct progress_bar {
  bool enabled;
  void operator()(int epoch, index_t done, index_t total) const {
    if (!enabled) return;
    const int width = 32;
    const auto filled = static_cast<int>(width * done / std::max<index_t>(total, 1));
    std::printf("\repoch %d [%s%s] %lld/%lld", epoch,
                std::string(static_cast<std::size_t>(filled), '#').c_str(),
                std::string(static_cast<std::size_t>(width - filled), ' ').c_str(),
                (long long)done, (long long)total);
    std::fflush(stdout);
  }
  void clear() const {
    if (enabled) std::printf("\r%70s\r", "");
  }
};

template <class Exec>
device_buffer<float> upload(Exec exec, std::vector<float>& v) {
  device_buffer<float> buffer(v.size(), exec);
  gpubatch::copy(exec, gpubatch::span<float>(buffer), host_span(v, static_cast<index_t>(v.size())));
  return buffer;
}

template <class Exec>
int run(Exec exec, const options& opt) {
  const index_t train_size = opt.images;
  if constexpr (gpubatch::is_host_exec_v<Exec>) {
    // The CUDA backend's memory rules on the host as well: what runs here runs on a GPU.
    exec.cuda_memory_rules = true;
  }
  dataset train = make_dataset(train_size, opt.seed * 2 + 1);
  dataset test = make_dataset(test_size, opt.seed * 2 + 2);
  // The data sets live in the backend's memory for the whole run.
  const device_buffer<float> train_images = upload(exec, train.images);
  const device_buffer<float> test_images = upload(exec, test.images);
  const index_t batch = std::min(opt.batch, train_size);
  network<Exec> net(exec, batch, opt);

  std::printf("training: %lld images of %lldx%lldx%lld, %lld classes, %lld test images; batch %lld, "
              "%d epochs, lr %g",
              (long long)train_size, (long long)image, (long long)image, (long long)in_channels,
              (long long)classes, (long long)test_size, (long long)batch, opt.epochs, double(opt.lr));
  if (opt.dp) {
    std::printf("; DP-SGD: clip %g, noise multiplier %g", double(opt.clip), double(opt.noise));
  }
  std::printf("\n");

  const progress_bar bar{opt.progress && isatty(STDOUT_FILENO) != 0};
  const index_t batches = (train_size + batch - 1) / batch;
  std::vector<index_t> order(static_cast<std::size_t>(batches));
  std::iota(order.begin(), order.end(), index_t{0});
  std::mt19937 shuffle(opt.seed);
  std::vector<double> losses;
  double accuracy = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int epoch = 1; epoch <= opt.epochs; ++epoch) {
    const auto epoch_start = std::chrono::steady_clock::now();
    std::shuffle(order.begin(), order.end(), shuffle);
    typename network<Exec>::tally sum;
    for (index_t b = 0; b < batches; ++b) {
      const index_t first = order[static_cast<std::size_t>(b)] * batch;
      const index_t n = std::min(batch, train_size - first);  // the last batch may be short
#if defined(GPUBATCH_TRAINING_MPI)
      const auto t = opt.dp ? net.train_step(train_images, train.labels, first, n)
                            : net.train_step_data_parallel(train_images, train.labels, first, n, *opt.world);
#else
      const auto t = net.train_step(train_images, train.labels, first, n);
#endif
      sum.loss += t.loss;
      sum.correct += t.correct;
      sum.clipped += t.clipped;
      bar(epoch, b + 1, batches);
    }
    const auto tested = net.evaluate(test_images, test.labels, test_size);
    accuracy = double(tested.correct) / double(test_size);
    losses.push_back(sum.loss / double(train_size));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
    bar.clear();
    std::printf("epoch %2d: loss %.4f, train accuracy %.3f, test accuracy %.3f", epoch, losses.back(),
                double(sum.correct) / double(train_size), accuracy);
    if (opt.dp) std::printf(", %.0f%% clipped", 100.0 * double(sum.clipped) / double(train_size));
    std::printf(" (%.2f s)\n", seconds);
    std::fflush(stdout);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("final test accuracy: %.3f (chance %.3f), trained in %.2f s\n", accuracy,
              1.0 / double(classes), seconds);

  if (!opt.check) return 0;
  bool ok = true;
  if (!(losses.back() <= check_loss_ratio * losses.front())) {
    std::printf("check failed: the last epoch's loss %.4f is not at most %.0f%% of the first's %.4f\n",
                losses.back(), 100 * check_loss_ratio, losses.front());
    ok = false;
  }
  if (!(accuracy >= check_accuracy)) {
    std::printf("check failed: test accuracy %.3f is below %.2f\n", accuracy, check_accuracy);
    ok = false;
  }
  if (ok) std::printf("check: ok\n");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
#if defined(GPUBATCH_TRAINING_MPI)
    const gpubatch::mpi::session mpi(argc, argv);
    const gpubatch::mpi::communicator world;
    // An exception on one rank ends the job: the others would wait in the allreduce for ever.
    return gpubatch::mpi::run_or_abort(world, [&] {
      options opt = parse(argc, argv);
      opt.world = &world;
      if (opt.dp && world.size() > 1) {
        throw gpubatch::invalid_argument("--dp", "DP-SGD trains in one process here (its noise is "
                                                 "drawn once per step); start one rank");
      }
      // Every rank computes the same numbers; rank 0 tells them.
      if (world.rank() != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) {
        throw gpubatch::error("training: cannot silence rank " + std::to_string(world.rank()));
      }
      std::printf("%s\n", gpubatch::to_string(gpubatch::best_available_choice()).c_str());
      std::printf("data-parallel on %d ranks\n", world.size());
      return gpubatch::with_best_available([&](auto exec) { return run(exec, opt); });
    });
#else
    const options opt = parse(argc, argv);
    // One code path for both machines: the GPU when this file's kernels run on it, else the CPU.
    std::printf("%s\n", gpubatch::to_string(gpubatch::best_available_choice()).c_str());
    return gpubatch::with_best_available([&](auto exec) { return run(exec, opt); });
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "training: %s\n", e.what());
    return 1;
  }
}
