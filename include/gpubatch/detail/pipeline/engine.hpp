/// @file detail/pipeline/engine.hpp
/// @brief The two backends of the streaming pipeline behind one interface: the driver
/// (pipeline.inl) issues copy-in, compute and copy-out per chunk and waits for chunks to land,
/// without knowing whether streams and events or worker threads and fences do the work.
///
/// Stages run on up to three queues (streams): copy-in, compute, copy-out; with fewer, roles
/// share one. Each ring slot has three completion markers, one per stage, so chunk k's compute
/// waits for its copy-in and its copy-out for its compute, while other chunks' stages overlap.
#pragma once

#include <gpubatch/detail/containers/allocate.hpp>
#include <gpubatch/detail/pipeline/host_queue.hpp>
#include <gpubatch/detail/pipeline/nvtx.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/memory_space.hpp>
#include <gpubatch/pinned_pool.hpp>
#include <gpubatch/stream.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#if !defined(GPUBATCH_DISABLE_NVTX)
#include <nvtx3/nvToolsExtCudaRt.h>
#endif

GPUBATCH_NAMESPACE_BEGIN
namespace detail {

/// Which queue a stage uses, for 1, 2 or 3 queues: copies share one when there are two.
struct queue_roles {
  std::size_t copy_in;
  std::size_t compute;
  std::size_t copy_out;
};
constexpr queue_roles roles_for(int streams) noexcept {
  if (streams >= 3) {
    return {0, 1, 2};
  }
  return streams == 2 ? queue_roles{0, 1, 0} : queue_roles{0, 0, 0};
}

template <class Exec>
class pipeline_engine;

/// Host backend: worker threads, memcpy, fences.
template <>
class pipeline_engine<host_exec> {
 public:
  pipeline_engine(host_exec exec, int streams, std::size_t slots)
      : exec_(exec),
        roles_(roles_for(streams)),
        copied_in_(slots),
        computed_(slots),
        copied_out_(slots) {
    for (int i = 0; i < (streams >= 3 ? 3 : streams); ++i) {
      queues_.push_back(std::make_unique<host_queue>());
    }
  }

  /// The "device" memory of the host backend is host memory; its free amount bounds chunks.
  [[nodiscard]] static memory_space device_space() noexcept { return memory_space::host; }
  [[nodiscard]] host_exec allocation_exec() const noexcept { return exec_; }
  void after_allocation() const noexcept {}

  /// Free memory for the chooser: what the kernel reports as available (MemAvailable, which
  /// counts reclaimable page cache, unlike free pages alone); unbounded if unknown.
  [[nodiscard]] static std::size_t free_bytes() noexcept {
    try {
      std::ifstream meminfo("/proc/meminfo");
      std::string key;
      std::size_t kib = 0;
      std::string unit;
      while (meminfo >> key >> kib >> unit) {
        if (key == "MemAvailable:") {
          return kib * 1024;
        }
      }
    } catch (...) {
      // fall through to the portable estimate
    }
    const std::size_t free = host_bytes_free();
    return free != 0 ? free : static_cast<std::size_t>(-1);
  }

  /// Host memory of any kind can be read by the workers directly.
  [[nodiscard]] static bool dma_capable(memory_space space) noexcept {
    return space == memory_space::host || space == memory_space::pinned ||
           space == memory_space::managed;
  }

  /// Whether compute and copy out share a queue (a single queue in all).
  [[nodiscard]] bool compute_shares_copy_out() const noexcept {
    return roles_.compute == roles_.copy_out;
  }

  void begin() noexcept {
    for (auto& q : queues_) {
      q->reset();
    }
  }

  void copy_in(std::size_t slot, std::size_t chunk, void* dst, const void* src,
               std::size_t bytes) {
    host_queue& q = queue(roles_.copy_in);
    q.enqueue([dst, src, bytes, chunk] {
      GPUBATCH_NVTX_RANGE("gpubatch copy in", chunk, copy_in);
      if (bytes != 0) std::memcpy(dst, src, bytes);
    });
    copied_in_[slot] = q.signal();
  }

  template <class Launch>
  void compute(std::size_t slot, std::size_t, Launch launch) {
    host_queue& q = queue(roles_.compute);
    q.wait(copied_in_[slot]);
    q.enqueue([launch, exec = exec_] { launch(exec); });
    computed_[slot] = q.signal();
  }

  void copy_out(std::size_t slot, std::size_t chunk, void* dst, const void* src,
                std::size_t bytes) {
    host_queue& q = queue(roles_.copy_out);
    q.wait(computed_[slot]);
    q.enqueue([dst, src, bytes, chunk] {
      GPUBATCH_NVTX_RANGE("gpubatch copy out", chunk, copy_out);
      if (bytes != 0) std::memcpy(dst, src, bytes);
    });
    copied_out_[slot] = q.signal();
  }

  /// Blocks until the chunk in `slot` has landed.
  /// @throws whatever one of its stages (or an earlier failed stage) threw
  void wait(std::size_t slot) { copied_out_[slot].wait(); }

  /// After drain(): whether the chunk in `slot` landed without failure.
  [[nodiscard]] bool succeeded(std::size_t slot) const noexcept {
    return copied_out_[slot].ready() && copied_out_[slot].failure() == nullptr;
  }

  void drain() noexcept {
    for (auto& q : queues_) {
      q->drain();
    }
  }

 private:
  host_queue& queue(std::size_t role) { return *queues_[role]; }

  host_exec exec_;
  queue_roles roles_;
  std::vector<std::unique_ptr<host_queue>> queues_;
  std::vector<host_fence> copied_in_;
  std::vector<host_fence> computed_;
  std::vector<host_fence> copied_out_;
};

/// CUDA backend: the pipeline's own non-blocking streams on its device, one event per slot and
/// stage, created once, so steady state issues only copies, launches and event records.
template <>
class pipeline_engine<cuda_exec> {
 public:
  pipeline_engine(cuda_exec exec, int streams, std::size_t slots)
      : user_stream_(exec.stream()),
        streams_(static_cast<std::size_t>(streams >= 3 ? 3 : streams)),
        roles_(roles_for(streams)),
        copied_in_(slots),
        computed_(slots),
        copied_out_(slots) {
#if !defined(GPUBATCH_DISABLE_NVTX)
    // Named streams make the overlap readable in Nsight Systems.
    static constexpr const char* names[3] = {"gpubatch pipeline: copy in",
                                             "gpubatch pipeline: compute",
                                             "gpubatch pipeline: copy out"};
    for (std::size_t i = 0; i < streams_.size(); ++i) {
      nvtxNameCudaStreamA(streams_[i].get(), names[i]);
    }
#endif
  }

  [[nodiscard]] static memory_space device_space() noexcept { return memory_space::device; }
  /// Device memory is allocated on the compute stream, then made visible to the others.
  [[nodiscard]] cuda_exec allocation_exec() const noexcept { return cuda_exec{stream(roles_.compute)}; }
  void after_allocation() const { GPUBATCH_CUDA_TRY(cudaStreamSynchronize(stream(roles_.compute))); }

  /// Free device memory for the chooser (cudaMemGetInfo on the current device).
  /// @throws cuda_error
  [[nodiscard]] static std::size_t free_bytes() {
    std::size_t free = 0;
    std::size_t total = 0;
    GPUBATCH_CUDA_TRY(cudaMemGetInfo(&free, &total));
    return free;
  }

  /// Only page-locked host memory can be the source or target of an asynchronous DMA.
  [[nodiscard]] static bool dma_capable(memory_space space) noexcept {
    return space == memory_space::pinned;
  }

  /// Whether compute and copy out share a stream (a single stream in all).
  [[nodiscard]] bool compute_shares_copy_out() const noexcept {
    return roles_.compute == roles_.copy_out;
  }

  /// Orders the pipeline after the work already issued to the caller's stream (say, uploading
  /// the operand every item shares).
  void begin() {
    start_.record(user_stream_);
    for (const cuda_stream& s : streams_) {
      start_.make_wait(s.get());
    }
  }

  void copy_in(std::size_t slot, std::size_t chunk, void* dst, const void* src,
               std::size_t bytes) {
    GPUBATCH_NVTX_RANGE("gpubatch issue copy in", chunk, copy_in);
    const cudaStream_t s = stream(roles_.copy_in);
    if (bytes != 0) {
      GPUBATCH_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
    }
    copied_in_[slot].record(s);
  }

  /// Calls the stage on this thread; its kernels and copies go to the compute stream. A launch
  /// error the stage did not check is caught here and charged to this chunk.
  template <class Launch>
  void compute(std::size_t slot, std::size_t, Launch launch) {
    const cudaStream_t s = stream(roles_.compute);
    copied_in_[slot].make_wait(s);
    launch(cuda_exec{s});
    GPUBATCH_CUDA_TRY(cudaGetLastError());
    computed_[slot].record(s);
  }

  void copy_out(std::size_t slot, std::size_t chunk, void* dst, const void* src,
                std::size_t bytes) {
    GPUBATCH_NVTX_RANGE("gpubatch issue copy out", chunk, copy_out);
    const cudaStream_t s = stream(roles_.copy_out);
    computed_[slot].make_wait(s);
    if (bytes != 0) {
      GPUBATCH_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
    }
    copied_out_[slot].record(s);
  }

  /// Blocks until the chunk in `slot` has landed.
  /// @throws cuda_error if its work (or earlier work on the device) failed
  void wait(std::size_t slot) { copied_out_[slot].synchronize(); }

  /// After drain(): whether the chunk in `slot` landed without failure.
  [[nodiscard]] bool succeeded(std::size_t slot) const noexcept {
    const cudaError_t status = cudaEventQuery(copied_out_[slot].get());
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
    }
    return status == cudaSuccess;
  }

  void drain() noexcept {
    for (const cuda_stream& s : streams_) {
      GPUBATCH_CUDA_TRY_NOTHROW(cudaStreamSynchronize(s.get()));
    }
  }

 private:
  [[nodiscard]] cudaStream_t stream(std::size_t role) const noexcept { return streams_[role].get(); }

  cudaStream_t user_stream_;
  std::vector<cuda_stream> streams_;
  queue_roles roles_;
  cuda_event start_;
  std::vector<cuda_event> copied_in_;
  std::vector<cuda_event> computed_;
  std::vector<cuda_event> copied_out_;
};

}  // namespace detail
GPUBATCH_NAMESPACE_END
