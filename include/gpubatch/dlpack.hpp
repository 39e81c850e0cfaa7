/// @file dlpack.hpp
/// @brief DLPack interop: gpubatch views of a `DLTensor` without a copy, and gpubatch
/// containers and views handed out as `DLManagedTensor`s (the format PyTorch, JAX, CuPy and
/// NumPy exchange).
///
/// This header, and only this one, needs `<dlpack/dlpack.h>` (Debian: libdlpack-dev; CMake:
/// `find_package(dlpack)` and link `dlpack::dlpack`); `gpubatch.hpp` does not include it.
///
/// Import checks everything a view relies on and throws invalid_argument naming the field of
/// the tensor at fault (`tensor.device`, `tensor.dtype`, `tensor.ndim`, `tensor.shape`,
/// `tensor.strides`, `tensor.data`) for anything the view cannot express: a device gpubatch
/// cannot run on, another element type or vector lanes, a layout with no unit stride, negative
/// strides, misaligned data. The view aliases the tensor's memory: the tensor's owner must keep
/// it alive while the view is in use.
#pragma once

#include <gpubatch/containers.hpp>
#include <gpubatch/detail/dlpack/dlpack.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/memory_space.hpp>
#include <gpubatch/numeric.hpp>
#include <gpubatch/transfer.hpp>
#include <gpubatch/views.hpp>

#include <dlpack/dlpack.h>

#include <cstdint>
#include <vector>

GPUBATCH_NAMESPACE_BEGIN

/// @brief The DLPack data type of element type T: `{kDLFloat, 32, 1}` for float, and so on for
/// double, half, bfloat16 and the integer types.
template <class T>
[[nodiscard]] constexpr DLDataType dlpack_dtype() noexcept {
  return detail::dlpack::dtype_of<std::remove_const_t<T>>();
}

/// @brief The memory space of a DLPack device: kDLCPU is host memory, kDLCUDAHost pinned host
/// memory, kDLCUDA device memory and kDLCUDAManaged managed memory.
/// @throws invalid_argument naming `tensor.device` for any other device type
[[nodiscard]] inline memory_space dlpack_memory_space(DLDevice device);

/// @brief A view of a DLPack tensor's memory, without a copy.
///
/// `View` is one of:
/// - `span<T>`: a contiguous (C-order, row-major) tensor of any rank, all its elements;
/// - `matrix_batch_view<T>`: a 2-D tensor (rows, cols), a batch of one, or a 3-D tensor
///   (batch, rows, cols); each matrix row- or column-major (one of its strides 1, the other at
///   least the extent it steps over), the batch at any non-negative stride (0 broadcasts; a
///   writable view's matrices must not overlap, as for the view's own constructor). A
///   transposed NumPy array is a column-major view of the same memory;
/// - `tensor4d_view<T>`: a 4-D tensor of shape (N, C, H, W) stored packed NCHW or NHWC; the
///   overload below reads the dimensions in NHWC order too.
///
/// Strides of a dimension of extent 1 do not matter (producers write anything there), nor do
/// those of an empty tensor. A
/// tensor on kDLCUDA must be on the current CUDA device (cudaGetDevice), the one gpubatch's
/// CUDA backend runs on.
/// @tparam View the view to build; its element type (`const T` for read-only use) must match
///         the tensor's dtype exactly
/// @throws invalid_argument naming the field of `tensor` at fault
template <class View>
[[nodiscard]] View from_dlpack(const DLTensor& tensor);

/// @brief A tensor4d_view of a 4-D DLPack tensor, without a copy.
/// @param dims how the tensor's dimensions are ordered: tensor_layout::nchw for a tensor of
///        shape (N, C, H, W), tensor_layout::nhwc for (N, H, W, C). The view takes the storage
///        order from the strides: a PyTorch channels-last tensor (shape NCHW, strides NHWC) is an
///        NHWC view, and so is a C-order NumPy array of shape (N, H, W, C).
/// @throws invalid_argument naming the field of `tensor` at fault; `tensor.strides` when the
///         storage is neither packed NCHW nor packed NHWC
template <class View>
[[nodiscard]] View from_dlpack(const DLTensor& tensor, tensor_layout dims);

/// @brief A view of a managed tensor's `dl_tensor`. The view does not take ownership: the caller
/// calls `managed->deleter(managed)` when it no longer uses the view.
/// @throws invalid_argument naming `tensor` if `managed` is null, else as above
template <class View>
[[nodiscard]] View from_dlpack(const DLManagedTensor* managed);
/// @copydoc from_dlpack(const DLManagedTensor*)
template <class View>
[[nodiscard]] View from_dlpack(const DLManagedTensor* managed, tensor_layout dims);

/// @brief Hands a gpubatch container over to a DLPack consumer, without a copy.
///
/// The returned tensor owns the container: its deleter frees the container's memory (once) and
/// the tensor itself. The device is kDLCPU for host memory (containers of host_exec), kDLCUDAHost
/// for pinned memory and kDLCUDA with the memory's device for device memory. The tensor's shape
/// and strides arrays live as long as the tensor; strides are always given.
///
/// Work queued on a device buffer's stream is not waited for: synchronise the stream (or order
/// the consumer after it) before the consumer reads the memory. A device buffer is freed on its
/// stream, which must still exist when the consumer calls the deleter.
/// @param container a device_buffer<T> or pinned_buffer<T>, moved in only on success: if
///        to_dlpack throws, the caller still owns it
/// @param shape the tensor's extents; their product (or the span the strides reach) must not
///        exceed the container's size
/// @param strides in elements, one per dimension; empty for C order (row-major)
/// @throws invalid_argument naming `shape`, `strides` or `container`
/// @throws cuda_error if the device of device memory cannot be determined
template <class Container>
[[nodiscard]] DLManagedTensor* to_dlpack(Container&& container, std::vector<std::int64_t> shape,
                                         std::vector<std::int64_t> strides = {});

/// @brief Describes a view's memory as a DLPack tensor, without ownership: the deleter frees the
/// DLManagedTensor only, and the memory must outlive every use the consumer makes of it.
///
/// A span is 1-D; a matrix_batch_view is 3-D (count, rows, cols) with its batch stride and leading
/// dimension as strides; a tensor4d_view is (N, C, H, W) with the strides of its storage order
/// (NHWC storage gives channels-last strides, as PyTorch writes them). DLPack 0.x cannot mark
/// memory read-only: a view of `const T` is exported, but the consumer must not write to it. The
/// device is taken from the view's memory space (classified with memory_space_of when unknown).
/// @throws cuda_error if the device of device memory cannot be determined
template <class View>
[[nodiscard]] DLManagedTensor* to_dlpack(const View& view);

GPUBATCH_NAMESPACE_END

#include <gpubatch/detail/dlpack/export.hpp>
#include <gpubatch/detail/dlpack/import.hpp>
