// The default-policy GEMM kernels for gpubatch::half (strided, pointer-array, grouped).
#include "audit.hpp"

void audit_gemm_f16(cudaStream_t stream) { gpubatch_audit::gemm_all_forms<gpubatch::half, gpubatch::half>(stream); }
