/// @file memory_resource.hpp
/// @brief Your memory resource behind gpubatch's allocations: device_buffer, pinned_buffer,
/// pinned_pool and pipeline take a memory_resource_ref, so an RMM resource, a PyTorch caching
/// allocator behind a small adaptor, or a resource of your own serves every byte they allocate.
///
/// A resource is any object with the member functions of CCCL's `cuda::mr` resources:
///
/// ```cpp
/// void* allocate(std::size_t bytes, std::size_t alignment);                  // synchronous
/// void deallocate(void* p, std::size_t bytes, std::size_t alignment);
/// void* allocate_async(std::size_t bytes, std::size_t alignment, cuda::stream_ref stream);
/// void deallocate_async(void* p, std::size_t bytes, std::size_t alignment,
///                       cuda::stream_ref stream);                             // stream-ordered
/// ```
///
/// One pair is enough; RMM's device resources and `cuda::mr::async_resource_ref` have both,
/// `std::pmr::memory_resource` has the synchronous pair. gpubatch needs neither CCCL's concepts
/// nor the macro that enables them (LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE); a program
/// that defines it may pass `cuda::mr::resource_ref` and `cuda::mr::async_resource_ref` objects
/// like any resource, and gpubatch then also reads the `cuda::mr::device_accessible` and
/// `cuda::mr::host_accessible` properties a resource declares.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/detail/containers/resource_ops.hpp>

#include <cstddef>
#include <memory>
#include <type_traits>

namespace gpubatch {

/// @brief Whether R has the synchronous pair `allocate(bytes, alignment)` /
/// `deallocate(p, bytes, alignment)`.
template <class R>
inline constexpr bool is_memory_resource_v = detail_shared::has_synchronous_shape<R>::value;

/// @brief Whether R has the stream-ordered pair `allocate_async(bytes, alignment, stream)` /
/// `deallocate_async(p, bytes, alignment, stream)`, with `stream` a `cuda::stream_ref`.
template <class R>
inline constexpr bool is_async_memory_resource_v =
    detail_shared::has_stream_ordered_shape<R>::value;

/// @brief A non-owning, type-erased reference to a memory resource; the empty reference means
/// gpubatch's own allocation (cudaMallocAsync, cudaMallocHost or cudaHostAlloc, aligned host
/// memory), which is the default everywhere.
///
/// The resource is referred to, never copied: it must outlive every buffer, pool and pipeline
/// given it (and every buffer borrowed from such a pool), as with `cuda::mr::resource_ref`.
/// A temporary is refused for that reason. A resource shared between threads (a pool or
/// pipeline used from several) must be thread-safe.
///
/// How gpubatch calls it:
/// - Every request asks for memory_resource_ref::alignment (256) bytes of alignment, and none
///   is for 0 bytes. nullptr in return becomes out_of_memory; memory aligned to less than
///   asked is handed back and refused with invalid_argument naming "resource".
/// - Device memory of the CUDA backend (device_buffer with cuda_exec, a pipeline's device ring)
///   is allocated and freed stream-ordered on the buffer's stream when the resource has the
///   stream-ordered pair. A synchronous-only resource is called directly, and the buffer's
///   stream is synchronised before its memory goes back, so no queued work still uses it.
/// - Pinned and host memory are not stream-ordered: the synchronous pair is used, or the
///   stream-ordered one on the default stream if that is all the resource has.
/// - An exception the resource throws propagates unchanged (after gpubatch has handed back
///   what it already took); deallocation runs in destructors, so an exception from it is
///   swallowed.
/// - On the host backend (host_exec) the resource serves the same allocations, and must return
///   host memory: the same program then runs on both backends with one counting or logging
///   resource.
class memory_resource_ref {
 public:
  /// @brief The alignment gpubatch asks of a resource: what cudaMalloc guarantees, enough for
  /// any element type and for coalesced access.
  static constexpr std::size_t alignment = 256;

  /// @brief The empty reference: gpubatch's own allocation.
  constexpr memory_resource_ref() noexcept = default;

  /// @brief Refers to `resource`, which must outlive every user of this reference.
  /// @tparam Resource has the synchronous pair, the stream-ordered pair, or both
  template <class Resource, class Source = detail_shared::property_source,
            std::enable_if_t<!std::is_same_v<std::remove_cv_t<Resource>, memory_resource_ref> &&
                                 (is_memory_resource_v<Resource> ||
                                  is_async_memory_resource_v<Resource>),
                             int> = 0>
  memory_resource_ref(Resource& resource) noexcept  // NOLINT(google-explicit-constructor)
      : object_(const_cast<void*>(static_cast<const volatile void*>(std::addressof(resource)))),
        ops_(&detail_shared::resource_ops_for<Resource, Source>::table) {}

  /// @brief A temporary dies before the memory it would serve is handed back.
  template <class Resource,
            std::enable_if_t<!std::is_lvalue_reference_v<Resource> &&
                                 (is_memory_resource_v<Resource> ||
                                  is_async_memory_resource_v<Resource>),
                             int> = 0>
  memory_resource_ref(Resource&& resource) = delete;

  /// @brief Whether a resource is referred to (false: gpubatch's own allocation).
  [[nodiscard]] explicit operator bool() const noexcept { return ops_ != nullptr; }
  /// @brief Whether the resource has the stream-ordered pair.
  [[nodiscard]] bool stream_ordered() const noexcept {
    return ops_ != nullptr && ops_->allocate_async != nullptr;
  }
  /// @brief Whether the resource has the synchronous pair.
  [[nodiscard]] bool synchronous() const noexcept {
    return ops_ != nullptr && ops_->allocate != nullptr;
  }
  /// @brief The resource referred to (nullptr when empty).
  [[nodiscard]] void* get() const noexcept { return object_; }

 private:
  friend struct detail_shared::resource_calls;
  void* object_ = nullptr;
  const detail_shared::resource_ops* ops_ = nullptr;
};

}  // namespace gpubatch
