/// @file detail/views/validate.hpp
/// @brief Host-side checks shared by every view constructor, and the container adapters that
/// let views be built from gpubatch containers, std::vector and thrust vectors alike.
#pragma once

#include <gpubatch/error.hpp>
#include <gpubatch/memory_space.hpp>

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

GPUBATCH_NAMESPACE_BEGIN
namespace detail {

inline void require_nonnegative(const char* parameter, std::int64_t value) {
  if (value < 0) {
    throw invalid_argument(parameter, std::to_string(value) + " is negative");
  }
}

/// A view spanning `span` elements needs data unless it is empty.
inline void require_data(const void* data, std::int64_t span) {
  if (data == nullptr && span > 0) {
    throw invalid_argument("data", "null pointer for a view spanning " + std::to_string(span) +
                                       " elements");
  }
}

/// A view built over a container must fit inside it.
inline void require_fits(std::int64_t span, std::size_t container_size) {
  if (span > 0 && static_cast<std::uint64_t>(span) > container_size) {
    throw invalid_argument("container", "holds " + std::to_string(container_size) +
                                            " elements but the view spans " +
                                            std::to_string(span));
  }
}

/// Plain pointers pass through; fancy pointers (thrust::device_ptr and the like) expose get().
template <class P>
auto to_address(P p) noexcept {
  if constexpr (std::is_pointer_v<P>) {
    return p;
  } else {
    return p.get();
  }
}

template <class C, class = void>
struct has_space_member : std::false_type {};
template <class C>
struct has_space_member<C, std::void_t<decltype(std::declval<const C&>().space())>>
    : std::true_type {};

/// Where a contiguous container's elements live: gpubatch containers say so; a container whose
/// data() is a fancy pointer (thrust::device_vector) is device memory; any other (std::vector,
/// thrust::host_vector) is host memory.
template <class Container>
memory_space container_space(const Container& c) {
  if constexpr (has_space_member<Container>::value) {
    return c.space();
  } else if constexpr (std::is_pointer_v<decltype(std::declval<Container&>().data())>) {
    return memory_space::host;
  } else {
    return memory_space::device;
  }
}

template <class Container, class T, class = void>
struct is_container_of : std::false_type {};
/// A contiguous container whose elements can be viewed as T (T may add const).
template <class Container, class T>
struct is_container_of<Container, T,
                       std::void_t<decltype(to_address(std::declval<Container&>().data())),
                                   decltype(std::declval<const Container&>().size())>>
    : std::is_convertible<decltype(to_address(std::declval<Container&>().data())), T*> {};

}  // namespace detail
GPUBATCH_NAMESPACE_END
