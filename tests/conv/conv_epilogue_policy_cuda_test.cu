#include "../support/cuda_backend.hpp"

#define CONV_EPILOGUE_PART 2  // part 1: conv_epilogue_cuda_test.cu
#include "conv_epilogue.inc"
