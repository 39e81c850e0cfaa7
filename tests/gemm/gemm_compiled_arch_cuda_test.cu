// A program whose kernels were compiled only for an architecture without tensor cores (sm_75,
// nvcc's default), running on a device that has them: dispatch decides from the code that was
// compiled, not from the device alone. f16, bf16 and int8 GEMM and convolution refuse with a
// clear error instead of launching tensor-core kernels that trap; f32 with allow_tf32 stays on
// SIMT cores. Built for the emulated device twice: as sm_75 code and as sm_90 code, each on an
// H100-class device (tests/CMakeLists.txt).
#include "../support/cuda_backend.hpp"
#include "gemm_check.hpp"

namespace {
using gpubatch::half;
using gpubatch::index_t;
using gpubatch::layout;
using gpubatch::op;
using gpubatch::test::batch_form;
using gpubatch::test::gemm_case;
using gpubatch::test::test_backend;

constexpr bool tensor_core_code = GPUBATCH_DEVICE_ARCH >= 800;
}  // namespace

TEST_CASE("f16, bf16 and int8 gemm run on tensor cores only where that code was compiled",
          "[gemm][arch]") {
  const batch_form form = GENERATE(batch_form::strided, batch_form::grouped);
  const gemm_case c{40, 72, 48, 3, op::none, op::none, layout::row_major, layout::col_major,
                    layout::row_major, 1.0, 0.5, form};
  if constexpr (tensor_core_code) {
    gpubatch::test::check_gemm<test_backend, half, half>(c);
    gpubatch::test::check_gemm<test_backend, gpubatch::bfloat16, float>(c);
    gpubatch::test::check_gemm<test_backend, std::int8_t, std::int32_t>(c);
  } else {
    const auto refused = gpubatch::test::Contains("CMAKE_CUDA_ARCHITECTURES");
    CHECK_THROWS_WITH((gpubatch::test::check_gemm<test_backend, half, half>(c)), refused);
    CHECK_THROWS_WITH((gpubatch::test::check_gemm<test_backend, gpubatch::bfloat16, float>(c)),
                      refused);
    CHECK_THROWS_WITH((gpubatch::test::check_gemm<test_backend, std::int8_t, std::int32_t>(c)),
                      refused);
  }
  // Nothing trapped: the device is still usable.
  test_backend::synchronize();
}

TEST_CASE("f32 gemm with allow_tf32 runs wherever it is compiled", "[gemm][arch]") {
  // TF32 is allowed, not required: without tensor-core code it runs on SIMT cores.
  const batch_form form = GENERATE(batch_form::strided, batch_form::grouped);
  gemm_case c{70, 33, 90, 2, op::transpose, op::none, layout::row_major, layout::row_major,
              layout::col_major, 1.0, 0.0, form};
  c.allow_tf32 = true;
  gpubatch::test::check_gemm<test_backend, float, float>(c);
}
