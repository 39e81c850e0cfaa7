// The default-policy convolution kernels for std::int8_t (implicit GEMM, split-K reduce, depthwise).
#include "audit.hpp"

void audit_conv_i8(cudaStream_t stream) { gpubatch_audit::conv_all_forms<std::int8_t, std::int32_t>(stream); }
