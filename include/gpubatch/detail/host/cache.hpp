/// @file detail/host/cache.hpp
/// @brief What the host kernels know of the CPU's caches and how they write past them: the size
/// of the largest data cache (from CPUID, read once) and stores that bypass the caches.
#pragma once

#include <gpubatch/config.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>
#define GPUBATCH_HOST_X86 1
#else
#define GPUBATCH_HOST_X86 0
#endif

// Non-temporal stores through the compilers' builtins, not <immintrin.h> (half a second of every
// translation unit's compile time). Not in nvcc's passes, whose front end lacks GCC's x86
// builtins: there the stores stay plain, which changes speed, never results.
#if GPUBATCH_HOST_X86 && !defined(__CUDACC__) && (defined(__clang__) || defined(__GNUC__))
#define GPUBATCH_HOST_STREAM_STORES 1
#else
#define GPUBATCH_HOST_STREAM_STORES 0
#endif

GPUBATCH_NAMESPACE_BEGIN
namespace detail::host_cache {

#if GPUBATCH_HOST_X86
/// The largest data or unified cache a deterministic-cache-parameters CPUID leaf describes
/// (leaf 4 on Intel, 0x8000001D on AMD): ways x partitions x line size x sets; 0 if none.
inline std::size_t largest_described(unsigned leaf) {
  std::size_t largest = 0;
  for (unsigned sub = 0; sub < 16; ++sub) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(leaf, sub, &a, &b, &c, &d) == 0) break;
    const unsigned type = a & 0x1FU;
    if (type == 0) break;     // no more caches
    if (type == 2) continue;  // instruction cache
    const std::size_t ways = ((b >> 22) & 0x3FFU) + 1;
    const std::size_t partitions = ((b >> 12) & 0x3FFU) + 1;
    const std::size_t line = (b & 0xFFFU) + 1;
    const std::size_t sets = std::size_t{c} + 1;
    const std::size_t bytes = ways * partitions * line * sets;
    if (bytes > largest) largest = bytes;
  }
  return largest;
}
#endif

/// @brief Bytes of the largest cache one core's data passes through (the L3 slice it shares on
/// current x86 parts), read from CPUID on first use; 0 where it cannot be read (other
/// architectures), which turns off what depends on it.
inline std::size_t last_level_bytes() {
#if GPUBATCH_HOST_X86
  static const std::size_t bytes = [] {
    const std::size_t intel = largest_described(4);
    return intel != 0 ? intel : largest_described(0x8000001DU);
  }();
  return bytes;
#else
  return 0;
#endif
}

/// @brief Whether a pass over `bytes` of operands streams through the caches: more than the last
/// level holds, so that lines written early are evicted before anyone reads them again.
inline bool streams(std::size_t bytes) {
  const std::size_t cache = last_level_bytes();
  return cache != 0 && bytes > cache;
}

/// Whether stream_store can write a `Bytes`-wide vector in this build.
template <int Bytes>
inline constexpr bool can_stream_store =
#if GPUBATCH_HOST_STREAM_STORES && defined(__AVX512F__)
    Bytes == 16 || Bytes == 32 || Bytes == 64;
#elif GPUBATCH_HOST_STREAM_STORES && defined(__AVX__)
    Bytes == 16 || Bytes == 32;
#elif GPUBATCH_HOST_STREAM_STORES && defined(__SSE2__)
    Bytes == 16;
#else
    false;
#endif

#if GPUBATCH_HOST_STREAM_STORES
/// The integer vectors the compilers' non-temporal store builtins take.
typedef long long words16 __attribute__((vector_size(16)));
typedef long long words32 __attribute__((vector_size(32)));
typedef long long words64 __attribute__((vector_size(64)));

template <class Words>
inline void stream_words(void* out, const void* v) {
  Words x;
  std::memcpy(&x, v, sizeof(x));
#if defined(__clang__)
  __builtin_nontemporal_store(x, static_cast<Words*>(out));
#else
  if constexpr (sizeof(Words) == 16) __builtin_ia32_movntdq(static_cast<Words*>(out), x);
#if defined(__AVX__)
  if constexpr (sizeof(Words) == 32) __builtin_ia32_movntdq256(static_cast<Words*>(out), x);
#endif
#if defined(__AVX512F__)
  if constexpr (sizeof(Words) == 64) __builtin_ia32_movntdq512(static_cast<Words*>(out), x);
#endif
#endif
}
#endif

/// @brief Writes the vector `v` to `out` (aligned to its size) with a non-temporal store: the
/// line is not read first and does not displace cached data. Needs store_fence() before another
/// thread reads it. Only where can_stream_store<sizeof(Vec)>.
template <class Vec>
inline void stream_store([[maybe_unused]] void* out, [[maybe_unused]] const Vec& v) {
  static_assert(can_stream_store<static_cast<int>(sizeof(Vec))>,
                "no non-temporal store of this width here");
#if GPUBATCH_HOST_STREAM_STORES
  if constexpr (sizeof(Vec) == 16) stream_words<words16>(out, &v);
  if constexpr (sizeof(Vec) == 32) stream_words<words32>(out, &v);
  if constexpr (sizeof(Vec) == 64) stream_words<words64>(out, &v);
#endif
}

/// @brief Orders the calling thread's non-temporal stores before its later stores, so that a
/// thread that synchronizes with it afterwards reads them.
inline void store_fence() {
#if GPUBATCH_HOST_STREAM_STORES
  __builtin_ia32_sfence();
#endif
}

}  // namespace detail::host_cache
GPUBATCH_NAMESPACE_END
