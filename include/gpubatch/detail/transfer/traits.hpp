/// @file detail/transfer/traits.hpp
/// @brief What the copies accept, at compile time: views (non-owning, fine as temporaries) and
/// owning containers (never as temporaries), their element types, and their byte regions.
#pragma once

#include <gpubatch/detail/transfer/plan.hpp>
#include <gpubatch/detail/views/validate.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/memory_space.hpp>
#include <gpubatch/views.hpp>

#include <cuda/std/span>

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

namespace gpubatch {
template <class T>
class span;
template <class T, class Exec>
class pooled_buffer;
template <class Exec>
class pinned_pool;
}  // namespace gpubatch

GPUBATCH_NAMESPACE_BEGIN
namespace detail {

/// Keeps a parameter out of template argument deduction (std::type_identity_t in C++20).
template <class T>
struct no_deduce {
  using type = T;
};
template <class T>
using no_deduce_t = typename no_deduce<T>::type;

template <class T>
struct is_matrix_view : std::false_type {};
template <class T>
struct is_matrix_view<matrix_batch_view<T>> : std::true_type {};

template <class T>
struct is_tensor_view : std::false_type {};
template <class T>
struct is_tensor_view<tensor4d_view<T>> : std::true_type {};

template <class T>
struct is_gpubatch_span : std::false_type {};
template <class T>
struct is_gpubatch_span<span<T>> : std::true_type {};

template <class T>
struct is_cuda_std_span : std::false_type {};
template <class T, std::size_t Extent>
struct is_cuda_std_span<cuda::std::span<T, Extent>> : std::true_type {};

template <class T>
struct is_pooled_buffer : std::false_type {};
template <class T, class Exec>
struct is_pooled_buffer<pooled_buffer<T, Exec>> : std::true_type {};

template <class T>
struct is_pinned_pool : std::false_type {};
template <class Exec>
struct is_pinned_pool<pinned_pool<Exec>> : std::true_type {};

/// Non-owning views: a temporary view still refers to memory that outlives the call.
template <class T>
inline constexpr bool is_view_v =
    is_matrix_view<std::remove_cv_t<T>>::value || is_tensor_view<std::remove_cv_t<T>>::value ||
    is_gpubatch_span<std::remove_cv_t<T>>::value || is_cuda_std_span<std::remove_cv_t<T>>::value;

/// True for an argument deduced as `T` from `T&&`: an rvalue. Passing an owning container as
/// an rvalue to an asynchronous copy frees its memory before the copy has run.
template <class T>
inline constexpr bool is_owning_rvalue_v = !std::is_reference_v<T> && !is_view_v<T>;

template <class R, class = void>
struct is_linear_range : std::false_type {};
template <class R>
struct is_linear_range<R, std::void_t<decltype(to_address(std::declval<R&>().data())),
                                      decltype(std::declval<const R&>().size())>>
    : std::true_type {};

/// What a copy can read or write: a matrix batch view, or anything with data() and size().
template <class R>
inline constexpr bool is_copyable_range_v =
    is_matrix_view<std::remove_cv_t<R>>::value || is_linear_range<R>::value;

template <class R, class = void>
struct range_element {
  using type = void;
};
template <class R>
struct range_element<R, std::enable_if_t<is_matrix_view<std::remove_cv_t<R>>::value>> {
  using type = typename std::remove_cv_t<R>::element_type;
};
template <class R>
struct range_element<R, std::enable_if_t<!is_matrix_view<std::remove_cv_t<R>>::value &&
                                         is_linear_range<R>::value>> {
  using type = std::remove_pointer_t<decltype(to_address(std::declval<R&>().data()))>;
};
/// The element type a range exposes through `R&` (const for a const container).
template <class R>
using range_element_t = typename range_element<R>::type;

/// Where a range's memory lives, as far as the range says: its own label, else (std::vector and
/// the like) unknown, to be classified at run time — a registered vector is pinned.
template <class R>
memory_space range_label(const R& r) {
  if constexpr (is_matrix_view<R>::value || is_tensor_view<R>::value) {
    return r.space();
  } else if constexpr (has_space_member<R>::value) {
    return r.space();
  } else if constexpr (std::is_pointer_v<decltype(std::declval<R&>().data())>) {
    return memory_space::unknown;
  } else {
    return memory_space::device;  // fancy pointer: thrust::device_vector
  }
}

template <class T>
std::byte* as_bytes(T* p) noexcept {
  return reinterpret_cast<std::byte*>(const_cast<std::remove_cv_t<T>*>(p));
}

/// The byte region of a range.
template <class R>
copy_region region_of(R& r) {
  using element = range_element_t<R>;
  constexpr std::size_t size = sizeof(element);
  if constexpr (is_matrix_view<std::remove_cv_t<R>>::value) {
    const bool row_major = r.order() == layout::row_major;
    const auto lines = static_cast<std::size_t>(row_major ? r.rows() : r.cols());
    const auto length = static_cast<std::size_t>(row_major ? r.cols() : r.rows());
    copy_region region;
    region.data = as_bytes(r.data());
    region.width = length * size;
    region.height = lines;
    region.pitch = static_cast<std::size_t>(r.ld()) * size;
    region.count = static_cast<std::size_t>(r.count());
    region.stride = static_cast<std::size_t>(r.batch_stride()) * size;
    region.space = range_label(r);
    return region;
  } else {
    const auto n = static_cast<std::size_t>(r.size());
    return copy_region::linear(as_bytes(to_address(r.data())), n * size, range_label(r));
  }
}

inline std::string matrix_batch_string(index_t count, index_t rows, index_t cols, layout order) {
  return std::to_string(count) + " matrices of " + std::to_string(rows) + " x " +
         std::to_string(cols) + " (" + to_string(order) + ")";
}

/// Compile-time and run-time checks that `dst` can receive a copy of `src`. `Dst` carries the
/// destination's constness (a const container cannot be written).
/// @throws invalid_argument naming "dst" for a shape mismatch or a broadcast destination
template <class Dst, class Src>
void check_copy_shapes(const Dst& dst, const Src& src) {
  using dst_t = std::remove_cv_t<Dst>;
  using src_t = std::remove_cv_t<Src>;
  static_assert(is_copyable_range_v<Dst> && is_copyable_range_v<Src>,
                "gpubatch copies: dst and src must be containers (data() and size()), "
                "gpubatch::span, tensor4d_view or matrix_batch_view");
  static_assert(is_matrix_view<dst_t>::value == is_matrix_view<src_t>::value,
                "gpubatch copies: copy like to like, a matrix_batch_view to a matrix_batch_view "
                "or a 1-D range to a 1-D range; view a buffer as a packed matrix batch with "
                "matrix_batch_view<T>::packed(buffer, rows, cols, count)");
  using dst_element = range_element_t<Dst>;
  using src_element = range_element_t<const Src>;
  static_assert(!std::is_const_v<dst_element>,
                "gpubatch copies: the destination must be writable (not a view of const or a "
                "const container)");
  static_assert(std::is_same_v<std::remove_cv_t<dst_element>, std::remove_cv_t<src_element>>,
                "gpubatch copies: dst and src must have the same element type (a copy does not "
                "convert)");
  if constexpr (is_matrix_view<dst_t>::value) {
    if (dst.rows() != src.rows() || dst.cols() != src.cols() || dst.count() != src.count() ||
        dst.order() != src.order()) {
      throw invalid_argument(
          "dst", "is a batch of " +
                     matrix_batch_string(dst.count(), dst.rows(), dst.cols(), dst.order()) +
                     " but src is a batch of " +
                     matrix_batch_string(src.count(), src.rows(), src.cols(), src.order()) +
                     " (a copy does not transpose)");
    }
    if (dst.count() > 1 && dst.batch_stride() == 0 && dst.rows() * dst.cols() > 0) {
      throw invalid_argument("dst", "has batch stride 0: " + std::to_string(dst.count()) +
                                        " matrices would be written to one place");
    }
  } else {
    if constexpr (is_tensor_view<dst_t>::value && is_tensor_view<src_t>::value) {
      if (dst.n() != src.n() || dst.c() != src.c() || dst.h() != src.h() ||
          dst.w() != src.w() || dst.order() != src.order()) {
        throw invalid_argument("dst", std::string("is a ") + to_string(dst.order()) +
                                          " tensor of different extents or layout than src (" +
                                          to_string(src.order()) + ")");
      }
    }
    const auto dst_size = static_cast<std::size_t>(dst.size());
    const auto src_size = static_cast<std::size_t>(src.size());
    if (dst_size != src_size) {
      throw invalid_argument("dst", "holds " + std::to_string(dst_size) +
                                        " elements but src holds " + std::to_string(src_size) +
                                        " (copy a subspan to copy part of a range)");
    }
  }
}

}  // namespace detail
GPUBATCH_NAMESPACE_END
