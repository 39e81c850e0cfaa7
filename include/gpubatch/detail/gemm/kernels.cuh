/// @file detail/gemm/kernels.cuh
/// @brief CUDA GEMM kernels; included only by translation units compiled by nvcc.
///
/// - tiny_gemm_kernel: many tiny problems per block; each problem's operands are staged once in
///   shared memory, each thread keeps a few outputs in registers.
/// - tiled_gemm_kernel: a thread-block tile of C per block, TM x TN accumulators per thread in
///   registers, K steps staged in shared memory with register-prefetched double buffering.
///
/// Index math, edge predicates and the epilogue store are the shared __host__ __device__ code of
/// detail/gemm/problem.hpp, exercised by the host tests.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/detail/gemm/problem.hpp>

#include <cstdint>

GPUBATCH_KERNELS_BEGIN

namespace gpubatch::detail::cuda_gemm {

/// Shape of a tiny launch: problems staged per block and the K chunk staged at a time.
struct tiny_shape {
  int problems_per_block;
  int k_chunk;
};

/// Several whole problems per block. Thread t owns outputs t, t + threads, ... of the block's
/// problems laid end to end, so small problems keep every thread busy.
template <int Threads, int OutputsPerThread, class Batch, class Compute, class Epilogue>
GPUBATCH_KERNEL void __launch_bounds__(Threads)
    tiny_gemm_kernel(Batch batch, tiny_shape shape, Compute alpha, Compute beta, Epilogue epilogue) {
  extern __shared__ unsigned char tiny_shared[];
  Compute* const shared = reinterpret_cast<Compute*>(tiny_shared);
  const index_t m = batch.m, n = batch.n, k = batch.k;
  const int ppb = shape.problems_per_block;
  const int kc = shape.k_chunk;
  const index_t first = static_cast<index_t>(blockIdx.x) * ppb;
  const int problems = static_cast<int>(first + ppb <= batch.count ? ppb : batch.count - first);
  Compute* const a_s = shared;                         // [problems][m][kc]
  Compute* const b_s = shared + static_cast<index_t>(ppb) * m * kc;  // [problems][kc][n]

  const index_t outputs = m * n;
  Compute acc[OutputsPerThread];
  int local[OutputsPerThread];
  index_t row[OutputsPerThread], col[OutputsPerThread];
#pragma unroll
  for (int r = 0; r < OutputsPerThread; ++r) {
    const index_t e = threadIdx.x + static_cast<index_t>(r) * Threads;
    local[r] = static_cast<int>(e / outputs);
    row[r] = (e % outputs) / n;
    col[r] = e % n;
    acc[r] = Compute(0);
  }

  for (index_t k0 = 0; k0 < k; k0 += kc) {
    const index_t kk = k - k0 < kc ? k - k0 : kc;
    __syncthreads();  // the previous chunk has been consumed
    for (index_t idx = threadIdx.x; idx < problems * m * kk; idx += Threads) {
      const index_t lp = idx / (m * kk), i = (idx / kk) % m, p = idx % kk;
      a_s[(lp * m + i) * kc + p] = convert<Compute>(batch.problem(first + lp).a(i, k0 + p));
    }
    for (index_t idx = threadIdx.x; idx < problems * kk * n; idx += Threads) {
      const index_t lp = idx / (kk * n), p = (idx / n) % kk, j = idx % n;
      b_s[(lp * kc + p) * n + j] = convert<Compute>(batch.problem(first + lp).b(k0 + p, j));
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < OutputsPerThread; ++r) {
      if (local[r] < problems) {
        const Compute* a_row = a_s + (static_cast<index_t>(local[r]) * m + row[r]) * kc;
        const Compute* b_col = b_s + static_cast<index_t>(local[r]) * kc * n + col[r];
        Compute sum = acc[r];
        for (index_t p = 0; p < kk; ++p) sum += a_row[p] * b_col[p * n];
        acc[r] = sum;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < OutputsPerThread; ++r) {
    if (local[r] < problems) {
      const index_t b = first + local[r];
      store_output(batch.problem(b).c(row[r], col[r]), acc[r], alpha, beta, epilogue, b, row[r],
                   col[r]);
    }
  }
}

/// Loads the (rows x cols) tile at (row0, col0) of `src` into registers, converted to Compute,
/// zero outside the matrix. Consecutive threads walk the operand's contiguous dimension so
/// global loads coalesce whichever way the operand is stored.
template <int Rows, int Cols, int Threads, class Compute, class T>
GPUBATCH_DEVICE void load_tile(const matrix_ref<const T>& src, index_t rows_total,
                               index_t cols_total, index_t row0, index_t col0,
                               Compute (&regs)[Rows * Cols / Threads]) {
  const bool cols_contiguous = src.stride.col == 1;
#pragma unroll
  for (int r = 0; r < Rows * Cols / Threads; ++r) {
    const int e = static_cast<int>(threadIdx.x) + r * Threads;
    const int i = cols_contiguous ? e / Cols : e % Rows;
    const int j = cols_contiguous ? e % Cols : e / Rows;
    const index_t gi = row0 + i, gj = col0 + j;
    regs[r] = (gi < rows_total && gj < cols_total) ? convert<Compute>(src(gi, gj)) : Compute(0);
  }
}

/// Stores registers loaded by load_tile into shared memory laid out [Cols][Rows] when
/// `k_major_rows` (A tiles: k rows of the m dimension) or [Rows][Cols] otherwise.
template <int Rows, int Cols, int Threads, class Compute>
GPUBATCH_DEVICE void store_tile(bool cols_contiguous, bool transpose_into_shared, Compute* dst,
                                const Compute (&regs)[Rows * Cols / Threads]) {
#pragma unroll
  for (int r = 0; r < Rows * Cols / Threads; ++r) {
    const int e = static_cast<int>(threadIdx.x) + r * Threads;
    const int i = cols_contiguous ? e / Cols : e % Rows;
    const int j = cols_contiguous ? e % Cols : e / Rows;
    dst[transpose_into_shared ? j * Rows + i : i * Cols + j] = regs[r];
  }
}

/// Columns of a thread's register tile: the largest power of two whose square fits.
constexpr int register_tile_cols(int accumulators) {
  int cols = 1;
  while ((cols * 2) * (cols * 2) <= accumulators) cols *= 2;
  return cols;
}

/// The pipelined main loop of the SIMT tiled kernels (GEMM and implicit-GEMM convolution):
/// tile kt + 1 is fetched from global memory into registers while tile kt is multiplied out of
/// shared memory, then stashed into the other stage buffer; one barrier per K step with two
/// stages. On return acc holds this thread's TM x TN part of the block's product.
/// @param fetch fetch(kt) loads K tile kt into the caller's registers
/// @param stash stash(stage) stores those registers into stage buffer `stage`: A as [BK][BM],
///        B as [BK][BN], B right after A
template <class Policy, int TM, int TN, class Compute, class Fetch, class Stash>
GPUBATCH_DEVICE void tiled_mainloop(index_t k_tiles, const Compute* shared, int ty, int tx,
                                    Fetch&& fetch, Stash&& stash, Compute (&acc)[TM][TN]) {
  constexpr int BM = Policy::tile_m, BN = Policy::tile_n, BK = Policy::tile_k;
  constexpr int stage_elems = (BM + BN) * BK;
  constexpr int threads_n = BN / TN;
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = Compute(0);
  if (k_tiles > 0) {
    fetch(index_t{0});
    stash(0);
  }
  __syncthreads();
  for (index_t kt = 0; kt < k_tiles; ++kt) {
    const int stage = Policy::stages == 2 ? static_cast<int>(kt & 1) : 0;
    const bool more = kt + 1 < k_tiles;
    if (more) fetch(kt + 1);  // global loads in flight while this tile is computed
    const Compute* const a_s = shared + stage * stage_elems;
    const Compute* const b_s = a_s + BM * BK;
#pragma unroll
    for (int p = 0; p < BK; ++p) {
      Compute a_frag[TM], b_frag[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a_frag[i] = a_s[p * BM + ty + i * (BM / TM)];
#pragma unroll
      for (int j = 0; j < TN; ++j) b_frag[j] = b_s[p * BN + tx + j * threads_n];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += a_frag[i] * b_frag[j];
    }
    if (more) {
      if constexpr (Policy::stages == 1) __syncthreads();  // one buffer: wait for every reader
      stash(Policy::stages == 2 ? 1 - stage : 0);
    }
    __syncthreads();
  }
}

/// One C tile of (TileM x TileN) per block: grid.x walks the tiles of a problem, grid.y the
/// problems of this launch (starting at `first_problem`).
template <class Policy, class Batch, class Compute, class Epilogue>
GPUBATCH_KERNEL void __launch_bounds__(Policy::threads)
    tiled_gemm_kernel(Batch batch, index_t first_problem, index_t tiles_n, Compute alpha,
                      Compute beta, Epilogue epilogue) {
  constexpr int BM = Policy::tile_m, BN = Policy::tile_n, BK = Policy::tile_k;
  constexpr int T = Policy::threads;
  static_assert(Policy::stages <= 2, "gpubatch: the SIMT GEMM kernel pipelines 1 or 2 stages");
  static_assert((BM * BK) % T == 0 && (BK * BN) % T == 0,
                "gpubatch: the policy's A and B tiles must divide evenly among its threads");
  // Threads form a (BM / TM) x (BN / TN) grid, each with a TM x TN register tile, as square
  // as the accumulator count allows (fewer shared-memory reads per multiply-add).
  constexpr int TN = register_tile_cols(Policy::accumulators_per_thread);
  constexpr int TM = Policy::accumulators_per_thread / TN;
  static_assert(TM * TN == Policy::accumulators_per_thread && BM % TM == 0 && BN % TN == 0,
                "gpubatch: the policy's tile does not map onto its threads");
  constexpr int threads_n = BN / TN;

  extern __shared__ unsigned char tiled_shared[];
  Compute* const shared = reinterpret_cast<Compute*>(tiled_shared);
  constexpr int stage_elems = (BM + BN) * BK;

  const index_t b = first_problem + blockIdx.y;
  const auto problem = batch.problem(b);
  const index_t tile_row = static_cast<index_t>(blockIdx.x / tiles_n) * BM;
  const index_t tile_col = static_cast<index_t>(blockIdx.x % tiles_n) * BN;
  if (tile_row >= problem.m || tile_col >= problem.n || problem.k <= 0) {
    return;  // grouped batches: this problem is smaller than the grid's bounds (block-uniform)
  }

  const bool a_k_contiguous = problem.a.stride.col == 1;
  const bool b_n_contiguous = problem.b.stride.col == 1;
  Compute a_regs[BM * BK / T];
  Compute b_regs[BK * BN / T];
  const auto fetch = [&](index_t kt) {
    load_tile<BM, BK, T>(problem.a, problem.m, problem.k, tile_row, kt * BK, a_regs);
    load_tile<BK, BN, T>(problem.b, problem.k, problem.n, kt * BK, tile_col, b_regs);
  };
  const auto stash = [&](int stage) {
    Compute* const a_s = shared + stage * stage_elems;  // [BK][BM]
    Compute* const b_s = a_s + BM * BK;                 // [BK][BN]
    store_tile<BM, BK, T>(a_k_contiguous, true, a_s, a_regs);
    store_tile<BK, BN, T>(b_n_contiguous, false, b_s, b_regs);
  };

  const int ty = static_cast<int>(threadIdx.x) / threads_n;
  const int tx = static_cast<int>(threadIdx.x) % threads_n;
  Compute acc[TM][TN];
  tiled_mainloop<Policy>(ceil_div(problem.k, BK), shared, ty, tx, fetch, stash, acc);

#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const index_t row = tile_row + ty + i * (BM / TM);
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const index_t col = tile_col + tx + j * threads_n;
      if (row < problem.m && col < problem.n) {
        store_output(problem.c(row, col), acc[i][j], alpha, beta, epilogue, b, row, col);
      }
    }
  }
}

}  // namespace gpubatch::detail::cuda_gemm

GPUBATCH_KERNELS_END
