// Backward data on the host as forward convolutions of dy (detail/conv/host_backward.hpp):
// stride-1 layers whole (dgrad_as_fprop), strided ones one stride phase at a time
// (phase_as_fprop), in passes of samples bounded by a scratch size. The public tests run every
// layer in one pass; here the passes are cut small (one sample; eight, then a tail of one) so
// that each pass's samples, filters and stores are checked against the float64 reference. And
// the filters these paths pack are checked for inf and NaN as the forward path's are.
#include "backward_check.hpp"

#include "../support/catch.hpp"
#include "../support/host_backend.hpp"

#include <gpubatch/detail/conv/host_backward.hpp>

#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <vector>

namespace {

using gpubatch::index_t;
using gpubatch::tensor_layout;
using gpubatch::test::conv_case;
namespace host_conv = gpubatch::detail::host_conv;
namespace conv = gpubatch::detail::conv;

conv::conv2d_geometry geometry_of(const conv_case& cc) {
  return conv::make_geometry(cc.n, cc.c, cc.h, cc.w, cc.k, cc.r, cc.s, cc.params,
                             tensor_layout::nhwc);
}

/// How many of a layer's phases run as forward convolutions on f32.
int forward_phases(const conv::conv2d_geometry& geo) {
  int count = 0;
  for (const host_conv::dgrad_phase& phase : host_conv::dgrad_phases(geo)) {
    const auto forward = host_conv::phase_as_fprop(geo, phase);
    count += forward && host_conv::taps_in_place<float, float>(forward->geo) ? 1 : 0;
  }
  return count;
}

}  // namespace

TEST_CASE("dgrad stride phases as forward convolutions: geometry of ResNet-50's res3 stride 2",
          "[conv][backward]") {
  const conv_case cc{"res3 3x3 stride 2", 8, 128, 56, 56, 128, 3, 3,
                     gpubatch::test::pad(1, 1).with_stride(2, 2)};
  const conv::conv2d_geometry geo = geometry_of(cc);
  const std::vector<host_conv::dgrad_phase> phases = host_conv::dgrad_phases(geo);
  REQUIRE(phases.size() == 4);
  // Even rows take tap row 1 from output row u; odd rows taps 2 and 0 from rows u and u + 1.
  const index_t expected_r[2] = {1, 2};
  for (const host_conv::dgrad_phase& phase : phases) {
    INFO("phase " << phase.a << ", " << phase.b);
    const auto forward = host_conv::phase_as_fprop(geo, phase);
    REQUIRE(forward.has_value());
    CHECK(forward->geo.p == 28);
    CHECK(forward->geo.q == 28);
    CHECK(forward->geo.c == 128);  // dy's channels
    CHECK(forward->geo.k == 128);  // dx's channels
    CHECK(forward->geo.r == expected_r[phase.a]);
    CHECK(forward->geo.s == expected_r[phase.b]);
    CHECK(forward->geo.pad_h == 0);
    CHECK(forward->geo.pad_w == 0);
    CHECK(forward->rows.front() == (phase.a == 0 ? 1 : 2));  // forward tap 0: the last layer tap
    CHECK(host_conv::taps_in_place<float, float>(forward->geo));
  }
}

TEST_CASE("dgrad stride phases as forward convolutions: passes of few samples",
          "[conv][backward]") {
  const auto exec = gpubatch::test::test_backend::exec();
  const conv_case layers[] = {
      {"3x3 stride 2, 17 samples", 17, 24, 9, 10, 16, 3, 3,
       gpubatch::test::pad(1, 1).with_stride(2, 2)},
      {"5x4 stride 3x2, groups 2", 3, 20, 13, 11, 32, 5, 4,
       gpubatch::conv2d_params{}.with_padding(3, 1, 2, 2).with_stride(3, 2).with_groups(2)},
  };
  for (const conv_case& cc : layers) {
    const conv::conv2d_geometry geo = geometry_of(cc);
    REQUIRE(forward_phases(geo) > 0);
    // The largest phase's scratch per sample: passes of one sample, and of eight.
    index_t plane = 0;
    for (const auto& phase : host_conv::dgrad_phases(geo)) plane = std::max(plane, phase.rows * phase.cols);
    const index_t sample_bytes = plane * cc.c * static_cast<index_t>(sizeof(float));
    for (const index_t scratch : {index_t{1}, 8 * sample_bytes}) {
      for (const bool per_sample : {false, true}) {
        INFO(gpubatch::test::describe(cc) << ", scratch " << scratch << " bytes, "
                                          << (per_sample ? "per-sample" : "shared") << " filters");
        const std::uint64_t seed = gpubatch::test::seed_of(cc);
        const index_t sets = per_sample ? cc.n : 1;
        gpubatch::tensor4d_shape ws = cc.w_shape();
        ws.n *= sets;
        const auto ys = cc.y_shape(), xs = cc.x_shape();
        const auto dy = gpubatch::test::random_inputs<float>(static_cast<std::size_t>(ys.size()), seed);
        const auto w = gpubatch::test::random_inputs<float>(static_cast<std::size_t>(ws.size()), seed + 1);
        const auto dx0 = gpubatch::test::random_inputs<float>(static_cast<std::size_t>(xs.size()), seed + 2);
        const auto dy_nhwc = gpubatch::test::store_as(tensor_layout::nhwc, ys, dy);
        const auto w_nhwc = gpubatch::test::store_as(tensor_layout::nhwc, ws, w);
        auto dx = gpubatch::test::store_as(tensor_layout::nhwc, xs, dx0);
        const conv::dgrad_batch<float, float, float> batch(geo, dy_nhwc.data(), w_nhwc.data(),
                                                           dx.data(), per_sample);
        const float alpha = 0.75F, beta = -0.5F;
        host_conv::strided_dgrad(exec, batch, alpha, beta, gpubatch::epilogue::identity{}, scratch);
        const auto got = gpubatch::test::load_from(tensor_layout::nhwc, xs, dx);
        std::vector<double> expected = gpubatch::test::backward_reference{cc}.dgrad(
            gpubatch::test::as_double(dy), gpubatch::test::as_double(w), sets);
        for (std::size_t i = 0; i < expected.size(); ++i) {
          expected[i] = alpha * expected[i] + beta * static_cast<double>(dx0[i]);
        }
        gpubatch::test::compare(got, expected, gpubatch::test::output_tolerance<float>(), xs);
      }
    }
  }
}

TEST_CASE("dgrad as forward convolutions: an inf filter gives the same dx batched as one sample "
          "at a time",
          "[conv][backward]") {
  // 24 samples fill the micro-tile strips, so the forward path may skip the products of dy's
  // padding; not with an inf filter, whose products with those zeros are NaN (as they are one
  // sample at a time, and on a GPU). A stride-1 layer and a strided one.
  const index_t n = 24, c = 16, h = 6, w = 7, k = 32;
  for (const index_t stride : {1, 2}) {
    INFO("stride " << stride);
    const auto params = gpubatch::conv2d_params{}.with_padding(1, 1).with_stride(stride, stride);
    const auto order = tensor_layout::nhwc;
    const gpubatch::tensor4d_shape ys = gpubatch::conv2d_output_shape({n, c, h, w}, {k, c, 3, 3}, params);
    std::mt19937 rng(2025);
    std::uniform_real_distribution<float> uniform(-1.0F, 1.0F);
    std::vector<float> dy(static_cast<std::size_t>(ys.size()));
    std::vector<float> filters(static_cast<std::size_t>(k * c * 9));
    for (float& v : dy) v = uniform(rng);
    for (float& v : filters) v = uniform(rng);
    filters[3 * c * 9 + 0 * c + 5] = std::numeric_limits<float>::infinity();  // filter 3, tap (0, 0)
    const auto per_sample = static_cast<std::size_t>(c * h * w);
    const auto dy_sample = static_cast<std::size_t>(ys.c * ys.h * ys.w);
    std::vector<float> batched(n * per_sample, -7.0F), single(per_sample, -7.0F);
    const gpubatch::tensor4d_view<const float> wv(filters.data(), k, c, 3, 3, order);
    gpubatch::conv2d_backward_data(
        gpubatch::on_host, params, 1.0F,
        gpubatch::tensor4d_view<const float>(dy.data(), n, ys.c, ys.h, ys.w, order), wv, 0.0F,
        gpubatch::tensor4d_view<float>(batched.data(), n, c, h, w, order));
    index_t nan_outputs = 0;
    for (index_t s = 0; s < n; ++s) {
      gpubatch::conv2d_backward_data(
          gpubatch::on_host, params, 1.0F,
          gpubatch::tensor4d_view<const float>(dy.data() + s * dy_sample, 1, ys.c, ys.h, ys.w, order),
          wv, 0.0F, gpubatch::tensor4d_view<float>(single.data(), 1, c, h, w, order));
      nan_outputs += gpubatch::test::require_same_as_alone(batched.data() + s * per_sample, single, s);
    }
    CHECK(nan_outputs > 0);  // the padding met the inf tap
  }
}
