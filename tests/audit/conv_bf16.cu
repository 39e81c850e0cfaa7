// The default-policy convolution kernels for gpubatch::bfloat16 (implicit GEMM, split-K reduce, depthwise).
#include "audit.hpp"

void audit_conv_bf16(cudaStream_t stream) { gpubatch_audit::conv_all_forms<gpubatch::bfloat16, gpubatch::bfloat16>(stream); }
