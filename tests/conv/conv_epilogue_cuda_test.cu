#include "../support/cuda_backend.hpp"

#define CONV_EPILOGUE_PART 1  // part 2: conv_epilogue_policy_cuda_test.cu
#include "conv_epilogue.inc"
