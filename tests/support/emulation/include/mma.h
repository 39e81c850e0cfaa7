// nvcuda::wmma on the emulated device. A fragment's elements are owned by the lanes of a warp
// (element e of the row-major fragment by lane e % 32), so each lane holds only its share, as on
// hardware, and no store races with another lane's. Every *_sync operation is a warp-collective:
// all 32 lanes must arrive at the same call with the same pointer and leading dimension; the
// pointer must be 32-byte aligned and the leading dimension a multiple of 16 bytes.
#pragma once

#include <gpubatch_emulation/device.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
}  // namespace precision

namespace detail {
template <class Use, int M, int N, int K>
struct extent;
template <int M, int N, int K>
struct extent<matrix_a, M, N, K> {
  static constexpr int rows = M, cols = K;
};
template <int M, int N, int K>
struct extent<matrix_b, M, N, K> {
  static constexpr int rows = K, cols = N;
};
template <int M, int N, int K>
struct extent<accumulator, M, N, K> {
  static constexpr int rows = M, cols = N;
};
/// What one element of a fragment is stored as (TF32 fragments hold floats).
template <class T>
struct storage {
  using type = T;
};
template <>
struct storage<precision::tf32> {
  using type = float;
};
/// Every half value as a float, filled once by CUDA's host routine, an out-of-line call that
/// was a fifth of an emulated f16 test's time: a warp's product widens each operand element
/// once per product it enters.
inline const std::vector<float> half_values = [] {
  std::vector<float> t(1U << 16);
  for (unsigned i = 0; i < t.size(); ++i) {
    __half_raw raw;
    raw.x = static_cast<unsigned short>(i);
    t[i] = __half2float(__half(raw));
  }
  return t;
}();
/// Inlined even in the sanitizers' -O1 builds: one mma_sync widens 2 x K values per output.
template <class T>
__attribute__((always_inline)) inline float widen(T v) {
  if constexpr (std::is_same_v<T, __half>) {
    std::uint16_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    return half_values[bits];
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    std::uint16_t bits;  // the high half of a float's bits, as CUDA's own routine widens it
    std::memcpy(&bits, &v, sizeof bits);
    const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &wide, sizeof f);
    return f;
  } else {
    return static_cast<float>(v);
  }
}
/// The TF32 value the tensor core uses: the low 13 mantissa bits are ignored.
inline float truncate_tf32(float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits &= 0xffffe000U;
  std::memcpy(&v, &bits, 4);
  return v;
}
}  // namespace detail

template <class Use, int M, int N, int K, class T, class Layout = void>
class fragment {
 public:
  using element_type = typename detail::storage<T>::type;
  using storage_element_type = element_type;
  static constexpr int rows = detail::extent<Use, M, N, K>::rows;
  static constexpr int cols = detail::extent<Use, M, N, K>::cols;
  static_assert(rows * cols % 32 == 0, "emulated wmma: unsupported fragment shape");
  static constexpr int num_elements = rows * cols / 32;
  element_type x[num_elements];

  /// Row and column of this lane's element i.
  static int row_of(int lane, int i) { return (i * 32 + lane) / cols; }
  static int col_of(int lane, int i) { return (i * 32 + lane) % cols; }
};

namespace detail {
struct access {
  const void* pointer;
  unsigned ldm;
  int layout;
};

/// The warp-collective checks every load and store makes.
template <class Memory>
void check_access(const Memory* p, unsigned ldm, int layout, const char* what, const char* file,
                  int line) {
  const access mine{p, ldm, layout};
  const void* const* all =
      gpubatch_emu::warp_exchange(&mine, sizeof mine, what, file, line, /*whole_warp=*/true);
  for (int l = 0; l < 32; ++l) {
    const auto* other = static_cast<const access*>(all[l]);
    if (other->pointer != mine.pointer || other->ldm != ldm || other->layout != layout) {
      gpubatch_emu::device_fault(cudaErrorIllegalInstruction, file, line,
                                 "%s: lanes of one warp pass different pointers, leading "
                                 "dimensions or layouts (lane %d: %p ldm %u, lane %d: %p ldm %u)",
                                 what, gpubatch_emu::lane_id(), mine.pointer, ldm, l,
                                 other->pointer, other->ldm);
    }
  }
  if (reinterpret_cast<std::uintptr_t>(p) % 32 != 0) {
    gpubatch_emu::device_fault(cudaErrorMisalignedAddress, file, line,
                               "%s: pointer %p is not 32-byte aligned", what,
                               static_cast<const void*>(p));
  }
  if (ldm * sizeof(Memory) % 16 != 0) {
    gpubatch_emu::device_fault(cudaErrorMisalignedAddress, file, line,
                               "%s: leading dimension %u elements is not a multiple of 16 bytes",
                               what, ldm);
  }
}

template <class Layout>
constexpr int layout_of() {
  return std::is_same_v<Layout, row_major> ? mem_row_major : mem_col_major;
}
}  // namespace detail

template <class Use, int M, int N, int K, class T, class Layout, class V>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, const V& v) {
  for (auto& e : f.x) e = static_cast<typename fragment<Use, M, N, K, T, Layout>::element_type>(v);
}

/// Operand fragments: the layout is part of the fragment's type.
template <class Use, int M, int N, int K, class T, class Layout, class Memory>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const Memory* p, unsigned ldm,
                      const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  static_assert(!std::is_void_v<Layout>, "emulated wmma: an accumulator load needs a layout_t");
  using frag = fragment<Use, M, N, K, T, Layout>;
  constexpr int layout = detail::layout_of<Layout>();
  detail::check_access(p, ldm, layout, "wmma::load_matrix_sync", file, line);
  const int lane = gpubatch_emu::lane_id();
  for (int i = 0; i < frag::num_elements; ++i) {
    const int r = frag::row_of(lane, i), c = frag::col_of(lane, i);
    const Memory& v = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
    f.x[i] = static_cast<typename frag::element_type>(v);
  }
}

/// Accumulator fragments: the memory layout is an argument.
template <int M, int N, int K, class T, class Memory>
void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const Memory* p, unsigned ldm,
                      layout_t layout, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  using frag = fragment<accumulator, M, N, K, T>;
  detail::check_access(p, ldm, layout, "wmma::load_matrix_sync", file, line);
  const int lane = gpubatch_emu::lane_id();
  for (int i = 0; i < frag::num_elements; ++i) {
    const int r = frag::row_of(lane, i), c = frag::col_of(lane, i);
    f.x[i] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
  }
}

template <int M, int N, int K, class T, class Memory>
void store_matrix_sync(Memory* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm,
                       layout_t layout, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
  using frag = fragment<accumulator, M, N, K, T>;
  detail::check_access(p, ldm, layout, "wmma::store_matrix_sync", file, line);
  const int lane = gpubatch_emu::lane_id();
  for (int i = 0; i < frag::num_elements; ++i) {
    const int r = frag::row_of(lane, i), c = frag::col_of(lane, i);
    (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = static_cast<Memory>(f.x[i]);
  }
}

/// d = a * b + c over the whole warp: each lane computes the elements of d it owns from every
/// lane's share of a and b (products in f32, or int32 for 8-bit inputs).
template <int M, int N, int K, class TA, class LA, class LB, class TC>
void mma_sync(fragment<accumulator, M, N, K, TC>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
              const fragment<matrix_b, M, N, K, TA, LB>& b,
              const fragment<accumulator, M, N, K, TC>& c, const char* file = __builtin_FILE(),
              int line = __builtin_LINE()) {
  using frag_a = fragment<matrix_a, M, N, K, TA, LA>;
  using frag_b = fragment<matrix_b, M, N, K, TA, LB>;
  using frag_c = fragment<accumulator, M, N, K, TC>;
  struct operands {
    const frag_a* a;
    const frag_b* b;
  };
  const operands mine{&a, &b};
  const void* const* all =
      gpubatch_emu::warp_exchange(&mine, sizeof mine, "wmma::mma_sync", file, line, true);
  const frag_a* as[32];
  const frag_b* bs[32];
  for (int l = 0; l < 32; ++l) {
    as[l] = static_cast<const operands*>(all[l])->a;
    bs[l] = static_cast<const operands*>(all[l])->b;
  }
  const auto a_at = [&](int r, int k) {
    const int e = r * K + k;
    return as[e % 32]->x[e / 32];
  };
  const auto b_at = [&](int k, int col) {
    const int e = k * N + col;
    return bs[e % 32]->x[e / 32];
  };
  const int lane = gpubatch_emu::lane_id();
  typename frag_c::element_type out[frag_c::num_elements];
  for (int i = 0; i < frag_c::num_elements; ++i) {
    const int r = frag_c::row_of(lane, i), col = frag_c::col_of(lane, i);
    if constexpr (std::is_integral_v<typename frag_c::element_type>) {
      std::int32_t sum = 0;
      for (int k = 0; k < K; ++k) sum += static_cast<std::int32_t>(a_at(r, k)) * b_at(k, col);
      out[i] = sum + c.x[i];
    } else {
      float sum = 0.0F;
      for (int k = 0; k < K; ++k) {
        float x = detail::widen(a_at(r, k)), y = detail::widen(b_at(k, col));
        if constexpr (std::is_same_v<TA, precision::tf32>) {
          x = detail::truncate_tf32(x);
          y = detail::truncate_tf32(y);
        }
        sum = std::fma(x, y, sum);
      }
      out[i] = sum + c.x[i];
    }
  }
  // Every lane has read the others' a and b before any lane may change its own.
  gpubatch_emu::warp_exchange(&mine, sizeof mine, "wmma::mma_sync", file, line, true);
  for (int i = 0; i < frag_c::num_elements; ++i) d.x[i] = out[i];
}

/// Rounds to the nearest TF32 value, ties away from zero (cvt.rna.tf32.f32).
inline float __float_to_tf32(float v) {
  if (!std::isfinite(v)) return v;
  std::uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits = (bits + 0x1000U) & 0xffffe000U;
  std::memcpy(&v, &bits, 4);
  return v;
}

}  // namespace nvcuda::wmma
