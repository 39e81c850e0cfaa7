/// @file detail/host/unroll.hpp
/// @brief GPUBATCH_HOST_UNROLL(n): complete unrolling of a host kernel's constant-trip loops, so
/// that register arrays indexed by the loop counter stay in registers and conditions on the
/// counter fold away. A GCC pragma, which nvcc's front end rejects: in the host pass of an nvcc
/// translation unit (and with other compilers) the unrolling is left to the compiler, which
/// changes speed, never results.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define GPUBATCH_HOST_PRAGMA(x) _Pragma(#x)
#define GPUBATCH_HOST_UNROLL(n) GPUBATCH_HOST_PRAGMA(GCC unroll n)
#else
#define GPUBATCH_HOST_UNROLL(n)
#endif
