/// @file detail/fill/kernels.cuh
/// @brief The CUDA side of fill; included only by translation units compiled by nvcc.
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
GPUBATCH_KERNEL void fill_kernel(T* first, std::size_t count, T value) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    first[i] = value;
  }
}

template <class T>
void launch_fill(T* first, std::size_t count, const T& value, cudaStream_t stream) {
  constexpr unsigned threads = 256;
  // A grid-stride loop: enough blocks to fill the machine, never more than the work needs.
  const std::size_t blocks_needed = (count + threads - 1) / threads;
  const auto blocks = static_cast<unsigned>(std::min<std::size_t>(blocks_needed, 65535));
  launch(fill_kernel<T>, launch_config{blocks, threads, 0, stream}, first, count, value);
  GPUBATCH_CUDA_TRY(cudaGetLastError());
}

}  // namespace detail
GPUBATCH_NAMESPACE_END

GPUBATCH_KERNELS_END
