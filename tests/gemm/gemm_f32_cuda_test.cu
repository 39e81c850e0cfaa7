#include "../support/cuda_backend.hpp"
#define GEMM_TA float
#define GEMM_TC float
#define GEMM_TYPES "f32->f32"
#include "gemm.inc"
