/// @file detail/transfer/host_fence_state.hpp
/// @brief The shared state behind gpubatch::host_fence: a flag, a condition variable and the
/// failure of the work the fence tracks.
#pragma once

#include <condition_variable>
#include <exception>
#include <mutex>

namespace gpubatch::detail {

struct host_fence_state {
  std::mutex mutex;
  std::condition_variable completed;
  bool done = false;
  std::exception_ptr failure;
};

}  // namespace gpubatch::detail
