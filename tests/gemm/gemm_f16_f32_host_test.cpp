#include "../support/host_backend.hpp"
#define GEMM_TA gpubatch::half
#define GEMM_TC float
#define GEMM_TYPES "f16->f32"
#include "gemm.inc"
