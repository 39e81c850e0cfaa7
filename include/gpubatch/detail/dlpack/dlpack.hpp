/// @file detail/dlpack/dlpack.hpp
/// @brief What import and export share: DLPack data types of gpubatch's element types, printable
/// names of DLPack devices and data types, and overflow-checked extent arithmetic.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/numeric.hpp>

#include <dlpack/dlpack.h>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

GPUBATCH_NAMESPACE_BEGIN
namespace detail::dlpack {

template <class T>
constexpr DLDataType dtype_of() noexcept {
  constexpr auto bits = static_cast<std::uint8_t>(sizeof(T) * 8);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                std::is_same_v<T, half>) {
    return DLDataType{static_cast<std::uint8_t>(kDLFloat), bits, 1};
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    return DLDataType{static_cast<std::uint8_t>(kDLBfloat), bits, 1};
  } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return DLDataType{static_cast<std::uint8_t>(std::is_signed_v<T> ? kDLInt : kDLUInt), bits, 1};
  } else {
    static_assert(dependent_false_v<T>,
                  "gpubatch DLPack interop: the element type must be float, double, "
                  "gpubatch::half, gpubatch::bfloat16 or an integer type other than bool");
    return DLDataType{};
  }
}

constexpr bool same_dtype(DLDataType a, DLDataType b) noexcept {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

/// "float32", "bfloat16", "int8", "complex64", "float32x4" (4 lanes), "code 9, 8 bits".
inline std::string dtype_name(DLDataType dtype) {
  // Codes by value, so that names from newer DLPack headers than the one installed still print.
  const char* kind = nullptr;
  switch (dtype.code) {
    case 0: kind = "int"; break;
    case 1: kind = "uint"; break;
    case 2: kind = "float"; break;
    case 3: kind = "opaque handle "; break;
    case 4: kind = "bfloat"; break;
    case 5: kind = "complex"; break;
    case 6: kind = "bool"; break;
    default: break;
  }
  std::string name = kind != nullptr ? kind + std::to_string(dtype.bits)
                                     : "type code " + std::to_string(dtype.code) + ", " +
                                           std::to_string(dtype.bits) + " bits";
  if (dtype.lanes != 1) {
    name += " x " + std::to_string(dtype.lanes) + " lanes";
  }
  return name;
}

/// "kDLCUDA (2)"; unknown types print their number.
inline std::string device_type_name(int type) {
  const char* name = nullptr;
  switch (type) {
    case 1: name = "kDLCPU"; break;
    case 2: name = "kDLCUDA"; break;
    case 3: name = "kDLCUDAHost"; break;
    case 4: name = "kDLOpenCL"; break;
    case 7: name = "kDLVulkan"; break;
    case 8: name = "kDLMetal"; break;
    case 9: name = "kDLVPI"; break;
    case 10: name = "kDLROCM"; break;
    case 11: name = "kDLROCMHost"; break;
    case 12: name = "kDLExtDev"; break;
    case 13: name = "kDLCUDAManaged"; break;
    case 14: name = "kDLOneAPI"; break;
    case 15: name = "kDLWebGPU"; break;
    case 16: name = "kDLHexagon"; break;
    default: break;
  }
  const std::string number = "(" + std::to_string(type) + ")";
  return name != nullptr ? std::string(name) + " " + number : "device type " + number;
}

/// "(2, 3, 4)", as NumPy prints a shape.
inline std::string tuple_string(const std::int64_t* values, int count) {
  std::string text = "(";
  for (int i = 0; i < count; ++i) {
    text += (i > 0 ? ", " : "") + std::to_string(values[i]);
  }
  return text + (count == 1 ? ",)" : ")");
}

/// a * b + c for non-negative operands, or false if it exceeds int64.
inline bool multiply_add(std::int64_t a, std::int64_t b, std::int64_t c,
                         std::int64_t& out) noexcept {
  std::int64_t product = 0;
  return !__builtin_mul_overflow(a, b, &product) && !__builtin_add_overflow(product, c, &out);
}

/// Elements from the first to the last element of a tensor (0 when it is empty), or -1 if that
/// exceeds int64 or `max_elements`. Strides must be non-negative.
inline std::int64_t span_elements(const std::int64_t* shape, const std::int64_t* strides,
                                  int ndim, std::int64_t max_elements) noexcept {
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] == 0) {
      return 0;
    }
  }
  std::int64_t last = 0;  // offset of the last element
  for (int i = 0; i < ndim; ++i) {
    if (!multiply_add(shape[i] - 1, strides[i], last, last)) {
      return -1;
    }
  }
  return last < max_elements ? last + 1 : -1;
}

/// The largest number of elements of `element_size` bytes whose size in bytes fits in int64.
constexpr std::int64_t max_elements(std::size_t element_size) noexcept {
  return std::numeric_limits<std::int64_t>::max() / static_cast<std::int64_t>(element_size);
}

}  // namespace detail::dlpack
GPUBATCH_NAMESPACE_END
