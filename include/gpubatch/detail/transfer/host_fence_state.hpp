/// @file detail/transfer/host_fence_state.hpp
/// @brief The shared state behind gpubatch::host_fence: a flag, a condition variable and the
/// failure of the work the fence tracks.
#pragma once

#include <gpubatch/config.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>

GPUBATCH_NAMESPACE_BEGIN
namespace detail {

/// A process-wide recording order for fences, so that of two fences on one serial queue the
/// later one can be told apart (it completes last).
inline std::uint64_t next_fence_sequence() noexcept {
  static std::atomic<std::uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}

struct host_fence_state {
  std::mutex mutex;
  std::condition_variable completed;
  bool done = false;
  std::exception_ptr failure;
};

}  // namespace detail
GPUBATCH_NAMESPACE_END
