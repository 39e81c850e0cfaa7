/// @file transfer.hpp
/// @brief Copies between host, pinned host and device memory on either backend: copy_async
/// (truly asynchronous, so pageable memory is refused unless you opt in to staging), copy
/// (synchronous), copy_to_host_async (a typed handle that owns the destination until the copy
/// has landed), register_host (pin a buffer you already have) and span (a 1-D view that knows
/// where its memory lives).
///
/// These helpers call the CUDA runtime only — no kernels — so they work in files compiled by
/// the host compiler as well as by nvcc.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/containers.hpp>
#include <gpubatch/detail/containers/allocate.hpp>
#include <gpubatch/detail/transfer/copy.hpp>
#include <gpubatch/detail/transfer/plan.hpp>
#include <gpubatch/detail/transfer/traits.hpp>
#include <gpubatch/detail/views/validate.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/memory_space.hpp>
#include <gpubatch/pinned_pool.hpp>
#include <gpubatch/views.hpp>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

namespace gpubatch {

// ---------------------------------------------------------------------------------------------
// span

/// @brief A non-owning, trivially copyable 1-D view of `size()` elements that knows which memory
/// space they live in; kernels may take it by value.
///
/// Build one from any contiguous container (gpubatch containers, std::vector, thrust vectors),
/// or from a pointer, a size and a space. `subspan()` addresses part of a buffer for a copy.
/// Views of the matrix and tensor kinds build from a span, and take over its memory space.
/// @tparam T the element type; `const T` for a read-only span
template <class T>
class span {
 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using size_type = std::size_t;

  /// @brief An empty span.
  constexpr span() noexcept = default;

  /// @brief Views `size` elements at `data`.
  /// @param space where `data` lives, if known; copies classify `unknown` at run time
  /// @throws invalid_argument if `data` is null and `size` is not 0
  span(T* data, size_type size, memory_space space = memory_space::unknown)
      : data_(data), size_(size), space_(space) {
    if (data == nullptr && size != 0) {
      throw invalid_argument("data", "null pointer for a span of " + std::to_string(size) +
                                         " elements");
    }
  }

  /// @brief Views a contiguous container (an lvalue: a span of a temporary would dangle).
  template <class Container,
            std::enable_if_t<detail::is_container_of<Container, T>::value &&
                                 !detail::is_gpubatch_span<std::remove_cv_t<Container>>::value,
                             int> = 0>
  span(Container& container)  // NOLINT(google-explicit-constructor): a span is a view
      : data_(detail::to_address(container.data())),
        size_(static_cast<size_type>(container.size())),
        space_(detail::range_label(container)) {}

  /// @brief A read-only span of a writable one.
  template <class U, std::enable_if_t<std::is_same_v<const U, T> && !std::is_same_v<U, T>, int> = 0>
  GPUBATCH_HOST_DEVICE span(const span<U>& other) noexcept  // NOLINT(google-explicit-constructor)
      : data_(other.data()), size_(other.size()), space_(other.space()) {}

  GPUBATCH_HOST_DEVICE T* data() const noexcept { return data_; }
  GPUBATCH_HOST_DEVICE size_type size() const noexcept { return size_; }
  GPUBATCH_HOST_DEVICE size_type size_bytes() const noexcept { return size_ * sizeof(T); }
  GPUBATCH_HOST_DEVICE bool empty() const noexcept { return size_ == 0; }
  GPUBATCH_HOST_DEVICE memory_space space() const noexcept { return space_; }
  GPUBATCH_HOST_DEVICE T& operator[](size_type i) const noexcept { return data_[i]; }
  GPUBATCH_HOST_DEVICE T* begin() const noexcept { return data_; }
  GPUBATCH_HOST_DEVICE T* end() const noexcept { return data_ + size_; }

  /// @brief Elements [offset, offset + count) of this span, in the same memory space.
  /// @throws invalid_argument if the range does not lie within the span
  [[nodiscard]] span subspan(size_type offset, size_type count) const {
    if (offset > size_ || count > size_ - offset) {
      throw invalid_argument("count", "elements [" + std::to_string(offset) + ", " +
                                          std::to_string(offset) + " + " + std::to_string(count) +
                                          ") lie outside a span of " + std::to_string(size_));
    }
    span part;
    part.data_ = data_ + offset;
    part.size_ = count;
    part.space_ = space_;
    return part;
  }

 private:
  T* data_ = nullptr;
  size_type size_ = 0;
  memory_space space_ = memory_space::unknown;
};

template <class Container>
span(Container&) -> span<std::remove_pointer_t<decltype(detail::to_address(
    std::declval<Container&>().data()))>>;
template <class T>
span(T*, std::size_t, memory_space) -> span<T>;
template <class T>
span(T*, std::size_t) -> span<T>;

// ---------------------------------------------------------------------------------------------
// register_host

/// @brief Page-locks an existing host buffer in place (cudaHostRegister) for as long as the
/// object lives, so that copies from and to it are truly asynchronous without copying your data
/// into a pinned buffer first. Move-only; unregisters on destruction.
///
/// The buffer must stay where it is while registered: do not resize or free a registered
/// std::vector. With host_exec nothing is registered (no device, nothing to pin).
class host_registration {
 public:
  /// @brief Registers nothing.
  host_registration() noexcept = default;

  /// @brief Page-locks `bytes` bytes at `data` (portable: pinned for every device).
  /// @throws invalid_argument if `data` is null with nonzero bytes, is already page-locked or
  ///         cannot be registered (device memory, for example)
  /// @throws out_of_memory if the system cannot lock that much memory; cuda_error otherwise
  host_registration(cuda_exec exec, void* data, std::size_t bytes) {
    (void)exec;
    check(data, bytes);
    if (bytes == 0) {
      return;
    }
    const cudaError_t status = cudaHostRegister(data, bytes, cudaHostRegisterPortable);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      if (status == cudaErrorMemoryAllocation) {
        throw out_of_memory("pinned host", bytes, detail::host_bytes_free());
      }
      if (status == cudaErrorHostMemoryAlreadyRegistered) {
        throw invalid_argument("data", "is already page-locked (registered, or allocated "
                                       "with cudaMallocHost / a pinned_buffer)");
      }
      if (status == cudaErrorInvalidValue) {
        throw invalid_argument("data", std::string("cannot be page-locked (") +
                                           cudaGetErrorName(status) +
                                           "): it is not ordinary host memory");
      }
      detail::throw_on_cuda_error(status, "cudaHostRegister", __FILE__, __LINE__);
    }
    data_ = data;
    bytes_ = bytes;
  }

  /// @brief The host backend pins nothing; the range counts as pinned memory for
  /// gpubatch::on_host_checked while the object lives.
  /// @throws invalid_argument if `data` is null with nonzero bytes
  host_registration(host_exec exec, void* data, std::size_t bytes) {
    (void)exec;
    check(data, bytes);
    if (bytes != 0) {
      detail_shared::host_roles().add(data, bytes, memory_space::pinned);
      host_role_ = data;
    }
  }

  host_registration(const host_registration&) = delete;
  host_registration& operator=(const host_registration&) = delete;
  host_registration(host_registration&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)),
        host_role_(std::exchange(other.host_role_, nullptr)) {}
  host_registration& operator=(host_registration&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      host_role_ = std::exchange(other.host_role_, nullptr);
    }
    return *this;
  }
  /// @brief Unregisters the buffer.
  ~host_registration() { reset(); }

  /// @brief Unregisters the buffer now. Copies that use it must have completed.
  void reset() noexcept {
    if (data_ != nullptr) {
      GPUBATCH_CUDA_TRY_NOTHROW(cudaHostUnregister(data_));
    }
    if (host_role_ != nullptr) {
      detail_shared::host_roles().remove(host_role_);
    }
    data_ = nullptr;
    bytes_ = 0;
    host_role_ = nullptr;
  }

  /// @brief Whether a buffer is page-locked by this object.
  [[nodiscard]] bool registered() const noexcept { return data_ != nullptr; }
  /// @brief The registered range's first byte (nullptr when nothing is registered).
  [[nodiscard]] void* data() const noexcept { return data_; }
  /// @brief The registered range's size in bytes.
  [[nodiscard]] std::size_t size_bytes() const noexcept { return bytes_; }
  /// @brief memory_space::pinned while registered, memory_space::host otherwise.
  [[nodiscard]] memory_space space() const noexcept {
    return data_ != nullptr ? memory_space::pinned : memory_space::host;
  }

 private:
  static void check(const void* data, std::size_t bytes) {
    if (data == nullptr && bytes != 0) {
      throw invalid_argument("data", "null pointer for " + std::to_string(bytes) + " bytes");
    }
  }

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  void* host_role_ = nullptr;  // the host backend's record for on_host_checked
};

GPUBATCH_ABI_BEGIN
/// @brief Page-locks `count` elements at `data` in place; see host_registration.
/// @throws as host_registration's constructor
template <class Exec, class T>
[[nodiscard]] host_registration register_host(Exec exec, T* data, std::size_t count) {
  static_assert(is_execution_v<Exec>, "gpubatch::register_host: the first argument must be an "
                                      "execution argument (gpubatch::on_host or gpubatch::on(stream))");
  static_assert(!std::is_const_v<T>, "gpubatch::register_host: registration changes the memory's "
                                     "state, so it needs a non-const pointer");
  return host_registration(exec, static_cast<void*>(data),
                           detail::checked_bytes(count, sizeof(T), "pinned host"));
}

/// @brief Page-locks the elements of a contiguous host container (std::vector, ...) in place.
/// @throws as host_registration's constructor
template <class Exec, class Container,
          std::enable_if_t<detail::is_linear_range<Container>::value, int> = 0>
[[nodiscard]] host_registration register_host(Exec exec, Container& container) {
  return register_host(exec, detail::to_address(container.data()),
                       static_cast<std::size_t>(container.size()));
}

/// @brief Deleted: registering a temporary would leave the registration pointing at freed memory.
template <class Exec, class Container,
          std::enable_if_t<!std::is_lvalue_reference_v<Container>, int> = 0>
host_registration register_host(Exec exec, Container&& container) = delete;
GPUBATCH_ABI_END

// ---------------------------------------------------------------------------------------------
// Copies

/// @brief The explicit opt-in to stage pageable memory through a pinned pool:
/// `copy_async(exec, dst, src, gpubatch::stage_through(pool))`.
///
/// A pageable source is packed into a pool block on the calling thread (so it may be reused as
/// soon as the call returns), then copied asynchronously; a pageable destination receives the
/// data in a pool block, unpacked by a host function queued on the stream after the copy. The
/// blocks go back to the pool tracked by the copy's fence.
template <class Exec>
class stage_through {
 public:
  /// @param pool the pool that lends the staging blocks; it must outlive the call
  explicit stage_through(pinned_pool<Exec>& pool) noexcept : pool_(&pool) {}
  /// @brief The pool that lends the staging blocks.
  [[nodiscard]] pinned_pool<Exec>& pool() const noexcept { return *pool_; }

 private:
  pinned_pool<Exec>* pool_;
};

template <class Exec>
stage_through(pinned_pool<Exec>&) -> stage_through<Exec>;

GPUBATCH_ABI_BEGIN
namespace detail {
/// Records the copy's fence on the pooled sides, so their blocks outlive the copy in the pool.
template <class Exec, class R>
void track_pooled(const R& range, const fence_t<Exec>& fence) noexcept {
  if constexpr (is_pooled_buffer<std::remove_cv_t<R>>::value) {
    range.record_use(fence);
  } else {
    (void)range;
    (void)fence;
  }
}

template <class R>
inline constexpr bool is_pooled_v = is_pooled_buffer<std::remove_cv_t<R>>::value;

template <class Exec, class Dst, class Src>
fence_t<Exec> copy_ranges(Exec exec, Dst& dst, const Src& src, copy_mode mode,
                          no_deduce_t<pinned_pool<Exec>>* pool, bool want_fence) {
  static_assert(is_execution_v<Exec>, "gpubatch copies: the first argument must be an execution "
                                      "argument (gpubatch::on_host or gpubatch::on(stream))");
  check_copy_shapes<Dst>(dst, src);
  const bool track = is_cuda_exec_v<Exec> && (is_pooled_v<Dst> || is_pooled_v<Src>);
  fence_t<Exec> fence =
      issue_copy(exec, region_of(dst), region_of(src), mode, pool, want_fence || track);
  track_pooled<Exec>(dst, fence);
  track_pooled<Exec>(src, fence);
  return fence;
}
}  // namespace detail
GPUBATCH_ABI_END

GPUBATCH_ABI_BEGIN
/// @brief Copies `src` into `dst` asynchronously on exec's stream; the direction (host to
/// device, device to host, device to device, pinned to pinned) is deduced from where each side
/// lives.
///
/// Sides: gpubatch containers and pooled buffers, std::vector and thrust vectors, span,
/// tensor4d_view (1-D, element for element), or matrix_batch_view on both sides (2-D strided:
/// one cudaMemcpy2DAsync for evenly spaced matrices, one per matrix otherwise; the padding of a
/// strided destination is never written). Sizes, or rows, cols, count and layout, must match.
///
/// With cuda_exec a pageable host side is refused: cudaMemcpyAsync from or to pageable memory
/// blocks the calling thread, which is not what an async copy promises. Use pinned memory
/// (pinned_buffer, pinned_pool, register_host), the overload taking stage_through(pool), or
/// copy(). With host_exec the copy is a memcpy, done when the call returns, and a pageable side
/// is accepted; gpubatch::on_host_checked refuses it as the CUDA backend does.
///
/// Copies through a pooled_buffer record their fence on it, so its block is not reused before
/// the copy has completed. The memory of both sides must stay valid until then (an owning
/// temporary as a side is a compile-time error).
///
/// @warning Only a pooled_buffer passed as a side itself is tracked. A view of pool memory (a
/// span or subspan of a pooled_buffer, a matrix_batch_view or tensor4d_view over one) records
/// nothing: call `buffer.record_use(record_fence(exec))` after the copy, or the block may be
/// reused (or freed by pinned_pool::release) while the copy still runs.
/// @throws invalid_argument naming "dst" or "src": mismatched shapes, a pageable side, memory
///         the backend cannot access, a broadcast (batch stride 0) destination
/// @throws cuda_error if the copy cannot be issued
template <class Exec, class Dst, class Src,
          std::enable_if_t<!detail::is_owning_rvalue_v<Dst>, int> = 0>
void copy_async(Exec exec, Dst&& dst, const Src& src) {
  (void)detail::copy_ranges(exec, dst, src, detail::copy_mode::async, nullptr, false);
}

/// @brief copy_async that stages a pageable side through `staging.pool()` instead of refusing
/// it (see stage_through). With host_exec there is nothing to stage and the pool is unused.
/// @throws as copy_async, and out_of_memory if a staging block cannot be allocated
template <class Exec, class Dst, class Src,
          std::enable_if_t<!detail::is_owning_rvalue_v<Dst>, int> = 0>
void copy_async(Exec exec, Dst&& dst, const Src& src, stage_through<Exec> staging) {
  (void)detail::copy_ranges(exec, dst, src, detail::copy_mode::staged, &staging.pool(), false);
}

/// @brief Deleted: an owning temporary as the source is freed before the copy has run.
template <class Exec, class Dst, class Src,
          std::enable_if_t<detail::is_owning_rvalue_v<Src>, int> = 0>
void copy_async(Exec exec, Dst&& dst, Src&& src) = delete;
/// @brief Deleted: an owning temporary as the destination is freed before the copy lands.
template <class Exec, class Dst, class Src,
          std::enable_if_t<detail::is_owning_rvalue_v<Dst>, int> = 0>
void copy_async(Exec exec, Dst&& dst, const Src& src) = delete;
/// @brief Deleted: an owning temporary as the source is freed before the copy has run.
template <class Exec, class Dst, class Src,
          std::enable_if_t<detail::is_owning_rvalue_v<Src>, int> = 0>
void copy_async(Exec exec, Dst&& dst, Src&& src, stage_through<Exec> staging) = delete;

/// @brief Copies `src` into `dst` and returns when the copy is complete. Any host memory is
/// accepted, pageable included: the call waits anyway. Sides as for copy_async.
/// @throws invalid_argument for mismatched shapes or memory the backend cannot access
/// @throws cuda_error if the copy fails
template <class Exec, class Dst, class Src>
void copy(Exec exec, Dst&& dst, const Src& src) {
  (void)detail::copy_ranges(exec, dst, src, detail::copy_mode::synchronous, nullptr, false);
  if constexpr (is_cuda_exec_v<Exec>) {
    GPUBATCH_CUDA_TRY(cudaStreamSynchronize(exec.stream()));
  }
}
GPUBATCH_ABI_END

template <class Dst, class Exec>
class copy_future;

GPUBATCH_ABI_BEGIN
namespace detail {
struct copy_future_access {
  template <class Dst, class Exec>
  static copy_future<Dst, Exec> make(std::unique_ptr<Dst> dst, fence_t<Exec> fence) {
    return copy_future<Dst, Exec>(std::move(dst), std::move(fence));
  }
};
}  // namespace detail
GPUBATCH_ABI_END

/// @brief The typed completion handle of a device-to-host copy: it owns the destination, and
/// hands it out only after synchronising on the copy's fence, so the host cannot read data that
/// has not landed yet.
///
/// Like std::future: ready() polls, wait() blocks, get() waits and returns the destination.
/// Destroying a handle whose copy is still running waits for it first, so the destination is
/// never freed under a DMA. Move-only.
///
/// The destination lives on the heap from before the copy is issued until get() moves it out,
/// so moving the handle never moves the destination: containers whose move relocates their
/// elements (std::array, inline storage) are written where the copy was aimed.
/// @tparam Dst the destination type (pinned_buffer, pooled_buffer, std::vector, span, ...)
/// @tparam Exec the backend that issued the copy
template <class Dst, class Exec>
class copy_future {
 public:
  /// @brief A handle without a copy; valid() is false.
  copy_future() noexcept = default;
  copy_future(const copy_future&) = delete;
  copy_future& operator=(const copy_future&) = delete;
  copy_future(copy_future&& other) noexcept
      : destination_(std::move(other.destination_)), fence_(std::move(other.fence_)) {}
  copy_future& operator=(copy_future&& other) noexcept {
    if (this != &other) {
      settle();
      destination_ = std::move(other.destination_);
      fence_ = std::move(other.fence_);
    }
    return *this;
  }
  /// @brief Waits for a copy still running, so its destination is not freed under it.
  ~copy_future() { settle(); }

  /// @brief Whether the handle holds a destination (false after `std::move(f).get()`).
  [[nodiscard]] bool valid() const noexcept { return destination_ != nullptr; }
  /// @brief Whether the copy has completed, successfully or not; never blocks.
  [[nodiscard]] bool ready() const noexcept { return fence_.ready(); }
  /// @brief Blocks until the copy has completed.
  /// @throws cuda_error if it failed
  void wait() const { fence_.wait(); }
  /// @brief Blocks until the copy has completed or `timeout` has passed.
  /// @return whether the copy has completed
  template <class Rep, class Period>
  [[nodiscard]] bool wait_for(const std::chrono::duration<Rep, Period>& timeout) const {
    return fence_.wait_for(timeout);
  }
  /// @brief Waits for the copy, then gives access to the destination.
  /// @throws error if the handle is not valid(); cuda_error if the copy failed
  [[nodiscard]] Dst& get() & {
    require_valid();
    fence_.wait();
    return *destination_;
  }
  /// @brief Waits for the copy, then moves the destination out; valid() becomes false.
  /// @throws error if the handle is not valid(); cuda_error if the copy failed
  [[nodiscard]] Dst get() && {
    require_valid();
    fence_.wait();
    Dst out = std::move(*destination_);
    destination_.reset();
    return out;
  }

 private:
  friend struct detail::copy_future_access;
  copy_future(std::unique_ptr<Dst> destination, fence_t<Exec> fence)
      : destination_(std::move(destination)), fence_(std::move(fence)) {}

  void require_valid() const {
    if (destination_ == nullptr) {
      throw error("gpubatch::copy_future::get: the handle holds no destination (default "
                  "constructed, moved from, or already taken with std::move(f).get())");
    }
  }
  void settle() noexcept {
    if (destination_ != nullptr) {
      fence_.wait_nothrow();
    }
  }

  std::unique_ptr<Dst> destination_;  // never moves while a copy may be writing it
  fence_t<Exec> fence_;
};

GPUBATCH_ABI_BEGIN
namespace detail {
template <class Exec, class Dst, class Src>
copy_future<Dst, Exec> copy_to_host(Exec exec, Dst&& dst, const Src& src, copy_mode mode,
                                    no_deduce_t<pinned_pool<Exec>>* pool) {
  const copy_region region = region_of(dst);
  if (resolve_space<Exec>(region.space, region.data) == memory_space::device) {
    throw invalid_argument("dst", "is device memory: copy_to_host_async copies to host memory "
                                  "(use copy_async between device buffers)");
  }
  // Move the destination to where it stays first, then aim the copy at it: the move of a
  // std::array or of inline storage relocates the elements.
  auto stored = std::make_unique<Dst>(std::move(dst));
  fence_t<Exec> fence = copy_ranges(exec, *stored, src, mode, pool, true);
  return copy_future_access::make<Dst, Exec>(std::move(stored), std::move(fence));
}
}  // namespace detail
GPUBATCH_ABI_END

GPUBATCH_ABI_BEGIN
/// @brief Copies `src` (typically device memory) into `dst`, a host container the handle takes
/// ownership of, and returns the handle through which alone the host reads the result.
///
/// `dst` is pinned memory (pinned_buffer, pooled_buffer, a registered vector) — or, with the
/// stage_through overload, pageable memory. Pass it with std::move: the caller must not keep a
/// way to read it before the copy has landed. Shapes and sides as for copy_async.
/// @throws invalid_argument naming "dst" or "src" (as copy_async; "dst" also for device memory)
/// @throws cuda_error if the copy or its fence cannot be issued
template <class Exec, class Dst, class Src,
          std::enable_if_t<!std::is_lvalue_reference_v<Dst> &&
                               !detail::is_pinned_pool<std::remove_cv_t<Dst>>::value,
                           int> = 0>
[[nodiscard]] copy_future<Dst, Exec> copy_to_host_async(Exec exec, Dst&& dst, const Src& src) {
  return detail::copy_to_host(exec, std::move(dst), src, detail::copy_mode::async, nullptr);
}

/// @brief copy_to_host_async into pageable memory, staged through `staging.pool()`.
/// @throws as copy_to_host_async, and out_of_memory if a staging block cannot be allocated
template <class Exec, class Dst, class Src,
          std::enable_if_t<!std::is_lvalue_reference_v<Dst> &&
                               !detail::is_pinned_pool<std::remove_cv_t<Dst>>::value,
                           int> = 0>
[[nodiscard]] copy_future<Dst, Exec> copy_to_host_async(Exec exec, Dst&& dst, const Src& src,
                                                        stage_through<Exec> staging) {
  return detail::copy_to_host(exec, std::move(dst), src, detail::copy_mode::staged,
                              &staging.pool());
}

/// @brief copy_to_host_async into a buffer borrowed from `pool`, sized like `src`.
/// @return a handle whose get() gives a pooled_buffer holding the copy
/// @throws as copy_to_host_async, and out_of_memory if the pool cannot lend the buffer
template <class Exec, class Src>
[[nodiscard]] auto copy_to_host_async(Exec exec, pinned_pool<Exec>& pool, const Src& src) {
  static_assert(!detail::is_matrix_view<std::remove_cv_t<Src>>::value,
                "gpubatch::copy_to_host_async(exec, pool, src): src must be a 1-D range; for a "
                "matrix batch allocate a pooled_buffer, copy_async into a matrix_batch_view over "
                "it, then call buffer.record_use(record_fence(exec)): a view records no fence");
  using element = std::remove_cv_t<detail::range_element_t<const Src>>;
  pooled_buffer<element, Exec> destination =
      pool.template allocate<element>(static_cast<std::size_t>(src.size()));
  return detail::copy_to_host(exec, std::move(destination), src, detail::copy_mode::async,
                              nullptr);
}

/// @brief Deleted: pass the destination with std::move — the handle must own it, so that the
/// host reads it only after the copy has landed.
template <class Exec, class Dst, class Src,
          std::enable_if_t<std::is_lvalue_reference_v<Dst> &&
                               !detail::is_pinned_pool<std::remove_cv_t<std::remove_reference_t<Dst>>>::value,
                           int> = 0>
void copy_to_host_async(Exec exec, Dst&& dst, const Src& src) = delete;
/// @brief Deleted: an owning temporary as the source is freed before the copy has run.
template <class Exec, class Dst, class Src,
          std::enable_if_t<detail::is_owning_rvalue_v<Src>, int> = 0>
void copy_to_host_async(Exec exec, Dst&& dst, Src&& src) = delete;
/// @brief Deleted: an owning temporary as the source is freed before the copy has run.
template <class Exec, class Dst, class Src,
          std::enable_if_t<detail::is_owning_rvalue_v<Src>, int> = 0>
void copy_to_host_async(Exec exec, Dst&& dst, Src&& src, stage_through<Exec> staging) = delete;
GPUBATCH_ABI_END

}  // namespace gpubatch
