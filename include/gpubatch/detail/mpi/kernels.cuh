/// @file detail/mpi/kernels.cuh
/// @brief The CUDA side of allreduce_mean through CUDA-aware MPI (the division of the sum by
/// the number of ranks); included only by translation units compiled by a CUDA compiler.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/launch.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>

GPUBATCH_KERNELS_BEGIN

GPUBATCH_NAMESPACE_BEGIN
namespace detail {

template <class T>
GPUBATCH_KERNEL void divide_kernel(T* values, std::size_t count, T divisor) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    values[i] = values[i] / divisor;  // a division, as the host path does, not a reciprocal
  }
}

template <class T>
void launch_divide(T* values, std::size_t count, T divisor, cudaStream_t stream) {
  constexpr unsigned threads = 256;
  const std::size_t blocks_needed = (count + threads - 1) / threads;
  const auto blocks = static_cast<unsigned>(std::min<std::size_t>(blocks_needed, 65535));
  launch(divide_kernel<T>, launch_config{blocks, threads, 0, stream}, values, count, divisor);
  GPUBATCH_CUDA_TRY(cudaGetLastError());
}

}  // namespace detail
GPUBATCH_NAMESPACE_END

GPUBATCH_KERNELS_END
