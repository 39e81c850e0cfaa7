/// @file launch.hpp
/// @brief gpubatch::launch, the one way gpubatch, its tests and its benchmarks launch kernels:
/// `kernel<<<grid, block, shared_bytes, stream>>>(args...)` with nvcc, and a launch on the
/// emulated device when gpubatch's test suite compiles CUDA code with the host compiler.
#pragma once

#include <gpubatch/config.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

GPUBATCH_NAMESPACE_BEGIN

/// @brief Where and how wide a kernel runs: the `<<<grid, block, shared_bytes, stream>>>` of a
/// launch.
struct launch_config {
  dim3 grid;                       ///< blocks
  dim3 block;                      ///< threads per block
  std::size_t shared_bytes = 0;    ///< dynamic shared memory per block
  cudaStream_t stream = nullptr;   ///< the stream the kernel is ordered on
#if defined(GPUBATCH_EMULATION)
  const char* file = __builtin_FILE();  ///< the launch site, for the emulator's reports
  int line = __builtin_LINE();
#endif
};

#if GPUBATCH_CUDA_COMPILER
/// @brief Launches `kernel` with `config`, as `kernel<<<...>>>(args...)` does; like it, reports
/// a bad configuration through cudaGetLastError(), not by throwing.
/// @param kernel a `__global__` function
/// @param config grid, block, dynamic shared memory and stream
/// @param args the kernel's arguments, converted to its parameter types
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), const launch_config& config, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "gpubatch::launch: wrong argument count");
#if defined(GPUBATCH_EMULATION)
  ::gpubatch_emu::launch(kernel, config.grid, config.block, config.shared_bytes, config.stream,
                         config.file, config.line, std::forward<Args>(args)...);
#else
  kernel<<<config.grid, config.block, config.shared_bytes, config.stream>>>(
      std::forward<Args>(args)...);
#endif
}
#endif

GPUBATCH_NAMESPACE_END
