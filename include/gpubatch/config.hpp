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

// ---------------------------------------------------------------------------------------------
// The ABI namespace. gpubatch is header-only, so every translation unit compiles its own copy
// of each function, and the linker keeps one copy of each inline function for the whole
// program. The host GEMM's register blocking follows the instruction set, the host loops follow
// OpenMP, and a kernel's host stub belongs to the device code of the architectures its file was
// compiled for: two files built with different flags must never share such a definition, or the
// program runs one file's code with the other's assumptions (wrong results, heap corruption,
// missing kernel images). Every gpubatch function, and every internal type, therefore lives in an
// inline namespace named after the build configuration; user code never spells it.
// The public class types (containers, views, problems, policies, execution arguments) stay in
// `gpubatch` itself with layouts that no flag changes, so they can cross between differently
// built files in the user's own interfaces (tests/abi checks both).

#define GPUBATCH_DETAIL_PP_CAT_(a, b) a##b
#define GPUBATCH_DETAIL_PP_CAT(a, b) GPUBATCH_DETAIL_PP_CAT_(a, b)

// Instruction set of the host code: what changes the host backend's tiling and vectorisation.
#if defined(__AVX512F__)
#define GPUBATCH_DETAIL_ABI_ISA _avx512
#elif defined(__AVX2__)
#define GPUBATCH_DETAIL_ABI_ISA _avx2
#elif defined(__AVX__)
#define GPUBATCH_DETAIL_ABI_ISA _avx
#elif defined(__ARM_FEATURE_SVE)
#define GPUBATCH_DETAIL_ABI_ISA _sve
#else
#define GPUBATCH_DETAIL_ABI_ISA _base
#endif
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define GPUBATCH_DETAIL_ABI_FMA _fma
#else
#define GPUBATCH_DETAIL_ABI_FMA
#endif

#if defined(_OPENMP)
#define GPUBATCH_DETAIL_ABI_OPENMP _omp
#else
#define GPUBATCH_DETAIL_ABI_OPENMP
#endif

// The device code a translation unit carries. nvcc defines __CUDA_ARCH_LIST__ (e.g. 800,900) in
// its host and device passes alike, and runs both passes' preprocessor with the same host
// compiler flags, so a kernel's name is the same in its stub and in its device code.
#define GPUBATCH_DETAIL_PP_COUNT(...) \
  GPUBATCH_DETAIL_PP_COUNT_(__VA_ARGS__, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define GPUBATCH_DETAIL_PP_COUNT_(a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, \
                                  a15, a16, n, ...)                                             \
  n
#define GPUBATCH_DETAIL_PP_JOIN(...)                                                     \
  GPUBATCH_DETAIL_PP_CAT(GPUBATCH_DETAIL_PP_JOIN_, GPUBATCH_DETAIL_PP_COUNT(__VA_ARGS__)) \
  (__VA_ARGS__)
#define GPUBATCH_DETAIL_PP_JOIN_1(a) GPUBATCH_DETAIL_PP_CAT(_, a)
#define GPUBATCH_DETAIL_PP_JOIN_2(a, ...) \
  GPUBATCH_DETAIL_PP_CAT(GPUBATCH_DETAIL_PP_JOIN_1(a), GPUBATCH_DETAIL_PP_JOIN_1(__VA_ARGS__))
#define GPUBATCH_DETAIL_PP_JOIN_3(a, ...) \
  GPUBATCH_DETAIL_PP_CAT(GPUBATCH_DETAIL_PP_JOIN_1(a), GPUBATCH_DETAIL_PP_JOIN_2(__VA_ARGS__))
#define GPUBATCH_DETAIL_PP_JOIN_4(a, ...) \
  GPUBATCH_DETAIL_PP_CAT(GPUBATCH_DETAIL_PP_JOIN_1(a), GPUBATCH_DETAIL_PP_JOIN_3(__VA_ARGS__))
#define GPUBATCH_DETAIL_PP_JOIN_5(a, ...) \
  GPUBATCH_DETAIL_PP_CAT(GPUBATCH_DETAIL_PP_JOIN_1(a), GPUBATCH_DETAIL_PP_JOIN_4(__VA_ARGS__))
#define GPUBATCH_DETAIL_PP_JOIN_6(a, ...) \
  GPUBATCH_DETAIL_PP_CAT(GPUBATCH_DETAIL_PP_JOIN_1(a), GPUBATCH_DETAIL_PP_JOIN_5(__VA_ARGS__))
#define GPUBATCH_DETAIL_PP_JOIN_7(a, ...) \
  GPUBATCH_DETAIL_PP_CAT(GPUBATCH_DETAIL_PP_JOIN_1(a), GPUBATCH_DETAIL_PP_JOIN_6(__VA_ARGS__))
#define GPUBATCH_DETAIL_PP_JOIN_8(a, ...) \
  GPUBATCH_DETAIL_PP_CAT(GPUBATCH_DETAIL_PP_JOIN_1(a), GPUBATCH_DETAIL_PP_JOIN_7(__VA_ARGS__))
#define GPUBATCH_DETAIL_PP_JOIN_9(a, ...) \
  GPUBATCH_DETAIL_PP_CAT(GPUBATCH_DETAIL_PP_JOIN_1(a), GPUBATCH_DETAIL_PP_JOIN_8(__VA_ARGS__))
#define GPUBATCH_DETAIL_PP_JOIN_10(a, ...) \
  GPUBATCH_DETAIL_PP_CAT(GPUBATCH_DETAIL_PP_JOIN_1(a), GPUBATCH_DETAIL_PP_JOIN_9(__VA_ARGS__))
#define GPUBATCH_DETAIL_PP_JOIN_11(a, ...) \
  GPUBATCH_DETAIL_PP_CAT(GPUBATCH_DETAIL_PP_JOIN_1(a), GPUBATCH_DETAIL_PP_JOIN_10(__VA_ARGS__))
#define GPUBATCH_DETAIL_PP_JOIN_12(a, ...) \
  GPUBATCH_DETAIL_PP_CAT(GPUBATCH_DETAIL_PP_JOIN_1(a), GPUBATCH_DETAIL_PP_JOIN_11(__VA_ARGS__))
#define GPUBATCH_DETAIL_PP_JOIN_13(a, ...) \
  GPUBATCH_DETAIL_PP_CAT(GPUBATCH_DETAIL_PP_JOIN_1(a), GPUBATCH_DETAIL_PP_JOIN_12(__VA_ARGS__))
#define GPUBATCH_DETAIL_PP_JOIN_14(a, ...) \
  GPUBATCH_DETAIL_PP_CAT(GPUBATCH_DETAIL_PP_JOIN_1(a), GPUBATCH_DETAIL_PP_JOIN_13(__VA_ARGS__))
#define GPUBATCH_DETAIL_PP_JOIN_15(a, ...) \
  GPUBATCH_DETAIL_PP_CAT(GPUBATCH_DETAIL_PP_JOIN_1(a), GPUBATCH_DETAIL_PP_JOIN_14(__VA_ARGS__))
#define GPUBATCH_DETAIL_PP_JOIN_16(a, ...) \
  GPUBATCH_DETAIL_PP_CAT(GPUBATCH_DETAIL_PP_JOIN_1(a), GPUBATCH_DETAIL_PP_JOIN_15(__VA_ARGS__))

#if defined(GPUBATCH_EMULATION)
#define GPUBATCH_DETAIL_ABI_CUDA GPUBATCH_DETAIL_PP_CAT(_emu, GPUBATCH_EMULATION_ARCH)
#elif defined(__CUDACC__) && defined(__CUDA_ARCH_LIST__)
#define GPUBATCH_DETAIL_ABI_CUDA \
  GPUBATCH_DETAIL_PP_CAT(_sm, GPUBATCH_DETAIL_PP_JOIN(__CUDA_ARCH_LIST__))
#elif defined(__CUDACC__)
#define GPUBATCH_DETAIL_ABI_CUDA _cuda
#else
#define GPUBATCH_DETAIL_ABI_CUDA _host
#endif

#define GPUBATCH_DETAIL_ABI_NAME_(major, minor, isa, fma, omp, cuda) \
  abi_##major##_##minor##isa##fma##omp##cuda
#define GPUBATCH_DETAIL_ABI_NAME(major, minor, isa, fma, omp, cuda) \
  GPUBATCH_DETAIL_ABI_NAME_(major, minor, isa, fma, omp, cuda)

/// @brief The inline namespace every gpubatch function and internal type lives in, e.g.
/// `abi_0_1_avx2_fma_omp_sm_800_900` (version, host instruction set, FMA, OpenMP, the CUDA
/// architectures, or `host` without a CUDA compiler). Never spelled by user code.
#define GPUBATCH_ABI_NAMESPACE                                                         \
  GPUBATCH_DETAIL_ABI_NAME(GPUBATCH_VERSION_MAJOR, GPUBATCH_VERSION_MINOR,              \
                           GPUBATCH_DETAIL_ABI_ISA, GPUBATCH_DETAIL_ABI_FMA,            \
                           GPUBATCH_DETAIL_ABI_OPENMP, GPUBATCH_DETAIL_ABI_CUDA)

/// @brief Opens `gpubatch` and its ABI namespace; closed by GPUBATCH_NAMESPACE_END.
#define GPUBATCH_NAMESPACE_BEGIN \
  namespace gpubatch {           \
  inline namespace GPUBATCH_ABI_NAMESPACE {
/// @brief Closes what GPUBATCH_NAMESPACE_BEGIN opened.
#define GPUBATCH_NAMESPACE_END \
  }                            \
  }
/// @brief Opens the ABI namespace inside `namespace gpubatch`; closed by GPUBATCH_ABI_END.
#define GPUBATCH_ABI_BEGIN inline namespace GPUBATCH_ABI_NAMESPACE {
/// @brief Closes what GPUBATCH_ABI_BEGIN opened.
#define GPUBATCH_ABI_END }

#define GPUBATCH_DETAIL_STRINGIFY_(x) #x
#define GPUBATCH_DETAIL_STRINGIFY(x) GPUBATCH_DETAIL_STRINGIFY_(x)
/// @brief The ABI namespace's name as a string literal, for diagnostics.
#define GPUBATCH_ABI_NAMESPACE_STRING GPUBATCH_DETAIL_STRINGIFY(GPUBATCH_ABI_NAMESPACE)

GPUBATCH_NAMESPACE_BEGIN
/// @brief Everything in this namespace is internal and may change without notice.
namespace detail {}
GPUBATCH_NAMESPACE_END
