/// @file detail/containers/allocate.hpp
/// @brief Raw allocation for gpubatch's containers: each failure becomes out_of_memory or
/// cuda_error, and each release is non-throwing.
#pragma once

#include <gpubatch/error.hpp>

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstddef>
#include <limits>
#include <new>

GPUBATCH_NAMESPACE_BEGIN
namespace detail {

/// Alignment of host allocations: a cache line, and enough for any vector load.
inline constexpr std::size_t host_alignment = 64;

/// Bytes for `count` elements of `element_size`; an overflowing request is one no allocator can
/// satisfy, so it is reported as out_of_memory (saying it overflowed) rather than wrapped.
inline std::size_t checked_bytes(std::size_t count, std::size_t element_size, const char* where) {
  if (element_size != 0 && count > std::numeric_limits<std::size_t>::max() / element_size) {
    throw out_of_memory::size_overflow(where, count, element_size);
  }
  return count * element_size;
}

/// Physical host memory currently available, for out_of_memory messages (0 if unknown).
inline std::size_t host_bytes_free() noexcept {
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  return (pages > 0 && page_size > 0) ? static_cast<std::size_t>(pages) * page_size : 0;
}

/// Device memory currently free on the current device (0 if it cannot be queried).
inline std::size_t device_bytes_free() noexcept {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return free_bytes;
}

inline void* allocate_host(std::size_t bytes) {
  if (bytes == 0) {
    return nullptr;
  }
  void* p = ::operator new(bytes, std::align_val_t{host_alignment}, std::nothrow);
  if (p == nullptr) {
    throw out_of_memory("host", bytes, host_bytes_free());
  }
  return p;
}

inline void deallocate_host(void* p) noexcept {
  ::operator delete(p, std::align_val_t{host_alignment});
}

inline void* allocate_pinned(std::size_t bytes) {
  if (bytes == 0) {
    return nullptr;
  }
  void* p = nullptr;
  const cudaError_t status = cudaMallocHost(&p, bytes);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw out_of_memory("pinned host", bytes, host_bytes_free());
  }
  throw_on_cuda_error(status, "cudaMallocHost", __FILE__, __LINE__);
  return p;
}

inline void deallocate_pinned(void* p) noexcept {
  if (p != nullptr) {
    GPUBATCH_CUDA_TRY_NOTHROW(cudaFreeHost(p));
  }
}

/// Stream-ordered device allocation: the memory may be used by work on `stream` at once, and by
/// other streams after they synchronise with it.
inline void* allocate_device(std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) {
    return nullptr;
  }
  void* p = nullptr;
  const cudaError_t status = cudaMallocAsync(&p, bytes, stream);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw out_of_memory("device", bytes, device_bytes_free());
  }
  throw_on_cuda_error(status, "cudaMallocAsync", __FILE__, __LINE__);
  return p;
}

/// Orders all work issued to `waiter` from now on after the work already issued to `producer`.
/// @throws cuda_error
inline void stream_wait(cudaStream_t waiter, cudaStream_t producer) {
  cudaEvent_t event = nullptr;
  GPUBATCH_CUDA_TRY(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  const cudaError_t recorded = cudaEventRecord(event, producer);
  const cudaError_t waited =
      recorded == cudaSuccess ? cudaStreamWaitEvent(waiter, event, 0) : recorded;
  GPUBATCH_CUDA_TRY_NOTHROW(cudaEventDestroy(event));  // released once the wait is satisfied
  GPUBATCH_CUDA_TRY(waited);
}

inline void deallocate_device(void* p, cudaStream_t stream) noexcept {
  if (p != nullptr) {
    GPUBATCH_CUDA_TRY_NOTHROW(cudaFreeAsync(p, stream));
  }
}

}  // namespace detail
GPUBATCH_NAMESPACE_END
