/// @file detail/conv/radix_walk.hpp
/// @brief A grid-stride walk over a tensor in storage order without division, shared by the
/// depthwise kernel and the host tests.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/views.hpp>

#include <cstdint>

// Only the device pass understands the pragma (host compilers warn about it).
#if defined(__CUDA_ARCH__)
#define GPUBATCH_RADIX_UNROLL _Pragma("unroll")
#else
#define GPUBATCH_RADIX_UNROLL
#endif

GPUBATCH_NAMESPACE_BEGIN
namespace detail::cuda_conv {

/// A grid-stride walk over a tensor in storage order, as mixed-radix digits (most significant
/// first; the first unbounded) stepped without dividing: 64-bit division is a called subroutine
/// on the GPU, and around the calls the depthwise kernel spilled. The start and the stride are
/// below 2^31 (at most 2^20 blocks of 256 threads), so 32-bit division finds their digits once.
template <int Digits>
struct radix_walk {
  index_t digit[Digits];
  index_t step[Digits];
  index_t radix[Digits];  ///< radix[0] is unused

  /// `radices` are the extents of digits 1 .. Digits - 1, each at least 1.
  GPUBATCH_HOST_DEVICE radix_walk(std::uint32_t start, std::uint32_t stride,
                                  const index_t (&radices)[Digits - 1]) {
    radix[0] = 0;
GPUBATCH_RADIX_UNROLL
    for (int d = 1; d < Digits; ++d) radix[d] = radices[d - 1];
    split(start, digit);
    split(stride, step);
  }

  /// Moves on by the stride: each digit takes its step and the carry, which one subtraction
  /// brings back into range (digit + step + 1 < 2 * radix).
  GPUBATCH_HOST_DEVICE void advance() {
    index_t carry = 0;
GPUBATCH_RADIX_UNROLL
    for (int d = Digits - 1; d > 0; --d) {
      digit[d] += step[d] + carry;
      carry = digit[d] >= radix[d] ? 1 : 0;
      if (carry != 0) digit[d] -= radix[d];
    }
    digit[0] += step[0] + carry;
  }

 private:
  GPUBATCH_HOST_DEVICE void split(std::uint32_t value, index_t (&out)[Digits]) const {
GPUBATCH_RADIX_UNROLL
    for (int d = Digits - 1; d > 0; --d) {
      // A radix above the value leaves it whole; any other fits 32 bits.
      const bool small = radix[d] <= static_cast<index_t>(value);
      const std::uint32_t r = small ? static_cast<std::uint32_t>(radix[d]) : 1U;
      out[d] = small ? static_cast<index_t>(value % r) : static_cast<index_t>(value);
      value = small ? value / r : 0U;
    }
    out[0] = static_cast<index_t>(value);
  }
};

}  // namespace detail::cuda_conv
GPUBATCH_NAMESPACE_END

#undef GPUBATCH_RADIX_UNROLL
