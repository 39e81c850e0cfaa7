// The tensor-core convolution beyond what the per-type tests reach (f16, bf16 and int8 take it
// by default): f32 on TF32 tensor cores, user tensor-core policies, large tiles, per-sample
// filters, and the refusal of f32 on tensor cores without allow_tf32.
#include "../support/cuda_backend.hpp"
#include "../support/race_check.hpp"
#include "conv_check.hpp"

namespace {
using gpubatch::tensor_core_policy;
using gpubatch::tensor_layout;
using gpubatch::test::check_conv;
using gpubatch::test::conv_case;
using gpubatch::test::filter_form;
using gpubatch::test::test_backend;
namespace ep = gpubatch::epilogue;
constexpr tensor_layout layouts[] = {tensor_layout::nhwc, tensor_layout::nchw};
}  // namespace

TEST_CASE("conv2d f32 on TF32 tensor cores", "[conv][tensor_core]") {
  for (const tensor_layout order : layouts) {
    for (const conv_case& cc : gpubatch::test::network_layers()) {
      check_conv<test_backend, float, float, ep::identity>(cc, order, filter_form::shared, 1.0, 0.5, ep::identity{}, nullptr,
                                             nullptr, /*allow_tf32=*/true);
    }
    for (const conv_case& cc : gpubatch::test::odd_layers()) {
      check_conv<test_backend, float, float, ep::identity>(cc, order, filter_form::per_sample, 1.0, 0.0, ep::identity{},
                                             nullptr, nullptr, /*allow_tf32=*/true);
    }
  }
}

TEST_CASE("conv2d with user tensor-core policies", "[conv][tensor_core]") {
  using narrow = tensor_core_policy<32, 32, 32, 2, 2, 3>;  // 3 GEMMs per launch
  using deep = tensor_core_policy<128, 64, 64, 4, 4>;
  for (const tensor_layout order : layouts) {
    for (const conv_case& cc :
         gpubatch::test::sampled_in_race_check(gpubatch::test::odd_layers(), 3)) {
      check_conv<test_backend, gpubatch::half, float, ep::relu, narrow>(
          cc, order, filter_form::per_sample, 1.0, 0.5, ep::relu{});
      check_conv<test_backend, gpubatch::bfloat16, gpubatch::bfloat16, ep::identity, deep>(
          cc, order, filter_form::shared);
      check_conv<test_backend, std::int8_t, std::int32_t, ep::identity, narrow>(cc, order);
    }
  }
}

TEST_CASE("conv2d NCHW on tensor cores: the gather staged M-major", "[conv][tensor_core]") {
  // Input rows of 16 (whole 16-byte chunks of output columns for f16 and bf16, one for int8):
  // 1x1 layers take every chunk with cp.async, 3x3 the taps whose column is aligned, the 1x9
  // layer padded on the right has aligned runs that leave the input row (element by element),
  // and column stride 2 none; TF32 chunks are 4 columns.
  const auto base = gpubatch::conv2d_params{};
  const conv_case layers[] = {
      {"1x1 16->24", 2, 16, 6, 16, 24, 1, 1, base},
      {"3x3 8->8", 2, 8, 5, 16, 8, 3, 3, base.with_padding(1, 1)},
      {"1x9 right-padded", 1, 8, 3, 16, 8, 1, 9, base.with_padding(0, 0, 0, 8)},
      {"3x3 stride 1x2", 2, 8, 5, 16, 8, 3, 3, base.with_padding(1, 1).with_stride(1, 2)},
      {"1x1 32x32", 1, 16, 32, 32, 16, 1, 1, base},
  };
  for (const conv_case& cc : layers) {
    check_conv<test_backend, gpubatch::half, float>(cc, tensor_layout::nchw, filter_form::shared,
                                                    1.0, 0.5);
    check_conv<test_backend, gpubatch::bfloat16, gpubatch::bfloat16>(cc, tensor_layout::nchw,
                                                                     filter_form::per_sample);
    check_conv<test_backend, std::int8_t, std::int32_t>(cc, tensor_layout::nchw);
    check_conv<test_backend, float, float, ep::identity>(cc, tensor_layout::nchw,
                                                         filter_form::shared, 1.0, 0.0,
                                                         ep::identity{}, nullptr, nullptr,
                                                         /*allow_tf32=*/true);
  }
}

TEST_CASE("conv2d: the large tensor-core tile", "[conv][tensor_core]") {
  // 4 x 28 x 28 = 3136 output pixels x 256 channels: the large size class.
  const conv_case cc{"large 3x3 64->256", 4, 64, 28, 28, 256, 3, 3,
                     gpubatch::conv2d_params{}.with_padding(1, 1)};
  for (const tensor_layout order : layouts) {
    check_conv<test_backend, gpubatch::half, gpubatch::half>(cc, order);
  }
}

TEST_CASE("a tensor-core conv2d policy with f32 needs allow_tf32", "[conv][tensor_core]") {
  const conv_case cc = gpubatch::test::odd_layers()[0];
  // With it, the layer runs; the workspace query answers 0 (no split-K on tensor cores).
  std::size_t bytes = 1;
  check_conv<test_backend, float, float, ep::identity, tensor_core_policy<32, 32, 16, 2, 2>>(
      cc, tensor_layout::nhwc, filter_form::shared, 1.0, 0.0, ep::identity{}, nullptr, &bytes,
      /*allow_tf32=*/true);
  CHECK(bytes == 0);
  try {
    check_conv<test_backend, float, float, ep::identity, tensor_core_policy<32, 32, 16, 2, 2>>(
        cc, tensor_layout::nhwc);
    FAIL("expected gpubatch::invalid_argument");
  } catch (const gpubatch::invalid_argument& e) {
    CHECK(e.parameter() == "options");
  }
}
