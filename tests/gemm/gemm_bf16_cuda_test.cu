#include "../support/cuda_backend.hpp"
#define GEMM_TA gpubatch::bfloat16
#define GEMM_TC gpubatch::bfloat16
#define GEMM_TYPES "bf16->bf16"
#include "gemm.inc"
