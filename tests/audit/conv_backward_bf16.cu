// The convolution backward kernels (detail/conv/backward_*.cuh) of one element type: a unit
// per type, so that the audit's build compiles them in parallel.
#include "audit.hpp"

void audit_conv_backward_bf16(cudaStream_t stream) {
  gpubatch_audit::conv_backward_all<gpubatch::bfloat16>(stream);
}
