/// @file detail/containers/resource_ops.hpp
/// @brief What memory_resource_ref erases: the shape checks of a resource's member functions,
/// one table of calls per resource type, and the memory-space properties a resource declares.
///
/// memory_resource_ref is one type for the whole program (a pipeline_options built in one
/// translation unit may be used in another, compiled with other flags), so what it holds lives
/// outside the ABI namespaces, and its layout depends on no build flag.
#pragma once

#include <gpubatch/config.hpp>

#include <cuda/stream_ref>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <type_traits>
#include <utility>

// CCCL's resource concepts and properties exist only with this opt-in macro; gpubatch reads the
// properties when the program opted in, and never defines the macro itself.
#if defined(LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE)
#include <cuda/memory_resource>
#define GPUBATCH_DETAIL_CCCL_MEMORY_RESOURCE 1
#else
#define GPUBATCH_DETAIL_CCCL_MEMORY_RESOURCE 0
#endif

namespace gpubatch {
namespace detail_shared {

template <class R, class = void>
struct has_synchronous_shape : std::false_type {};
template <class R>
struct has_synchronous_shape<
    R, std::void_t<decltype(std::declval<R&>().allocate(std::size_t{}, std::size_t{})),
                   decltype(std::declval<R&>().deallocate(static_cast<void*>(nullptr),
                                                          std::size_t{}, std::size_t{}))>>
    : std::is_convertible<decltype(std::declval<R&>().allocate(std::size_t{}, std::size_t{})),
                          void*> {};

template <class R, class = void>
struct has_stream_ordered_shape : std::false_type {};
template <class R>
struct has_stream_ordered_shape<
    R, std::void_t<decltype(std::declval<R&>().allocate_async(std::size_t{}, std::size_t{},
                                                              std::declval<cuda::stream_ref>())),
                   decltype(std::declval<R&>().deallocate_async(
                       static_cast<void*>(nullptr), std::size_t{}, std::size_t{},
                       std::declval<cuda::stream_ref>()))>>
    : std::is_convertible<decltype(std::declval<R&>().allocate_async(
                              std::size_t{}, std::size_t{}, std::declval<cuda::stream_ref>())),
                          void*> {};

/// Makes the calls behind a memory_resource_ref (allocate.hpp).
struct resource_calls;

/// Bits of what a resource declares through CCCL's properties.
inline constexpr unsigned declares_device_accessible = 1U;
inline constexpr unsigned declares_host_accessible = 2U;

/// Calls into one resource type; a missing pair is nullptr.
struct resource_ops {
  void* (*allocate)(void*, std::size_t, std::size_t);
  void (*deallocate)(void*, void*, std::size_t, std::size_t);
  void* (*allocate_async)(void*, std::size_t, std::size_t, cudaStream_t);
  void (*deallocate_async)(void*, void*, std::size_t, std::size_t, cudaStream_t);
  unsigned declared;
};

/// Tag types that differ with the opt-in macro, so a resource type's table built with CCCL's
/// properties and one built without are different template specialisations: translation units
/// that disagree on the macro do not break the one-definition rule.
struct properties_from_cccl {};
struct properties_unknown {};
#if GPUBATCH_DETAIL_CCCL_MEMORY_RESOURCE
using property_source = properties_from_cccl;
#else
using property_source = properties_unknown;
#endif

template <class R, class Source>
constexpr unsigned declared_properties() noexcept {
#if GPUBATCH_DETAIL_CCCL_MEMORY_RESOURCE
  if constexpr (std::is_same_v<Source, properties_from_cccl>) {
    unsigned bits = 0;
    if constexpr (cuda::has_property<R, cuda::mr::device_accessible>) {
      bits |= declares_device_accessible;
    }
    if constexpr (cuda::has_property<R, cuda::mr::host_accessible>) {
      bits |= declares_host_accessible;
    }
    return bits;
  } else {
    return 0;
  }
#else
  return 0;
#endif
}

template <class R, class Source>
struct resource_ops_for {
  static void* allocate(void* r, std::size_t bytes, std::size_t alignment) {
    return static_cast<void*>(static_cast<R*>(r)->allocate(bytes, alignment));
  }
  static void deallocate(void* r, void* p, std::size_t bytes, std::size_t alignment) {
    static_cast<R*>(r)->deallocate(p, bytes, alignment);
  }
  static void* allocate_async(void* r, std::size_t bytes, std::size_t alignment, cudaStream_t s) {
    return static_cast<void*>(
        static_cast<R*>(r)->allocate_async(bytes, alignment, cuda::stream_ref(s)));
  }
  static void deallocate_async(void* r, void* p, std::size_t bytes, std::size_t alignment,
                               cudaStream_t s) {
    static_cast<R*>(r)->deallocate_async(p, bytes, alignment, cuda::stream_ref(s));
  }

  static constexpr resource_ops make() noexcept {
    resource_ops ops{nullptr, nullptr, nullptr, nullptr, declared_properties<R, Source>()};
    if constexpr (has_synchronous_shape<R>::value) {
      ops.allocate = &allocate;
      ops.deallocate = &deallocate;
    }
    if constexpr (has_stream_ordered_shape<R>::value) {
      ops.allocate_async = &allocate_async;
      ops.deallocate_async = &deallocate_async;
    }
    return ops;
  }
  static constexpr resource_ops table = make();
};

}  // namespace detail_shared
}  // namespace gpubatch
