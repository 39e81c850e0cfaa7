/// @file detail/gemm/host.hpp
/// @brief The host backend of GEMM: a dedicated path for tiny problems, and for the rest
/// operands packed into cache-resident panels feeding a register-blocked micro-kernel that the
/// compiler vectorises. Parallel across the batch and across tiles of each problem.
#pragma once

#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/detail/host/cache.hpp>
#include <gpubatch/detail/host/parallel.hpp>
#include <gpubatch/detail/host/unroll.hpp>
#include <gpubatch/epilogue.hpp>
#include <gpubatch/gemm_policy.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

GPUBATCH_NAMESPACE_BEGIN
namespace detail::host_gemm {

// Register blocking follows the widest vector the host compiler may use.
#if defined(__AVX512F__)
inline constexpr int vector_bytes = 64;
#elif defined(__AVX__)
inline constexpr int vector_bytes = 32;
#else
inline constexpr int vector_bytes = 16;
#endif

/// Vector registers of that instruction set (x86-64: 32 with AVX-512, 16 with AVX2 or SSE).
/// Register-blocked kernels size their accumulators from this.
inline constexpr int vector_registers = vector_bytes == 64 ? 32 : 16;

/// Micro-tile of MR x NR accumulators: two vectors per row, and as many rows as keep the
/// accumulators within the register file (16 vector registers without AVX-512, 32 with).
template <class Compute>
struct tuning {
  static constexpr int lanes = vector_bytes / static_cast<int>(sizeof(Compute));
  static constexpr int nr = 2 * lanes;
  static constexpr int mr = vector_registers == 32 ? 8 : 6;
  /// Rows of op(A) one task packs: a block that stays in L2 next to the B panel.
  static constexpr index_t mc = mr * 16;
  /// Bytes of packed op(B) one task keeps. Only one NR-wide strip of it need stay in L1 while
  /// the A block streams from L2, so the panel may exceed L2: a wide panel packs each A block
  /// once per problem instead of once per panel (n = 512 f64: 1.28x -> 1.11x the OpenBLAS time).
  static constexpr index_t b_panel_bytes = 2048 * 1024;
  /// Reduction steps per pass over a block: keeps a B strip (kc x NR) within L1 while all of
  /// the block's A strips stream past it.
  static constexpr index_t kc = 256;
};

/// Alignment of the host buffers whose values the micro-kernels load as whole vectors (packed
/// strips, scratch tiles): a cache line, so that no vector load straddles two (a plain `new`
/// guarantees 16 bytes).
inline constexpr std::size_t buffer_alignment = 64;

/// Frees what allocate_aligned allocated.
struct aligned_delete {
  template <class T>
  void operator()(T* p) const {
    ::operator delete(p, std::align_val_t{buffer_alignment});
  }
};

/// Host storage aligned to buffer_alignment.
template <class T>
using aligned_array = std::unique_ptr<T[], aligned_delete>;

/// Uninitialised storage for `count` values (at least one) of a trivial type, aligned to
/// buffer_alignment.
template <class T>
aligned_array<T> allocate_aligned(std::size_t count) {
  static_assert(std::is_trivially_default_constructible_v<T> && std::is_trivially_destructible_v<T>,
                "aligned host buffers hold trivial values only");
  return aligned_array<T>(static_cast<T*>(
      ::operator new(std::max<std::size_t>(count, 1) * sizeof(T), std::align_val_t{buffer_alignment})));
}

/// A per-thread scratch buffer (slot 0, 1 or 2), grown on demand and reused by later calls on
/// the same thread.
template <class Compute>
Compute* scratch(std::size_t count, int slot) {
  thread_local aligned_array<Compute> buffers[3];
  thread_local std::size_t capacity[3] = {0, 0, 0};
  if (capacity[slot] < count) {
    buffers[slot] = allocate_aligned<Compute>(count);
    capacity[slot] = count;
  }
  return buffers[slot].get();
}

#if defined(__GNUC__)
template <class T, int Bytes>
struct vector_of {
  typedef T type __attribute__((vector_size(Bytes)));
};

/// Every lane set to x. Written as x - 0, which is x exactly (so the compiler emits a bare
/// broadcast, from memory when x is loaded), where 0 + x is not (-0 + 0 = +0) and would cost
/// an extra add on the shuffle port before each broadcast.
template <class Vec, class T>
inline Vec splat(T x) {
  return x - Vec{};
}

/// Pins a vector of B to a register at a multiply-add that uses it. Left alone, GCC spilled
/// the micro-kernel's second B vector to the stack when A is read in place (its row pointers
/// take the general registers) and fed every multiply-add from there as a memory operand: a
/// store and eight reloads per reduction step, and f64 at n = 128 and 256 ran at 1.5x
/// LIBXSMM's time (1.0x with the pin). The empty asm makes the value opaque where it is used,
/// so it stays in a register; pinned only once per step it was spilled all the same, and the
/// f32 kernels lost 1.5x.
template <class Vec>
inline void keep_in_register([[maybe_unused]] Vec& v) {
#if (defined(__x86_64__) || defined(__i386__)) && !defined(__CUDACC__)
#if defined(__AVX512F__)
  asm("" : "+v"(v));  // any of the 32 vector registers
#else
  asm("" : "+x"(v));
#endif
#endif
}

/// p, which the optimiser can no longer prove equal to p: loads through it stay where they are
/// written instead of being hoisted out of the enclosing loop.
template <class T>
inline const T* opaque(const T* p) {
#if !defined(__CUDACC__)
  asm("" : "+r"(p));
#endif
  return p;
}
#endif

/// Where the micro-kernel reads a strip of op(A) (MR rows) and of op(B) (NR columns): element
/// (row r, reduction p) of A at a[r * a_row + p * a_k], element (p, column c) of B at
/// b[p * b_k + c]. Packed strips have a_row = 1, a_k = MR, b_k = NR; operands read in place
/// have their own leading dimensions.
template <class Compute>
struct strips {
  const Compute* a;
  index_t a_row, a_k;
  const Compute* b;
  index_t b_k;
  /// Runs of k reduction steps (micro_kernel<Compute, true> only): run j reads A from
  /// a + j * a_run and B from b + j * b_run.
  index_t runs = 1;
  index_t a_run = 0;
  index_t b_run = 0;
};

/// Consecutive lines of memory to fetch into the cache, one per reduction step of a
/// micro-kernel, for reading or (`write`) for writing.
struct fetch_run {
  const char* first = nullptr;
  index_t lines = 0;
  bool write = false;
};

/// out (MR x NR, row pitch out_ld) = scale * (A strip (MR x k) * B strip (k x NR) + in), where
/// `in` (row pitch in_ld) holds the sums of earlier passes over the reduction, or is null on the
/// first. With `Runs`, the reduction is s.runs runs of k steps (see strips), summed in registers:
/// a convolution's filter rows, whose inputs lie an input row apart. `fetch` (at most k lines)
/// is fetched a line per reduction step, among the multiply-adds.
template <class Compute, bool Runs = false>
inline void micro_kernel_to(index_t k, strips<Compute> s, const Compute* in, index_t in_ld,
                            Compute* out, index_t out_ld, Compute scale,
                            [[maybe_unused]] fetch_run fetch = {}) {
  constexpr int mr = tuning<Compute>::mr;
  [[maybe_unused]] constexpr int nr = tuning<Compute>::nr;  // the portable loop
  constexpr int lanes = tuning<Compute>::lanes;
  const Compute* a = s.a;
  const Compute* b = s.b;
#if defined(__GNUC__)
  // GNU vector types pin the accumulators to registers whatever the optimiser decides, as long
  // as every loop over the rows is unrolled: kept rolled, GCC held c0 and c1 as stack arrays
  // outside the reduction loop, zeroed them with two calls of memset per tile and copied the
  // sums to C through the stack (a tenth of a 64 x 64 x 64 f32 problem's time).
  using vec = typename vector_of<Compute, vector_bytes>::type;
  vec c0[mr];
  vec c1[mr];
  GPUBATCH_HOST_UNROLL(8)
  for (int i = 0; i < mr; ++i) {
    c0[i] = vec{};
    c1[i] = vec{};
    if (in != nullptr) {
      std::memcpy(&c0[i], in + i * in_ld, sizeof(vec));
      std::memcpy(&c1[i], in + i * in_ld + lanes, sizeof(vec));
    }
  }
  for (index_t run = 0; run < (Runs ? s.runs : 1); ++run) {
    if (Runs) {
      a = s.a + run * s.a_run;
      b = s.b + run * s.b_run;
    }
    for (index_t p = 0; p < k; ++p) {
      vec b0;
      vec b1;
      std::memcpy(&b0, b, sizeof(vec));
      std::memcpy(&b1, b + lanes, sizeof(vec));
      if (p < fetch.lines) {
        if (fetch.write) {
          __builtin_prefetch(fetch.first + p * 64, 1, 2);
        } else {
          __builtin_prefetch(fetch.first + p * 64, 0, 2);
        }
      }
      GPUBATCH_HOST_UNROLL(8)
      for (int i = 0; i < mr; ++i) {
        keep_in_register(b0);  // at every use: see keep_in_register
        keep_in_register(b1);
        const vec ai = splat<vec>(a[i * s.a_row]);
        c0[i] += ai * b0;
        c1[i] += ai * b1;
      }
      a += s.a_k;
      b += s.b_k;
    }
  }
  if (scale != Compute(1)) {
    const vec factor = splat<vec>(scale);
    GPUBATCH_HOST_UNROLL(8)
    for (int i = 0; i < mr; ++i) {
      c0[i] *= factor;
      c1[i] *= factor;
    }
  }
  GPUBATCH_HOST_UNROLL(8)
  for (int i = 0; i < mr; ++i) {
    std::memcpy(out + i * out_ld, &c0[i], sizeof(vec));
    std::memcpy(out + i * out_ld + lanes, &c1[i], sizeof(vec));
  }
#else
  Compute sums[mr * nr];
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) sums[i * nr + j] = in != nullptr ? in[i * in_ld + j] : Compute(0);
  for (index_t run = 0; run < (Runs ? s.runs : 1); ++run) {
    if (Runs) {
      a = s.a + run * s.a_run;
      b = s.b + run * s.b_run;
    }
    for (index_t p = 0; p < k; ++p, a += s.a_k, b += s.b_k) {
      for (int i = 0; i < mr; ++i) {
        for (int j = 0; j < nr; ++j) sums[i * nr + j] += a[i * s.a_row] * b[j];
      }
    }
  }
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) {
      out[i * out_ld + j] = scale != Compute(1) ? scale * sums[i * nr + j] : sums[i * nr + j];
    }
#endif
}

/// acc (MR x NR, row pitch acc_ld) = A strip (MR x k) * B strip (k x NR), plus acc's previous
/// contents when `accumulate` (later passes over the reduction): micro_kernel_to in place.
template <class Compute, bool Runs = false>
inline void micro_kernel(index_t k, strips<Compute> s, Compute* acc, index_t acc_ld,
                         bool accumulate) {
  micro_kernel_to<Compute, Runs>(k, s, accumulate ? acc : nullptr, acc_ld, acc, acc_ld,
                                 Compute(1));
}

/// Rows of micro_kernel_wide's tile: half of micro_kernel's, so that its 4-vector rows keep the
/// same number of accumulators in registers.
template <class Compute>
inline constexpr int wide_rows = tuning<Compute>::mr / 2;

/// micro_kernel over twice the columns and half the rows: acc (wide_rows x 2 NR, row pitch
/// acc_ld) from an A strip's first wide_rows rows and two B strips, the second `b_next`
/// elements after the first (consecutive packed strips). Each row of A is read by one call
/// instead of by one call per B strip, so once its sums are stored nothing reads it again:
/// see taps_block_sample_minor for when that matters. Same sums, in the same order, as
/// micro_kernel's.
template <class Compute>
inline void micro_kernel_wide(index_t k, strips<Compute> s, index_t b_next, Compute* acc,
                              index_t acc_ld, bool accumulate) {
  constexpr int mr = wide_rows<Compute>;
  constexpr int lanes = tuning<Compute>::lanes;
  [[maybe_unused]] constexpr int vectors = 4;  // 2 NR, the portable loop
#if defined(__GNUC__)
  using vec = typename vector_of<Compute, vector_bytes>::type;
  vec c0[mr], c1[mr], c2[mr], c3[mr];  // row loops unrolled: see micro_kernel_to
  GPUBATCH_HOST_UNROLL(8)
  for (int i = 0; i < mr; ++i) {
    c0[i] = c1[i] = c2[i] = c3[i] = vec{};
    if (accumulate) {
      std::memcpy(&c0[i], acc + i * acc_ld, sizeof(vec));
      std::memcpy(&c1[i], acc + i * acc_ld + lanes, sizeof(vec));
      std::memcpy(&c2[i], acc + i * acc_ld + 2 * lanes, sizeof(vec));
      std::memcpy(&c3[i], acc + i * acc_ld + 3 * lanes, sizeof(vec));
    }
  }
  for (index_t run = 0; run < s.runs; ++run) {
    const Compute* a = s.a + run * s.a_run;
    const Compute* b = s.b + run * s.b_run;
    for (index_t p = 0; p < k; ++p) {
      // Named vectors, not an array: GCC stored an array's pinned elements to the stack on
      // every step.
      vec b0, b1, b2, b3;
      std::memcpy(&b0, b, sizeof(vec));
      std::memcpy(&b1, b + lanes, sizeof(vec));
      std::memcpy(&b2, b + b_next, sizeof(vec));
      std::memcpy(&b3, b + b_next + lanes, sizeof(vec));
      GPUBATCH_HOST_UNROLL(8)
      for (int i = 0; i < mr; ++i) {
        keep_in_register(b0);  // see keep_in_register
        keep_in_register(b1);
        keep_in_register(b2);
        keep_in_register(b3);
        const vec ai = splat<vec>(a[i * s.a_row]);
        c0[i] += ai * b0;
        c1[i] += ai * b1;
        c2[i] += ai * b2;
        c3[i] += ai * b3;
      }
      a += s.a_k;
      b += s.b_k;
    }
  }
  GPUBATCH_HOST_UNROLL(8)
  for (int i = 0; i < mr; ++i) {
    std::memcpy(acc + i * acc_ld, &c0[i], sizeof(vec));
    std::memcpy(acc + i * acc_ld + lanes, &c1[i], sizeof(vec));
    std::memcpy(acc + i * acc_ld + 2 * lanes, &c2[i], sizeof(vec));
    std::memcpy(acc + i * acc_ld + 3 * lanes, &c3[i], sizeof(vec));
  }
#else
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < vectors * lanes; ++j)
      if (!accumulate) acc[i * acc_ld + j] = Compute(0);
  for (index_t run = 0; run < s.runs; ++run) {
    const Compute* a = s.a + run * s.a_run;
    const Compute* b = s.b + run * s.b_run;
    for (index_t p = 0; p < k; ++p, a += s.a_k, b += s.b_k) {
      for (int i = 0; i < mr; ++i) {
        for (int j = 0; j < vectors * lanes; ++j) {
          acc[i * acc_ld + j] += a[i * s.a_row] * b[(j / (2 * lanes)) * b_next + j % (2 * lanes)];
        }
      }
    }
  }
#endif
}

/// Packs rows [i0, i0 + rows) of op(A) into MR-row strips, k-major, zero-padding the last.
/// The loop order follows the operand's contiguous dimension, so reads stream through memory.
template <class Compute, class TA>
void pack_a(matrix_ref<const TA> a, index_t k, index_t i0, index_t rows, Compute* out) {
  constexpr int mr = tuning<Compute>::mr;
  if (rows <= 0) return;
  for (index_t s = 0; s < rows; s += mr, out += k * mr) {
    const index_t valid = std::min<index_t>(mr, rows - s);
    const TA* const base = a.data + (i0 + s) * a.stride.row;
    if (a.stride.row == 1) {  // op(A) columns contiguous: copy MR-element runs
      for (index_t p = 0; p < k; ++p) {
        const TA* const column = base + p * a.stride.col;
        if (std::is_same_v<TA, Compute> && valid == mr) {
          std::memcpy(out + p * mr, column, mr * sizeof(Compute));  // a vector move
        } else {
          for (index_t r = 0; r < mr; ++r) out[p * mr + r] = r < valid ? convert<Compute>(column[r]) : Compute(0);
        }
      }
    } else {  // op(A) rows contiguous (or neither): walk each row
      for (index_t r = 0; r < mr; ++r) {
        if (r < valid) {
          const TA* const row = base + r * a.stride.row;
          for (index_t p = 0; p < k; ++p) out[p * mr + r] = convert<Compute>(row[p * a.stride.col]);
        } else {
          for (index_t p = 0; p < k; ++p) out[p * mr + r] = Compute(0);
        }
      }
    }
  }
}

#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
/// Transposes the square block held in `rows` (Lanes vectors of Lanes elements) in place: in
/// each round (H = Lanes / 2, ..., 1), every 2H x 2H sub-block swaps its two off-diagonal H x H
/// blocks, two-vector shuffles with constant masks (vpermt2ps and kin). GCC only:
/// __builtin_shuffle.
template <int Lanes, int H = Lanes / 2, class Vec>
inline void transpose_square(Vec (&rows)[Lanes]) {
  using lane_index = decltype(rows[0] < rows[0]);  // the integer vector of the same shape
  lane_index low{};
  lane_index high{};
  GPUBATCH_HOST_UNROLL(16)
  for (int j = 0; j < Lanes; ++j) {
    low[j] = (j & H) == 0 ? j : Lanes + j - H;
    high[j] = (j & H) == 0 ? j + H : Lanes + j;
  }
  GPUBATCH_HOST_UNROLL(16)
  for (int i = 0; i < Lanes; ++i) {
    if ((i & H) == 0) {
      const Vec a = rows[i];
      const Vec b = rows[i + H];
      rows[i] = __builtin_shuffle(a, b, low);
      rows[i + H] = __builtin_shuffle(a, b, high);
    }
  }
  if constexpr (H > 1) {
    transpose_square<Lanes, H / 2>(rows);
  }
}

/// The leading `steps` reduction steps (a multiple of the vector width) of a whole NR-column
/// strip of op(B) whose columns are contiguous, column c at `column0 + c * ld`: square blocks
/// transposed in registers, a vector load and store per row of a block instead of an element
/// load and store per element (a ResNet-50 3x3 x 512 layer's filters: an eighth of its time).
template <class Compute>
inline void pack_b_columns(const Compute* column0, index_t ld, index_t steps, Compute* out) {
  constexpr int nr = tuning<Compute>::nr;
  constexpr int lanes = tuning<Compute>::lanes;
  using vec = typename vector_of<Compute, vector_bytes>::type;
  for (index_t p0 = 0; p0 < steps; p0 += lanes) {
    GPUBATCH_HOST_UNROLL(2)
    for (int half = 0; half < nr / lanes; ++half) {
      vec rows[lanes];
      GPUBATCH_HOST_UNROLL(16)
      for (int c = 0; c < lanes; ++c) {
        std::memcpy(&rows[c], column0 + (half * lanes + c) * ld + p0, sizeof(vec));
      }
      transpose_square<lanes>(rows);
      GPUBATCH_HOST_UNROLL(16)
      for (int t = 0; t < lanes; ++t) {
        std::memcpy(out + (p0 + t) * nr + half * lanes, &rows[t], sizeof(vec));
      }
    }
  }
}
#endif

/// Packs columns [j0, j0 + cols) of op(B) into NR-column strips, k-major, zero-padding the last.
template <class Compute, class TB>
void pack_b(matrix_ref<const TB> b, index_t k, index_t j0, index_t cols, Compute* out) {
  constexpr int nr = tuning<Compute>::nr;
  if (cols <= 0) return;
  const index_t strips = ceil_div(cols, nr);
  if (b.stride.col == 1) {
    // op(B) rows contiguous: walk each row across every strip, so reads stream along the row
    // (rows are often a multiple of 4 KiB apart, which defeats prefetching down a column).
    const index_t full = cols / nr;
    for (index_t p = 0; p < k; ++p) {
      const TB* const row = b.data + p * b.stride.row + j0;
      for (index_t s = 0; s < full; ++s) {
        Compute* const dst = out + s * k * nr + p * nr;
        if constexpr (std::is_same_v<TB, Compute>) {
          std::memcpy(dst, row + s * nr, nr * sizeof(Compute));  // a few vector moves
        } else {
          for (index_t c = 0; c < nr; ++c) dst[c] = convert<Compute>(row[s * nr + c]);
        }
      }
      if (full < strips) {
        const index_t valid = cols - full * nr;
        Compute* const dst = out + full * k * nr + p * nr;
        for (index_t c = 0; c < nr; ++c) dst[c] = c < valid ? convert<Compute>(row[full * nr + c]) : Compute(0);
      }
    }
    return;
  }
  // op(B) columns contiguous (or neither): walk each column, 64 reduction steps at a time, so
  // that the part of the strip being written (64 x NR) stays in L1. Whole columns at once
  // wrote a line of a strip larger than L1 per element read (a ResNet-50 3x3 x 512 layer's
  // filters took 4 ms to pack).
  constexpr index_t steps = 64;
  for (index_t s = 0; s < strips; ++s, out += k * nr) {
    const index_t valid = std::min<index_t>(nr, cols - s * nr);
    const TB* const base = b.data + (j0 + s * nr) * b.stride.col;
    index_t transposed = 0;  // leading reduction steps done by pack_b_columns
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
    if constexpr (std::is_same_v<TB, Compute>) {
      if (valid == nr && b.stride.row == 1) {
        transposed = k / tuning<Compute>::lanes * tuning<Compute>::lanes;
        pack_b_columns(base, b.stride.col, transposed, out);
      }
    }
#endif
    for (index_t p0 = transposed; p0 < k; p0 += steps) {
      const index_t p1 = std::min(k, p0 + steps);
      for (index_t c = 0; c < nr; ++c) {
        if (c < valid) {
          const TB* const column = base + c * b.stride.col;
          for (index_t p = p0; p < p1; ++p) out[p * nr + c] = convert<Compute>(column[p * b.stride.row]);
        } else {
          for (index_t p = p0; p < p1; ++p) out[p * nr + c] = Compute(0);
        }
      }
    }
  }
}

/// Rows and columns of C one task covers, for a problem of shape m x n x k.
template <class Compute>
struct blocking {
  index_t mc, nc, m_blocks, n_blocks;
  blocking(index_t m, index_t n, index_t k) {
    constexpr int nr = tuning<Compute>::nr;
    mc = std::min<index_t>(tuning<Compute>::mc, m);
    const index_t fit = tuning<Compute>::b_panel_bytes / (k * static_cast<index_t>(sizeof(Compute)));
    nc = std::max<index_t>(nr, fit / nr * nr);
    nc = std::min<index_t>(nc, ceil_div(n, nr) * nr);
    m_blocks = ceil_div(m, mc);
    n_blocks = ceil_div(n, nc);
  }
};

/// Stores `count` accumulators to the consecutive outputs out[0 ...] through store_output's
/// arithmetic, the epilogue seeing (batch, row, col0 + j): with beta tested once, not per
/// element, the loops vectorise.
template <class TC, class Compute, class Epilogue>
inline void store_contiguous(TC* out, index_t count, const Compute* acc, Compute alpha,
                             Compute beta, const Epilogue& epilogue, index_t batch, index_t row,
                             index_t col0) {
  if (beta == Compute(0)) {
    for (index_t j = 0; j < count; ++j) {
      out[j] = convert<TC>(epilogue(alpha * acc[j], batch, row, col0 + j));
    }
  } else {
    for (index_t j = 0; j < count; ++j) {
      out[j] = convert<TC>(epilogue(alpha * acc[j] + beta * convert<Compute>(out[j]), batch, row,
                                    col0 + j));
    }
  }
}

/// Stores `count` accumulators as C(row, col0 ...) through store_output's arithmetic; a row of C
/// that is contiguous goes through store_contiguous.
template <class TC, class Compute, class Epilogue>
inline void store_run(const matrix_ref<TC>& c, index_t row, index_t col0, index_t count,
                      const Compute* acc, Compute alpha, Compute beta, const Epilogue& epilogue,
                      index_t batch) {
  if (c.stride.col != 1) {
    for (index_t j = 0; j < count; ++j) {
      store_output(c(row, col0 + j), acc[j], alpha, beta, epilogue, batch, row, col0 + j);
    }
    return;
  }
  store_contiguous(&c(row, col0), count, acc, alpha, beta, epilogue, batch, row, col0);
}

/// store_run for a compile-time count (a tiny problem's whole row): the loops unroll and, for a
/// contiguous row, become a few vector instructions instead of a loop with a remainder. Kept
/// apart from store_run on purpose: routing tiny rows through store_run, even with the count as
/// an integral_constant, measured n = 8 in L2 1.15x slower.
template <int Count, class TC, class Compute, class Epilogue>
inline void store_fixed(const matrix_ref<TC>& c, index_t row, const Compute* acc, Compute alpha,
                        Compute beta, const Epilogue& epilogue, index_t batch) {
  if (c.stride.col != 1) {
    store_run(c, row, 0, Count, acc, alpha, beta, epilogue, batch);
    return;
  }
  TC* const out = &c(row, 0);
  if (beta == Compute(0)) {
    for (int j = 0; j < Count; ++j) out[j] = convert<TC>(epilogue(alpha * acc[j], batch, row, index_t{j}));
  } else {
    for (int j = 0; j < Count; ++j) {
      out[j] = convert<TC>(epilogue(alpha * acc[j] + beta * convert<Compute>(out[j]), batch, row, index_t{j}));
    }
  }
}

/// Whether compute_block reads the whole NR-wide strips of B in place rather than packed (its
/// rows contiguous and of the compute type). A packed panel pays for its copy only when several
/// blocks of rows reuse it: with one block (m <= MC) B is read in place whatever k (m = 16,
/// n = k = 512: packing had taken 1.3x-1.6x the time). With several, B is read in place only
/// while a strip fits in half of L1: a strip of rows a leading dimension apart (often a
/// multiple of 1 KiB) falls into a few cache sets, and packing a panel once per problem (see
/// run) beats reading 32 KiB strips in place (n = 256: 0.92x-0.97x the time).
template <class Compute, class TA, class TB, class TC>
bool reads_b_in_place(const gemm_instance<TA, TB, TC>& p) {
  const index_t strip_bytes = p.k * tuning<Compute>::nr * static_cast<index_t>(sizeof(Compute));
  return std::is_same_v<TB, Compute> && p.b.stride.col == 1 &&
         (p.m <= tuning<Compute>::mc || strip_bytes <= 16 * 1024);
}

/// Packs the strips of B columns [j0, j0 + cols) that compute_block does not read in place
/// (all k rows) into the calling thread's scratch slot 1, and returns them.
template <class Compute, class TA, class TB, class TC>
const Compute* pack_b_panel(const gemm_instance<TA, TB, TC>& p, index_t j0, index_t cols) {
  constexpr int nr = tuning<Compute>::nr;
  const index_t full_b = reads_b_in_place<Compute>(p) ? cols / nr : 0;
  Compute* const packed_b =
      scratch<Compute>(static_cast<std::size_t>((ceil_div(cols, nr) - full_b) * nr * p.k), 1);
  pack_b<Compute>(p.b, p.k, j0 + full_b * nr, cols - full_b * nr, packed_b);
  return packed_b;
}

/// Lines of memory to fetch into L2 a few at a time while a block computes: the next problem's
/// A and B, to read, and C, to write (fetched for writing, its lines are not read again when
/// stored), on a batch that streams from memory.
struct prefetch_stream {
  const char* next[3] = {nullptr, nullptr, nullptr};  ///< the next line of A, B and C to fetch
  const char* end[3] = {nullptr, nullptr, nullptr};
  /// Lines left to fetch.
  index_t lines() const {
    return ((end[0] - next[0]) + (end[1] - next[1]) + (end[2] - next[2])) / 64;
  }
  /// Takes up to `count` of the next lines, all of one operand (A's before B's before C's), to
  /// fetch as a fetch_run.
  fetch_run take(index_t count) {
    for (int r = 0; r < 3; ++r) {
      if (next[r] < end[r]) {
        fetch_run run{next[r], std::min<index_t>(count, (end[r] - next[r] + 63) / 64), r == 2};
        next[r] += run.lines * 64;
        return run;
      }
    }
    return {};
  }
  /// Fetches the next `count` lines, A's before B's before C's, if any are left.
  void step(index_t count) {
    for (int r = 0; r < 2; ++r) {
      for (; count > 0 && next[r] < end[r]; --count, next[r] += 64) {
        __builtin_prefetch(next[r], 0, 2);
      }
    }
    for (; count > 0 && next[2] < end[2]; --count, next[2] += 64) {
      __builtin_prefetch(next[2], 1, 2);
    }
  }
};

/// The bytes an operand of a problem spans in memory, from its first element.
template <class T>
index_t span_bytes(const matrix_ref<T>& x, index_t rows, index_t cols) {
  return ((rows - 1) * x.stride.row + (cols - 1) * x.stride.col + 1) *
         static_cast<index_t>(sizeof(T));
}

/// A prefetch_stream over problem p's A, B and C.
template <class TA, class TB, class TC>
prefetch_stream operands_of(const gemm_instance<TA, TB, TC>& p) {
  prefetch_stream s;
  s.next[0] = reinterpret_cast<const char*>(p.a.data);
  s.end[0] = s.next[0] + span_bytes(p.a, p.m, p.k);
  s.next[1] = reinterpret_cast<const char*>(p.b.data);
  s.end[1] = s.next[1] + span_bytes(p.b, p.k, p.n);
  s.next[2] = reinterpret_cast<const char*>(p.c.data);
  s.end[2] = s.next[2] + span_bytes(p.c, p.m, p.n);
  return s;
}

/// Computes the C block [i0, i0 + rows) x [j0, j0 + cols) of problem `batch`. `b_panel`, when
/// not null, is what pack_b_panel(p, j0, cols) returned, shared by the blocks of one panel.
/// `ahead`, when not null, is fetched into L2 in even steps over the block's micro-tiles.
template <class Compute, class TA, class TB, class TC, class Epilogue>
void compute_block(const gemm_instance<TA, TB, TC>& p, index_t i0, index_t rows, index_t j0,
                   index_t cols, Compute alpha, Compute beta, const Epilogue& epilogue,
                   index_t batch, const Compute* b_panel = nullptr,
                   prefetch_stream* ahead = nullptr) {
  constexpr int mr = tuning<Compute>::mr;
  constexpr int nr = tuning<Compute>::nr;
  const index_t a_strips = ceil_div(rows, mr);
  const index_t b_strips = ceil_div(cols, nr);
  // Operands already of the compute type whose op() rows are contiguous are read in place,
  // whole strips at a time; only the rest (and a ragged last strip) is packed. Reading in place
  // saves a copy of every operand, which is what small and medium problems are bound by.
  // A strips (MR rows read side by side) are read in place only when rows are not 4 KiB apart.
  const bool direct_a = std::is_same_v<TA, Compute> && p.a.stride.col == 1 &&
                        (p.a.stride.row * static_cast<index_t>(sizeof(Compute))) % 4096 != 0;
  // Long reductions run in passes of kc steps over every micro-tile of the block, the sums
  // kept in a block-sized tile, so each B strip is reused from L1 by all the A strips.
  const index_t kc = std::min<index_t>(tuning<Compute>::kc, p.k);
  const bool passes = kc < p.k;
  const index_t tile_ld = b_strips * nr;
  // Whole micro-tiles go from registers straight to C, on the last pass, when nothing but
  // alpha stands between the sums and C: the round trip through a scratch tile and store_run
  // had cost 1.07x-1.08x the time at n = 128.
  constexpr bool plain_output =
      std::is_same_v<TC, Compute> && std::is_same_v<Epilogue, epilogue::identity>;
  const bool straight_to_c = plain_output && beta == Compute(0) && p.c.stride.col == 1;
  // A ragged last strip of rows read in place ends at the block's last row instead, overlapping
  // the strip before it, when C = alpha A B is all a store does (rewriting a row stores the same
  // values: the same sums in the same order) and one pass covers the reduction. It then runs
  // like the others, instead of being packed and stored through a scratch tile (n = 64 f32:
  // 64 = 10 x 6 + 4 rows).
  const bool shift_last = direct_a && straight_to_c && !passes && rows > mr && rows % mr != 0;
  // Leading strips read in place.
  const index_t full_a = shift_last ? a_strips : direct_a ? rows / mr : 0;
  const index_t full_b = reads_b_in_place<Compute>(p) ? cols / nr : 0;  // likewise
  Compute* const packed_a =
      scratch<Compute>(static_cast<std::size_t>((a_strips - full_a) * mr * p.k), 0);
  pack_a<Compute>(p.a, p.k, i0 + full_a * mr, rows - full_a * mr, packed_a);
  const Compute* const packed_b = b_panel != nullptr ? b_panel : pack_b_panel<Compute>(p, j0, cols);
  alignas(64) Compute acc[mr * nr];
  Compute* const tile =
      passes ? scratch<Compute>(static_cast<std::size_t>(a_strips * mr * tile_ld), 2) : acc;
  const index_t tiles = ceil_div(p.k, kc) * a_strips * b_strips;
  // Shared over two tiles fewer than there are: a tile that ends A's or B's lines takes fewer.
  const index_t lines_per_tile =
      ahead != nullptr ? ceil_div(ahead->lines(), std::max<index_t>(1, tiles - 2)) : 0;
  for (index_t k0 = 0; k0 < p.k; k0 += kc) {
    const index_t kcur = std::min(kc, p.k - k0);
    const bool last = k0 + kcur == p.k;
    for (index_t sj = 0; sj < b_strips; ++sj) {
      const index_t col0 = j0 + sj * nr;
      const index_t valid_cols = std::min<index_t>(nr, j0 + cols - col0);
      strips<Compute> s{};
      if (sj < full_b) {
        s.b = reinterpret_cast<const Compute*>(&p.b(k0, col0));
        s.b_k = p.b.stride.row;
      } else {
        s.b = packed_b + (sj - full_b) * nr * p.k + k0 * nr;
        s.b_k = nr;
      }
      for (index_t si = 0; si < a_strips; ++si) {
        const index_t row0 = shift_last && si + 1 == a_strips ? i0 + rows - mr : i0 + si * mr;
        if (si < full_a) {
          s.a = reinterpret_cast<const Compute*>(&p.a(row0, k0));
          s.a_row = p.a.stride.row;
          s.a_k = 1;
        } else {
          s.a = packed_a + (si - full_a) * mr * p.k + k0 * mr;
          s.a_row = 1;
          s.a_k = mr;
        }
        Compute* const sums = passes ? tile + si * mr * tile_ld + sj * nr : acc;
        if constexpr (plain_output) {
          if (last && straight_to_c && row0 + mr <= i0 + rows && valid_cols == nr) {
            // The lines go one per reduction step, among the multiply-adds: fetched all at
            // once before the tile, they had stalled it on the outstanding misses.
            const fetch_run lines =
                ahead != nullptr ? ahead->take(std::min(lines_per_tile, kcur)) : fetch_run{};
            micro_kernel_to(kcur, s, k0 > 0 ? sums : nullptr, tile_ld, &p.c(row0, col0),
                            p.c.stride.row, alpha, lines);
            continue;
          }
        }
        if (ahead != nullptr) ahead->step(lines_per_tile);
        const index_t sums_ld = passes ? tile_ld : nr;
        micro_kernel(kcur, s, sums, sums_ld, k0 > 0);
        if (last) {
          const index_t valid_rows = std::min<index_t>(mr, i0 + rows - row0);
          for (index_t r = 0; r < valid_rows; ++r) {
            store_run(p.c, row0 + r, col0, valid_cols, sums + r * sums_ld, alpha, beta, epilogue,
                      batch);
          }
        }
      }
    }
  }
}

/// Tiny problems (m, n <= 32, k <= 64): each row of C accumulated in vector registers as
/// narrow as NB allows (4 columns take 4-lane vectors, not 16), several rows at a time; no
/// packing of A, no blocking. Rows of op(B) already of the compute type and exactly one block
/// wide are read in place, others converted once into a k x NB block. `Square` > 0 promises
/// m = n = k = Square, so every loop has a compile-time trip count and unrolls completely.
template <int NB, int Square, class Compute, class TA, class TB, class TC, class Epilogue>
void tiny_problem(const gemm_instance<TA, TB, TC>& p, Compute alpha, Compute beta,
                  const Epilogue& epilogue, index_t batch) {
  const index_t m = Square > 0 ? Square : p.m;
  const index_t n = Square > 0 ? Square : p.n;
  const index_t k = Square > 0 ? Square : p.k;
  constexpr int nb_bytes = NB * static_cast<int>(sizeof(Compute));
  constexpr int bytes = nb_bytes < 16 ? 16 : (nb_bytes < vector_bytes ? nb_bytes : vector_bytes);
  constexpr int lanes = bytes / static_cast<int>(sizeof(Compute));
  constexpr int vectors = (NB + lanes - 1) / lanes;
  constexpr int width = vectors * lanes;  // NB rounded up to whole vectors
  // Column passes of up to a quarter of the register file in vectors (all of a row with
  // AVX-512), and as many rows a pass as leave a pass's sums, B's vectors and A's broadcast in
  // registers: 8 rows with 32 registers (4 from 3 vectors up), at most 8 with 16 (AVX2, SSE),
  // and never more than a square problem has. Independent accumulator chains hide the
  // multiply-add latency; 8 rows of 2 vectors, or 4 of 4 (f32 at 16 and 32 with AVX2, f64 at 8
  // and 16) had needed 19 and 21 registers of 16 and spilled: 1.5x and 4.4x LIBXSMM's time.
  constexpr int pass_vectors = vectors < vector_registers / 4 ? vectors : vector_registers / 4;
  constexpr int passes = (vectors + pass_vectors - 1) / pass_vectors;
  static_assert(vectors % pass_vectors == 0);
  constexpr int fit_rows =
      vector_registers == 32 ? (vectors <= 2 ? 8 : 4)
                             : std::min(8, (vector_registers - 1 - pass_vectors) / pass_vectors);
  // A square problem (4, 8 or 16 rows) in whole passes: 4 rows where fit_rows (6) divides none.
  constexpr int rows = Square == 0 ? fit_rows
                       : Square <= fit_rows ? Square
                       : Square % fit_rows == 0 ? fit_rows
                                                : std::min(4, fit_rows);
  // Every pass is whole when the row count divides a square problem: no clamping of rows.
  constexpr bool whole_passes = Square > 0 && Square % rows == 0;
  const Compute* b = nullptr;
  index_t b_ld = width;
  alignas(64) Compute b_block[64 * width];
  if (std::is_same_v<TB, Compute> && p.b.stride.col == 1 && n == width) {
    b = reinterpret_cast<const Compute*>(p.b.data);
    b_ld = p.b.stride.row;
  } else {
    for (index_t q = 0; q < k; ++q) {
      for (index_t j = 0; j < width; ++j) {
        b_block[q * width + j] = j < n ? convert<Compute>(p.b(q, j)) : Compute(0);
      }
    }
    b = b_block;
  }
  alignas(64) Compute out[rows * width];
  for (index_t i0 = 0; i0 < m; i0 += rows) {
    const index_t valid = whole_passes ? rows : std::min<index_t>(rows, m - i0);
#if defined(__GNUC__)
    using vec = typename vector_of<Compute, bytes>::type;
    // Row starts resolved once per pass; rows past the end repeat the last row, and their
    // results are discarded.
    const TA* a_row[rows];
    for (int r = 0; r < rows; ++r) {
      a_row[r] = &p.a(whole_passes ? i0 + r : i0 + std::min<index_t>(r, valid - 1), 0);
    }
    const index_t a_step = p.a.stride.col;
    for (int pass = 0; pass < passes; ++pass) {
      const int v0 = pass * pass_vectors;
      vec acc[rows][pass_vectors];
      for (int r = 0; r < rows; ++r)
        for (int v = 0; v < pass_vectors; ++v) acc[r][v] = vec{};
      for (index_t q = 0; q < k; ++q) {
        // One load per vector into its own variable: copying the row as an array of vectors
        // goes through the stack.
        vec bq[pass_vectors];
        GPUBATCH_HOST_UNROLL(8)
        for (int v = 0; v < pass_vectors; ++v) {
          std::memcpy(&bq[v], b + q * b_ld + (v0 + v) * lanes, sizeof(vec));
        }
        GPUBATCH_HOST_UNROLL(8)
        for (int r = 0; r < rows; ++r) {
          const vec a = splat<vec>(convert<Compute>(a_row[r][q * a_step]));
          GPUBATCH_HOST_UNROLL(8)
          for (int v = 0; v < pass_vectors; ++v) acc[r][v] += a * bq[v];
        }
      }
      for (int r = 0; r < rows; ++r) {
        std::memcpy(out + r * width + v0 * lanes, acc[r], sizeof(acc[r]));
      }
    }
#else
    for (int e = 0; e < rows * width; ++e) out[e] = Compute(0);
    for (index_t r = 0; r < valid; ++r)
      for (index_t q = 0; q < k; ++q) {
        const Compute a = convert<Compute>(p.a(i0 + r, q));
        for (int j = 0; j < width; ++j) out[r * width + j] += a * b[q * b_ld + j];
      }
#endif
    for (index_t r = 0; r < valid; ++r) {
      if constexpr (Square > 0) {
        store_fixed<Square>(p.c, i0 + r, out + r * width, alpha, beta, epilogue, batch);
      } else {
        store_run(p.c, i0 + r, 0, n, out + r * width, alpha, beta, epilogue, batch);
      }
    }
  }
}

/// Element types of a batch's operands.
template <class Batch>
struct batch_types {
  using instance = decltype(std::declval<const Batch&>().problem(0));
  using a = std::remove_const_t<std::remove_pointer_t<decltype(instance::a.data)>>;
  using b = std::remove_const_t<std::remove_pointer_t<decltype(instance::b.data)>>;
  using c = std::remove_pointer_t<decltype(instance::c.data)>;
};

/// The bytes of a uniform batch's A, B and C.
template <class Batch>
std::size_t batch_bytes(const Batch& batch) {
  using types = batch_types<Batch>;
  return static_cast<std::size_t>(batch.count) *
         static_cast<std::size_t>(batch.m * batch.k * sizeof(typename types::a) +
                                  batch.k * batch.n * sizeof(typename types::b) +
                                  batch.m * batch.n * sizeof(typename types::c));
}

/// Whether square_run writes a uniform batch's C with non-temporal stores (where a problem's C is
/// aligned to the vector): beta = 0, so C is not read, and the batch's operands are more than the
/// last-level cache holds, so C would be evicted before anyone read it back from there.
template <class Batch, class Compute>
bool streams_c(const Batch& batch, Compute beta) {
  return beta == Compute(0) && host_cache::streams(batch_bytes(batch));
}

/// Whether A and B are already of the compute type (the run kernels read them as they lie).
template <class Batch, class Compute>
inline constexpr bool operands_of_type =
    std::is_same_v<typename batch_types<Batch>::a, Compute> &&
    std::is_same_v<typename batch_types<Batch>::b, Compute>;

// The 4 x 4 permutation kernel needs __builtin_shufflevector (GCC 12, Clang). nvcc's front end
// rejects it in a pack expansion, so translation units nvcc compiles use the row kernel there.
#if defined(__has_builtin) && !defined(__CUDACC__)
#if __has_builtin(__builtin_shufflevector)
#define GPUBATCH_HOST_GEMM_FOUR_BY_FOUR 1
#endif
#endif

#if defined(GPUBATCH_HOST_GEMM_FOUR_BY_FOUR)
/// Source lane of lane `lane` of a 4 x 4 operand for reduction step `q`: the A factor
/// op(A)(i, q) or the B factor op(B)(q, j) of C(i, j), with i = lane / 4 and j = lane % 4, when
/// the operand's 16 elements are loaded as they lie in memory (rows contiguous, or columns).
constexpr int four_lane(bool is_a, bool rows_contiguous, int q, int lane) {
  const int i = lane / 4, j = lane % 4;
  if (is_a) return rows_contiguous ? i * 4 + q : q * 4 + i;
  return rows_contiguous ? q * 4 + j : j * 4 + q;
}

/// Lanes [Part * N, Part * N + N) of the factor of step Q, N = sizeof...(L): a native-width
/// vector permuted out of the 16 loaded elements.
template <bool IsA, bool Rows, int Q, int Part, class Out, class Vec, int... L>
inline Out four_factor(const Vec& v, std::integer_sequence<int, L...>) {
  constexpr int n = static_cast<int>(sizeof...(L));
  return __builtin_shufflevector(v, v, four_lane(IsA, Rows, Q, Part * n + L)...);
}

/// A 4 x 4 x 4 problem whose operands are packed 4 x 4 blocks of the compute type: C is one
/// 16-lane vector, or a few native-width parts of it (one AVX-512 register of f32, two of
/// f64), and each reduction step one multiply-add per part of two lane permutations of the
/// loaded A and B: a third of the instructions of the row loop, and no broadcast loads.
/// Problems whose rows are all contiguous go to square_run<4> instead, which takes less time
/// (see has_square_run); this kernel keeps the column-major operands.
template <bool ARows, bool BRows, class Compute, class TC, class Epilogue, int... Part>
void four_by_four(const Compute* a_data, const Compute* b_data, const matrix_ref<TC>& c,
                  Compute alpha, Compute beta, const Epilogue& epilogue, index_t batch,
                  std::integer_sequence<int, Part...>) {
  constexpr int part_lanes = 16 / static_cast<int>(sizeof...(Part));
  using whole = typename vector_of<Compute, 16 * static_cast<int>(sizeof(Compute))>::type;
  using part = typename vector_of<Compute, part_lanes * static_cast<int>(sizeof(Compute))>::type;
  constexpr auto lanes = std::make_integer_sequence<int, part_lanes>{};
  whole a;
  whole b;
  std::memcpy(&a, a_data, sizeof(whole));
  std::memcpy(&b, b_data, sizeof(whole));
  alignas(64) Compute out[16];
  const auto multiply_part = [&](auto part_index) {
    constexpr int P = decltype(part_index)::value;
    part acc = four_factor<true, ARows, 0, P, part>(a, lanes) *
               four_factor<false, BRows, 0, P, part>(b, lanes);
    acc += four_factor<true, ARows, 1, P, part>(a, lanes) *
           four_factor<false, BRows, 1, P, part>(b, lanes);
    acc += four_factor<true, ARows, 2, P, part>(a, lanes) *
           four_factor<false, BRows, 2, P, part>(b, lanes);
    acc += four_factor<true, ARows, 3, P, part>(a, lanes) *
           four_factor<false, BRows, 3, P, part>(b, lanes);
    std::memcpy(out + P * part_lanes, &acc, sizeof(acc));
  };
  (multiply_part(std::integral_constant<int, Part>{}), ...);
  for (index_t r = 0; r < 4; ++r) store_fixed<4>(c, r, out + 4 * r, alpha, beta, epilogue, batch);
}

/// Runs problems [first, last) of a uniform batch of 4 x 4 x 4 problems through four_by_four
/// when A and B are packed blocks of the compute type (either orientation; the batch's strides
/// are the same for every problem); returns false, having done nothing, otherwise.
template <class Batch, class Compute, class Epilogue>
bool try_four_by_four(const Batch& batch, index_t first, index_t last, Compute alpha,
                      Compute beta, const Epilogue& epilogue) {
  if constexpr (operands_of_type<Batch, Compute>) {
    const auto p0 = batch.problem(first);
    const auto packed = [](strides2 s) {
      return (s.row == 4 && s.col == 1) || (s.row == 1 && s.col == 4);
    };
    if (!packed(p0.a.stride) || !packed(p0.b.stride)) return false;
    // Native-width parts: 16 lanes of f32 in one AVX-512 register, f64 in two, and so on.
    constexpr int native = vector_bytes / static_cast<int>(sizeof(Compute));
    constexpr auto parts = std::make_integer_sequence<int, native >= 16 ? 1 : 16 / native>{};
    const auto each = [&](auto a_rows, auto b_rows) {
      for (index_t i = first; i < last; ++i) {
        const auto p = batch.problem(i);
        four_by_four<decltype(a_rows)::value, decltype(b_rows)::value>(
            p.a.data, p.b.data, p.c, alpha, beta, epilogue, i, parts);
      }
    };
    using yes = std::true_type;
    using no = std::false_type;
    const bool a_rows = p0.a.stride.col == 1;
    const bool b_rows = p0.b.stride.col == 1;
    if (a_rows && b_rows) {
      each(yes{}, yes{});
    } else if (a_rows) {
      each(yes{}, no{});
    } else if (b_rows) {
      each(no{}, yes{});
    } else {
      each(no{}, no{});
    }
    return true;
  } else {
    (void)batch, (void)first, (void)last, (void)alpha, (void)beta, (void)epilogue;
    return false;
  }
}
#endif

#if defined(__GNUC__)
/// Whether the plain GEMM's stores serve: C of the compute type and no epilogue, so rows of C
/// are stored as whole vectors; any other epilogue or output type sees every element.
template <class Batch, class Compute, class Epilogue>
inline constexpr bool plain_store = std::is_same_v<typename batch_types<Batch>::c, Compute> &&
                                    std::is_same_v<Epilogue, epilogue::identity>;

/// Calls f(std::true_type{}) if `choice`, else f(std::false_type{}): a choice made once per run
/// becomes a template argument.
template <class F>
void with_choice(bool choice, F&& f) {
  if (choice) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

/// Rows of C one pass of square_run keeps in registers: the largest power of two up to N whose
/// accumulators (rows x vectors per row) take at most half the vector register file.
constexpr int square_rows_per_pass(int n, int vectors_per_row) {
  const int budget = vector_registers / 2;
  int rows = 1;
  while (rows * 2 <= n && rows * 2 * vectors_per_row <= budget) rows *= 2;
  return rows;
}

/// A run of square N x N x N problems, each row of op(A), op(B) and C contiguous and the
/// operands of the compute type. Rows of C stay in registers through a completely unrolled
/// reduction (independent multiply-add chains, A broadcast straight from memory) in as few
/// passes as the register file allows (one for f32 up to 16 with AVX-512), and the stores take C
/// from those registers. Everything that is the same for the whole run (strides, beta = 0, the
/// store path) is decided once, so a problem costs little more than its multiply-adds: the
/// row kernel's per-problem work (pass setup, a row buffer, per-row checks) was half the time
/// of an 8 x 8 x 8 f32 problem.
/// Nothing is prefetched in software; the hardware prefetchers follow a batch's operands.
/// Prefetching the problem after next (into L1, or L2 for problems over 16 KiB) measured 1.2x
/// to 2x slower than none at n = 8 and 16 on batches far beyond L2 (a 2-core slice of an AMD
/// EPYC with AVX-512), and no faster at 32 and 64 or on L2-resident batches; prefetching into L2
/// only, or four to eight problems ahead, did not close the gap. Spreading the next problem's
/// prefetches over the reduction steps, on batches of four times the L3, was slower again (1.2x
/// to 1.4x at n = 32, up to 1.6x at 64).
/// `stream_c` (beta = 0, a batch larger than the last-level cache): C is written with
/// non-temporal stores, which spare reading its lines from memory first and leave the cache to
/// the operands; where a problem's C is not aligned to the vector, plainly. On 160 MiB batches
/// (five times the L3 of a 2-core EPYC slice, n = 16) they took 0.55x to 0.7x the time of plain
/// stores; on batches that fit in the caches they would push C out to memory, so those keep
/// plain stores.
/// `Packed`: every leading dimension is N, known at compile time, so all of a problem's
/// addresses are one base register plus a constant (16 row pointers of A took most of the
/// general registers and cost 1.4x at n = 16).
/// `Scale`: false when alpha = 1 and the store is plain, which skips a multiply per vector of C
/// (1.05x at n = 16: 16 of the ~290 instructions of a problem).
/// Never inlined: inlined into its caller, next to the other sizes' kernels, GCC ran short of
/// vector registers and kept f64's B vectors at n = 32 on the stack (1.3x LIBXSMM's time).
template <int N, bool ReadC, bool Packed, bool Scale, class Batch, class Compute, class Epilogue>
__attribute__((noinline)) void square_run(const Batch& batch, index_t first, index_t last,
                                          Compute alpha, Compute beta, const Epilogue& epilogue,
                                          bool stream_c) {
  constexpr int row_bytes = N * static_cast<int>(sizeof(Compute));
  constexpr int vec_bytes = row_bytes < vector_bytes ? row_bytes : vector_bytes;
  constexpr int lanes = vec_bytes / static_cast<int>(sizeof(Compute));
  constexpr int V = row_bytes / vec_bytes;  // vectors per row of C
  // Vectors of a row per column pass: all with AVX-512 (up to 8); 4 with 16 registers, where
  // B's 8 vectors and a row of sums had spilled.
  constexpr int VP = V < vector_registers / 4 ? V : vector_registers / 4;
  constexpr int R = square_rows_per_pass(N, VP);
  using vec = typename vector_of<Compute, vec_bytes>::type;
  using TC = typename batch_types<Batch>::c;
  constexpr bool vector_store = plain_store<Batch, Compute, Epilogue>;
  const vec alpha_v = splat<vec>(alpha);
  [[maybe_unused]] const vec beta_v = splat<vec>(beta);
  // A copy of the batch description, which the compiler keeps in registers: read through the
  // reference, it was reloaded after every store to C that might alias it (1.2x at n = 16).
  const Batch local = batch;
  for (index_t i = first; i < last; ++i) {
    const auto p = local.problem(i);
    const index_t a_ld = Packed ? N : p.a.stride.row;
    const index_t b_ld = Packed ? N : p.b.stride.row;
    const index_t c_ld = Packed ? N : p.c.stride.row;
    [[maybe_unused]] const bool stream_this =
        stream_c && reinterpret_cast<std::uintptr_t>(p.c.data) % vec_bytes == 0 &&
        (c_ld * static_cast<index_t>(sizeof(TC))) % vec_bytes == 0;
    for (int i0 = 0; i0 < N; i0 += R) {
      const Compute* const a = p.a.data + i0 * a_ld;
      // The same B for every pass, so GCC would hoist all of its loads out of the pass loop
      // and, short of registers, keep them on the stack: an opaque pointer per pass stops it.
      const Compute* const b = opaque(p.b.data);
      GPUBATCH_HOST_UNROLL(4)
      for (int v0 = 0; v0 < V; v0 += VP) {
        vec acc[R][VP];
        GPUBATCH_HOST_UNROLL(64)
        for (int q = 0; q < N; ++q) {
          vec bq[VP];
          GPUBATCH_HOST_UNROLL(8)
          for (int v = 0; v < VP; ++v) {
            std::memcpy(&bq[v], b + q * b_ld + (v0 + v) * lanes, sizeof(vec));
            keep_in_register(bq[v]);  // else each multiply-add reloads it from memory
          }
          GPUBATCH_HOST_UNROLL(16)
          for (int r = 0; r < R; ++r) {
            const vec ar = splat<vec>(a[r * a_ld + q]);
            GPUBATCH_HOST_UNROLL(8)
            for (int v = 0; v < VP; ++v) {
              if (q == 0) {
                acc[r][v] = ar * bq[v];
              } else {
                acc[r][v] += ar * bq[v];
              }
            }
          }
        }
        if constexpr (vector_store) {
          const auto store = [&](auto streamed) {
            GPUBATCH_HOST_UNROLL(16)
            for (int r = 0; r < R; ++r) {
              TC* const out = p.c.data + (i0 + r) * c_ld + v0 * lanes;
              GPUBATCH_HOST_UNROLL(8)
              for (int v = 0; v < VP; ++v) {
                vec x = Scale ? alpha_v * acc[r][v] : acc[r][v];
                if constexpr (ReadC) {
                  vec old;
                  std::memcpy(&old, out + v * lanes, sizeof(vec));
                  x += beta_v * old;
                }
                if constexpr (decltype(streamed)::value) {
                  host_cache::stream_store(out + v * lanes, x);
                } else {
                  std::memcpy(out + v * lanes, &x, sizeof(vec));
                }
              }
            }
          };
          if constexpr (!ReadC && host_cache::can_stream_store<vec_bytes>) {
            if (stream_this) {
              store(std::true_type{});
            } else {
              store(std::false_type{});
            }
          } else {
            store(std::false_type{});
          }
        } else {
          // The epilogue sees every element, a row at a time through a loop kept rolled:
          // unrolled over the rows, each kernel held R x N inlined copies of the epilogue
          // (60 KiB of code for f32 at n = 16 with AVX-512, and minutes of compile time for a
          // few epilogues).
          constexpr int columns = VP * lanes;
          alignas(64) Compute rows[R][columns];
          std::memcpy(rows, acc, sizeof(acc));
          GPUBATCH_HOST_UNROLL(1)
          for (int r = 0; r < R; ++r) {
            const index_t row = i0 + r;
            TC* const out = p.c.data + row * c_ld + v0 * lanes;
            for (int j = 0; j < columns; ++j) {
              Compute x = alpha * rows[r][j];
              if constexpr (ReadC) x += beta * convert<Compute>(out[j]);
              out[j] = convert<TC>(epilogue(x, i, row, index_t{v0 * lanes + j}));
            }
          }
        }
      }
    }
  }
  if (stream_c) host_cache::store_fence();
}

/// Whether square_run has an N x N x N kernel for the compute type. Measured faster than the
/// other paths with AVX-512 (32 registers) at 4, 8, 16, 32 and 64 (64: 1.1x the blocked path,
/// whose micro-tiles go through a buffer), and where all of C is one register per row; with
/// AVX2 (16 registers) up to 32 (f32 at 16 and 32: 0.54x and 0.23x tiny_problem's time on
/// L2-resident batches, where that had spilled its accumulators; f64 at 8, 16 and 32: 0.5x,
/// 0.24x and 0.3x), not at 64 (f32 and f64: 1.15x to 1.25x the blocked path's time, paired
/// against LIBXSMM). With 16-byte vectors (several per row) the row kernel's wider passes win
/// at 16 and 32. At 4 it beats four_by_four's permutations: 0.6x its time for f64 (a row of C is
/// one 4-lane vector and each step one multiply-add with A broadcast from memory, where the
/// permutations of f64's two registers took two-source shuffles) and 0.8x for f32, on
/// L2-resident batches with AVX-512, and 0.6x (f32) and 0.9x (f64) with AVX2.
template <class Compute, int N>
constexpr bool has_square_run() {
  const int vectors = std::max(1, N * static_cast<int>(sizeof(Compute)) / vector_bytes);
  return vector_bytes == 64 || (vector_bytes == 32 && N <= 32) ||
         (vectors == 1 && square_rows_per_pass(N, 1) == N);
}

/// Whether try_square_run takes a uniform batch (count > 0): square N x N x N with a square_run
/// kernel, operands of the compute type, every row of op(A), op(B) and C contiguous.
template <class Compute, class Batch>
bool fits_square_run(const Batch& batch) {
  if constexpr (operands_of_type<Batch, Compute>) {
    if (batch.m != batch.n || batch.n != batch.k) return false;
    const bool kernel = (batch.n == 4 && has_square_run<Compute, 4>()) ||
                        (batch.n == 8 && has_square_run<Compute, 8>()) ||
                        (batch.n == 16 && has_square_run<Compute, 16>()) ||
                        (batch.n == 32 && has_square_run<Compute, 32>()) ||
                        (batch.n == 64 && has_square_run<Compute, 64>());
    const auto p0 = batch.problem(0);
    return kernel && p0.a.stride.col == 1 && p0.b.stride.col == 1 && p0.c.stride.col == 1;
  } else {
    (void)batch;
    return false;
  }
}

/// Runs problems [first, last) of a uniform square batch through square_run when
/// fits_square_run says it may; returns false, having done nothing, otherwise.
template <class Batch, class Compute, class Epilogue>
bool try_square_run(const Batch& batch, index_t first, index_t last, Compute alpha,
                    Compute beta, const Epilogue& epilogue, bool stream_c) {
  if constexpr (operands_of_type<Batch, Compute>) {
    if (!fits_square_run<Compute>(batch)) return false;
    const auto p0 = batch.problem(first);
    const auto run = [&](auto n) {
      constexpr int N = decltype(n)::value;
      if constexpr (has_square_run<Compute, N>()) {
        const bool packed = p0.a.stride.row == N && p0.b.stride.row == N && p0.c.stride.row == N;
        const auto launch = [&](auto read_c, auto pack, auto scale) {
          square_run<N, decltype(read_c)::value, decltype(pack)::value, decltype(scale)::value>(
              batch, first, last, alpha, beta, epilogue, stream_c);
        };
        with_choice(beta != Compute(0), [&](auto read_c) {
          with_choice(packed, [&](auto pack) {
            if constexpr (plain_store<Batch, Compute, Epilogue>) {
              with_choice(alpha != Compute(1),
                          [&](auto scale) { launch(read_c, pack, scale); });
            } else {
              launch(read_c, pack, std::true_type{});
            }
          });
        });
      }
    };
    switch (batch.n) {
      case 4: run(std::integral_constant<int, 4>{}); break;
      case 8: run(std::integral_constant<int, 8>{}); break;
      case 16: run(std::integral_constant<int, 16>{}); break;
      case 32: run(std::integral_constant<int, 32>{}); break;
      default: run(std::integral_constant<int, 64>{}); break;  // the one size left
    }
    return true;
  } else {
    (void)batch, (void)first, (void)last, (void)alpha, (void)beta, (void)epilogue, (void)stream_c;
    return false;
  }
}
#endif

template <class Compute, class TA, class TB, class TC, class Epilogue>
void tiny(const gemm_instance<TA, TB, TC>& p, Compute alpha, Compute beta,
          const Epilogue& epilogue, index_t batch) {
  const bool square = p.m == p.n && p.n == p.k;
  if (p.n <= 4) {
    if (square && p.n == 4) {
      tiny_problem<4, 4>(p, alpha, beta, epilogue, batch);
    } else {
      tiny_problem<4, 0>(p, alpha, beta, epilogue, batch);
    }
  } else if (p.n <= 8) {
    if (square && p.n == 8) {
      tiny_problem<8, 8>(p, alpha, beta, epilogue, batch);
    } else {
      tiny_problem<8, 0>(p, alpha, beta, epilogue, batch);
    }
  } else if (p.n <= 16) {
    if (square && p.n == 16) {
      tiny_problem<16, 16>(p, alpha, beta, epilogue, batch);
    } else {
      tiny_problem<16, 0>(p, alpha, beta, epilogue, batch);
    }
  } else {
    tiny_problem<32, 0>(p, alpha, beta, epilogue, batch);
  }
}

/// Problems [first, last) of a uniform batch that in_runs admits, on the calling thread. The
/// shape and strides are the same for every problem, so the kernel is chosen once. `stream_c`:
/// streams_c said so for the batch.
template <class Batch, class Compute, class Epilogue>
void tiny_range(const Batch& batch, index_t first, index_t last, Compute alpha, Compute beta,
                const Epilogue& epilogue, [[maybe_unused]] bool stream_c) {
#if defined(__GNUC__)
  if (try_square_run(batch, first, last, alpha, beta, epilogue, stream_c)) return;
#endif
#if defined(GPUBATCH_HOST_GEMM_FOUR_BY_FOUR)
  if (batch.m == 4 && batch.n == 4 && batch.k == 4 &&
      try_four_by_four(batch, first, last, alpha, beta, epilogue)) {
    return;
  }
#endif
  for (index_t i = first; i < last; ++i) tiny(batch.problem(i), alpha, beta, epilogue, i);
}

/// Whether a uniform batch (count > 0) goes to tiny_range in runs of whole problems: tiny
/// problems, and square ones that square_run takes (64 x 64 x 64 ones are one task each on the
/// blocked path anyway, so nothing is lost in parallelism).
template <class Compute, class Batch>
bool in_runs(const Batch& batch) {
  if (classify_gemm(batch.m, batch.n, batch.k) == size_class::tiny) return true;
#if defined(__GNUC__)
  return fits_square_run<Compute>(batch);
#else
  return false;
#endif
}

/// One whole problem on the calling thread.
template <class Compute, class TA, class TB, class TC, class Epilogue>
void serial_problem(const gemm_instance<TA, TB, TC>& p, Compute alpha, Compute beta,
                    const Epilogue& epilogue, index_t batch) {
  if (p.m <= 0 || p.n <= 0 || p.k <= 0) {
    return;
  }
  if (classify_gemm(p.m, p.n, p.k) == size_class::tiny) {
    tiny(p, alpha, beta, epilogue, batch);
    return;
  }
  const blocking<Compute> blocks(p.m, p.n, p.k);
  for (index_t jb = 0; jb < blocks.n_blocks; ++jb) {
    const index_t j0 = jb * blocks.nc;
    const index_t cols = std::min(blocks.nc, p.n - j0);
    // One packed panel of B for all of its blocks.
    const Compute* const b_panel = pack_b_panel<Compute>(p, j0, cols);
    for (index_t ib = 0; ib < blocks.m_blocks; ++ib) {
      const index_t i0 = ib * blocks.mc;
      compute_block(p, i0, std::min(blocks.mc, p.m - i0), j0, cols, alpha, beta, epilogue, batch,
                    b_panel);
    }
  }
}

/// Runs a batch: uniform batches split into (problem, block) tasks so that one large problem
/// still uses every thread; grouped batches hand out whole problems dynamically.
template <class Batch, class Compute, class Epilogue>
void run(host_exec exec, const Batch& batch, Compute alpha, Compute beta,
         const Epilogue& epilogue) {
  if constexpr (Batch::uniform) {
    if (batch.m == 0 || batch.n == 0 || batch.k == 0 || batch.count == 0) {
      return;
    }
    if (in_runs<Compute>(batch)) {
      // Runs of up to 64 problems per task: the per-task cost (the call, the choice of
      // kernel) is a large part of a problem of a few hundred multiply-adds. The runs are a
      // multiple of the thread count and differ by at most one problem, so the static schedule
      // gives every thread the same work (9 runs of 42 on 2 threads made one thread do 5).
      const index_t threads = host_thread_count(exec);
      index_t runs = std::max<index_t>(threads, ceil_div(batch.count, 64));
      runs = std::min<index_t>(ceil_div(runs, threads) * threads, batch.count);
      const index_t base = batch.count / runs, longer = batch.count % runs;
      const bool stream_c = streams_c(batch, beta);
      host_parallel_for(exec, runs, schedule::uniform, [&](index_t r) {
        const index_t first = r * base + std::min(r, longer);
        tiny_range(batch, first, first + base + (r < longer ? 1 : 0), alpha, beta, epilogue,
                   stream_c);
      });
      return;
    }
    const blocking<Compute> blocks(batch.m, batch.n, batch.k);
    const index_t per_problem = blocks.m_blocks * blocks.n_blocks;
    // Problems of several blocks whose B is packed go to threads whole, so that the panel is
    // packed once per problem, not once per block (n = 512: 0.90x-0.97x the time), as long as
    // whole problems still share out evenly (within 1/8).
    const index_t threads = host_thread_count(exec);
    const bool even = ceil_div(batch.count, threads) * threads * 8 <= batch.count * 9;
    if (per_problem > 1 && !reads_b_in_place<Compute>(batch.problem(0)) && even) {
      host_parallel_for(exec, batch.count, schedule::uniform, [&](index_t b) {
        serial_problem(batch.problem(b), alpha, beta, epilogue, b);
      });
      return;
    }
    // Equal tasks (one block per problem) go to threads in contiguous ranges, which keeps each
    // thread's hardware prefetchers on one stream; unequal ones (edge blocks) one at a time.
    const schedule kind = per_problem == 1 ? schedule::uniform : schedule::dynamic;
    // On a batch that streams from memory, a problem of one block fetches the next one's
    // operands as it computes (n = 128 on a 2-core EPYC, paired against LIBXSMM: f32 1.22x to
    // 1.25x its time, from 1.40x to 1.47x, with the lines fetched in bursts before each tile;
    // 1.05x to 1.09x with a line per reduction step; f64 1.26x-1.33x, 1.19x-1.28x, 1.05x-1.07x).
    const bool fetch_next = per_problem == 1 && host_cache::streams(batch_bytes(batch));
    host_parallel_for(exec, batch.count * per_problem, kind, [&](index_t task) {
      const index_t b = task / per_problem;
      const index_t block = task % per_problem;
      const index_t i0 = (block % blocks.m_blocks) * blocks.mc;
      const index_t j0 = (block / blocks.m_blocks) * blocks.nc;
      prefetch_stream next;
      if (fetch_next && b + 1 < batch.count) next = operands_of(batch.problem(b + 1));
      compute_block(batch.problem(b), i0, std::min(blocks.mc, batch.m - i0), j0,
                    std::min(blocks.nc, batch.n - j0), alpha, beta, epilogue, b,
                    static_cast<const Compute*>(nullptr), fetch_next ? &next : nullptr);
    });
  } else {
    host_parallel_for(exec, batch.count, schedule::dynamic, [&](index_t b) {
      serial_problem(batch.problem(b), alpha, beta, epilogue, b);
    });
  }
}

}  // namespace detail::host_gemm
GPUBATCH_NAMESPACE_END
