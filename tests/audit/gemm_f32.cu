// The default-policy GEMM kernels for float (strided, pointer-array, grouped).
#include "audit.hpp"

void audit_gemm_f32(cudaStream_t stream) { gpubatch_audit::gemm_all_forms<float, float>(stream); }
