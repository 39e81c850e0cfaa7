// The fill kernel for every element type.
#include "audit.hpp"

void audit_fill(cudaStream_t stream) {
  gpubatch_audit::fill_one<float>(stream);
  gpubatch_audit::fill_one<double>(stream);
  gpubatch_audit::fill_one<gpubatch::half>(stream);
  gpubatch_audit::fill_one<gpubatch::bfloat16>(stream);
  gpubatch_audit::fill_one<std::int8_t>(stream);
  gpubatch_audit::fill_one<std::int32_t>(stream);
}
