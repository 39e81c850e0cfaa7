#include "../support/cuda_backend.hpp"

#define GEMM_EPILOGUE_PART 2  // part 1: gemm_epilogue_cuda_test.cu
#include "gemm_epilogue.inc"
