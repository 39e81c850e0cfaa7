// The emulated CUDA device: what a CUDA translation unit sees in place of nvcc's built-ins when
// it is compiled by the host compiler for the emulator. Force-included (-include) before
// anything else, so that the CUDA headers keep the execution-space keywords defined here.
//
// Every CUDA thread of a block runs as a fiber on one host thread; blocks run one after another.
// Intrinsics that synchronise or exchange data (__syncthreads, warp-level MMA, cp.async) call the
// runtime in tests/support/emulation/src, which checks what the hardware checks and reports a
// violation with the file and line of the call.
#pragma once

#define GPUBATCH_EMULATION 1
#if !defined(GPUBATCH_EMULATION_ARCH)
/// The architecture the emulated kernels were "compiled" for (nvcc's sm_XX), as 10 * major + minor.
#define GPUBATCH_EMULATION_ARCH 90
#endif

// Execution-space keywords: host code is device code here. __shared__ variables live once per
// host thread, and a host thread runs one block at a time, so a block's fibers share them.
#define __host__
#define __device__
#define __global__
#define __shared__ static thread_local
#define __constant__ static
#define __launch_bounds__(...)

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

namespace gpubatch_emu {

/// The built-in variables of the running CUDA thread.
struct builtins {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

/// The running CUDA thread's built-ins; reports an error outside an emulated kernel.
const builtins& current_builtins(const char* file = __builtin_FILE(), int line = __builtin_LINE());

/// The block's dynamic shared memory (checked against `alignment`).
void* dynamic_shared(std::size_t alignment, const char* file = __builtin_FILE(),
                     int line = __builtin_LINE());

void syncthreads(const char* file, int line);
[[noreturn]] void trap(const char* file, int line);

/// Synchronises the calling lane's warp at one call site (every lane of the warp must come, to
/// the same site) and exchanges a copy of each lane's `payload` (at most 32 bytes): on return,
/// the lanes' copies in lane order, valid until the warp's next exchange but one. `whole_warp`
/// requires all 32 lanes to exist.
const void* const* warp_exchange(const void* payload, std::size_t bytes, const char* what,
                                 const char* file, int line, bool whole_warp);
/// Lane of the calling thread within its warp.
int lane_id();

/// Reports a device-side error in the running kernel (the launch fails; the context keeps the
/// error) and never returns to the caller's code.
[[noreturn]] void device_fault(cudaError_t code, const char* file, int line, const char* format,
                               ...) __attribute__((format(printf, 4, 5)));

/// Whether [p, p + bytes) lies in live device memory, and whether in the block's shared memory.
bool is_global(const void* p, std::size_t bytes);
bool is_shared(const void* p, std::size_t bytes);

/// A vector load or store of `bytes` at `p` (a library's own 8- or 16-byte access of global or
/// shared memory) by the running CUDA thread: faults as the hardware does when `p` is not
/// aligned to `bytes`. Outside a kernel it checks nothing.
void vector_access(const void* p, std::size_t bytes, const char* file = __builtin_FILE(),
                   int line = __builtin_LINE());

// cp.async (cuda_pipeline_primitives.h): the runtime keeps each thread's copies and groups.
struct landing {
  void* dst;
  unsigned char bytes[16];
  std::size_t size;
};
void async_copy_issue(void* dst, const void* src, std::size_t size, std::size_t zfill,
                      const char* file, int line);
void async_copy_commit();
/// The copies of every committed group older than the newest `keep`, oldest first, removed
/// from the thread's pending list; the caller writes them (so sanitizers see the writes).
std::size_t async_copy_complete(std::size_t keep, landing* out, std::size_t capacity);

/// A kernel launch as the runtime queues it.
struct launch_request {
  const void* kernel;
  dim3 grid;
  dim3 block;
  std::size_t dynamic_shared;
  cudaStream_t stream;
  std::shared_ptr<void> arguments;  ///< keeps the bound arguments alive while queued
  void (*run)(const void* arguments);
  const char* file;
  int line;
};
/// Validates and queues a launch; the error a real launch would return (cudaGetLastError).
cudaError_t submit_launch(launch_request request);

/// Called once per translation unit so that kernels report the architecture they were built for.
int register_compiled_arch(int arch);

/// How many device and kernel queries (cudaDeviceGetAttribute, cudaGetDeviceProperties,
/// cudaFuncGetAttributes, cudaOccupancyMaxActiveBlocksPerMultiprocessor) the program has made:
/// tests of the per-call overhead of gpubatch's dispatch count them.
long long query_count();
#if !defined(GPUBATCH_EMULATION_RUNTIME)
[[maybe_unused]] static const int compiled_arch_registration =
    register_compiled_arch(GPUBATCH_EMULATION_ARCH);
#endif

/// Launches `kernel` as `kernel<<<grid, block, shared, stream>>>(args...)` would.
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared,
            cudaStream_t stream, const char* file, int line, Args&&... args) {
  using bound = std::tuple<void (*)(Params...), std::decay_t<Params>...>;
  auto arguments = std::make_shared<bound>(kernel, std::forward<Args>(args)...);
  launch_request r{reinterpret_cast<const void*>(kernel), grid, block, shared, stream,
                   arguments,
                   [](const void* a) {
                     // Each CUDA thread gets its own copy of the parameters, as on the device.
                     bound copy = *static_cast<const bound*>(a);
                     std::apply([](auto k, auto&... p) { k(p...); }, copy);
                   },
                   file, line};
  (void)submit_launch(std::move(r));
}

}  // namespace gpubatch_emu

#define threadIdx (::gpubatch_emu::current_builtins().thread_idx)
#define blockIdx (::gpubatch_emu::current_builtins().block_idx)
#define blockDim (::gpubatch_emu::current_builtins().block_dim)
#define gridDim (::gpubatch_emu::current_builtins().grid_dim)
inline constexpr int warpSize = 32;

// The runtime's C++ overloads that take a kernel itself, which cuda_runtime.h declares for nvcc only.
template <class Function>
cudaError_t cudaFuncSetAttribute(Function* kernel, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}
template <class Function>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, Function* kernel) {
  return ::cudaFuncGetAttributes(attributes, reinterpret_cast<const void*>(kernel));
}
template <class Function>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, Function* kernel,
                                                          int block_size, std::size_t shared) {
  return ::cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      blocks, reinterpret_cast<const void*>(kernel), block_size, shared);
}

inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::gpubatch_emu::syncthreads(file, line);
}
[[noreturn]] inline void __trap(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::gpubatch_emu::trap(file, line);
}
inline void __syncwarp(unsigned mask = 0xffffffffU, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
  ::gpubatch_emu::warp_exchange(&mask, sizeof mask, "__syncwarp", file, line, mask == 0xffffffffU);
}
// Fibers of a block run one at a time on one host thread: every store is visible to the next
// fiber that runs, so fences order nothing further.
inline void __threadfence() {}
inline void __threadfence_block() {}
