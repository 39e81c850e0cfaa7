// The default-policy GEMM kernels for double (strided, pointer-array, grouped).
#include "audit.hpp"

void audit_gemm_f64(cudaStream_t stream) { gpubatch_audit::gemm_all_forms<double, double>(stream); }
