// The default-policy GEMM kernels for std::int8_t (strided, pointer-array, grouped).
#include "audit.hpp"

void audit_gemm_i8(cudaStream_t stream) { gpubatch_audit::gemm_all_forms<std::int8_t, std::int32_t>(stream); }
