/// @file detail/dlpack/import.hpp
/// @brief from_dlpack: the checks every view needs (device, dtype, rank, shape, strides, data),
/// then one builder per view kind.
#pragma once

#include <gpubatch/detail/dlpack/dlpack.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/memory_space.hpp>
#include <gpubatch/transfer.hpp>
#include <gpubatch/views.hpp>

#include <cuda_runtime_api.h>
#include <dlpack/dlpack.h>

#include <array>
#include <initializer_list>
#include <cstdint>
#include <string>
#include <type_traits>

GPUBATCH_NAMESPACE_BEGIN

inline memory_space dlpack_memory_space(DLDevice device) {
  switch (static_cast<int>(device.device_type)) {
    case kDLCPU: return memory_space::host;
    case kDLCUDAHost: return memory_space::pinned;
    case kDLCUDA: return memory_space::device;
    case kDLCUDAManaged: return memory_space::managed;
    default:
      throw invalid_argument(
          "tensor.device", detail::dlpack::device_type_name(static_cast<int>(device.device_type)) +
                               ": gpubatch views memory of kDLCPU, kDLCUDAHost, kDLCUDA and "
                               "kDLCUDAManaged devices only");
  }
}

namespace detail::dlpack {

/// A tensor that passed the checks every view needs: its first element (byte_offset applied),
/// where it lives, and its strides in elements (compact row-major when the tensor gave none;
/// strides of extent-1 dimensions are normalised to 0 since producers write anything there).
template <class T, int MaxRank>
struct checked_tensor {
  T* data = nullptr;
  memory_space space = memory_space::unknown;
  int ndim = 0;
  std::array<std::int64_t, MaxRank> shape{};
  std::array<std::int64_t, MaxRank> strides{};
  std::int64_t reach = 0;  // elements from the first to the last, 0 when empty
  bool empty = false;
};

/// The tensor's strides as NumPy prints them, or that it gave none.
inline std::string strides_string(const DLTensor& tensor) {
  return tensor.strides != nullptr ? tuple_string(tensor.strides, tensor.ndim)
                                   : std::string("none (C order)");
}

/// kDLCUDA memory is usable only on the device gpubatch's CUDA backend runs on: the current one.
inline void require_current_device(int device_id) {
  int current = 0;
  const cudaError_t code = cudaGetDevice(&current);
  if (code != cudaSuccess) {
    (void)cudaGetLastError();
    throw invalid_argument("tensor.device", "kDLCUDA device " + std::to_string(device_id) +
                                                ", but no CUDA device is usable here (" +
                                                cudaGetErrorName(code) + ")");
  }
  if (device_id != current) {
    throw invalid_argument("tensor.device",
                           "kDLCUDA device " + std::to_string(device_id) +
                               " is not the current CUDA device (" + std::to_string(current) +
                               "): call cudaSetDevice(" + std::to_string(device_id) + ") first");
  }
}

/// `ranks` says which ranks the view takes, for the message ("2 or 3").
template <class T, int MaxRank>
checked_tensor<T, MaxRank> check_tensor(const DLTensor& tensor, int min_rank, const char* view,
                                        const char* ranks) {
  using element = std::remove_const_t<T>;
  checked_tensor<T, MaxRank> out;
  out.space = dlpack_memory_space(tensor.device);
  if (out.space == memory_space::device) {
    require_current_device(tensor.device.device_id);
  }

  constexpr DLDataType expected = dtype_of<element>();
  if (!same_dtype(tensor.dtype, expected)) {
    throw invalid_argument("tensor.dtype", dtype_name(tensor.dtype) + ", but the " + view +
                                               " has elements of " + dtype_name(expected));
  }

  if (tensor.ndim < min_rank || tensor.ndim > MaxRank) {
    throw invalid_argument("tensor.ndim", std::to_string(tensor.ndim) + " dimensions, but a " +
                                              view + " views " + ranks);
  }
  out.ndim = tensor.ndim;
  if (tensor.ndim > 0 && tensor.shape == nullptr) {
    throw invalid_argument("tensor.shape", "null pointer for a tensor of " +
                                               std::to_string(tensor.ndim) + " dimensions");
  }
  for (int i = 0; i < tensor.ndim; ++i) {
    if (tensor.shape[i] < 0) {
      throw invalid_argument("tensor.shape", "extent " + std::to_string(tensor.shape[i]) +
                                                 " of dimension " + std::to_string(i) + " in " +
                                                 tuple_string(tensor.shape, tensor.ndim) +
                                                 " is negative");
    }
    out.shape[i] = tensor.shape[i];
    out.empty = out.empty || tensor.shape[i] == 0;
  }

  // No strides: compact row-major. An empty tensor's strides are never used.
  std::int64_t compact = 1;
  for (int i = tensor.ndim - 1; i >= 0; --i) {
    const std::int64_t stride = tensor.strides != nullptr ? tensor.strides[i] : compact;
    if (out.shape[i] > 1 && stride < 0 && !out.empty) {
      throw invalid_argument("tensor.strides",
                             "stride " + std::to_string(stride) + " of dimension " +
                                 std::to_string(i) + " in " + strides_string(tensor) +
                                 " is negative: gpubatch views step forward through memory");
    }
    out.strides[i] = out.shape[i] > 1 ? stride : 0;
    if (out.shape[i] > 0 && !multiply_add(compact, out.shape[i], 0, compact)) {
      throw invalid_argument("tensor.shape", tuple_string(tensor.shape, tensor.ndim) +
                                                 " has more elements than an int64 counts");
    }
  }
  if (!out.empty) {
    out.reach = span_elements(out.shape.data(), out.strides.data(), out.ndim,
                             max_elements(sizeof(element)));
    if (out.reach < 0) {
      throw invalid_argument("tensor.shape", tuple_string(tensor.shape, tensor.ndim) +
                                                 " spans more bytes than an int64 counts");
    }
  }

  if (tensor.data == nullptr) {
    if (out.reach > 0) {
      throw invalid_argument("tensor.data", "null pointer for a tensor spanning " +
                                                std::to_string(out.reach) + " elements");
    }
    return out;
  }
  const auto address = reinterpret_cast<std::uintptr_t>(tensor.data) + tensor.byte_offset;
  if (address % alignof(element) != 0) {
    throw invalid_argument("tensor.data", "data + byte_offset (" +
                                              std::to_string(tensor.byte_offset) +
                                              ") is not aligned to the " +
                                              std::to_string(alignof(element)) + " bytes of " +
                                              dtype_name(expected));
  }
  out.data = reinterpret_cast<T*>(address);
  return out;
}

template <class View>
struct importer {
  static_assert(dependent_false_v<View>,
                "gpubatch::from_dlpack<View>: View must be a gpubatch::span, matrix_batch_view "
                "or tensor4d_view");
};

template <class T>
struct importer<span<T>> {
  static span<T> make(const DLTensor& tensor) {
    // Any rank DLPack allows; a span only needs the elements to be contiguous in C order.
    constexpr int max_rank = 32;
    const auto t = check_tensor<T, max_rank>(tensor, 0, "span", "up to 32 dimensions");
    std::int64_t expected = 1;
    for (int i = t.ndim - 1; i >= 0 && !t.empty; --i) {
      if (t.shape[i] > 1 && t.strides[i] != expected) {
        throw invalid_argument("tensor.strides",
                               strides_string(tensor) + " of shape " +
                                   tuple_string(tensor.shape, tensor.ndim) +
                                   " is not contiguous in C order (row-major), as a span is");
      }
      expected *= t.shape[i];
    }
    const std::int64_t size = t.empty ? 0 : t.reach;
    return span<T>(t.data, static_cast<std::size_t>(size), t.space);
  }
};

template <class T>
struct importer<matrix_batch_view<T>> {
  static matrix_batch_view<T> make(const DLTensor& tensor) {
    const auto t = check_tensor<T, 3>(tensor, 2, "matrix_batch_view",
                                      "2 (rows, cols) or 3 (batch, rows, cols)");
    const int r = t.ndim - 2;  // the rows' dimension
    const index_t count = t.ndim == 3 ? t.shape[0] : 1;
    const index_t rows = t.shape[r];
    const index_t cols = t.shape[r + 1];
    if (t.empty) {
      // Nothing is read or written: any strides will do.
      return matrix_batch_view<T>(t.data, rows, cols, cols > 0 ? cols : 1, 0, count,
                                  layout::row_major, t.space);
    }
    // Strides of extent-1 dimensions are 0 here: such a dimension fits any order.
    const index_t row_stride = t.strides[r];
    const index_t col_stride = t.strides[r + 1];
    layout order = layout::row_major;
    index_t ld = 0;
    if ((cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= cols)) {
      ld = rows == 1 ? cols : row_stride;
    } else if ((rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= rows)) {
      order = layout::col_major;
      ld = cols == 1 ? rows : col_stride;
    } else {
      throw invalid_argument(
          "tensor.strides",
          strides_string(tensor) + " of shape " +
              tuple_string(tensor.shape, tensor.ndim) + ": the matrices are neither row-major " +
              "(column stride 1, row stride at least " + std::to_string(cols) +
              ") nor column-major (row stride 1, column stride at least " +
              std::to_string(rows) + ")");
    }
    const index_t batch_stride = count > 1 ? t.strides[0] : 0;
    if constexpr (!std::is_const_v<T>) {
      const index_t matrix_span = (order == layout::row_major ? rows - 1 : cols - 1) * ld +
                                  (order == layout::row_major ? cols : rows);
      if (batch_stride != 0 && batch_stride < matrix_span) {
        throw invalid_argument(
            "tensor.strides", "batch stride " + std::to_string(batch_stride) + " in " +
                                  strides_string(tensor) +
                                  " is less than the " + std::to_string(matrix_span) +
                                  " elements one matrix spans: the matrices of a writable view "
                                  "may not overlap (a view of const elements may)");
      }
    }
    return matrix_batch_view<T>(t.data, rows, cols, ld, batch_stride, count, order, t.space);
  }
};

template <class T>
struct importer<tensor4d_view<T>> {
  static tensor4d_view<T> make(const DLTensor& tensor) {
    return make(tensor, tensor_layout::nchw);
  }

  static tensor4d_view<T> make(const DLTensor& tensor, tensor_layout dims) {
    const auto t = check_tensor<T, 4>(tensor, 4, "tensor4d_view", "4");
    // The tensor's dimension holding each of n, c, h and w.
    const std::array<int, 4> at = dims == tensor_layout::nchw ? std::array<int, 4>{0, 1, 2, 3}
                                                              : std::array<int, 4>{0, 3, 1, 2};
    const index_t n = t.shape[at[0]], c = t.shape[at[1]], h = t.shape[at[2]], w = t.shape[at[3]];
    const tensor_layout other =
        dims == tensor_layout::nchw ? tensor_layout::nhwc : tensor_layout::nchw;
    for (const tensor_layout order : {dims, other}) {
      if (t.empty || packed_as(t, at, order)) {
        return tensor4d_view<T>(t.data, n, c, h, w, order, t.space);
      }
    }
    throw invalid_argument("tensor.strides",
                           strides_string(tensor) + " of shape " +
                               tuple_string(tensor.shape, tensor.ndim) + " (" + to_string(dims) +
                               ") are neither packed NCHW nor packed NHWC storage, as a "
                               "tensor4d_view needs");
  }

 private:
  // Whether the strides are those of packed storage in `order`, on extents > 1.
  template <class Checked>
  static bool packed_as(const Checked& t, const std::array<int, 4>& at, tensor_layout order) {
    // Dimensions (n, c, h, w) from the slowest to the fastest in memory.
    const std::array<int, 4> slowest_first =
        order == tensor_layout::nchw ? std::array<int, 4>{0, 1, 2, 3}
                                     : std::array<int, 4>{0, 2, 3, 1};
    std::int64_t expected = 1;
    for (int i = 3; i >= 0; --i) {
      const int dim = at[slowest_first[i]];
      if (t.shape[dim] > 1 && t.strides[dim] != expected) {
        return false;
      }
      expected *= t.shape[dim];
    }
    return true;
  }
};

inline const DLTensor& managed_tensor(const DLManagedTensor* managed) {
  if (managed == nullptr) {
    throw invalid_argument("tensor", "null DLManagedTensor");
  }
  return managed->dl_tensor;
}

}  // namespace detail::dlpack

template <class View>
View from_dlpack(const DLTensor& tensor) {
  return detail::dlpack::importer<View>::make(tensor);
}

template <class View>
View from_dlpack(const DLTensor& tensor, tensor_layout dims) {
  return detail::dlpack::importer<View>::make(tensor, dims);
}

template <class View>
View from_dlpack(const DLManagedTensor* managed) {
  return from_dlpack<View>(detail::dlpack::managed_tensor(managed));
}

template <class View>
View from_dlpack(const DLManagedTensor* managed, tensor_layout dims) {
  return from_dlpack<View>(detail::dlpack::managed_tensor(managed), dims);
}

GPUBATCH_NAMESPACE_END
