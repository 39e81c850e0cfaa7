// The convolution backward kernels (detail/conv/backward_*.cuh) for every element type.
#include "audit.hpp"

void audit_conv_backward(cudaStream_t stream) {
  gpubatch_audit::conv_backward_all<float>(stream);
  gpubatch_audit::conv_backward_all<double>(stream);
  gpubatch_audit::conv_backward_all<gpubatch::half>(stream);
  gpubatch_audit::conv_backward_all<gpubatch::bfloat16>(stream);
}
