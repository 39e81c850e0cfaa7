#include "../support/host_backend.hpp"
#define GEMM_TA std::int8_t
#define GEMM_TC std::int32_t
#define GEMM_TYPES "i8->i32"
#include "gemm.inc"
