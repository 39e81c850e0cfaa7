// The device paths of gpubatch::mpi, compiled by nvcc (the build is the test: no GPU runs them
// in CI): allreduce_mean on device buffers through MPI (staged, or CUDA-aware with the division
// kernel) and, when NCCL is found, through ncclAllReduce.
#include <gpubatch/mpi.hpp>

namespace {
template <class T>
void device_paths(gpubatch::cuda_exec exec, gpubatch::span<T> values,
                  const gpubatch::mpi::communicator& comm) {
  gpubatch::mpi::allreduce_mean(exec, values, comm);
#if defined(GPUBATCH_HAS_NCCL)
  const gpubatch::mpi::nccl_communicator nccl(comm);
  gpubatch::mpi::allreduce_mean(exec, values, nccl.get());
#endif
}
}  // namespace

void gpubatch_mpi_device_paths(gpubatch::cuda_exec exec, const gpubatch::mpi::communicator& comm,
                               gpubatch::span<float> f32, gpubatch::span<double> f64,
                               gpubatch::span<gpubatch::half> f16,
                               gpubatch::span<gpubatch::bfloat16> bf16) {
  device_paths(exec, f32, comm);
  device_paths(exec, f64, comm);
  device_paths(exec, f16, comm);
  device_paths(exec, bf16, comm);
}
