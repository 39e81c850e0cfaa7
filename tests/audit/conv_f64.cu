// The default-policy convolution kernels for double (implicit GEMM, split-K reduce, depthwise).
#include "audit.hpp"

void audit_conv_f64(cudaStream_t stream) { gpubatch_audit::conv_all_forms<double, double>(stream); }
