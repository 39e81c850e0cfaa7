// The tensor-core convolution beyond what the per-type tests reach (f16, bf16 and int8 take it
// by default): f32 on TF32 tensor cores, user tensor-core policies, large tiles, per-sample
// filters, and the refusal of f32 on tensor cores without allow_tf32.
#include "../support/cuda_backend.hpp"
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
    for (const conv_case& cc : gpubatch::test::odd_layers()) {
      check_conv<test_backend, gpubatch::half, float, ep::relu, narrow>(
          cc, order, filter_form::per_sample, 1.0, 0.5, ep::relu{});
      check_conv<test_backend, gpubatch::bfloat16, gpubatch::bfloat16, ep::identity, deep>(
          cc, order, filter_form::shared);
      check_conv<test_backend, std::int8_t, std::int32_t, ep::identity, narrow>(cc, order);
    }
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
