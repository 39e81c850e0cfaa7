/// @file detail/gemm/kernels.cuh
/// @brief CUDA GEMM kernels; included only by translation units compiled by nvcc.
///
/// - tiny_gemm_kernel: many tiny problems per block; each problem's operands are staged once in
///   shared memory, each thread keeps a few outputs in registers.
/// - tiled_gemm_kernel: a thread-block tile of C per block, TM x TN accumulators per thread in
///   registers, K steps staged in shared memory with register-prefetched double buffering;
///   operand tiles are fetched with 16-byte vector loads where the operand allows it.
///
/// Index math, edge predicates and the epilogue store are the shared __host__ __device__ code of
/// detail/gemm/problem.hpp, and the tiled kernel's tile loads that of detail/gemm/simt_tile.hpp,
/// both exercised by the host tests.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/detail/gemm/simt_tile.hpp>

#include <cstdint>
#include <type_traits>

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

/// Reads operand elements from global memory for simt::operand_tile: whole 16-byte chunks as one
/// vector load (the tile plan guarantees alignment and bounds), the rest one element at a time.
template <class Compute>
struct global_tile_loader {
  template <class T>
  GPUBATCH_DEVICE Compute element(const T* p) const {
    return convert<Compute>(*p);
  }
  template <class T>
  GPUBATCH_DEVICE void vector(Compute* dst, const T* p) const {
    static_assert(std::is_same_v<T, Compute>, "gpubatch: vector loads do not convert");
    if constexpr (std::is_same_v<Compute, float>) {
      const float4 v = *reinterpret_cast<const float4*>(p);
      dst[0] = v.x;
      dst[1] = v.y;
      dst[2] = v.z;
      dst[3] = v.w;
    } else if constexpr (std::is_same_v<Compute, double>) {
      const double2 v = *reinterpret_cast<const double2*>(p);
      dst[0] = v.x;
      dst[1] = v.y;
    } else {
      // Any other 16-byte-divisible type: an aligned aggregate still compiles to one load.
      struct alignas(16) piece {
        Compute v[simt::vector_width<Compute>];
      };
      const piece v = *reinterpret_cast<const piece*>(p);
#pragma unroll
      for (int e = 0; e < simt::vector_width<Compute>; ++e) dst[e] = v.v[e];
    }
  }
};

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

  using TA = std::remove_const_t<std::remove_pointer_t<decltype(problem.a.data)>>;
  using TB = std::remove_const_t<std::remove_pointer_t<decltype(problem.b.data)>>;
  using a_tile = simt::operand_tile<BM, BK, T, Compute, TA>;
  using b_tile = simt::operand_tile<BK, BN, T, Compute, TB>;
  // Vector or element-wise loads are decided once per operand, uniformly for the block.
  const simt::operand_plan a_plan = a_tile::plan(problem.a, problem.m, problem.k);
  const simt::operand_plan b_plan = b_tile::plan(problem.b, problem.k, problem.n);
  const int thread = static_cast<int>(threadIdx.x);
  Compute a_regs[BM * BK / T];
  Compute b_regs[BK * BN / T];
  const auto fetch = [&](index_t kt) {
    a_tile::load(a_plan, problem.a, problem.m, problem.k, tile_row, kt * BK, thread, a_regs,
                 global_tile_loader<Compute>{});
    b_tile::load(b_plan, problem.b, problem.k, problem.n, kt * BK, tile_col, thread, b_regs,
                 global_tile_loader<Compute>{});
  };
  const auto stash = [&](int stage) {
    Compute* const a_s = shared + stage * stage_elems;  // [BK][BM]
    Compute* const b_s = a_s + BM * BK;                 // [BK][BN]
    a_tile::store(a_plan, true, a_s, thread, a_regs);
    b_tile::store(b_plan, false, b_s, thread, b_regs);
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
