/// @file detail/gemm/host.hpp
/// @brief The host backend of GEMM: a dedicated path for tiny problems, and for the rest
/// operands packed into cache-resident panels feeding a register-blocked micro-kernel that the
/// compiler vectorises. Parallel across the batch and across tiles of each problem.
#pragma once

#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/detail/host/parallel.hpp>
#include <gpubatch/gemm_policy.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>

namespace gpubatch::detail::host_gemm {

// Register blocking follows the widest vector the host compiler may use.
#if defined(__AVX512F__)
inline constexpr int vector_bytes = 64;
#elif defined(__AVX__)
inline constexpr int vector_bytes = 32;
#else
inline constexpr int vector_bytes = 16;
#endif

/// Micro-tile of MR x NR accumulators: two vectors per row, and as many rows as keep the
/// accumulators within the register file (16 vector registers without AVX-512, 32 with).
template <class Compute>
struct tuning {
  static constexpr int lanes = vector_bytes / static_cast<int>(sizeof(Compute));
  static constexpr int nr = 2 * lanes;
  static constexpr int mr = vector_bytes == 64 ? 8 : 6;
  /// Rows of op(A) one task packs: a block that stays in L2 next to the B panel.
  static constexpr index_t mc = mr * 16;
  /// Bytes of packed op(B) one task keeps: most of a 1-2 MiB L2.
  static constexpr index_t b_panel_bytes = 512 * 1024;
};

/// A per-thread scratch buffer, grown on demand and reused by later calls on the same thread.
template <class Compute>
Compute* scratch(std::size_t count, int slot) {
  struct aligned_delete {
    void operator()(Compute* p) const { ::operator delete(p, std::align_val_t{64}); }
  };
  thread_local std::unique_ptr<Compute, aligned_delete> buffers[2];
  thread_local std::size_t capacity[2] = {0, 0};
  if (capacity[slot] < count) {
    buffers[slot].reset(static_cast<Compute*>(
        ::operator new(count * sizeof(Compute), std::align_val_t{64})));
    capacity[slot] = count;
  }
  return buffers[slot].get();
}

#if defined(__GNUC__)
template <class T, int Bytes>
struct vector_of {
  typedef T type __attribute__((vector_size(Bytes)));
};
#endif

/// acc (MR x NR, row-major) = packed A strip (k x MR) * packed B strip (k x NR).
template <class Compute>
inline void micro_kernel(index_t k, const Compute* a, const Compute* b, Compute* acc) {
  constexpr int mr = tuning<Compute>::mr;
  constexpr int nr = tuning<Compute>::nr;
  constexpr int lanes = tuning<Compute>::lanes;
#if defined(__GNUC__)
  // GNU vector types pin the accumulators to registers whatever the optimiser decides.
  using vec = typename vector_of<Compute, vector_bytes>::type;
  vec c0[mr];
  vec c1[mr];
  for (int i = 0; i < mr; ++i) {
    c0[i] = vec{};
    c1[i] = vec{};
  }
  for (index_t p = 0; p < k; ++p) {
    vec b0;
    vec b1;
    std::memcpy(&b0, b, sizeof(vec));
    std::memcpy(&b1, b + lanes, sizeof(vec));
    for (int i = 0; i < mr; ++i) {
      const vec ai = vec{} + a[i];
      c0[i] += ai * b0;
      c1[i] += ai * b1;
    }
    a += mr;
    b += nr;
  }
  for (int i = 0; i < mr; ++i) {
    std::memcpy(acc + i * nr, &c0[i], sizeof(vec));
    std::memcpy(acc + i * nr + lanes, &c1[i], sizeof(vec));
  }
#else
  for (int e = 0; e < mr * nr; ++e) acc[e] = Compute(0);
  for (index_t p = 0; p < k; ++p, a += mr, b += nr) {
    for (int i = 0; i < mr; ++i) {
      for (int j = 0; j < nr; ++j) acc[i * nr + j] += a[i] * b[j];
    }
  }
#endif
}

/// Packs rows [i0, i0 + rows) of op(A) into MR-row strips, k-major, zero-padding the last.
/// The loop order follows the operand's contiguous dimension, so reads stream through memory.
template <class Compute, class TA>
void pack_a(matrix_ref<const TA> a, index_t k, index_t i0, index_t rows, Compute* out) {
  constexpr int mr = tuning<Compute>::mr;
  for (index_t s = 0; s < rows; s += mr, out += k * mr) {
    const index_t valid = std::min<index_t>(mr, rows - s);
    const TA* const base = a.data + (i0 + s) * a.stride.row;
    if (a.stride.row == 1) {  // op(A) columns contiguous: copy MR-element runs
      for (index_t p = 0; p < k; ++p) {
        const TA* const column = base + p * a.stride.col;
        for (index_t r = 0; r < mr; ++r) out[p * mr + r] = r < valid ? convert<Compute>(column[r]) : Compute(0);
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

/// Packs columns [j0, j0 + cols) of op(B) into NR-column strips, k-major, zero-padding the last.
template <class Compute, class TB>
void pack_b(matrix_ref<const TB> b, index_t k, index_t j0, index_t cols, Compute* out) {
  constexpr int nr = tuning<Compute>::nr;
  for (index_t s = 0; s < cols; s += nr, out += k * nr) {
    const index_t valid = std::min<index_t>(nr, cols - s);
    const TB* const base = b.data + (j0 + s) * b.stride.col;
    if (b.stride.col == 1) {  // op(B) rows contiguous: copy NR-element runs
      for (index_t p = 0; p < k; ++p) {
        const TB* const row = base + p * b.stride.row;
        if (valid == nr) {
          for (index_t c = 0; c < nr; ++c) out[p * nr + c] = convert<Compute>(row[c]);
        } else {
          for (index_t c = 0; c < nr; ++c) out[p * nr + c] = c < valid ? convert<Compute>(row[c]) : Compute(0);
        }
      }
    } else {  // op(B) columns contiguous (or neither): walk each column
      for (index_t c = 0; c < nr; ++c) {
        if (c < valid) {
          const TB* const column = base + c * b.stride.col;
          for (index_t p = 0; p < k; ++p) out[p * nr + c] = convert<Compute>(column[p * b.stride.row]);
        } else {
          for (index_t p = 0; p < k; ++p) out[p * nr + c] = Compute(0);
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

/// Computes the C block [i0, i0 + rows) x [j0, j0 + cols) of problem `batch`.
template <class Compute, class TA, class TB, class TC, class Epilogue>
void compute_block(const gemm_instance<TA, TB, TC>& p, index_t i0, index_t rows, index_t j0,
                   index_t cols, Compute alpha, Compute beta, const Epilogue& epilogue,
                   index_t batch) {
  constexpr int mr = tuning<Compute>::mr;
  constexpr int nr = tuning<Compute>::nr;
  const index_t a_strips = ceil_div(rows, mr);
  const index_t b_strips = ceil_div(cols, nr);
  Compute* const packed_a = scratch<Compute>(static_cast<std::size_t>(a_strips * mr * p.k), 0);
  Compute* const packed_b = scratch<Compute>(static_cast<std::size_t>(b_strips * nr * p.k), 1);
  pack_a<Compute>(p.a, p.k, i0, rows, packed_a);
  pack_b<Compute>(p.b, p.k, j0, cols, packed_b);

  alignas(64) Compute acc[mr * nr];
  for (index_t sj = 0; sj < b_strips; ++sj) {
    const index_t col0 = j0 + sj * nr;
    const index_t valid_cols = std::min<index_t>(nr, j0 + cols - col0);
    for (index_t si = 0; si < a_strips; ++si) {
      const index_t row0 = i0 + si * mr;
      const index_t valid_rows = std::min<index_t>(mr, i0 + rows - row0);
      micro_kernel(p.k, packed_a + si * mr * p.k, packed_b + sj * nr * p.k, acc);
      for (index_t r = 0; r < valid_rows; ++r) {
        for (index_t c = 0; c < valid_cols; ++c) {
          store_output(p.c(row0 + r, col0 + c), acc[r * nr + c], alpha, beta, epilogue, batch,
                       row0 + r, col0 + c);
        }
      }
    }
  }
}

/// Tiny problems (m, n <= 32, k <= 64): op(B) converted once into a k x NB block, each row of C
/// accumulated in NB lanes of vector registers; no packing of A, no blocking.
template <int NB, class Compute, class TA, class TB, class TC, class Epilogue>
void tiny_problem(const gemm_instance<TA, TB, TC>& p, Compute alpha, Compute beta,
                  const Epilogue& epilogue, index_t batch) {
  constexpr int lanes = tuning<Compute>::lanes;
  constexpr int vectors = (NB + lanes - 1) / lanes;
  constexpr int width = vectors * lanes;  // NB rounded up to whole vectors
  alignas(64) Compute b[64 * width];
  for (index_t q = 0; q < p.k; ++q) {
    for (index_t j = 0; j < width; ++j) {
      b[q * width + j] = j < p.n ? convert<Compute>(p.b(q, j)) : Compute(0);
    }
  }
  // Four rows at a time: four independent accumulator chains hide the multiply-add latency.
  constexpr int rows = 4;
  alignas(64) Compute out[rows * width];
  for (index_t i0 = 0; i0 < p.m; i0 += rows) {
    const index_t valid = std::min<index_t>(rows, p.m - i0);
#if defined(__GNUC__)
    using vec = typename vector_of<Compute, vector_bytes>::type;
    vec acc[rows][vectors];
    for (int r = 0; r < rows; ++r)
      for (int v = 0; v < vectors; ++v) acc[r][v] = vec{};
    for (index_t q = 0; q < p.k; ++q) {
      vec bq[vectors];
      std::memcpy(bq, b + q * width, sizeof(bq));
      for (int r = 0; r < rows; ++r) {
        // Rows past the end repeat the last row; their results are discarded.
        const vec a = vec{} + convert<Compute>(p.a(i0 + std::min<index_t>(r, valid - 1), q));
        for (int v = 0; v < vectors; ++v) acc[r][v] += a * bq[v];
      }
    }
    std::memcpy(out, acc, sizeof(acc));
#else
    for (int e = 0; e < rows * width; ++e) out[e] = Compute(0);
    for (index_t r = 0; r < valid; ++r)
      for (index_t q = 0; q < p.k; ++q) {
        const Compute a = convert<Compute>(p.a(i0 + r, q));
        for (int j = 0; j < width; ++j) out[r * width + j] += a * b[q * width + j];
      }
#endif
    for (index_t r = 0; r < valid; ++r) {
      for (index_t j = 0; j < p.n; ++j) {
        store_output(p.c(i0 + r, j), out[r * width + j], alpha, beta, epilogue, batch, i0 + r, j);
      }
    }
  }
}

template <class Compute, class TA, class TB, class TC, class Epilogue>
void tiny(const gemm_instance<TA, TB, TC>& p, Compute alpha, Compute beta,
          const Epilogue& epilogue, index_t batch) {
  if (p.n <= 8) {
    tiny_problem<8>(p, alpha, beta, epilogue, batch);
  } else if (p.n <= 16) {
    tiny_problem<16>(p, alpha, beta, epilogue, batch);
  } else {
    tiny_problem<32>(p, alpha, beta, epilogue, batch);
  }
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
    for (index_t ib = 0; ib < blocks.m_blocks; ++ib) {
      const index_t i0 = ib * blocks.mc;
      const index_t j0 = jb * blocks.nc;
      compute_block(p, i0, std::min(blocks.mc, p.m - i0), j0, std::min(blocks.nc, p.n - j0), alpha,
                    beta, epilogue, batch);
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
    if (classify_gemm(batch.m, batch.n, batch.k) == size_class::tiny) {
      host_parallel_for(exec, batch.count, schedule::uniform, [&](index_t b) {
        tiny(batch.problem(b), alpha, beta, epilogue, b);
      });
      return;
    }
    const blocking<Compute> blocks(batch.m, batch.n, batch.k);
    const index_t per_problem = blocks.m_blocks * blocks.n_blocks;
    host_parallel_for(exec, batch.count * per_problem, schedule::dynamic, [&](index_t task) {
      const index_t b = task / per_problem;
      const index_t block = task % per_problem;
      const index_t i0 = (block % blocks.m_blocks) * blocks.mc;
      const index_t j0 = (block / blocks.m_blocks) * blocks.nc;
      compute_block(batch.problem(b), i0, std::min(blocks.mc, batch.m - i0), j0,
                    std::min(blocks.nc, batch.n - j0), alpha, beta, epilogue, b);
    });
  } else {
    host_parallel_for(exec, batch.count, schedule::dynamic, [&](index_t b) {
      serial_problem(batch.problem(b), alpha, beta, epilogue, b);
    });
  }
}

}  // namespace gpubatch::detail::host_gemm
