/// @file detail/pipeline/host_queue.hpp
/// @brief The host backend's stand-in for a CUDA stream: one worker thread running tasks in
/// order, fences it signals (events), and waits on other queues' fences (cudaStreamWaitEvent).
///
/// A task that throws poisons the queue the way a failed launch poisons a stream: later tasks
/// are skipped, and every later fence is signalled with that failure, so whoever waits learns
/// of it — nobody waits forever. A wait on a failed fence poisons the waiting queue likewise.
#pragma once

#include <gpubatch/pinned_pool.hpp>

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

GPUBATCH_NAMESPACE_BEGIN
namespace detail {

class host_queue {
 public:
  host_queue() : worker_([this] { run(); }) {}
  host_queue(const host_queue&) = delete;
  host_queue& operator=(const host_queue&) = delete;

  /// Runs what is queued, then stops the worker.
  ~host_queue() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    worker_.join();
  }

  /// Queues `work`; it is skipped if an earlier task failed.
  void enqueue(std::function<void()> work) { push(task{kind::work, std::move(work), {}}); }

  /// A fence that completes after everything queued so far, carrying the queue's failure.
  [[nodiscard]] host_fence signal() {
    host_fence fence = host_fence::pending(this);
    push(task{kind::signal, {}, fence});
    return fence;
  }

  /// Later tasks run after `fence` completes; its failure poisons this queue.
  void wait(const host_fence& fence) { push(task{kind::wait, {}, fence}); }

  /// Blocks until every queued task has run (or been skipped).
  void drain() noexcept {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [this] { return tasks_.empty() && !busy_; });
  }

  /// Forgets an earlier failure; call after drain(), before new work.
  void reset() noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    failure_ = nullptr;
  }

 private:
  enum class kind { work, signal, wait };
  struct task {
    kind what = kind::work;
    std::function<void()> work;
    host_fence fence;
  };

  void push(task t) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      tasks_.push_back(std::move(t));
    }
    wake_.notify_one();
  }

  void run() noexcept {
    for (;;) {
      task t;
      std::exception_ptr failure;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) {
          return;  // stopping, and nothing left to run
        }
        t = std::move(tasks_.front());
        tasks_.pop_front();
        busy_ = true;
        failure = failure_;
      }
      switch (t.what) {
        case kind::work:
          if (failure == nullptr) {
            try {
              t.work();
            } catch (...) {
              failure = std::current_exception();
            }
          }
          break;
        case kind::signal:
          t.fence.signal(failure);
          break;
        case kind::wait:
          t.fence.wait_nothrow();
          if (failure == nullptr) {
            failure = t.fence.failure();
          }
          break;
      }
      t = task{};  // release the work's captures before reporting idle
      {
        const std::lock_guard<std::mutex> lock(mutex_);
        failure_ = failure;
        busy_ = false;
        if (tasks_.empty()) {
          idle_.notify_all();
        }
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<task> tasks_;
  std::exception_ptr failure_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread worker_;  // last: starts after every other member is ready
};

}  // namespace detail
GPUBATCH_NAMESPACE_END
