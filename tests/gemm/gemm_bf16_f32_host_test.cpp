#include "../support/host_backend.hpp"
#define GEMM_TA gpubatch::bfloat16
#define GEMM_TC float
#define GEMM_TYPES "bf16->f32"
#include "gemm.inc"
