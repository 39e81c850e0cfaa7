/// @file config.hpp
/// @brief Compiler detection and the few macros gpubatch defines.
#pragma once

#include <gpubatch/version.hpp>

/// @brief 1 when the translation unit is compiled by a CUDA compiler (nvcc), else 0.
/// CUDA-backend operations that launch kernels need it; everything else works without it.
/// gpubatch's test suite also compiles CUDA code with the host compiler for its emulated device
/// (tests/support/emulation, which defines GPUBATCH_EMULATION); it counts as a CUDA compiler.
#if defined(__CUDACC__) || defined(GPUBATCH_EMULATION)
#define GPUBATCH_CUDA_COMPILER 1
#else
#define GPUBATCH_CUDA_COMPILER 0
#endif

/// @brief The architecture device code is compiled for (`__CUDA_ARCH__`, e.g. 900), defined only
/// in device code: nvcc's device passes, and the emulated device (its GPUBATCH_EMULATION_ARCH).
/// GPUBATCH_DEVICE_CODE is 1 there and 0 in host code. Branches that must behave as on the
/// device (vector loads, architecture guards) test these, never `__CUDA_ARCH__` directly, so the
/// emulated device runs the device branch.
#if defined(__CUDA_ARCH__)
#define GPUBATCH_DEVICE_ARCH __CUDA_ARCH__
#elif defined(GPUBATCH_EMULATION)
#define GPUBATCH_DEVICE_ARCH (GPUBATCH_EMULATION_ARCH * 10)
#endif
#if defined(GPUBATCH_DEVICE_ARCH)
#define GPUBATCH_DEVICE_CODE 1
#else
#define GPUBATCH_DEVICE_CODE 0
#endif

/// @brief Marks a function callable from host and device code; plain `inline` without nvcc.
#if defined(__CUDACC__)
#define GPUBATCH_HOST_DEVICE __host__ __device__ inline
#define GPUBATCH_DEVICE __device__ inline
#else
#define GPUBATCH_HOST_DEVICE inline
#define GPUBATCH_DEVICE inline
#endif

/// @brief Declares a kernel's dynamic shared memory as `Type* name` (an array on the device),
/// aligned to `Alignment` bytes: `extern __shared__` with nvcc, the emulated block's shared
/// memory under emulation (where `extern __shared__` has no meaning).
#if defined(GPUBATCH_EMULATION)
#define GPUBATCH_DYNAMIC_SHARED(Type, name, Alignment) \
  Type* const name = static_cast<Type*>(::gpubatch_emu::dynamic_shared(Alignment))
#else
#define GPUBATCH_DYNAMIC_SHARED(Type, name, Alignment) \
  extern __shared__ __align__(Alignment) Type name[]
#endif

/// @brief A kernel entry point with hidden visibility, so that two shared libraries that each
/// instantiate the same gpubatch kernel do not resolve to one another's copy.
#define GPUBATCH_KERNEL __global__ __attribute__((visibility("hidden")))

/// @brief Bracket kernel definitions. A kernel instantiated with a type of internal linkage (a
/// functor in an anonymous namespace) cannot be hidden, and nvcc says so for every instantiation;
/// the attribute is simply moot there, so the warning is silenced for gpubatch's kernels only.
#if defined(__CUDACC__)
#define GPUBATCH_KERNELS_BEGIN _Pragma("nv_diagnostic push") _Pragma("nv_diag_suppress 1407")
#define GPUBATCH_KERNELS_END _Pragma("nv_diagnostic pop")
#else
#define GPUBATCH_KERNELS_BEGIN
#define GPUBATCH_KERNELS_END
#endif

/// @brief Expands to an OpenMP `parallel for` when the host compiler has OpenMP enabled.
#if defined(_OPENMP)
#define GPUBATCH_OMP_PARALLEL_FOR _Pragma("omp parallel for schedule(static)")
#else
#define GPUBATCH_OMP_PARALLEL_FOR
#endif

namespace gpubatch {
/// @brief Everything in this namespace is internal and may change without notice.
namespace detail {}
}  // namespace gpubatch
