/// @file stream.hpp
/// @brief RAII CUDA streams and events, and a CUDA-event timer.
#pragma once

#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>

#include <cuda_runtime_api.h>

#include <utility>

namespace gpubatch {

/// @brief An owning, move-only CUDA stream. Non-blocking with respect to the legacy default
/// stream, so gpubatch work never serialises with unrelated default-stream work by accident.
class cuda_stream {
 public:
  /// @throws cuda_error if the stream cannot be created (for example, no device)
  cuda_stream() { GPUBATCH_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~cuda_stream() {
    if (stream_ != nullptr) {
      GPUBATCH_CUDA_TRY_NOTHROW(cudaStreamDestroy(stream_));
    }
  }
  cuda_stream(const cuda_stream&) = delete;
  cuda_stream& operator=(const cuda_stream&) = delete;
  cuda_stream(cuda_stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  cuda_stream& operator=(cuda_stream&& other) noexcept {
    std::swap(stream_, other.stream_);
    return *this;
  }

  /// @brief The stream handle; stays owned by this object.
  [[nodiscard]] cudaStream_t get() const noexcept { return stream_; }
  /// @brief The CUDA backend bound to this stream.
  [[nodiscard]] cuda_exec exec() const noexcept { return cuda_exec{stream_}; }
  /// @brief Blocks until all work on the stream has completed.
  void synchronize() const { GPUBATCH_CUDA_TRY(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

/// @brief An owning, move-only CUDA event.
class cuda_event {
 public:
  /// @brief Whether the event records timestamps; timing costs a little on every record.
  enum class timing { disabled, enabled };

  /// @throws cuda_error if the event cannot be created
  explicit cuda_event(timing t = timing::disabled) {
    GPUBATCH_CUDA_TRY(cudaEventCreateWithFlags(
        &event_, t == timing::enabled ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~cuda_event() {
    if (event_ != nullptr) {
      GPUBATCH_CUDA_TRY_NOTHROW(cudaEventDestroy(event_));
    }
  }
  cuda_event(const cuda_event&) = delete;
  cuda_event& operator=(const cuda_event&) = delete;
  cuda_event(cuda_event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  cuda_event& operator=(cuda_event&& other) noexcept {
    std::swap(event_, other.event_);
    return *this;
  }

  /// @brief The event handle; stays owned by this object.
  [[nodiscard]] cudaEvent_t get() const noexcept { return event_; }
  /// @brief Records the event on `stream`: it completes when all work issued before it does.
  void record(cudaStream_t stream) { GPUBATCH_CUDA_TRY(cudaEventRecord(event_, stream)); }
  /// @brief Blocks until the event has completed.
  void synchronize() const { GPUBATCH_CUDA_TRY(cudaEventSynchronize(event_)); }
  /// @brief Makes later work on `stream` wait for this event, without blocking the host.
  void make_wait(cudaStream_t stream) const {
    GPUBATCH_CUDA_TRY(cudaStreamWaitEvent(stream, event_, 0));
  }
  /// @brief Whether the event has completed; does not block.
  [[nodiscard]] bool ready() const {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    detail::throw_on_cuda_error(status, "cudaEventQuery", __FILE__, __LINE__);
    return true;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

/// @brief Measures device time between two points on a stream with a pair of CUDA events.
///
/// `start()` and `stop()` are asynchronous; `elapsed_ms()` waits for the stop event.
class event_timer {
 public:
  event_timer() : start_(cuda_event::timing::enabled), stop_(cuda_event::timing::enabled) {}

  /// @brief Records the start point on `stream`.
  void start(cudaStream_t stream) { start_.record(stream); }
  /// @brief Records the stop point on `stream`.
  void stop(cudaStream_t stream) { stop_.record(stream); }
  /// @brief Milliseconds of device time between start and stop; blocks until stop completes.
  [[nodiscard]] float elapsed_ms() const {
    stop_.synchronize();
    float ms = 0.0F;
    GPUBATCH_CUDA_TRY(cudaEventElapsedTime(&ms, start_.get(), stop_.get()));
    return ms;
  }

 private:
  cuda_event start_;
  cuda_event stop_;
};

}  // namespace gpubatch
