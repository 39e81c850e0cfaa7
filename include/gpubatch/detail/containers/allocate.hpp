/// @file detail/containers/allocate.hpp
/// @brief Raw allocation for gpubatch's containers: each failure becomes out_of_memory or
/// cuda_error, and each release is non-throwing.
#pragma once

#include <gpubatch/error.hpp>
#include <gpubatch/memory_resource.hpp>
#include <gpubatch/memory_space.hpp>

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <utility>

namespace gpubatch {
/// Internal state shared by every ABI namespace of a program: one per process, so it lives
/// outside them, and its layout depends on no build flag.
namespace detail_shared {

/// The host backend's stand-ins for device and pinned memory: which host allocations gpubatch
/// made as a device_buffer (role device) or as pinned memory (pinned_buffer, pinned_pool,
/// register_host: role pinned). gpubatch::on_host_checked reads it to apply the CUDA backend's
/// memory rules on the host.
class host_role_registry {
 public:
  /// Records [p, p + bytes) as memory of `role`.
  void add(const void* p, std::size_t bytes, memory_space role) {
    const std::lock_guard<std::mutex> lock(mutex_);
    ranges_[reinterpret_cast<std::uintptr_t>(p)] = {reinterpret_cast<std::uintptr_t>(p) + bytes,
                                                    role};
  }
  /// Forgets the range that starts at p.
  void remove(const void* p) noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    ranges_.erase(reinterpret_cast<std::uintptr_t>(p));
  }
  /// The role of the range containing p, memory_space::unknown if none does.
  [[nodiscard]] memory_space find(const void* p) const {
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    const std::lock_guard<std::mutex> lock(mutex_);
    auto it = ranges_.upper_bound(address);
    if (it == ranges_.begin()) return memory_space::unknown;
    --it;
    return address < it->second.first ? it->second.second : memory_space::unknown;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::pair<std::uintptr_t, memory_space>> ranges_;
};

inline host_role_registry& host_roles() {
  static host_role_registry registry;
  return registry;
}

/// The calls behind a memory_resource_ref, with the rules memory_resource.hpp states.
struct resource_calls {
  /// `bytes` (> 0) from `r`; `stream` is the stream of device memory, nullptr for memory that
  /// is not stream-ordered.
  /// @throws out_of_memory if the resource returns nullptr; invalid_argument naming "resource"
  ///         if it returns memory aligned to less than it was asked; whatever it throws
  static void* allocate(const memory_resource_ref& r, std::size_t bytes,
                        const cudaStream_t* stream, const char* where) {
    const resource_ops& ops = *r.ops_;
    constexpr std::size_t a = memory_resource_ref::alignment;
    void* p = nullptr;
    if (stream != nullptr && ops.allocate_async != nullptr) {
      p = ops.allocate_async(r.object_, bytes, a, *stream);
    } else if (ops.allocate != nullptr) {
      p = ops.allocate(r.object_, bytes, a);
    } else {
      p = ops.allocate_async(r.object_, bytes, a, cudaStream_t{});
    }
    if (p == nullptr) {
      throw out_of_memory(where, bytes, 0);
    }
    if (reinterpret_cast<std::uintptr_t>(p) % a != 0) {
      deallocate(r, p, bytes, stream);
      throw invalid_argument("resource", "returned " + std::string(where) +
                                             " memory aligned to less than the " +
                                             std::to_string(a) + " bytes asked for");
    }
    return p;
  }

  /// Hands `p` back the way allocate() took it. A synchronous resource gets device memory only
  /// once the work queued on its stream is done.
  static void deallocate(const memory_resource_ref& r, void* p, std::size_t bytes,
                         const cudaStream_t* stream) noexcept {
    const resource_ops& ops = *r.ops_;
    constexpr std::size_t a = memory_resource_ref::alignment;
    try {
      if (stream != nullptr && ops.deallocate_async != nullptr) {
        ops.deallocate_async(r.object_, p, bytes, a, *stream);
      } else if (ops.deallocate != nullptr) {
        if (stream != nullptr) {
          GPUBATCH_CUDA_TRY_NOTHROW(cudaStreamSynchronize(*stream));
        }
        ops.deallocate(r.object_, p, bytes, a);
      } else {
        ops.deallocate_async(r.object_, p, bytes, a, cudaStream_t{});
      }
    } catch (...) {
      // Called from destructors: nothing can be reported, and the memory is the resource's now.
    }
  }

  /// Refuses a resource that declares CCCL memory-space properties without `needed` (one of
  /// declares_device_accessible, declares_host_accessible). Declaring none says nothing.
  static void require(const memory_resource_ref& r, unsigned needed, const char* parameter) {
    if (!r) {
      return;
    }
    const unsigned declared = r.ops_->declared;
    if (declared != 0 && (declared & needed) == 0) {
      throw invalid_argument(parameter,
                             std::string("declares memory that is not ") +
                                 (needed == declares_device_accessible
                                      ? "device accessible (cuda::mr::device_accessible)"
                                      : "host accessible (cuda::mr::host_accessible)") +
                                 ", and this memory must be");
    }
  }
};

}  // namespace detail_shared
}  // namespace gpubatch

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

/// Host memory standing in for device or pinned memory on the host backend (`role`); the
/// registry remembers it for gpubatch::on_host_checked.
inline void* allocate_host_in_role(std::size_t bytes, memory_space role) {
  void* p = allocate_host(bytes);
  if (p != nullptr) {
    try {
      detail_shared::host_roles().add(p, bytes, role);
    } catch (...) {
      deallocate_host(p);
      throw;
    }
  }
  return p;
}

inline void deallocate_host_in_role(void* p) noexcept {
  if (p != nullptr) {
    detail_shared::host_roles().remove(p);
    deallocate_host(p);
  }
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

// ---------------------------------------------------------------------------------------------
// Through a memory_resource_ref (memory_resource.hpp says the rules)

using detail_shared::declares_device_accessible;
using detail_shared::declares_host_accessible;
using detail_shared::resource_calls;

/// Device memory for work on `stream`: from `resource`, or cudaMallocAsync without one.
inline void* allocate_device(std::size_t bytes, cudaStream_t stream,
                             const memory_resource_ref& resource) {
  if (!resource) {
    return allocate_device(bytes, stream);
  }
  return bytes == 0 ? nullptr : resource_calls::allocate(resource, bytes, &stream, "device");
}

inline void deallocate_device(void* p, std::size_t bytes, cudaStream_t stream,
                              const memory_resource_ref& resource) noexcept {
  if (!resource) {
    deallocate_device(p, stream);
  } else if (p != nullptr) {
    resource_calls::deallocate(resource, p, bytes, &stream);
  }
}

/// Pinned host memory: from `resource`, or cudaMallocHost without one.
inline void* allocate_pinned(std::size_t bytes, const memory_resource_ref& resource) {
  if (!resource) {
    return allocate_pinned(bytes);
  }
  return bytes == 0 ? nullptr : resource_calls::allocate(resource, bytes, nullptr, "pinned host");
}

inline void deallocate_pinned(void* p, std::size_t bytes,
                              const memory_resource_ref& resource) noexcept {
  if (!resource) {
    deallocate_pinned(p);
  } else if (p != nullptr) {
    resource_calls::deallocate(resource, p, bytes, nullptr);
  }
}

/// The host backend's stand-in for device or pinned memory: from `resource` (host memory), or
/// aligned host memory without one; recorded in the role registry either way.
inline void* allocate_host_in_role(std::size_t bytes, memory_space role,
                                   const memory_resource_ref& resource) {
  if (!resource) {
    return allocate_host_in_role(bytes, role);
  }
  if (bytes == 0) {
    return nullptr;
  }
  void* p = resource_calls::allocate(resource, bytes, nullptr, "host");
  try {
    detail_shared::host_roles().add(p, bytes, role);
  } catch (...) {
    resource_calls::deallocate(resource, p, bytes, nullptr);
    throw;
  }
  return p;
}

inline void deallocate_host_in_role(void* p, std::size_t bytes,
                                    const memory_resource_ref& resource) noexcept {
  if (!resource) {
    deallocate_host_in_role(p);
  } else if (p != nullptr) {
    detail_shared::host_roles().remove(p);
    resource_calls::deallocate(resource, p, bytes, nullptr);
  }
}

}  // namespace detail
GPUBATCH_NAMESPACE_END
