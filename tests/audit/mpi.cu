// The MPI component's kernel (allreduce_mean's division on device memory, float and double). It
// needs only the CUDA runtime, so the audit reaches it without MPI.
#include <gpubatch/detail/mpi/kernels.cuh>

void audit_mpi_divide(cudaStream_t stream) {
  gpubatch::detail::launch_divide(static_cast<float*>(nullptr), 1, 2.0F, stream);
  gpubatch::detail::launch_divide(static_cast<double*>(nullptr), 1, 2.0, stream);
}
