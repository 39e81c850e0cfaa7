/// @file config.hpp
/// @brief Compiler detection and the few macros gpubatch defines.
#pragma once

#include <gpubatch/version.hpp>

/// @brief 1 when the translation unit is compiled by a CUDA compiler (nvcc), else 0.
/// CUDA-backend operations that launch kernels need it; everything else works without it.
#if defined(__CUDACC__)
#define GPUBATCH_CUDA_COMPILER 1
#else
#define GPUBATCH_CUDA_COMPILER 0
#endif

/// @brief Marks a function callable from host and device code; plain `inline` without nvcc.
#if GPUBATCH_CUDA_COMPILER
#define GPUBATCH_HOST_DEVICE __host__ __device__ inline
#define GPUBATCH_DEVICE __device__ inline
#else
#define GPUBATCH_HOST_DEVICE inline
#define GPUBATCH_DEVICE inline
#endif

/// @brief A kernel entry point with hidden visibility, so that two shared libraries that each
/// instantiate the same gpubatch kernel do not resolve to one another's copy.
#define GPUBATCH_KERNEL __global__ __attribute__((visibility("hidden")))

/// @brief Bracket kernel definitions. A kernel instantiated with a type of internal linkage (a
/// functor in an anonymous namespace) cannot be hidden, and nvcc says so for every instantiation;
/// the attribute is simply moot there, so the warning is silenced for gpubatch's kernels only.
#if GPUBATCH_CUDA_COMPILER
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
