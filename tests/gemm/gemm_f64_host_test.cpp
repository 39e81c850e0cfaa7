#include "../support/host_backend.hpp"
#define GEMM_TA double
#define GEMM_TC double
#define GEMM_TYPES "f64->f64"
#include "gemm.inc"
