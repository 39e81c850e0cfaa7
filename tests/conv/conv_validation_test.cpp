// Convolution argument validation: each bad input raises invalid_argument naming the parameter,
// before anything is touched; the output-shape helper; empty problems are no-ops.
#include <gpubatch/conv.hpp>
#include <gpubatch/conv_filters.hpp>

#include "../support/catch.hpp"
#include "../support/require_invalid.hpp"

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace gpubatch {
// For Catch's messages; found by argument-dependent lookup.
inline std::ostream& operator<<(std::ostream& os, const tensor4d_shape& s) { return os << to_string(s); }
}  // namespace gpubatch

using gpubatch::conv2d_params;
using gpubatch::index_t;
using gpubatch::tensor4d_shape;
using gpubatch::tensor4d_view;
using gpubatch::tensor_layout;

namespace {
using gpubatch::test::require_invalid;

/// Host tensors for a layer: x N x C x H x W, w K x C/g x R x S, y of the given shape.
struct tensors {
  std::vector<float> x = std::vector<float>(4096, 1.0F);
  std::vector<float> w = std::vector<float>(4096, 1.0F);
  std::vector<float> y = std::vector<float>(4096, -7.0F);
  tensor_layout order = tensor_layout::nchw;

  tensor4d_view<const float> vx(index_t n, index_t c, index_t h, index_t wd) const {
    return {x.data(), n, c, h, wd, order};
  }
  tensor4d_view<const float> vw(index_t k, index_t c, index_t r, index_t s) const {
    return {w.data(), k, c, r, s, order};
  }
  tensor4d_view<float> vy(index_t n, index_t k, index_t p, index_t q) {
    return {y.data(), n, k, p, q, order};
  }
  [[nodiscard]] bool y_untouched() const {
    for (float v : y) {
      if (v != -7.0F) return false;
    }
    return true;
  }
};
}  // namespace

TEST_CASE("conv2d_output_shape follows the usual formula", "[conv][validation]") {
  const auto shape = [](index_t h, index_t w, index_t r, index_t s, conv2d_params p) {
    return gpubatch::conv2d_output_shape({8, 4 * p.groups, h, w}, {16 * p.groups, 4, r, s}, p);
  };
  CHECK(shape(224, 224, 7, 7, conv2d_params{}.with_padding(3, 3).with_stride(2, 2)) ==
        tensor4d_shape{8, 16, 112, 112});
  CHECK(shape(56, 56, 3, 3, conv2d_params{}.with_padding(1, 1)) == tensor4d_shape{8, 16, 56, 56});
  CHECK(shape(56, 56, 1, 1, conv2d_params{}.with_stride(2, 2)) == tensor4d_shape{8, 16, 28, 28});
  CHECK(shape(13, 13, 3, 3, conv2d_params{}.with_padding(2, 2).with_dilation(2, 2)) ==
        tensor4d_shape{8, 16, 13, 13});
  CHECK(shape(12, 17, 3, 2, conv2d_params{}.with_padding(2, 0, 1, 3).with_stride(2, 3)) ==
        tensor4d_shape{8, 16, 6, 7});
  CHECK(shape(4, 4, 5, 5, conv2d_params{}.with_padding(1, 0, 1, 0)) == tensor4d_shape{8, 16, 1, 1});
  CHECK(shape(10, 10, 3, 3, conv2d_params{}.with_padding(1, 1).with_groups(3)) ==
        tensor4d_shape{8, 48, 10, 10});
}

TEST_CASE("conv2d rejects bad parameters, naming them", "[conv][validation]") {
  tensors t;
  const auto run = [&](conv2d_params p) {
    gpubatch::conv2d(gpubatch::on_host, p, 1.0F, t.vx(1, 4, 6, 6), t.vw(4, 4, 3, 3), 0.0F,
                     t.vy(1, 4, 4, 4));
  };
  require_invalid("params.stride_h", [&] { run(conv2d_params{}.with_stride(0, 1)); });
  require_invalid("params.stride_w", [&] { run(conv2d_params{}.with_stride(1, -2)); });
  require_invalid("params.dilation_h", [&] { run(conv2d_params{}.with_dilation(0, 1)); });
  require_invalid("params.dilation_w", [&] { run(conv2d_params{}.with_dilation(1, -1)); });
  require_invalid("params.groups", [&] { run(conv2d_params{}.with_groups(0)); });
  require_invalid("params.pad_w_end", [&] { run(conv2d_params{}.with_padding(0, 0, 0, -1)); });
  CHECK(t.y_untouched());
}

TEST_CASE("conv2d rejects inconsistent shapes, naming the tensor", "[conv][validation]") {
  tensors t;
  const auto host = gpubatch::on_host;
  const conv2d_params g2 = conv2d_params{}.with_groups(2);
  // C not divisible by groups
  require_invalid("x", [&] { gpubatch::conv2d(host, g2, 1.0F, t.vx(1, 5, 4, 4), t.vw(4, 2, 1, 1), 0.0F, t.vy(1, 4, 4, 4)); });
  // K not divisible by groups
  require_invalid("w", [&] { gpubatch::conv2d(host, g2, 1.0F, t.vx(1, 4, 4, 4), t.vw(3, 2, 1, 1), 0.0F, t.vy(1, 3, 4, 4)); });
  // filters without C / groups channels
  require_invalid("w", [&] { gpubatch::conv2d(host, g2, 1.0F, t.vx(1, 4, 4, 4), t.vw(4, 4, 1, 1), 0.0F, t.vy(1, 4, 4, 4)); });
  // a filter larger than the padded input
  require_invalid("w", [&] { gpubatch::conv2d(host, conv2d_params{}.with_padding(1, 0), 1.0F, t.vx(1, 2, 3, 3), t.vw(2, 2, 6, 3), 0.0F, t.vy(1, 2, 1, 1)); });
  require_invalid("w", [&] { gpubatch::conv2d(host, conv2d_params{}.with_dilation(1, 3), 1.0F, t.vx(1, 2, 6, 6), t.vw(2, 2, 3, 3), 0.0F, t.vy(1, 2, 4, 1)); });
  // output of the wrong shape: P, K and N
  require_invalid("y", [&] { gpubatch::conv2d(host, conv2d_params{}, 1.0F, t.vx(1, 2, 6, 6), t.vw(3, 2, 3, 3), 0.0F, t.vy(1, 3, 6, 6)); });
  require_invalid("y", [&] { gpubatch::conv2d(host, conv2d_params{}, 1.0F, t.vx(1, 2, 6, 6), t.vw(3, 2, 3, 3), 0.0F, t.vy(1, 2, 4, 4)); });
  require_invalid("y", [&] { gpubatch::conv2d(host, conv2d_params{}, 1.0F, t.vx(2, 2, 6, 6), t.vw(3, 2, 3, 3), 0.0F, t.vy(1, 3, 4, 4)); });
  // per-sample filters must number N * K
  require_invalid("w", [&] { gpubatch::conv2d_per_sample(host, conv2d_params{}, 1.0F, t.vx(2, 2, 6, 6), t.vw(3, 2, 3, 3), 0.0F, t.vy(2, 3, 4, 4)); });
  CHECK(t.y_untouched());
}

TEST_CASE("conv2d rejects tensors in the wrong layout or memory space", "[conv][validation]") {
  tensors t;
  const auto host = gpubatch::on_host;
  const tensor4d_view<const float> x(t.x.data(), 1, 2, 6, 6, tensor_layout::nchw);
  const tensor4d_view<const float> w(t.w.data(), 3, 2, 3, 3, tensor_layout::nchw);
  const tensor4d_view<float> y(t.y.data(), 1, 3, 4, 4, tensor_layout::nchw);
  const tensor4d_view<const float> w_nhwc(t.w.data(), 3, 2, 3, 3, tensor_layout::nhwc);
  const tensor4d_view<float> y_nhwc(t.y.data(), 1, 3, 4, 4, tensor_layout::nhwc);
  require_invalid("w", [&] { gpubatch::conv2d(host, conv2d_params{}, 1.0F, x, w_nhwc, 0.0F, y); });
  require_invalid("y", [&] { gpubatch::conv2d(host, conv2d_params{}, 1.0F, x, w, 0.0F, y_nhwc); });
  const auto device = gpubatch::memory_space::device;
  const tensor4d_view<const float> x_dev(t.x.data(), 1, 2, 6, 6, tensor_layout::nchw, device);
  const tensor4d_view<const float> w_dev(t.w.data(), 3, 2, 3, 3, tensor_layout::nchw, device);
  const tensor4d_view<float> y_dev(t.y.data(), 1, 3, 4, 4, tensor_layout::nchw, device);
  require_invalid("x", [&] { gpubatch::conv2d(host, conv2d_params{}, 1.0F, x_dev, w, 0.0F, y); });
  require_invalid("w", [&] { gpubatch::conv2d(host, conv2d_params{}, 1.0F, x, w_dev, 0.0F, y); });
  require_invalid("y", [&] { gpubatch::conv2d(host, conv2d_params{}, 1.0F, x, w, 0.0F, y_dev); });
  gpubatch::conv2d_options no_workspace;
  no_workspace.workspace_bytes = 1024;
  require_invalid("options.workspace", [&] { gpubatch::conv2d(host, conv2d_params{}, 1.0F, x, w, 0.0F, y, gpubatch::epilogue::identity{}, no_workspace); });
  CHECK(t.y_untouched());
  CHECK(gpubatch::conv2d_workspace_size(host, conv2d_params{}, x, w, y) == 0);
}

TEST_CASE("packed_conv2d_filters rejects bad filters and calls that do not match them", "[conv][validation]") {
  tensors t;
  const auto host = gpubatch::on_host;
  const auto groups2 = conv2d_params{}.with_groups(2);
  require_invalid("params.groups", "at least 1", [&] {
    gpubatch::packed_conv2d_filters<float>(host, conv2d_params{}.with_groups(0), t.vw(4, 2, 3, 3));
  });
  require_invalid("w", "multiple of groups", [&] {
    gpubatch::packed_conv2d_filters<float>(host, groups2, t.vw(3, 2, 3, 3));
  });
  const std::vector<std::int8_t> w8(4 * 2 * 3 * 3, 1);
  const tensor4d_view<const std::int8_t> vw8(w8.data(), 4, 2, 3, 3, tensor_layout::nchw);
  require_invalid("passes", "int8", [&] {
    gpubatch::packed_conv2d_filters<std::int8_t>(host, groups2, vw8,
                                                 gpubatch::filter_passes::forward_and_backward_data);
  });
  const tensor4d_view<const float> w_dev(t.w.data(), 4, 2, 3, 3, tensor_layout::nchw,
                                         gpubatch::memory_space::device);
  require_invalid("w", [&] { gpubatch::packed_conv2d_filters<float>(host, groups2, w_dev); });

  // Filters for 2 groups of 2 channels: 4 filters of 2 x 3 x 3, over a 4-channel input.
  const gpubatch::packed_conv2d_filters<float> packed(host, groups2, t.vw(4, 2, 3, 3));
  CHECK(packed.groups() == 2);
  CHECK(packed.view().n() == 4);
  CHECK(packed.view().c() == 2);
  CHECK(packed.view().order() == tensor_layout::nchw);
  const auto x = t.vx(1, 4, 6, 6);
  require_invalid("w", "groups = 2", [&] {
    gpubatch::conv2d(host, conv2d_params{}.with_groups(4), 1.0F, t.vx(1, 8, 6, 6), packed, 0.0F, t.vy(1, 4, 4, 4));
  });
  tensors nhwc;
  nhwc.order = tensor_layout::nhwc;
  require_invalid("w", "must be KRSC", [&] {
    gpubatch::conv2d(host, groups2, 1.0F, nhwc.vx(1, 4, 6, 6), packed, 0.0F, nhwc.vy(1, 4, 4, 4));
  });
  require_invalid("y", [&] { gpubatch::conv2d(host, groups2, 1.0F, x, packed, 0.0F, t.vy(1, 4, 5, 5)); });
  CHECK(t.y_untouched());
  CHECK(nhwc.y_untouched());
  gpubatch::conv2d(host, groups2, 1.0F, x, packed, 0.0F, t.vy(1, 4, 4, 4));
  CHECK(t.y[0] == 18.0F);  // every filter sums 2 x 3 x 3 products of ones
}

TEST_CASE("conv2d_backward_data rejects packed filters that do not match the call", "[conv][validation]") {
  tensors t;
  const auto host = gpubatch::on_host;
  const auto groups2 = conv2d_params{}.with_groups(2);
  // 4 filters of 8 x 3 x 3 for 2 groups: 16 input channels, 8 per group (the host's packed
  // backward-data path); dy 1 x 4 x 4 x 4 into dx 1 x 16 x 6 x 6.
  const gpubatch::packed_conv2d_filters<float> packed(host, groups2, t.vw(4, 8, 3, 3),
                                                      gpubatch::filter_passes::backward_data);
  const auto dy = t.vx(1, 4, 4, 4);
  require_invalid("w", "groups = 2", [&] {
    gpubatch::conv2d_backward_data(host, conv2d_params{}.with_groups(4), 1.0F, t.vx(1, 8, 4, 4), packed, 0.0F, t.vy(1, 32, 6, 6));
  });
  require_invalid("dy", [&] { gpubatch::conv2d_backward_data(host, groups2, 1.0F, dy, packed, 0.0F, t.vy(1, 16, 7, 7)); });
  CHECK(t.y_untouched());
  gpubatch::conv2d_backward_data(host, groups2, 1.0F, dy, packed, 0.0F, t.vy(1, 16, 6, 6));
  // dx at a corner takes one tap of each of a group's 2 filters: 2 products of ones; at the
  // centre of the 6 x 6 plane, 9 taps of each.
  CHECK(t.y[0] == 2.0F);
  CHECK(t.y[2 * 6 + 2] == 18.0F);
}

TEST_CASE("conv2d with N, K or C = 0 touches nothing; beta = 0 never reads y", "[conv][validation]") {
  tensors t;
  const auto host = gpubatch::on_host;
  gpubatch::conv2d(host, conv2d_params{}, 1.0F, t.vx(0, 2, 6, 6), t.vw(3, 2, 3, 3), 1.0F, t.vy(0, 3, 4, 4));
  gpubatch::conv2d(host, conv2d_params{}, 1.0F, t.vx(1, 2, 6, 6), t.vw(0, 2, 3, 3), 1.0F, t.vy(1, 0, 4, 4));
  gpubatch::conv2d(host, conv2d_params{}, 1.0F, t.vx(1, 0, 6, 6), t.vw(3, 0, 3, 3), 1.0F, t.vy(1, 3, 4, 4));
  CHECK(t.y_untouched());

  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<float> w = {1, 0, 0, -1};
  std::vector<float> y(4, std::nanf(""));
  gpubatch::conv2d(host, conv2d_params{}, 2.0F, tensor4d_view<const float>(x.data(), 1, 1, 3, 3, tensor_layout::nchw),
                   tensor4d_view<const float>(w.data(), 1, 1, 2, 2, tensor_layout::nchw), 0.0F,
                   tensor4d_view<float>(y.data(), 1, 1, 2, 2, tensor_layout::nchw));
  CHECK(y == std::vector<float>{-8, -8, -8, -8});  // 2 * (x[i][j] - x[i+1][j+1])
}

TEST_CASE("conv2d_grouped validates every problem on the host backend", "[conv][validation]") {
  std::vector<float> x(64, 1.0F), w(64, 1.0F), y(64, -7.0F);
  using problem = gpubatch::conv2d_problem<float, float, float>;
  std::vector<problem> problems = {{1, 2, 3, 3, 2, 2, 2, conv2d_params{}, x.data(), w.data(), y.data()},
                                   {1, 2, 3, 3, 2, 2, 2, conv2d_params{}.with_stride(0, 1), x.data(), w.data(), y.data()}};
  const auto host = gpubatch::on_host;
  const auto order = tensor_layout::nhwc;
  require_invalid("problems[1]", [&] { gpubatch::conv2d_grouped(host, order, 1.0F, problems.data(), 2, 0.0F); });
  problems[1].params = conv2d_params{}.with_groups(2);
  problems[1].k = 3;  // K not divisible by groups
  require_invalid("problems[1]", [&] { gpubatch::conv2d_grouped(host, order, 1.0F, problems.data(), 2, 0.0F); });
  problems[1] = {1, 2, 3, 3, 2, 4, 4, conv2d_params{}, x.data(), w.data(), y.data()};  // filter too large
  require_invalid("problems[1]", [&] { gpubatch::conv2d_grouped(host, order, 1.0F, problems.data(), 2, 0.0F); });
  problems[1] = {1, 2, 3, 3, 2, 2, 2, conv2d_params{}, x.data(), nullptr, y.data()};
  require_invalid("problems[1]", [&] { gpubatch::conv2d_grouped(host, order, 1.0F, problems.data(), 2, 0.0F); });
  require_invalid("problems", [&] { gpubatch::conv2d_grouped(host, order, 1.0F, static_cast<const problem*>(nullptr), 2, 0.0F); });
  require_invalid("count", [&] { gpubatch::conv2d_grouped(host, order, 1.0F, problems.data(), -1, 0.0F); });
  for (float v : y) CHECK(v == -7.0F);  // nothing ran: validation precedes computation
  // Empty problems are skipped, the others computed.
  problems[1] = {0, 2, 3, 3, 2, 2, 2, conv2d_params{}, nullptr, nullptr, nullptr};
  gpubatch::conv2d_grouped(host, order, 1.0F, problems.data(), 2, 0.0F);
  CHECK(y[0] == 8.0F);  // 2 x 2 window over 2 channels of ones
}
