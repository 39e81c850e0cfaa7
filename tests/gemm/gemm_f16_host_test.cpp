#include "../support/host_backend.hpp"
#define GEMM_TA gpubatch::half
#define GEMM_TC gpubatch::half
#define GEMM_TYPES "f16->f16"
#include "gemm.inc"
