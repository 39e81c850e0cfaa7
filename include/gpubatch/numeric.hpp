/// @file numeric.hpp
/// @brief Element types gpubatch computes with, their compute (accumulator) types, and
/// conversions that work in host and device code alike.
#pragma once

#include <gpubatch/config.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace gpubatch {

/// @brief IEEE half precision (CUDA's __half).
using half = __half;
/// @brief bfloat16 (CUDA's __nv_bfloat16).
using bfloat16 = __nv_bfloat16;

/// @brief The type products of `T` are accumulated in: float for f32, f16 and bf16; double for
/// f64; int32_t for int8. Alpha, beta and epilogues work in this type too.
template <class T>
struct compute_type;
template <>
struct compute_type<double> { using type = double; };
template <>
struct compute_type<float> { using type = float; };
template <>
struct compute_type<half> { using type = float; };
template <>
struct compute_type<bfloat16> { using type = float; };
template <>
struct compute_type<std::int8_t> { using type = std::int32_t; };
/// @brief Shorthand for compute_type<T>::type.
template <class T>
using compute_type_t = typename compute_type<std::remove_const_t<T>>::type;

/// @brief Whether gpubatch computes with element type T.
template <class T, class = void>
inline constexpr bool is_supported_element_v = false;
template <class T>
inline constexpr bool is_supported_element_v<T, std::void_t<typename compute_type<T>::type>> =
    true;

GPUBATCH_ABI_BEGIN
namespace detail {
template <class T>
struct type_identity {
  using type = T;
};
/// The accumulate type of an operation on elements T, in a non-deduced context: alpha and beta
/// parameters take it, so `1.0` or `1.0F` both convert instead of failing deduction.
template <class T>
using scalar_t = typename type_identity<compute_type_t<T>>::type;

/// Output types an operation on elements In may write: In itself (not for int8, whose products
/// need int32), or the accumulate type (not for double, which is its own accumulate type).
template <class In, class Out>
inline constexpr bool supported_output_v =
    std::is_same_v<Out, In> ? !std::is_same_v<In, std::int8_t>
                            : std::is_same_v<Out, compute_type_t<In>> && !std::is_same_v<In, double>;
}  // namespace detail
GPUBATCH_ABI_END

GPUBATCH_ABI_BEGIN
namespace detail {
/// The bits of a 16-bit element (half or bfloat16).
template <class T>
GPUBATCH_HOST_DEVICE std::uint32_t bits_of16(T value) {
  static_assert(sizeof(T) == 2);
  std::uint16_t h;
  std::memcpy(&h, &value, sizeof h);
  return h;
}

/// The float with the given bits.
GPUBATCH_HOST_DEVICE float float_with_bits(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

/// half to float, exact. On a GPU the conversion instruction; elsewhere a few integer operations
/// inlined: CUDA's host routine is an out-of-line call that normalises subnormals in a loop
/// (40% of an emulated f16 GEMM test's time). A NaN becomes the canonical quiet NaN, as from
/// CUDA's host routine.
GPUBATCH_HOST_DEVICE float half_to_float(half value) {
#if defined(__CUDA_ARCH__)
  return __half2float(value);
#else
  const std::uint32_t h = bits_of16(value);
  const std::uint32_t sign = (h & 0x8000U) << 16;
  const std::uint32_t magnitude = h & 0x7fffU;
  if (magnitude >= 0x7c00U) {  // infinity or NaN
    return float_with_bits(magnitude == 0x7c00U ? (sign | 0x7f800000U) : 0x7fffffffU);
  }
  if (magnitude >= 0x0400U) {  // normal: the exponent rebiased from 15 to 127
    return float_with_bits(sign | ((magnitude << 13) + 0x38000000U));
  }
  // Zero or subnormal: magnitude x 2^-24, exact in float (and no subnormal arithmetic).
  const float f = static_cast<float>(magnitude) * 5.9604644775390625e-8F;
  return sign != 0 ? -f : f;
#endif
}

/// bfloat16 to float, exact: its bits are a float's high half (as in CUDA's host routine).
GPUBATCH_HOST_DEVICE float bfloat16_to_float(bfloat16 value) {
#if defined(__CUDA_ARCH__)
  return __bfloat162float(value);
#else
  return float_with_bits(bits_of16(value) << 16);
#endif
}
}  // namespace detail
GPUBATCH_ABI_END

/// @brief Converts between element and compute types, rounding to nearest for half and
/// bfloat16, in host and device code.
template <class To, class From>
GPUBATCH_HOST_DEVICE To convert(From value) {
  if constexpr (std::is_same_v<To, From>) {
    return value;
  } else if constexpr (std::is_same_v<From, half>) {
    return static_cast<To>(detail::half_to_float(value));
  } else if constexpr (std::is_same_v<From, bfloat16>) {
    return static_cast<To>(detail::bfloat16_to_float(value));
  } else if constexpr (std::is_same_v<To, half>) {
    return __float2half_rn(static_cast<float>(value));
  } else if constexpr (std::is_same_v<To, bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(value));
  } else {
    return static_cast<To>(value);
  }
}

}  // namespace gpubatch
