/// @file pinned_pool.hpp
/// @brief Completion tracking (fences) and a caching pool of pinned host memory whose blocks are
/// reused only after the copies that used them have completed.
///
/// A fence says when asynchronous work has completed: on the CUDA backend it is a CUDA event
/// recorded on a stream, on the host backend a flag that the thread doing the work sets. The
/// pool is written against fences only, so its bookkeeping (reuse after completion, statistics,
/// bounded waste, release) runs — and is tested — on a machine without a GPU.
#pragma once

#include <gpubatch/detail/transfer/host_fence_state.hpp>
#include <gpubatch/detail/transfer/pool_state.hpp>
#include <gpubatch/detail/transfer/size_class.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/memory_resource.hpp>
#include <gpubatch/memory_space.hpp>
#include <gpubatch/stream.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>

namespace gpubatch {

// ---------------------------------------------------------------------------------------------
// Fences

/// @brief Completion of host-backend work: a flag set by whoever runs the work, and the
/// exception that work threw, if any. A cheap, copyable handle to shared state.
///
/// A default-constructed fence is complete: host_exec runs operations synchronously, so there
/// is nothing to wait for when one returns. Worker threads (the host pipeline) create pending
/// fences and signal them when their work is done.
class host_fence {
 public:
  /// @brief A fence that is already complete.
  host_fence() noexcept = default;

  /// @brief A pending fence, completed by signal().
  /// @param order identifies a serial queue: fences of one queue complete in creation order
  ///        (nullptr: no such guarantee)
  /// @throws std::bad_alloc
  [[nodiscard]] static host_fence pending(const void* order = nullptr) {
    host_fence f;
    f.state_ = std::make_shared<detail::host_fence_state>();
    f.order_ = order;
    f.sequence_ = detail::next_fence_sequence();
    return f;
  }

  /// @brief Completes the fence and wakes every waiter; the first signal wins.
  /// @param failure the exception of the work the fence tracks, or nullptr on success
  void signal(std::exception_ptr failure = nullptr) const noexcept {
    if (state_ == nullptr) {
      return;
    }
    {
      const std::lock_guard<std::mutex> lock(state_->mutex);
      if (state_->done) {
        return;
      }
      state_->done = true;
      state_->failure = std::move(failure);
    }
    state_->completed.notify_all();
  }

  /// @brief Whether the work has completed, successfully or not; never blocks.
  [[nodiscard]] bool ready() const noexcept {
    if (state_ == nullptr) {
      return true;
    }
    const std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->done;
  }

  /// @brief Blocks until the work has completed.
  /// @throws whatever the work threw
  void wait() const {
    wait_nothrow();
    if (const std::exception_ptr f = failure()) {
      std::rethrow_exception(f);
    }
  }

  /// @brief Blocks until the work has completed or `timeout` has passed; does not throw the
  /// work's failure (wait() does).
  /// @return whether the work has completed
  template <class Rep, class Period>
  [[nodiscard]] bool wait_for(const std::chrono::duration<Rep, Period>& timeout) const {
    if (state_ == nullptr) {
      return true;
    }
    std::unique_lock<std::mutex> lock(state_->mutex);
    return state_->completed.wait_for(lock, timeout, [this] { return state_->done; });
  }

  /// @brief Blocks until the work has completed, ignoring its failure: for destructors and
  /// cleanup, which must not throw.
  void wait_nothrow() const noexcept {
    if (state_ == nullptr) {
      return;
    }
    std::unique_lock<std::mutex> lock(state_->mutex);
    state_->completed.wait(lock, [this] { return state_->done; });
  }

  /// @brief The exception the work threw; nullptr while pending or after success.
  [[nodiscard]] std::exception_ptr failure() const noexcept {
    if (state_ == nullptr) {
      return nullptr;
    }
    const std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->failure;
  }

  /// @brief Whether both fences belong to one serial queue, so they complete in creation order.
  [[nodiscard]] bool same_order(const host_fence& other) const noexcept {
    return order_ != nullptr && order_ == other.order_;
  }

  /// @brief Whether this fence was created after `other` (meaningful when same_order()).
  [[nodiscard]] bool recorded_after(const host_fence& other) const noexcept {
    return sequence_ > other.sequence_;
  }

 private:
  std::shared_ptr<detail::host_fence_state> state_;
  const void* order_ = nullptr;
  std::uint64_t sequence_ = 0;
};

/// @brief Completion of CUDA-backend work: a CUDA event recorded on a stream. A cheap, copyable
/// handle; the event is destroyed with the last copy.
class cuda_fence {
 public:
  /// @brief A fence that is already complete.
  cuda_fence() noexcept = default;

  /// @brief A fence that completes when all work issued to `stream` so far has completed.
  /// @throws cuda_error if the event cannot be created or recorded
  [[nodiscard]] static cuda_fence record(cudaStream_t stream) {
    cuda_fence f;
    f.event_ = std::make_shared<cuda_event>();
    f.event_->record(stream);
    f.stream_ = stream;
    f.sequence_ = detail::next_fence_sequence();
    return f;
  }

  /// @brief Whether the work has completed, successfully or not; never blocks. A failed device
  /// (a sticky error) counts as completed: nothing runs on it any more.
  [[nodiscard]] bool ready() const noexcept {
    if (event_ == nullptr) {
      return true;
    }
    const cudaError_t status = cudaEventQuery(event_->get());
    if (status == cudaSuccess) {
      return true;
    }
    (void)cudaGetLastError();
    return status != cudaErrorNotReady;
  }

  /// @brief Blocks until the work has completed.
  /// @throws cuda_error if the work failed
  void wait() const {
    if (event_ != nullptr) {
      GPUBATCH_CUDA_TRY(cudaEventSynchronize(event_->get()));
    }
  }

  /// @brief Polls until the work has completed or `timeout` has passed; does not throw the
  /// work's failure (wait() does).
  /// @return whether the work has completed
  template <class Rep, class Period>
  [[nodiscard]] bool wait_for(const std::chrono::duration<Rep, Period>& timeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::microseconds(20);
    while (!ready()) {
      if (std::chrono::steady_clock::now() >= deadline) {
        return false;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
    return true;
  }

  /// @brief Blocks until the work has completed, ignoring its failure.
  void wait_nothrow() const noexcept {
    if (event_ != nullptr) {
      GPUBATCH_CUDA_TRY_NOTHROW(cudaEventSynchronize(event_->get()));
    }
  }

  /// @brief Whether both fences were recorded on one stream, so they complete in recording order.
  ///
  /// Never for the default-stream handles (nullptr, cudaStreamLegacy, cudaStreamPerThread):
  /// which stream they mean depends on the recording thread and on how the code was compiled
  /// (--default-stream per-thread), so equal handles need not name one stream.
  [[nodiscard]] bool same_order(const cuda_fence& other) const noexcept {
    return event_ != nullptr && other.event_ != nullptr && stream_ == other.stream_ &&
           stream_ != nullptr && stream_ != cudaStreamLegacy && stream_ != cudaStreamPerThread;
  }

  /// @brief Whether this fence was recorded after `other` (meaningful when same_order()).
  [[nodiscard]] bool recorded_after(const cuda_fence& other) const noexcept {
    return sequence_ > other.sequence_;
  }

  /// @brief The stream the fence was recorded on.
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }

 private:
  std::shared_ptr<cuda_event> event_;
  cudaStream_t stream_ = nullptr;
  std::uint64_t sequence_ = 0;
};

/// @brief The fence type of a backend: cuda_fence for cuda_exec, host_fence for host_exec.
template <class Exec>
using fence_t = std::conditional_t<is_cuda_exec_v<Exec>, cuda_fence, host_fence>;

/// @brief A fence that completes when the work issued through `exec` so far has completed: an
/// event recorded on exec's stream.
/// @throws cuda_error if the event cannot be created or recorded
[[nodiscard]] inline cuda_fence record_fence(cuda_exec exec) {
  return cuda_fence::record(exec.stream());
}

/// @brief host_exec runs synchronously: the fence is complete at once (and allocates nothing).
[[nodiscard]] inline host_fence record_fence(host_exec) noexcept { return host_fence{}; }

// ---------------------------------------------------------------------------------------------
// The pool

/// @brief Tuning of a pinned_pool.
struct pinned_pool_options {
  /// Completed cached blocks beyond this many bytes are freed when a block comes back (largest
  /// first). Blocks whose copies still run are never freed early.
  ///
  /// Default 1 GiB: page-locked memory is taken from the whole system (it cannot be swapped),
  /// so an idle pool must not hoard it without bound; 1 GiB keeps the blocks of a typical
  /// pipeline (a few buffers of up to a few hundred MiB) cached. Raise it for larger working
  /// sets, or set std::numeric_limits<std::size_t>::max() to cache without limit.
  std::size_t max_cached_bytes = std::size_t{1} << 30;
  /// Where the pool's blocks come from: a resource of pinned memory (with host_exec, of host
  /// memory), called synchronously, which must outlive the pool and every buffer borrowed from
  /// it; blocks go back to it once their copies have completed. Empty (the default):
  /// cudaHostAlloc, or aligned host memory with host_exec.
  memory_resource_ref resource{};
};

/// @brief A snapshot of a pinned_pool's counters.
struct pinned_pool_stats {
  std::size_t bytes_in_use = 0;     ///< capacity of the blocks handed out and not yet returned
  std::size_t bytes_requested = 0;  ///< what was asked for those blocks (<= bytes_in_use)
  std::size_t bytes_cached = 0;     ///< capacity of returned blocks kept for reuse
  std::size_t peak_bytes = 0;       ///< highest bytes_in_use + bytes_cached so far
  std::size_t blocks_in_use = 0;    ///< blocks handed out
  std::size_t blocks_cached = 0;    ///< blocks kept for reuse
  std::size_t allocations = 0;      ///< blocks allocated (cudaHostAlloc or the resource)
  std::size_t reuses = 0;           ///< requests served from the cache
  std::size_t frees = 0;            ///< blocks returned (to the system or the resource)
};

template <class Exec>
class pinned_pool;

/// @brief A typed, move-only buffer borrowed from a pinned_pool; its block goes back to the pool
/// when the buffer is destroyed, and is reused only after the copies that used it completed.
///
/// gpubatch's copies record their fence on a pooled buffer they read or write when it is passed
/// as a side itself; work of your own (a kernel reading mapped pinned memory, a raw
/// cudaMemcpyAsync) is tracked by passing its fence to record_use(). The buffer keeps the
/// pool's state alive, so it may outlive the pool.
///
/// @warning A copy through a *view* of the buffer's memory (span, subspan, matrix_batch_view,
/// tensor4d_view) does not know the memory belongs to a pool and records nothing. After such a
/// copy call `buf.record_use(record_fence(exec))` before the buffer can be destroyed or reset,
/// or the block may be handed out again while the copy still reads or writes it.
/// @tparam T a trivially copyable element type
/// @tparam Exec the pool's backend: pinned memory for cuda_exec, ordinary memory for host_exec
template <class T, class Exec>
class pooled_buffer {
  static_assert(std::is_trivially_copyable_v<T>,
                "gpubatch::pooled_buffer<T>: T must be trivially copyable");

 public:
  using value_type = T;
  using size_type = std::size_t;
  /// @brief The fence type that tracks copies through this buffer.
  using fence_type = fence_t<Exec>;

  /// @brief An empty buffer that holds no block.
  pooled_buffer() noexcept = default;
  pooled_buffer(const pooled_buffer&) = delete;
  pooled_buffer& operator=(const pooled_buffer&) = delete;
  pooled_buffer(pooled_buffer&& other) noexcept
      : state_(std::move(other.state_)),
        block_(std::move(other.block_)),
        size_(std::exchange(other.size_, 0)) {}
  pooled_buffer& operator=(pooled_buffer&& other) noexcept {
    if (this != &other) {
      reset();
      state_ = std::move(other.state_);
      block_ = std::move(other.block_);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  /// @brief Returns the block to the pool (reusable once its recorded copies complete).
  ~pooled_buffer() { reset(); }

  /// @brief Returns the block to the pool now; the buffer becomes empty.
  void reset() noexcept {
    if (block_ != nullptr) {
      state_->give_back(std::move(block_));
    }
    state_.reset();
    size_ = 0;
  }

  /// @brief Records that work tracked by `fence` uses this memory: the block is not handed out
  /// again before the fence completes. gpubatch's copies call it for you when this buffer is a
  /// side of the copy, but not when a view of its memory is: then call it yourself, with
  /// record_fence(exec) right after issuing the copy.
  void record_use(const fence_type& fence) const noexcept {
    if (block_ != nullptr) {
      block_->add_use(fence);
    }
  }

  /// @brief Pointer to the first element (nullptr when empty).
  [[nodiscard]] T* data() noexcept { return block_ ? static_cast<T*>(block_->data) : nullptr; }
  /// @copydoc data()
  [[nodiscard]] const T* data() const noexcept {
    return block_ ? static_cast<const T*>(block_->data) : nullptr;
  }
  /// @brief Number of elements.
  [[nodiscard]] size_type size() const noexcept { return size_; }
  /// @brief Size in bytes.
  [[nodiscard]] size_type size_bytes() const noexcept { return size_ * sizeof(T); }
  /// @brief Bytes of the underlying block (at most 1/8, or 256 bytes, more than size_bytes()).
  [[nodiscard]] size_type capacity_bytes() const noexcept { return block_ ? block_->capacity : 0; }
  /// @brief Whether the buffer holds no element.
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  /// @brief memory_space::pinned for cuda_exec, memory_space::host for host_exec.
  [[nodiscard]] static constexpr memory_space space() noexcept {
    return is_cuda_exec_v<Exec> ? memory_space::pinned : memory_space::host;
  }

  /// @brief Element access; the memory is host memory, so this is always legal on the host.
  /// Read data written by an asynchronous copy only after that copy's fence has completed.
  [[nodiscard]] T& operator[](size_type i) noexcept { return data()[i]; }
  /// @copydoc operator[]
  [[nodiscard]] const T& operator[](size_type i) const noexcept { return data()[i]; }
  [[nodiscard]] T* begin() noexcept { return data(); }
  [[nodiscard]] T* end() noexcept { return data() + size_; }
  [[nodiscard]] const T* begin() const noexcept { return data(); }
  [[nodiscard]] const T* end() const noexcept { return data() + size_; }

 private:
  friend class pinned_pool<Exec>;
  using state_type = detail::pinned_pool_state<Exec, fence_type>;

  pooled_buffer(std::shared_ptr<state_type> state,
                std::unique_ptr<typename state_type::block> block, size_type size) noexcept
      : state_(std::move(state)), block_(std::move(block)), size_(size) {}

  std::shared_ptr<state_type> state_;
  std::unique_ptr<typename state_type::block> block_;
  size_type size_ = 0;
};

/// @brief A caching pool of page-locked host memory for staging copies.
///
/// `allocate<T>(n)` returns a pooled_buffer. When it is destroyed its block is cached, together
/// with the fences of the copies that used it, and handed out again — to a request of the same
/// size class — only after those copies have completed: memory a DMA engine is still reading is
/// never given to new data. Size classes are 8 per power of two, so a block is at most 1/8 (or
/// 256 bytes) larger than the request it serves. Thread-safe.
///
/// With host_exec the blocks are ordinary host memory and the same bookkeeping applies, so code
/// and tests run unchanged without a GPU.
/// @tparam Exec host_exec or cuda_exec; deduced from the constructor argument
template <class Exec>
class pinned_pool {
  static_assert(is_execution_v<Exec>, "gpubatch::pinned_pool<Exec>: Exec must be host_exec or "
                                      "cuda_exec");

 public:
  /// @brief The fence type that tracks copies through this pool's blocks.
  using fence_type = fence_t<Exec>;

  /// @brief An empty pool; nothing is allocated until the first request.
  /// @param exec selects the backend (the stream is not used: blocks are not stream-ordered)
  /// @param options cache limit and the resource blocks come from
  /// @throws invalid_argument naming "options.resource" if the resource declares memory that
  ///         is not host accessible (cuda::mr::host_accessible)
  explicit pinned_pool(Exec exec, pinned_pool_options options = {})
      : state_(make_state(options)) {
    (void)exec;
  }

  pinned_pool(const pinned_pool&) = delete;
  pinned_pool& operator=(const pinned_pool&) = delete;
  pinned_pool(pinned_pool&&) noexcept = default;
  pinned_pool& operator=(pinned_pool&&) noexcept = default;
  /// @brief Drops the pool's reference to its blocks: cached ones are freed (after their copies
  /// complete) once the last buffer borrowed from the pool is gone too.
  ~pinned_pool() = default;

  /// @brief Borrows a buffer of `count` uninitialised elements.
  /// @throws out_of_memory if pinned memory is exhausted even after freeing completed cached
  ///         blocks; cuda_error for other CUDA failures (for example, no device); whatever
  ///         the pool's resource throws (a std::bad_alloc is retried once, as out_of_memory is,
  ///         after freeing the completed cached blocks)
  template <class T>
  [[nodiscard]] pooled_buffer<T, Exec> allocate(std::size_t count) {
    if (count == 0) {
      return {};
    }
    const std::size_t bytes =
        detail::checked_bytes(count, sizeof(T), is_cuda_exec_v<Exec> ? "pinned host" : "host");
    return pooled_buffer<T, Exec>(state_, state_->acquire(bytes), count);
  }

  /// @brief Frees every cached block, first waiting for the copies still using one (bounded by
  /// the work already issued). Blocks in use are not touched.
  /// @return the bytes returned to the system
  std::size_t release() noexcept { return state_->release(); }

  /// @brief A snapshot of the pool's counters.
  [[nodiscard]] pinned_pool_stats stats() const {
    const detail::pool_counters c = state_->counters();
    pinned_pool_stats s;
    s.bytes_in_use = c.bytes_in_use;
    s.bytes_requested = c.bytes_requested;
    s.bytes_cached = c.bytes_cached;
    s.peak_bytes = c.peak_bytes;
    s.blocks_in_use = c.blocks_in_use;
    s.blocks_cached = c.blocks_cached;
    s.allocations = c.allocations;
    s.reuses = c.reuses;
    s.frees = c.frees;
    return s;
  }

  /// @brief The capacity of the block that serves a request of `bytes` bytes.
  [[nodiscard]] static constexpr std::size_t block_size(std::size_t bytes) noexcept {
    return detail::pinned_block_size(bytes);
  }

  /// @brief memory_space::pinned for cuda_exec, memory_space::host for host_exec.
  [[nodiscard]] static constexpr memory_space space() noexcept {
    return is_cuda_exec_v<Exec> ? memory_space::pinned : memory_space::host;
  }

 private:
  using state_type = detail::pinned_pool_state<Exec, fence_type>;

  static std::shared_ptr<state_type> make_state(const pinned_pool_options& options) {
    detail::resource_calls::require(options.resource, detail::declares_host_accessible,
                                    "options.resource");
    return std::make_shared<state_type>(options.max_cached_bytes, options.resource);
  }

  std::shared_ptr<state_type> state_;
};

}  // namespace gpubatch
