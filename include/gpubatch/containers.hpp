/// @file containers.hpp
/// @brief Owning, move-only typed buffers: device_buffer (device memory, stream-ordered) and
/// pinned_buffer (page-locked host memory). With host_exec both hold ordinary host memory, so
/// one code path serves both backends. Both take an optional memory resource
/// (memory_resource.hpp) that then serves their memory instead.
#pragma once

#include <gpubatch/detail/containers/allocate.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/memory_resource.hpp>
#include <gpubatch/memory_space.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

namespace gpubatch {

/// @brief A typed, uninitialised, move-only buffer in the memory of a backend.
///
/// With cuda_exec the memory is device memory allocated and freed in stream order
/// (cudaMallocAsync / cudaFreeAsync) on the stream the caller passes; with host_exec it is
/// 64-byte-aligned host memory. There is deliberately no constructor without an execution
/// argument: the stream of every allocation and free is explicit.
///
/// Given a memory resource, the buffer takes its memory from it instead — stream-ordered on
/// the buffer's stream where the resource is — and hands it back there, on resize too; the
/// resource must outlive the buffer (see memory_resource_ref).
///
/// @tparam T a trivially copyable element type (the buffer is copied as bytes, never constructed)
template <class T>
class device_buffer {
  static_assert(std::is_trivially_copyable_v<T>,
                "gpubatch::device_buffer<T>: T must be trivially copyable (its bytes are copied "
                "between host and device and no constructor or destructor ever runs)");

 public:
  using value_type = T;
  using size_type = std::size_t;

  /// @brief Allocates `size` uninitialised elements of host memory.
  /// @throws out_of_memory if the allocation fails
  device_buffer(size_type size, host_exec exec)
      : device_buffer(size, exec, memory_resource_ref{}) {}

  /// @brief Allocates `size` uninitialised elements of device memory, ordered on exec's stream.
  /// @throws out_of_memory if the device has not enough free memory
  /// @throws cuda_error for any other CUDA failure (for example, no device)
  device_buffer(size_type size, cuda_exec exec)
      : device_buffer(size, exec, memory_resource_ref{}) {}

  /// @brief Takes `size` uninitialised elements of host memory from `resource` (the empty
  /// reference: as without one).
  /// @throws out_of_memory if the resource returns nullptr; whatever the resource throws
  /// @throws invalid_argument naming "resource" if it declares memory that is not host
  ///         accessible, or returns memory less aligned than memory_resource_ref::alignment
  device_buffer(size_type size, host_exec, memory_resource_ref resource)
      : size_(size), space_(memory_space::host), resource_(resource) {
    detail::resource_calls::require(resource, detail::declares_host_accessible, "resource");
    data_ = static_cast<T*>(detail::allocate_host_in_role(
        detail::checked_bytes(size, sizeof(T), "host"), memory_space::device, resource_));
  }

  /// @brief Takes `size` uninitialised elements of device memory from `resource`, ordered on
  /// exec's stream (the empty reference: as without one).
  /// @throws out_of_memory if the resource returns nullptr; whatever the resource throws
  /// @throws invalid_argument naming "resource" if it declares memory that is not device
  ///         accessible, or returns memory less aligned than memory_resource_ref::alignment
  device_buffer(size_type size, cuda_exec exec, memory_resource_ref resource)
      : size_(size), space_(memory_space::device), stream_(exec.stream()), resource_(resource) {
    detail::resource_calls::require(resource, detail::declares_device_accessible, "resource");
    data_ = static_cast<T*>(detail::allocate_device(
        detail::checked_bytes(size, sizeof(T), "device"), stream_, resource_));
  }

  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  device_buffer(device_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        space_(other.space_),
        stream_(other.stream_),
        resource_(other.resource_) {}

  device_buffer& operator=(device_buffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      space_ = other.space_;
      stream_ = other.stream_;
      resource_ = other.resource_;
    }
    return *this;
  }

  /// @brief Frees the memory; device memory is freed in order on the buffer's current stream.
  ~device_buffer() { release(); }

  /// @brief Changes the size to `new_size`, keeping the first min(size(), new_size) elements;
  /// new elements are uninitialised. Reallocates in order on exec's stream, which becomes the
  /// buffer's stream. The new memory comes from the buffer's resource, if it has one. On failure
  /// the buffer is unchanged.
  /// @throws invalid_argument if `exec` selects a different backend than the buffer's
  template <class Exec>
  void resize(size_type new_size, Exec exec) {
    check_backend<Exec>("exec");
    if (new_size == size_) {
      return;
    }
    device_buffer grown(new_size, exec, resource_);
    const size_type kept_bytes = std::min(size_, new_size) * sizeof(T);
    if constexpr (is_cuda_exec_v<Exec>) {
      // The old memory was last used on stream_: exec's stream, which copies from it and then
      // frees it, waits for that work first (without blocking the host).
      if (data_ != nullptr && stream_ != exec.stream()) {
        detail::stream_wait(exec.stream(), stream_);
      }
      if (kept_bytes != 0) {
        GPUBATCH_CUDA_TRY(
            cudaMemcpyAsync(grown.data_, data_, kept_bytes, cudaMemcpyDeviceToDevice, exec.stream()));
      }
      stream_ = exec.stream();
    } else if (kept_bytes != 0) {
      std::memcpy(grown.data_, data_, kept_bytes);
    }
    std::swap(data_, grown.data_);
    std::swap(size_, grown.size_);
  }

  /// @brief Pointer to the first element (nullptr when empty).
  [[nodiscard]] T* data() noexcept { return data_; }
  /// @copydoc data()
  [[nodiscard]] const T* data() const noexcept { return data_; }
  /// @brief Number of elements.
  [[nodiscard]] size_type size() const noexcept { return size_; }
  /// @brief Size in bytes.
  [[nodiscard]] size_type size_bytes() const noexcept { return size_ * sizeof(T); }
  /// @brief Whether the buffer holds no element.
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  /// @brief memory_space::device with cuda_exec, memory_space::host with host_exec.
  [[nodiscard]] memory_space space() const noexcept { return space_; }
  /// @brief The stream device memory is freed on (nullptr for host memory).
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }
  /// @brief The resource the memory came from (empty: gpubatch's own allocation).
  [[nodiscard]] memory_resource_ref resource() const noexcept { return resource_; }

 private:
  template <class Exec>
  void check_backend(const char* parameter) const {
    const bool device = is_cuda_exec_v<Exec>;
    if (device != (space_ == memory_space::device)) {
      throw invalid_argument(parameter, std::string("a ") + (device ? "cuda" : "host") +
                                            " execution argument cannot manage a buffer in " +
                                            to_string(space_) + " memory");
    }
  }

  void release() noexcept {
    if (space_ == memory_space::device) {
      detail::deallocate_device(data_, size_bytes(), stream_, resource_);
    } else {
      detail::deallocate_host_in_role(data_, size_bytes(), resource_);
    }
    data_ = nullptr;
    size_ = 0;
  }

  T* data_ = nullptr;
  size_type size_ = 0;
  memory_space space_ = memory_space::host;
  cudaStream_t stream_ = nullptr;
  memory_resource_ref resource_;
};

/// @brief A typed, uninitialised, move-only buffer of page-locked host memory, the source and
/// destination that make host-device copies truly asynchronous.
///
/// With cuda_exec it is pinned (cudaMallocHost); with host_exec it is ordinary host memory,
/// since nothing needs pinning when no device is involved.
///
/// Given a memory resource, the buffer takes its memory from it instead (synchronously: pinned
/// memory is not stream-ordered); the resource must outlive the buffer. cudaFreeHost waits for
/// the device, a resource need not: let the copies that use the buffer finish before it is
/// destroyed.
/// @tparam T a trivially copyable element type
template <class T>
class pinned_buffer {
  static_assert(std::is_trivially_copyable_v<T>,
                "gpubatch::pinned_buffer<T>: T must be trivially copyable");

 public:
  using value_type = T;
  using size_type = std::size_t;

  /// @brief Allocates `size` elements of ordinary host memory.
  /// @throws out_of_memory if the allocation fails
  pinned_buffer(size_type size, host_exec exec)
      : pinned_buffer(size, exec, memory_resource_ref{}) {}

  /// @brief Allocates `size` elements of page-locked host memory.
  /// @throws out_of_memory if the allocation fails; cuda_error for other CUDA failures
  pinned_buffer(size_type size, cuda_exec exec)
      : pinned_buffer(size, exec, memory_resource_ref{}) {}

  /// @brief Takes `size` elements of host memory from `resource` (the empty reference: as
  /// without one).
  /// @throws out_of_memory if the resource returns nullptr; whatever the resource throws
  /// @throws invalid_argument naming "resource" if it declares memory that is not host
  ///         accessible, or returns memory less aligned than memory_resource_ref::alignment
  pinned_buffer(size_type size, host_exec, memory_resource_ref resource)
      : size_(size), space_(memory_space::host), resource_(resource) {
    detail::resource_calls::require(resource, detail::declares_host_accessible, "resource");
    data_ = static_cast<T*>(detail::allocate_host_in_role(
        detail::checked_bytes(size, sizeof(T), "host"), memory_space::pinned, resource_));
  }

  /// @brief Takes `size` elements of page-locked host memory from `resource`, which must
  /// return pinned memory (the empty reference: as without one).
  /// @throws as the host_exec overload
  pinned_buffer(size_type size, cuda_exec, memory_resource_ref resource)
      : size_(size), space_(memory_space::pinned), resource_(resource) {
    detail::resource_calls::require(resource, detail::declares_host_accessible, "resource");
    data_ = static_cast<T*>(detail::allocate_pinned(
        detail::checked_bytes(size, sizeof(T), "pinned host"), resource_));
  }

  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  pinned_buffer(pinned_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        space_(other.space_),
        resource_(other.resource_) {}
  pinned_buffer& operator=(pinned_buffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      space_ = other.space_;
      resource_ = other.resource_;
    }
    return *this;
  }
  ~pinned_buffer() { release(); }

  /// @brief Pointer to the first element (nullptr when empty).
  [[nodiscard]] T* data() noexcept { return data_; }
  /// @copydoc data()
  [[nodiscard]] const T* data() const noexcept { return data_; }
  /// @brief Number of elements.
  [[nodiscard]] size_type size() const noexcept { return size_; }
  /// @brief Size in bytes.
  [[nodiscard]] size_type size_bytes() const noexcept { return size_ * sizeof(T); }
  /// @brief Whether the buffer holds no element.
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  /// @brief memory_space::pinned with cuda_exec, memory_space::host with host_exec.
  [[nodiscard]] memory_space space() const noexcept { return space_; }
  /// @brief The resource the memory came from (empty: gpubatch's own allocation).
  [[nodiscard]] memory_resource_ref resource() const noexcept { return resource_; }

  /// @brief Element access; the memory is host memory, so this is always legal on the host.
  [[nodiscard]] T& operator[](size_type i) noexcept { return data_[i]; }
  /// @copydoc operator[]
  [[nodiscard]] const T& operator[](size_type i) const noexcept { return data_[i]; }
  [[nodiscard]] T* begin() noexcept { return data_; }
  [[nodiscard]] T* end() noexcept { return data_ + size_; }
  [[nodiscard]] const T* begin() const noexcept { return data_; }
  [[nodiscard]] const T* end() const noexcept { return data_ + size_; }

 private:
  void release() noexcept {
    if (space_ == memory_space::pinned) {
      detail::deallocate_pinned(data_, size_bytes(), resource_);
    } else {
      detail::deallocate_host_in_role(data_, size_bytes(), resource_);
    }
    data_ = nullptr;
    size_ = 0;
  }

  T* data_ = nullptr;
  size_type size_ = 0;
  memory_space space_ = memory_space::host;
  memory_resource_ref resource_;
};

}  // namespace gpubatch
