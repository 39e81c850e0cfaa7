// The default-policy convolution kernels for float (implicit GEMM, split-K reduce, depthwise).
#include "audit.hpp"

void audit_conv_f32(cudaStream_t stream) { gpubatch_audit::conv_all_forms<float, float>(stream); }
