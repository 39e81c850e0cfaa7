#include "../support/host_backend.hpp"

#include "gemm_epilogue.inc"
