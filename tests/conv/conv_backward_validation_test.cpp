// Convolution backward argument validation: each bad input raises invalid_argument naming the
// parameter as the caller knows it (dx, dy, dw, db, norms, options.workspace), before anything
// is touched; empty batches are no-ops.
#include <gpubatch/conv_backward.hpp>

#include "../support/catch.hpp"
#include "../support/require_invalid.hpp"

#include <algorithm>
#include <string>
#include <vector>

using gpubatch::conv2d_params;
using gpubatch::index_t;
using gpubatch::tensor4d_view;
using gpubatch::tensor_layout;

namespace {
using gpubatch::test::require_invalid;

constexpr auto nchw = tensor_layout::nchw;
const auto exec = gpubatch::on_host;
const conv2d_params same = conv2d_params{}.with_padding(1, 1);

struct tensors {
  std::vector<float> x = std::vector<float>(4096, 1.0F);
  std::vector<float> w = std::vector<float>(4096, 1.0F);
  std::vector<float> y = std::vector<float>(4096, 1.0F);
  std::vector<float> untouched = std::vector<float>(4096, -7.0F);

  // A 2 x 4 x 6 x 6 input, 8 filters of 3 x 3, a 2 x 8 x 6 x 6 output.
  tensor4d_view<const float> x_view(index_t c = 4) const { return {x.data(), 2, c, 6, 6, nchw}; }
  tensor4d_view<const float> w_view(index_t k = 8) const { return {w.data(), k, 4, 3, 3, nchw}; }
  tensor4d_view<const float> y_view(index_t h = 6) const { return {y.data(), 2, 8, h, 6, nchw}; }
  tensor4d_view<float> out(index_t n, index_t c, index_t h, index_t wd,
                           tensor_layout order = nchw) {
    return {untouched.data(), n, c, h, wd, order};
  }
  bool all_untouched() const {
    for (float v : untouched) {
      if (v != -7.0F) return false;
    }
    return true;
  }
};
}  // namespace

TEST_CASE("conv2d_backward_data names dx, w, dy and the parameters", "[conv][backward][validation]") {
  tensors t;
  // A wrong dx shows as a dy that does not match it; the message names both.
  require_invalid("dy", [&] { gpubatch::conv2d_backward_data(exec, same, 1.0F, t.y_view(), t.w_view(), 0.0F, t.out(2, 4, 7, 6)); });
  try {
    gpubatch::conv2d_backward_data(exec, same, 1.0F, t.y_view(), t.w_view(), 0.0F, t.out(2, 4, 7, 6));
  } catch (const gpubatch::invalid_argument& e) {
    CHECK_THAT(e.what(), gpubatch::test::Contains("dx (2 x 4 x 7 x 6) convolved with w"));
  }
  require_invalid("dy", [&] { gpubatch::conv2d_backward_data(exec, same, 1.0F, t.y_view(5), t.w_view(), 0.0F, t.out(2, 4, 6, 6)); });
  require_invalid("w", [&] { gpubatch::conv2d_backward_data(exec, same, 1.0F, t.y_view(), tensor4d_view<const float>(t.w.data(), 8, 3, 3, 3, nchw), 0.0F, t.out(2, 4, 6, 6)); });
  require_invalid("dx", [&] { gpubatch::conv2d_backward_data(exec, same.with_groups(3), 1.0F, t.y_view(), t.w_view(), 0.0F, t.out(2, 4, 6, 6)); });
  require_invalid("params.stride_w", [&] { gpubatch::conv2d_backward_data(exec, same.with_stride(1, 0), 1.0F, t.y_view(), t.w_view(), 0.0F, t.out(2, 4, 6, 6)); });
  require_invalid("dy", [&] { gpubatch::conv2d_backward_data(exec, same, 1.0F, tensor4d_view<const float>(t.y.data(), 2, 8, 6, 6, tensor_layout::nhwc), t.w_view(), 0.0F, t.out(2, 4, 6, 6)); });
  require_invalid("w", [&] { gpubatch::conv2d_backward_data_per_sample(exec, same, 1.0F, t.y_view(), t.w_view(), 0.0F, t.out(2, 4, 6, 6)); });
  require_invalid("epilogue", [&] {
    gpubatch::conv2d_backward_data(exec, same, 1.0F, t.y_view(), t.w_view(), 0.0F, t.out(2, 4, 6, 6),
                                   gpubatch::epilogue::relu_backward<float>{
                                       gpubatch::matrix_batch_view<const float>(nullptr, 0, 0, 1, 0, 0)});
  });
  CHECK(t.all_untouched());
}

TEST_CASE("conv2d_backward_filter names x, dw, dy and the workspace", "[conv][backward][validation]") {
  tensors t;
  require_invalid("dy", [&] { gpubatch::conv2d_backward_filter(exec, same, 1.0F, t.x_view(), t.y_view(), 0.0F, t.out(8, 4, 3, 2)); });
  require_invalid("dw", [&] { gpubatch::conv2d_backward_filter(exec, same, 1.0F, t.x_view(), t.y_view(), 0.0F, t.out(8, 3, 3, 3)); });
  require_invalid("dy", [&] { gpubatch::conv2d_backward_filter(exec, same, 1.0F, t.x_view(), t.y_view(4), 0.0F, t.out(8, 4, 3, 3)); });
  require_invalid("x", [&] { gpubatch::conv2d_backward_filter(exec, same.with_groups(3), 1.0F, t.x_view(), t.y_view(), 0.0F, t.out(8, 4, 3, 3)); });
  require_invalid("dw", [&] { gpubatch::conv2d_backward_filter_per_sample(exec, same, 1.0F, t.x_view(), t.y_view(), 0.0F, t.out(8, 4, 3, 3)); });
  require_invalid("dw", [&] { gpubatch::conv2d_backward_filter(exec, same, 1.0F, t.x_view(), t.y_view(), 0.0F, t.out(8, 4, 3, 3, tensor_layout::nhwc)); });
  gpubatch::conv2d_backward_options options;
  options.workspace_bytes = 64;
  require_invalid("options.workspace", [&] { gpubatch::conv2d_backward_filter(exec, same, 1.0F, t.x_view(), t.y_view(), 0.0F, t.out(8, 4, 3, 3), options); });
  CHECK(t.all_untouched());
}

TEST_CASE("conv2d_backward_filter_per_sample_norms and conv2d_backward_bias name what is wrong",
          "[conv][backward][validation]") {
  tensors t;
  std::vector<float> norms(2, -7.0F);
  std::vector<float> workspace(8 * 4 * 3 * 3);
  gpubatch::conv2d_backward_options options;
  options.workspace = workspace.data();
  options.workspace_bytes = workspace.size() * sizeof(float) - 1;
  const gpubatch::tensor4d_shape filters{8, 4, 3, 3};
  require_invalid("options.workspace", [&] { gpubatch::conv2d_backward_filter_per_sample_norms(exec, same, t.x_view(), filters, t.y_view(), norms.data(), options); });
  options.workspace_bytes += 1;
  require_invalid("norms", [&] { gpubatch::conv2d_backward_filter_per_sample_norms(exec, same, t.x_view(), filters, t.y_view(), nullptr, options); });
  require_invalid("filters", [&] { gpubatch::conv2d_backward_filter_per_sample_norms(exec, same, t.x_view(), {8, 3, 3, 3}, t.y_view(), norms.data(), options); });
  require_invalid("dy", [&] { gpubatch::conv2d_backward_filter_per_sample_norms(exec, same, t.x_view(), filters, t.y_view(5), norms.data(), options); });
  CHECK(norms == std::vector<float>(2, -7.0F));
  CHECK(gpubatch::conv2d_backward_filter_norms_workspace_size<float>(filters, 3) ==
        3 * workspace.size() * sizeof(float));
  require_invalid("db", [&] { gpubatch::conv2d_backward_bias(exec, 1.0F, t.y_view(), 0.0F, static_cast<float*>(nullptr)); });
}

TEST_CASE("convolution backward: empty batches touch nothing", "[conv][backward][validation]") {
  tensors t;
  const tensor4d_view<const float> no_samples(t.y.data(), 0, 8, 6, 6, nchw);
  gpubatch::conv2d_backward_data(exec, same, 1.0F, no_samples, t.w_view(), 0.0F, t.out(0, 4, 6, 6));
  gpubatch::conv2d_backward_filter(exec, same, 1.0F, tensor4d_view<const float>(t.x.data(), 0, 4, 6, 6, nchw),
                                   no_samples, 0.0F, t.out(8, 4, 3, 3));
  gpubatch::conv2d_backward_bias(exec, 1.0F, no_samples, 0.0F, t.untouched.data());
  CHECK(t.all_untouched());
}
