// The default-policy GEMM kernels for gpubatch::bfloat16 (strided, pointer-array, grouped).
#include "audit.hpp"

void audit_gemm_bf16(cudaStream_t stream) { gpubatch_audit::gemm_all_forms<gpubatch::bfloat16, gpubatch::bfloat16>(stream); }
