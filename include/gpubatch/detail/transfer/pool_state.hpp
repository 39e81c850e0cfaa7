/// @file detail/transfer/pool_state.hpp
/// @brief The pinned pool's bookkeeping, shared by the pool and every buffer it handed out (so a
/// buffer that outlives its pool still returns its block safely).
///
/// A block goes back to the cache with the fences of the copies that used it; it is handed out
/// again only once all of them have completed. Blocks are cached per size class
/// (size_class.hpp), so a cached block is never much larger than the request it serves.
#pragma once

#include <gpubatch/detail/containers/allocate.hpp>
#include <gpubatch/detail/transfer/size_class.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

GPUBATCH_NAMESPACE_BEGIN
namespace detail {

/// One block of pinned (or, on the host backend, ordinary) host memory and the copies that
/// still use it. `Fence` provides ready(), wait_nothrow() and same_order().
template <class Fence>
struct pinned_block {
  void* data = nullptr;
  std::size_t capacity = 0;
  std::size_t requested = 0;
  std::vector<Fence> pending;

  /// Remembers that work tracked by `fence` uses the block. A later fence on the same stream
  /// completes after an earlier one, so of the two only the later is kept: the list stays as
  /// short as the number of streams that touched the block.
  void add_use(const Fence& fence) noexcept {
    if (fence.ready()) {
      return;
    }
    drop_completed();
    for (Fence& f : pending) {
      if (f.same_order(fence)) {
        if (fence.recorded_after(f)) {
          f = fence;
        }
        return;
      }
    }
    try {
      pending.push_back(fence);
    } catch (...) {
      fence.wait_nothrow();  // cannot track it: make sure it is done before the block moves on
    }
  }

  void drop_completed() noexcept {
    pending.erase(std::remove_if(pending.begin(), pending.end(),
                                 [](const Fence& f) { return f.ready(); }),
                  pending.end());
  }

  [[nodiscard]] bool idle() noexcept {
    drop_completed();
    return pending.empty();
  }

  void wait() noexcept {
    for (const Fence& f : pending) {
      f.wait_nothrow();
    }
    pending.clear();
  }
};

/// Running totals of a pool; the public pinned_pool_stats is filled from them.
struct pool_counters {
  std::size_t bytes_in_use = 0;
  std::size_t bytes_requested = 0;
  std::size_t bytes_cached = 0;
  std::size_t peak_bytes = 0;
  std::size_t blocks_in_use = 0;
  std::size_t blocks_cached = 0;
  std::size_t allocations = 0;
  std::size_t reuses = 0;
  std::size_t frees = 0;
};

template <class Exec, class Fence>
class pinned_pool_state {
 public:
  using block = pinned_block<Fence>;

  pinned_pool_state(std::size_t max_cached_bytes, memory_resource_ref resource) noexcept
      : max_cached_bytes_(max_cached_bytes), resource_(resource) {}

  pinned_pool_state(const pinned_pool_state&) = delete;
  pinned_pool_state& operator=(const pinned_pool_state&) = delete;

  /// Waits for the copies still using cached blocks, then frees them. Blocks in use hold a
  /// reference to this state, so by now every block has come back.
  ~pinned_pool_state() { (void)release(); }

  /// A block for `bytes` bytes: a completed cached block of the same size class, else a new one.
  /// @throws out_of_memory, cuda_error
  std::unique_ptr<block> acquire(std::size_t bytes) {
    const std::size_t capacity = pinned_block_size(bytes);
    if (capacity == 0) {
      throw out_of_memory(is_cuda_exec_v<Exec> ? "pinned host" : "host", bytes, 0);
    }
    std::unique_ptr<block> b = take_cached(capacity);
    if (b == nullptr) {
      b = std::make_unique<block>();
      b->capacity = capacity;
      b->data = allocate_raw(capacity);
    }
    b->requested = bytes;
    const std::lock_guard<std::mutex> lock(mutex_);
    counters_.bytes_in_use += b->capacity;
    counters_.bytes_requested += bytes;
    ++counters_.blocks_in_use;
    note_peak();
    return b;
  }

  /// Takes a block back; it is cached until reused, trimmed or released.
  void give_back(std::unique_ptr<block> b) noexcept {
    if (b == nullptr) {
      return;
    }
    const std::lock_guard<std::mutex> lock(mutex_);
    counters_.bytes_in_use -= b->capacity;
    counters_.bytes_requested -= b->requested;
    --counters_.blocks_in_use;
    const std::size_t capacity = b->capacity;
    try {
      cached_[capacity].push_back(std::move(b));
    } catch (...) {
      // No room to remember it: free it now, once its copies are done.
      if (b != nullptr) {
        b->wait();
        free_raw(b->data, b->capacity);
        ++counters_.frees;
      }
      return;
    }
    counters_.bytes_cached += capacity;
    ++counters_.blocks_cached;
    trim_locked(max_cached_bytes_);
  }

  /// Frees every cached block, first waiting for the copies that still use one.
  /// @return the bytes freed
  std::size_t release() noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::size_t freed = 0;
    for (auto& [capacity, blocks] : cached_) {
      for (std::unique_ptr<block>& b : blocks) {
        b->wait();
        free_raw(b->data, capacity);
        freed += capacity;
        ++counters_.frees;
      }
      blocks.clear();
    }
    cached_.clear();
    counters_.bytes_cached = 0;
    counters_.blocks_cached = 0;
    return freed;
  }

  [[nodiscard]] pool_counters counters() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return counters_;
  }

 private:
  std::unique_ptr<block> take_cached(std::size_t capacity) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = cached_.find(capacity);
    if (it == cached_.end()) {
      return nullptr;
    }
    std::vector<std::unique_ptr<block>>& blocks = it->second;
    // The oldest block is the likeliest to have completed.
    for (auto b = blocks.begin(); b != blocks.end(); ++b) {
      if ((*b)->idle()) {
        std::unique_ptr<block> found = std::move(*b);
        blocks.erase(b);
        counters_.bytes_cached -= capacity;
        --counters_.blocks_cached;
        ++counters_.reuses;
        return found;
      }
    }
    return nullptr;
  }

  void* allocate_raw(std::size_t bytes) {
    try {
      return allocate_raw_once(bytes);
    } catch (const std::bad_alloc&) {
      // Cached blocks of other sizes may be what stands in the way: free the completed ones.
      // (out_of_memory is a bad_alloc, and so is what a resource throws when it is full.)
      {
        const std::lock_guard<std::mutex> lock(mutex_);
        trim_locked(0);
      }
      return allocate_raw_once(bytes);
    }
  }

  void* allocate_raw_once(std::size_t bytes) {
    void* p = nullptr;
    if (resource_) {
      p = is_cuda_exec_v<Exec> ? allocate_pinned(bytes, resource_)
                               : allocate_host_in_role(bytes, memory_space::pinned, resource_);
    } else if constexpr (is_cuda_exec_v<Exec>) {
      // Portable: pinned for every device, so one pool can feed pipelines on several GPUs.
      const cudaError_t status = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
      if (status == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        throw out_of_memory("pinned host", bytes, host_bytes_free());
      }
      throw_on_cuda_error(status, "cudaHostAlloc", __FILE__, __LINE__);
    } else {
      p = allocate_host_in_role(bytes, memory_space::pinned);
    }
    const std::lock_guard<std::mutex> lock(mutex_);
    ++counters_.allocations;
    return p;
  }

  void free_raw(void* p, std::size_t bytes) const noexcept {
    if constexpr (is_cuda_exec_v<Exec>) {
      deallocate_pinned(p, bytes, resource_);
    } else {
      deallocate_host_in_role(p, bytes, resource_);
    }
  }

  /// Frees completed cached blocks, largest first, until at most `limit` bytes stay cached.
  /// Blocks whose copies are still running stay: freeing them would pull memory from under a DMA.
  void trim_locked(std::size_t limit) noexcept {
    for (auto it = cached_.rbegin(); it != cached_.rend() && counters_.bytes_cached > limit; ++it) {
      std::vector<std::unique_ptr<block>>& blocks = it->second;
      for (auto b = blocks.begin(); b != blocks.end() && counters_.bytes_cached > limit;) {
        if ((*b)->idle()) {
          free_raw((*b)->data, (*b)->capacity);
          counters_.bytes_cached -= (*b)->capacity;
          --counters_.blocks_cached;
          ++counters_.frees;
          b = blocks.erase(b);
        } else {
          ++b;
        }
      }
    }
  }

  void note_peak() noexcept {
    counters_.peak_bytes =
        std::max(counters_.peak_bytes, counters_.bytes_in_use + counters_.bytes_cached);
  }

  mutable std::mutex mutex_;
  std::map<std::size_t, std::vector<std::unique_ptr<block>>> cached_;
  pool_counters counters_;
  std::size_t max_cached_bytes_;
  memory_resource_ref resource_;
};

}  // namespace detail
GPUBATCH_NAMESPACE_END
