/// @file detail/transfer/size_class.hpp
/// @brief The pinned pool's size classes: eight per power of two, so a cached block is never
/// more than 1/8 larger than the request it serves (power-of-two classes waste up to half).
#pragma once

#include <gpubatch/config.hpp>

#include <cstddef>
#include <limits>

GPUBATCH_NAMESPACE_BEGIN
namespace detail {

/// Requests up to this size share one granularity; above it the classes are geometric.
inline constexpr std::size_t pinned_small_limit = 2048;
/// Granularity of small classes: cudaHostAlloc hands out whole pages anyway, and 256 bytes keeps
/// every block aligned for any element type and for vectorised memcpy.
inline constexpr std::size_t pinned_small_granularity = 256;
/// log2 of the classes per power of two: 2^3 = 8, i.e. at most 12.5 % waste per block.
inline constexpr unsigned pinned_class_bits = 3;

constexpr unsigned floor_log2(std::size_t n) noexcept {
  unsigned k = 0;
  while (n > 1) {
    n >>= 1;
    ++k;
  }
  return k;
}

/// The granularity a request of `bytes` is rounded to.
constexpr std::size_t pinned_granularity(std::size_t bytes) noexcept {
  if (bytes <= pinned_small_limit) {
    return pinned_small_granularity;
  }
  return std::size_t{1} << (floor_log2(bytes) - pinned_class_bits);
}

/// The capacity of the block that serves a request of `bytes`; 0 when rounding would overflow
/// (no allocator can satisfy such a request). A block of this capacity serves exactly the
/// requests whose class it is, so waste is below max(256 bytes, bytes / 8).
constexpr std::size_t pinned_block_size(std::size_t bytes) noexcept {
  const std::size_t g = pinned_granularity(bytes == 0 ? 1 : bytes);
  const std::size_t n = bytes == 0 ? 1 : bytes;
  if (n > std::numeric_limits<std::size_t>::max() - (g - 1)) {
    return 0;
  }
  return (n + g - 1) / g * g;
}

}  // namespace detail
GPUBATCH_NAMESPACE_END
