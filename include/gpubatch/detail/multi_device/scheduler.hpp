/// @file detail/multi_device/scheduler.hpp
/// @brief The share scheduler behind gpubatch's device groups: one thread per member pulls
/// shares of the batch from a common queue until the batch is done or a member fails.
#pragma once

#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <exception>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

GPUBATCH_NAMESPACE_BEGIN
namespace detail::multi_device {

/// A share that failed part-way: the first `completed` items landed, `failed` did not.
/// Thrown by a member's work to report what a plain exception cannot (the pipeline's).
struct share_failure {
  std::size_t completed = 0;
  std::size_t failed_first = 0;  // relative to the share
  std::size_t failed_count = 0;
  std::exception_ptr cause;
};

/// Guided self-scheduling with measured speeds: each claim takes a slice of what remains, in
/// proportion to the member's speed, so early shares are large (few round trips) and late ones
/// small (no long tail). A member's speed is its measured items per second once it has finished
/// a share; before that, its weight scaled to the speeds measured so far. Until a member has
/// been measured it claims a quarter of its part, not a half: a slow device's first share is
/// the tail the others would wait for.
class share_queue {
 public:
  share_queue(std::size_t items, std::vector<double> weights, std::size_t min_share)
      : items_(items), weights_(std::move(weights)),
        caps_(weights_.size(), std::numeric_limits<std::size_t>::max()),
        rates_(weights_.size(), 0.0),
        min_share_(std::max<std::size_t>(min_share, 1)) {}

  /// At most `cap` items per share for `member` (what fits in its memory).
  void limit(std::size_t member, std::size_t cap) {
    const std::lock_guard<std::mutex> lock(mutex_);
    caps_[member] = std::max<std::size_t>(cap, 1);
  }

  /// `member` finished `items` in `seconds`: its speed from now on.
  void record(std::size_t member, std::size_t items, double seconds) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (items > 0 && seconds > 0.0) rates_[member] = static_cast<double>(items) / seconds;
  }

  /// The next share for `member` into `first`/`count`; false when nothing is left or stopped.
  bool claim(std::size_t member, std::size_t& first, std::size_t& count) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_ || next_ >= items_) return false;
    const std::size_t remaining = items_ - next_;
    // Speeds in one unit: measured items per second where known; otherwise the weight times
    // the mean measured speed per unit of weight (or the weights alone, before any is known).
    double measured_per_weight = 0.0;
    std::size_t measured = 0;
    for (std::size_t m = 0; m < rates_.size(); ++m) {
      if (rates_[m] > 0.0) {
        measured_per_weight += rates_[m] / weights_[m];
        ++measured;
      }
    }
    const double unit = measured > 0 ? measured_per_weight / static_cast<double>(measured) : 1.0;
    double total = 0.0;
    for (std::size_t m = 0; m < rates_.size(); ++m) {
      total += rates_[m] > 0.0 ? rates_[m] : weights_[m] * unit;
    }
    const double speed = rates_[member] > 0.0 ? rates_[member] : weights_[member] * unit;
    const double divisor = rates_[member] > 0.0 ? 2.0 : 4.0;
    std::size_t want = static_cast<std::size_t>(
        std::ceil(static_cast<double>(remaining) * speed / (divisor * total)));
    want = std::max(want, min_share_);
    want = std::min({want, caps_[member], remaining});
    first = next_;
    count = want;
    next_ += want;
    return true;
  }

  void stop() noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
  }

 private:
  std::mutex mutex_;
  std::size_t items_;
  std::vector<double> weights_;
  std::vector<std::size_t> caps_;
  std::vector<double> rates_;
  std::size_t min_share_;
  std::size_t next_ = 0;
  bool stopped_ = false;
};

/// What the members did, gathered under a lock as they finish shares.
struct outcome {
  struct failure {
    std::size_t member = 0;
    std::size_t first = 0;
    std::size_t count = 0;
    std::exception_ptr cause;
  };
  std::mutex mutex;
  std::vector<std::pair<std::size_t, std::size_t>> completed;  // (first, count)
  std::vector<failure> failures;                               // in the order they happened
  std::vector<std::size_t> member_items;
  std::vector<std::size_t> member_shares;
  std::vector<double> member_seconds;

  explicit outcome(std::size_t members)
      : member_items(members, 0), member_shares(members, 0), member_seconds(members, 0.0) {}

  void complete(std::size_t member, std::size_t first, std::size_t count, double seconds) {
    const std::lock_guard<std::mutex> lock(mutex);
    if (count > 0) completed.emplace_back(first, count);
    member_items[member] += count;
    member_shares[member] += 1;
    member_seconds[member] += seconds;
  }
  void fail(std::size_t member, std::size_t first, std::size_t count, std::exception_ptr cause) {
    const std::lock_guard<std::mutex> lock(mutex);
    failures.push_back({member, first, count, std::move(cause)});
  }
  /// The completed shares, sorted and with adjacent ones merged.
  [[nodiscard]] std::vector<std::pair<std::size_t, std::size_t>> merged() const {
    std::vector<std::pair<std::size_t, std::size_t>> sorted = completed;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::pair<std::size_t, std::size_t>> out;
    for (const auto& r : sorted) {
      if (!out.empty() && out.back().first + out.back().second == r.first) {
        out.back().second += r.second;
      } else {
        out.push_back(r);
      }
    }
    return out;
  }
};

/// Runs `member_body(member)` on one thread per member and waits for all of them. Each body
/// catches its own exceptions (they are the members' failures); a thread that cannot start is
/// recorded as its member's failure, and the threads already started are joined before
/// anything is reported.
template <class Body>
void on_member_threads(std::size_t members, outcome& result, share_queue& queue, Body&& body) {
  std::vector<std::thread> threads;
  threads.reserve(members);
  for (std::size_t m = 0; m < members; ++m) {
    try {
      threads.emplace_back([&body, m] { body(m); });
    } catch (...) {
      result.fail(m, 0, 0, std::current_exception());
      queue.stop();
    }
  }
  for (std::thread& t : threads) t.join();
}

/// Seconds since `start`.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Makes `device` current on the calling thread (a member's own thread).
inline void use_device(int device) {
  const cudaError_t status = cudaSetDevice(device);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw cuda_error(status, "cudaSetDevice(device)", __FILE__, __LINE__);
  }
}

}  // namespace detail::multi_device
GPUBATCH_NAMESPACE_END
