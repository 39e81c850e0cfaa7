/// @file views.hpp
/// @brief Non-owning, trivially copyable views that kernels take by value: a strided matrix
/// batch, a pointer-array matrix batch and a 4-D tensor, all built on cuda::std::mdspan with
/// 64-bit indices, validated once on the host when constructed.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/detail/views/validate.hpp>
#include <gpubatch/memory_space.hpp>

#include <cuda/std/mdspan>

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

namespace gpubatch {

/// @brief Storage order of a matrix.
enum class layout {
  row_major,  ///< element (i, j) at i * ld + j
  col_major,  ///< element (i, j) at i + j * ld
};

/// @brief A printable name for a layout.
[[nodiscard]] constexpr const char* to_string(layout order) noexcept {
  return order == layout::row_major ? "row-major" : "column-major";
}

/// @brief How an operation reads a matrix operand: as stored, or transposed.
enum class op {
  none,       ///< op(X) = X
  transpose,  ///< op(X) = X^T
};

/// @brief A printable name for an op: "N" or "T", as BLAS writes them.
[[nodiscard]] constexpr const char* to_string(op o) noexcept {
  return o == op::none ? "N" : "T";
}

/// @brief The index type of every view: 64-bit, so one batch may exceed 2^31 elements.
using index_t = std::int64_t;

/// @brief A batch of `count` equally shaped matrices at a constant distance `batch_stride`.
///
/// A batch stride of 0 repeats one matrix for the whole batch (a broadcast operand). Matrices of
/// a writable view may not overlap; those of a read-only (`const T`) view may.
/// @tparam T the element type; `const T` for a read-only view
template <class T>
class matrix_batch_view {
 public:
  using element_type = T;
  using index_type = index_t;
  using extents_type = cuda::std::dextents<index_type, 2>;
  using mapping_type = cuda::std::layout_stride::mapping<extents_type>;
  /// @brief One matrix of the batch.
  using matrix_type = cuda::std::mdspan<T, extents_type, cuda::std::layout_stride>;

  /// @brief Views raw memory.
  /// @param data the first element of matrix 0
  /// @param rows, cols the shape of each matrix
  /// @param ld leading dimension: distance between rows (row-major) or columns (column-major);
  ///        at least cols (row-major) or rows (column-major), and at least 1
  /// @param batch_stride distance between consecutive matrices; 0 broadcasts one matrix
  /// @param count number of matrices
  /// @param order row- or column-major
  /// @param space where `data` lives, if known; operations check it against their backend
  /// @throws invalid_argument naming the parameter, for negative extents, a leading dimension
  ///         too small, overlapping matrices in a writable view, or null data with a nonzero size
  matrix_batch_view(T* data, index_type rows, index_type cols, index_type ld,
                    index_type batch_stride, index_type count, layout order = layout::row_major,
                    memory_space space = memory_space::unknown)
      : data_(data),
        mapping_(make_mapping(rows, cols, ld, order)),
        batch_stride_(batch_stride),
        count_(count),
        order_(order),
        space_(space) {
    detail::require_nonnegative("batch_stride", batch_stride);
    detail::require_nonnegative("count", count);
    if constexpr (!std::is_const_v<T>) {
      if (count > 1 && batch_stride != 0 && batch_stride < matrix_span()) {
        throw invalid_argument("batch_stride", std::to_string(batch_stride) +
                                                   " makes the matrices of a writable view "
                                                   "overlap (each spans " +
                                                   std::to_string(matrix_span()) + " elements)");
      }
    }
    detail::require_data(data, required_span_size());
  }

  /// @brief Views a contiguous container: a gpubatch container, std::vector or a thrust vector.
  /// @throws invalid_argument as above, or if the view does not fit in the container
  template <class Container,
            std::enable_if_t<detail::is_container_of<Container, T>::value, int> = 0>
  matrix_batch_view(Container& container, index_type rows, index_type cols, index_type ld,
                    index_type batch_stride, index_type count, layout order = layout::row_major)
      : matrix_batch_view(detail::to_address(container.data()), rows, cols, ld, batch_stride,
                          count, order, detail::container_space(container)) {
    detail::require_fits(required_span_size(), container.size());
  }

  /// @brief A read-only view of a writable one.
  template <class U, std::enable_if_t<std::is_same_v<const U, T> && !std::is_same_v<U, T>, int> = 0>
  GPUBATCH_HOST_DEVICE matrix_batch_view(const matrix_batch_view<U>& other) noexcept
      : data_(other.data()),
        mapping_(other.mapping()),
        batch_stride_(other.batch_stride()),
        count_(other.count()),
        order_(other.order()),
        space_(other.space()) {}

  /// @brief Matrices packed back to back with the minimal leading dimension.
  template <class Source>
  [[nodiscard]] static matrix_batch_view packed(Source&& data, index_type rows, index_type cols,
                                                index_type count,
                                                layout order = layout::row_major) {
    const index_type ld = order == layout::row_major ? cols : rows;
    return matrix_batch_view(std::forward<Source>(data), rows, cols, ld > 0 ? ld : 1, rows * cols,
                             count, order);
  }

  GPUBATCH_HOST_DEVICE index_type rows() const noexcept { return mapping_.extents().extent(0); }
  GPUBATCH_HOST_DEVICE index_type cols() const noexcept { return mapping_.extents().extent(1); }
  /// @brief Leading dimension.
  GPUBATCH_HOST_DEVICE index_type ld() const noexcept {
    return order_ == layout::row_major ? mapping_.stride(0) : mapping_.stride(1);
  }
  GPUBATCH_HOST_DEVICE index_type batch_stride() const noexcept { return batch_stride_; }
  GPUBATCH_HOST_DEVICE index_type count() const noexcept { return count_; }
  GPUBATCH_HOST_DEVICE layout order() const noexcept { return order_; }
  GPUBATCH_HOST_DEVICE T* data() const noexcept { return data_; }
  GPUBATCH_HOST_DEVICE memory_space space() const noexcept { return space_; }
  GPUBATCH_HOST_DEVICE const mapping_type& mapping() const noexcept { return mapping_; }

  /// @brief Elements one matrix spans, from its first to its last element.
  GPUBATCH_HOST_DEVICE index_type matrix_span() const noexcept {
    return mapping_.required_span_size();
  }
  /// @brief Elements the whole batch spans, from the first element of matrix 0.
  GPUBATCH_HOST_DEVICE index_type required_span_size() const noexcept {
    if (count_ == 0 || matrix_span() == 0) {
      return 0;
    }
    return (count_ - 1) * batch_stride_ + matrix_span();
  }
  /// @brief Offset of element (i, j) of matrix b from data().
  GPUBATCH_HOST_DEVICE index_type offset(index_type b, index_type i, index_type j) const noexcept {
    return b * batch_stride_ + mapping_(i, j);
  }
  /// @brief Element (i, j) of matrix b.
  GPUBATCH_HOST_DEVICE T& operator()(index_type b, index_type i, index_type j) const noexcept {
    return data_[offset(b, i, j)];
  }
  /// @brief Matrix b as an mdspan.
  GPUBATCH_HOST_DEVICE matrix_type matrix(index_type b) const noexcept {
    return matrix_type(data_ + b * batch_stride_, mapping_);
  }

 private:
  static mapping_type make_mapping(index_type rows, index_type cols, index_type ld, layout order) {
    detail::require_nonnegative("rows", rows);
    detail::require_nonnegative("cols", cols);
    const index_type minor = order == layout::row_major ? cols : rows;
    if (ld < 1 || ld < minor) {
      throw invalid_argument("ld", "leading dimension " + std::to_string(ld) +
                                       " is smaller than " + (minor > 0 ? std::to_string(minor) : "1") +
                                       (order == layout::row_major ? " (cols" : " (rows") +
                                       ", " + to_string(order) + ")");
    }
    const cuda::std::array<index_type, 2> strides =
        order == layout::row_major ? cuda::std::array<index_type, 2>{ld, 1}
                                   : cuda::std::array<index_type, 2>{1, ld};
    return mapping_type(extents_type(rows, cols), strides);
  }

  T* data_;
  mapping_type mapping_;
  index_type batch_stride_;
  index_type count_;
  layout order_;
  memory_space space_;
};

/// @brief A batch of `count` equally shaped matrices, each at its own address.
///
/// The pointer array itself must be accessible to the backend that runs the operation (device
/// memory for cuda_exec); the view does not dereference it on construction.
/// @tparam T the element type; `const T` for a read-only view
template <class T>
class pointer_matrix_batch_view {
 public:
  using element_type = T;
  using index_type = index_t;
  using extents_type = cuda::std::dextents<index_type, 2>;
  using mapping_type = cuda::std::layout_stride::mapping<extents_type>;
  using matrix_type = cuda::std::mdspan<T, extents_type, cuda::std::layout_stride>;

  /// @param pointers `count` pointers, one per matrix
  /// @param rows, cols, ld, order as for matrix_batch_view
  /// @param space where the matrices and the pointer array live, if known
  /// @throws invalid_argument for negative extents, a leading dimension too small, or a null
  ///         pointer array with a nonzero count
  pointer_matrix_batch_view(T* const* pointers, index_type rows, index_type cols, index_type ld,
                            index_type count, layout order = layout::row_major,
                            memory_space space = memory_space::unknown)
      : pointers_(pointers),
        mapping_(matrix_batch_view<T>(static_cast<T*>(nullptr), rows, cols, ld, 0, 0, order)
                     .mapping()),
        count_(count),
        order_(order),
        space_(space) {
    detail::require_nonnegative("count", count);
    if (pointers == nullptr && count > 0) {
      throw invalid_argument("pointers", "null pointer array for a batch of " +
                                             std::to_string(count) + " matrices");
    }
  }

  GPUBATCH_HOST_DEVICE index_type rows() const noexcept { return mapping_.extents().extent(0); }
  GPUBATCH_HOST_DEVICE index_type cols() const noexcept { return mapping_.extents().extent(1); }
  GPUBATCH_HOST_DEVICE index_type ld() const noexcept {
    return order_ == layout::row_major ? mapping_.stride(0) : mapping_.stride(1);
  }
  GPUBATCH_HOST_DEVICE index_type count() const noexcept { return count_; }
  GPUBATCH_HOST_DEVICE layout order() const noexcept { return order_; }
  GPUBATCH_HOST_DEVICE T* const* pointers() const noexcept { return pointers_; }
  GPUBATCH_HOST_DEVICE memory_space space() const noexcept { return space_; }
  GPUBATCH_HOST_DEVICE const mapping_type& mapping() const noexcept { return mapping_; }
  /// @brief Element (i, j) of matrix b.
  GPUBATCH_HOST_DEVICE T& operator()(index_type b, index_type i, index_type j) const noexcept {
    return pointers_[b][mapping_(i, j)];
  }
  /// @brief Matrix b as an mdspan.
  GPUBATCH_HOST_DEVICE matrix_type matrix(index_type b) const noexcept {
    return matrix_type(pointers_[b], mapping_);
  }

 private:
  T* const* pointers_;
  mapping_type mapping_;
  index_type count_;
  layout order_;
  memory_space space_;
};

/// @brief Storage order of a 4-D activation or filter tensor.
enum class tensor_layout {
  nchw,  ///< batch, channel, row, column (filters: KCRS)
  nhwc,  ///< batch, row, column, channel (filters: KRSC)
};

/// @brief A printable name for a tensor layout.
[[nodiscard]] constexpr const char* to_string(tensor_layout order) noexcept {
  return order == tensor_layout::nchw ? "NCHW" : "NHWC";
}

/// @brief A packed 4-D tensor, indexed (n, c, h, w) whatever its storage order.
/// @tparam T the element type; `const T` for a read-only view
template <class T>
class tensor4d_view {
 public:
  using element_type = T;
  using index_type = index_t;
  using extents_type = cuda::std::dextents<index_type, 4>;
  using mapping_type = cuda::std::layout_stride::mapping<extents_type>;
  using mdspan_type = cuda::std::mdspan<T, extents_type, cuda::std::layout_stride>;

  /// @param data the first element
  /// @param n, c, h, w the extents: batch, channels, height, width
  /// @param order NCHW or NHWC
  /// @param space where `data` lives, if known
  /// @throws invalid_argument for negative extents or null data with a nonzero size
  tensor4d_view(T* data, index_type n, index_type c, index_type h, index_type w,
                tensor_layout order, memory_space space = memory_space::unknown)
      : data_(data), mapping_(make_mapping(n, c, h, w, order)), order_(order), space_(space) {
    detail::require_data(data, size());
  }

  /// @brief Views a contiguous container: a gpubatch container, std::vector or a thrust vector.
  /// @throws invalid_argument as above, or if the tensor does not fit in the container
  template <class Container,
            std::enable_if_t<detail::is_container_of<Container, T>::value, int> = 0>
  tensor4d_view(Container& container, index_type n, index_type c, index_type h, index_type w,
                tensor_layout order)
      : tensor4d_view(detail::to_address(container.data()), n, c, h, w, order,
                      detail::container_space(container)) {
    detail::require_fits(size(), container.size());
  }

  /// @brief A read-only view of a writable one.
  template <class U, std::enable_if_t<std::is_same_v<const U, T> && !std::is_same_v<U, T>, int> = 0>
  GPUBATCH_HOST_DEVICE tensor4d_view(const tensor4d_view<U>& other) noexcept
      : data_(other.data()), mapping_(other.mapping()), order_(other.order()), space_(other.space()) {}

  GPUBATCH_HOST_DEVICE index_type n() const noexcept { return mapping_.extents().extent(0); }
  GPUBATCH_HOST_DEVICE index_type c() const noexcept { return mapping_.extents().extent(1); }
  GPUBATCH_HOST_DEVICE index_type h() const noexcept { return mapping_.extents().extent(2); }
  GPUBATCH_HOST_DEVICE index_type w() const noexcept { return mapping_.extents().extent(3); }
  /// @brief Number of elements.
  GPUBATCH_HOST_DEVICE index_type size() const noexcept { return n() * c() * h() * w(); }
  GPUBATCH_HOST_DEVICE tensor_layout order() const noexcept { return order_; }
  GPUBATCH_HOST_DEVICE T* data() const noexcept { return data_; }
  GPUBATCH_HOST_DEVICE memory_space space() const noexcept { return space_; }
  GPUBATCH_HOST_DEVICE const mapping_type& mapping() const noexcept { return mapping_; }
  /// @brief Offset of element (n, c, h, w) from data().
  GPUBATCH_HOST_DEVICE index_type offset(index_type in, index_type ic, index_type ih,
                                         index_type iw) const noexcept {
    return mapping_(in, ic, ih, iw);
  }
  /// @brief Element (n, c, h, w).
  GPUBATCH_HOST_DEVICE T& operator()(index_type in, index_type ic, index_type ih,
                                     index_type iw) const noexcept {
    return data_[offset(in, ic, ih, iw)];
  }
  /// @brief The tensor as an mdspan with logical (n, c, h, w) extents.
  GPUBATCH_HOST_DEVICE mdspan_type mdspan() const noexcept { return mdspan_type(data_, mapping_); }

 private:
  static mapping_type make_mapping(index_type n, index_type c, index_type h, index_type w,
                                   tensor_layout order) {
    detail::require_nonnegative("n", n);
    detail::require_nonnegative("c", c);
    detail::require_nonnegative("h", h);
    detail::require_nonnegative("w", w);
    // Strides from extents clamped to 1 stay positive and unique, as layout_stride requires,
    // even when some extent is 0 (an empty tensor).
    const index_type c1 = c > 0 ? c : 1;
    const index_type h1 = h > 0 ? h : 1;
    const index_type w1 = w > 0 ? w : 1;
    const cuda::std::array<index_type, 4> strides =
        order == tensor_layout::nchw
            ? cuda::std::array<index_type, 4>{c1 * h1 * w1, h1 * w1, w1, 1}
            : cuda::std::array<index_type, 4>{h1 * w1 * c1, 1, w1 * c1, c1};
    return mapping_type(extents_type(n, c, h, w), strides);
  }

  T* data_;
  mapping_type mapping_;
  tensor_layout order_;
  memory_space space_;
};

}  // namespace gpubatch
