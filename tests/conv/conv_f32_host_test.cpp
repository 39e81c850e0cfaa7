#include "../support/host_backend.hpp"
#define CONV_TX float
#define CONV_TY float
#define CONV_TYPES "f32->f32"
#include "conv.inc"

#include <cmath>
#include <limits>
#include <random>

TEST_CASE("conv2d f32->f32 on the host: an inf filter gives the same outputs batched as one sample at a time",
          "[conv][host]") {
  // 24 samples fill the host's micro-tile strips, so a batch may skip the products of the
  // padding; not with an inf filter, whose products with the padding's zeros are NaN (as they
  // are one sample at a time, and on a GPU).
  using gpubatch::index_t;
  const index_t n = 24, c = 16, h = 5, w = 6, k = 32;
  const auto params = gpubatch::conv2d_params{}.with_padding(1, 1);
  const auto order = gpubatch::tensor_layout::nhwc;
  std::mt19937 rng(2024);
  std::uniform_real_distribution<float> uniform(-1.0F, 1.0F);
  std::vector<float> x(static_cast<std::size_t>(n * c * h * w));
  std::vector<float> filters(static_cast<std::size_t>(k * c * 9));
  for (float& v : x) v = uniform(rng);
  for (float& v : filters) v = uniform(rng);
  filters[3 * c * 9 + 0 * c + 5] = std::numeric_limits<float>::infinity();  // filter 3, tap (0, 0)
  const std::size_t per_sample = static_cast<std::size_t>(k * h * w);
  std::vector<float> batched(n * per_sample, -7.0F), single(per_sample, -7.0F);
  const gpubatch::tensor4d_view<const float> wv(filters.data(), k, c, 3, 3, order);
  gpubatch::conv2d(gpubatch::on_host, params, 1.0F,
                   gpubatch::tensor4d_view<const float>(x.data(), n, c, h, w, order), wv, 0.0F,
                   gpubatch::tensor4d_view<float>(batched.data(), n, k, h, w, order));
  index_t nan_outputs = 0;
  for (index_t s = 0; s < n; ++s) {
    gpubatch::conv2d(gpubatch::on_host, params, 1.0F,
                     gpubatch::tensor4d_view<const float>(x.data() + s * c * h * w, 1, c, h, w, order),
                     wv, 0.0F, gpubatch::tensor4d_view<float>(single.data(), 1, k, h, w, order));
    nan_outputs += gpubatch::test::require_same_as_alone(batched.data() + s * per_sample, single, s);
  }
  CHECK(nan_outputs > 0);  // the padding met the inf tap
}
