#include "../support/cuda_backend.hpp"

#define GEMM_EPILOGUE_PART 1  // part 2: gemm_epilogue_residual_cuda_test.cu
#include "gemm_epilogue.inc"

TEST_CASE("gemm_grouped on the CUDA backend needs size bounds", "[gemm]") {
  gpubatch::device_buffer<gpubatch::gemm_problem<float, float, float>> problems(2, test_backend::exec());
  try {
    gpubatch::gemm_grouped(test_backend::exec(), gpubatch::grouped_gemm_layout{}, 1.0F,
                           problems.data(), 2, 0.0F);
    FAIL("no exception");
  } catch (const gpubatch::invalid_argument& e) {
    CHECK(e.parameter() == "bounds");
  }
}
