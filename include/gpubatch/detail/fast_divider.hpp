/// @file detail/fast_divider.hpp
/// @brief Division by a divisor fixed ahead of a loop: a multiply-high, an add and a shift in
/// place of a division (64-bit division is a long subroutine on a GPU; 32-bit, some twenty
/// instructions). Shared by both backends, so the host tests check it.
#pragma once

#include <gpubatch/config.hpp>

#include <cstdint>

GPUBATCH_NAMESPACE_BEGIN
namespace detail {

/// Divides numerators in [0, 2^31) by a divisor in [1, 2^31], as in Granlund and Montgomery,
/// "Division by invariant integers using multiplication" (1994): with l = ceil(log2 d) and
/// m = floor(2^32 (2^l - d) / d) + 1, n / d = (mulhi(n, m) + n) >> l. The sum stays below 2^32
/// because n < 2^31 and mulhi(n, m) < n.
class fast_divider {
 public:
  GPUBATCH_HOST_DEVICE fast_divider() : fast_divider(1) {}
  GPUBATCH_HOST_DEVICE explicit fast_divider(std::uint32_t divisor) : divisor_(divisor) {
    while ((std::uint64_t{1} << shift_) < divisor) {
      ++shift_;
    }
    multiplier_ = static_cast<std::uint32_t>(
        (std::uint64_t{1} << 32) * ((std::uint64_t{1} << shift_) - divisor) / divisor + 1);
  }

  GPUBATCH_HOST_DEVICE std::uint32_t divisor() const { return divisor_; }

  /// n / divisor, for n < 2^31.
  GPUBATCH_HOST_DEVICE std::uint32_t divide(std::uint32_t n) const {
    // Compilers turn the 64-bit product's high half into one multiply-high instruction.
    const auto high =
        static_cast<std::uint32_t>((static_cast<std::uint64_t>(n) * multiplier_) >> 32);
    return (high + n) >> shift_;
  }

 private:
  std::uint32_t divisor_ = 1;
  std::uint32_t multiplier_ = 1;
  std::uint32_t shift_ = 0;
};

}  // namespace detail
GPUBATCH_NAMESPACE_END
