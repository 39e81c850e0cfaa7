// Helpers for the transfer and pipeline tests, on both backends: a gate that holds work back
// until the test opens it (so "not completed yet" is deterministic), and a watchdog that turns
// a hang into a failure.
#pragma once

#include <gpubatch/gpubatch.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>
#include <utility>

namespace gpubatch::test {

/// The longest any single wait in these tests may take; far above what the work needs.
inline constexpr std::chrono::seconds wait_limit{20};

/// Runs `f` on another thread and returns its result; if it does not finish within `limit`,
/// the process exits with a failure message instead of hanging CTest.
template <class F>
auto within(std::chrono::seconds limit, F&& f) {
  auto result = std::async(std::launch::async, std::forward<F>(f));
  if (result.wait_for(limit) != std::future_status::ready) {
    std::fprintf(stderr, "FAILED: did not finish within %lld s (hang)\n",
                 static_cast<long long>(limit.count()));
    std::fflush(stderr);
    std::_Exit(1);
  }
  return result.get();
}

/// Holds back the work a backend issues after it until open() (or destruction).
///  - host: a pending host_fence;
///  - CUDA: a host function queued on the stream that spins until opened (at most wait_limit),
///    so later copies on that stream do not start, and a fence recorded after it.
template <class Exec>
class gate;

template <>
class gate<host_exec> {
 public:
  explicit gate(host_exec) : fence_(host_fence::pending()) {}
  ~gate() { open(); }
  gate(const gate&) = delete;
  gate& operator=(const gate&) = delete;
  [[nodiscard]] host_fence fence() const { return fence_; }
  void open() { fence_.signal(); }

 private:
  host_fence fence_;
};

template <>
class gate<cuda_exec> {
 public:
  explicit gate(cuda_exec exec) : stream_(exec.stream()) {
    GPUBATCH_CUDA_TRY(cudaLaunchHostFunc(stream_, &gate::spin, &opened_));
    fence_ = cuda_fence::record(stream_);
  }
  ~gate() {
    open();
    GPUBATCH_CUDA_TRY_NOTHROW(cudaStreamSynchronize(stream_));
  }
  gate(const gate&) = delete;
  gate& operator=(const gate&) = delete;
  [[nodiscard]] cuda_fence fence() const { return fence_; }
  void open() { opened_.store(true); }

 private:
  static void spin(void* flag) {
    const auto deadline = std::chrono::steady_clock::now() + wait_limit;
    auto* opened = static_cast<std::atomic<bool>*>(flag);
    while (!opened->load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  cudaStream_t stream_;
  std::atomic<bool> opened_{false};
  cuda_fence fence_;
};

}  // namespace gpubatch::test
