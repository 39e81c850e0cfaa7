// The default-policy convolution kernels for gpubatch::half (implicit GEMM, split-K reduce, depthwise).
#include "audit.hpp"

void audit_conv_f16(cudaStream_t stream) { gpubatch_audit::conv_all_forms<gpubatch::half, gpubatch::half>(stream); }
