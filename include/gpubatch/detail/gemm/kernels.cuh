/// @file detail/gemm/kernels.cuh
/// @brief CUDA GEMM kernels; included only by translation units compiled by nvcc.
///
/// - tiny_gemm_kernel: many tiny problems per block, of any batch form (grouped ones each their
///   own shape); each problem's operands are staged once in shared memory, each thread keeps a
///   few outputs in registers.
/// - tiled_gemm_kernel: a thread-block tile of C per block split into warp tiles, TM x TN
///   accumulators per thread in registers fed by 16-byte shared-memory fragment reads, K steps
///   staged in shared memory with register-prefetched double buffering; operand tiles are
///   fetched with 16-byte vector loads where the operand allows it.
/// - grouped_tiled_gemm_kernel: the same tile computation for grouped batches, each block of a
///   GPU-sized grid walking the batch's tiles (detail/gemm/tile_schedule.hpp).
///
/// Index math, edge predicates and the epilogue store are the shared __host__ __device__ code of
/// detail/gemm/problem.hpp, the tiled kernel's tile loads that of detail/gemm/simt_tile.hpp and
/// its thread arrangement and inner product that of detail/gemm/warp_tiling.hpp, all exercised
/// by the host tests.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/detail/gemm/simt_tile.hpp>
#include <gpubatch/detail/gemm/tile_schedule.cuh>
#include <gpubatch/detail/gemm/tiny_block.hpp>
#include <gpubatch/detail/gemm/warp_tiling.hpp>

#include <cstdint>
#include <type_traits>

GPUBATCH_KERNELS_BEGIN

GPUBATCH_NAMESPACE_BEGIN
namespace detail::cuda_gemm {

/// Does nothing: its attributes tell which architecture this translation unit's kernels were
/// compiled for (dispatch.cuh, code_arch).
template <int = 0>
GPUBATCH_KERNEL void arch_probe_kernel() {}

/// Shape of a tiny launch: problems staged per block, the K chunk staged at a time, and the
/// bounds every problem lies within (a grouped batch's promised bounds).
struct tiny_shape {
  int problems_per_block;
  int k_chunk;
  tiny::block_bounds bounds;
};

/// Several whole problems per block, of any batch form (grouped problems each their own shape).
/// The block reads its problems' descriptors once into shared memory; thread t owns outputs
/// t, t + Threads, ... of the block's problems laid end to end, so small problems keep every
/// thread busy. The phases between the barriers are the shared code of detail/gemm/tiny_block.hpp.
template <int Threads, int MinBlocksPerSm, int OutputsPerThread, int MaxProblems, class Batch,
          class Compute, class Epilogue>
GPUBATCH_KERNEL void __launch_bounds__(Threads, MinBlocksPerSm)
    tiny_gemm_kernel(Batch batch, tiny_shape shape, Compute alpha, Compute beta, Epilogue epilogue) {
  using instance = std::remove_cv_t<decltype(batch.problem(0))>;
  using table_type = tiny::block_table<instance, MaxProblems>;
  // The table leads the block's dynamic shared memory, the staged operands follow: the launch
  // asks for all of it, and the dispatch budgets all of it.
  GPUBATCH_DYNAMIC_SHARED(unsigned char, tiny_shared, 16);
  table_type& table = *reinterpret_cast<table_type*>(tiny_shared);
  const int ppb = shape.problems_per_block;
  const index_t kc = shape.k_chunk;
  const index_t first = static_cast<index_t>(blockIdx.x) * ppb;
  const int problems = static_cast<int>(first + ppb <= batch.count ? ppb : batch.count - first);
  const int thread = static_cast<int>(threadIdx.x);
  for (int l = thread; l < problems; l += Threads) {
    tiny::fetch_problem(batch, first, l, shape.bounds, table);
  }
  __syncthreads();
  if (thread == 0) tiny::finish_table(problems, kc, table);
  __syncthreads();

  // A: the problems' rows end to end, a_pitch apart; then B: kc rows of the problems' columns
  // side by side (tiny_block.hpp)
  Compute* const a_s = reinterpret_cast<Compute*>(tiny_shared + tiny::table_bytes<table_type>());
  Compute* const b_s = a_s + static_cast<index_t>(ppb) * shape.bounds.max_m * tiny::a_pitch(kc);
  tiny::owned_output own[OutputsPerThread];
  Compute acc[OutputsPerThread];
#pragma unroll
  for (int r = 0; r < OutputsPerThread; ++r) {
    own[r] = tiny::output_of(table, thread + static_cast<index_t>(r) * Threads);
    acc[r] = Compute(0);
  }
  for (index_t k0 = 0; k0 < table.k_max; k0 += kc) {
    if (k0 > 0) __syncthreads();  // the previous chunk has been consumed
    tiny::stage_chunk(table, k0, kc, thread, Threads, a_s, b_s);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < OutputsPerThread; ++r) {
      if (own[r].local >= 0) acc[r] = tiny::accumulate_chunk(table, own[r], k0, kc, a_s, b_s, acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < OutputsPerThread; ++r) {
    if (own[r].local >= 0) {
      const auto& p = table.problem[own[r].local];
      store_output(p.c(own[r].row, own[r].col), acc[r], alpha, beta, epilogue,
                   first + own[r].local, own[r].row, own[r].col);
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
    simt::read_piece<simt::vector_width<Compute>>(p, dst);
  }
};

/// The SIMT block tile arrangement of `Policy` for compute type `Compute`.
template <class Policy, class Compute>
using policy_tiling = simt::warp_tiling<Policy::tile_m, Policy::tile_n, Policy::threads,
                                        Policy::accumulators_per_thread,
                                        simt::vector_width<Compute>>;

/// The pipelined main loop of the SIMT tiled kernels (GEMM and implicit-GEMM convolution):
/// tile kt + 1 is fetched from global memory into registers while tile kt is multiplied out of
/// shared memory, then stashed into the other stage buffer; one barrier per K step with two
/// stages. On return acc holds this thread's part of the block's product (see warp_tiling).
/// @param fetch fetch(kt) loads K tile kt into the caller's registers
/// @param stash stash(stage) stores those registers into stage buffer `stage`: A as [BK][BM],
///        B as [BK][BN], B right after A, K rows simt::stage_pitch elements apart
template <class Policy, class Tiling, class Compute, class Fetch, class Stash>
GPUBATCH_DEVICE void tiled_mainloop(index_t k_tiles, const Compute* shared, simt::lane_origin at,
                                    Fetch&& fetch, Stash&& stash,
                                    Compute (&acc)[Tiling::tm][Tiling::tn]) {
  constexpr int BM = Policy::tile_m, BN = Policy::tile_n, BK = Policy::tile_k;
  constexpr int stage_elems = simt::stage_elements<Compute, BM, BN, BK>;
#pragma unroll
  for (int i = 0; i < Tiling::tm; ++i)
#pragma unroll
    for (int j = 0; j < Tiling::tn; ++j) acc[i][j] = Compute(0);
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
    simt::multiply_stage<Tiling, BM, BN, BK>(a_s, a_s + simt::stage_pitch<Compute, BM> * BK, at,
                                             acc);
    if (more) {
      if constexpr (Policy::stages == 1) __syncthreads();  // one buffer: wait for every reader
      stash(Policy::stages == 2 ? 1 - stage : 0);
    }
    __syncthreads();
  }
}

/// Stores a thread's accumulators (Tiling's TM x TN register tile, its origin at output
/// (row0, col0)) to an output whose rows are contiguous, through store_output's arithmetic. Each
/// row's pieces of vector_n consecutive columns are runs: one inside the output and aligned to
/// its size is stored (and, when finishing reads the output, loaded) as one vector access, where
/// element by element each output took its own address, load and store; a run at the right edge
/// or misaligned goes element by element. `row_at(row)` is called once per row inside the
/// output and returns `run_at(col)`, the output_run starting at output (row, col): what a row's
/// runs share (a convolution's sample and pixel) is found once.
template <class Tiling, class TC, class Compute, class RowAt>
GPUBATCH_DEVICE void store_lane_tile(const Compute (&acc)[Tiling::tm][Tiling::tn], index_t row0,
                                     index_t col0, index_t m, index_t n, RowAt&& row_at) {
  constexpr int V = Tiling::vector_n;
#pragma unroll
  for (int i = 0; i < Tiling::tm; ++i) {
    const index_t row = row0 + Tiling::row(i);
    if (row >= m) continue;
    const auto run_at = row_at(row);
#pragma unroll
    for (int j = 0; j < Tiling::tn; j += V) {
      const index_t col = col0 + Tiling::col(j);
      if (col >= n) continue;
      const auto run = run_at(col);
      if (col + V <= n && simt::piece_aligned<V>(run.out)) {
        // Read only when finishing reads C; zeroed so g++ need not prove that (-Wmaybe-uninitialized).
        TC result[V]{};
        if (run.reads_output()) simt::read_piece<V>(run.out, result);
#pragma unroll
        for (int v = 0; v < V; ++v) run.finish(result[v], acc[i][j + v], v);
        simt::write_global_piece<V>(result, run.out);
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) {
          if (col + v < n) run.finish(run.out[v], acc[i][j + v], v);
        }
      }
    }
  }
}

/// The block computes the C tile of `problem` (problem `b` of the batch) at (tile_row,
/// tile_col), which lies inside C.
template <class Policy, class Instance, class Compute, class Epilogue>
GPUBATCH_DEVICE void tiled_gemm_tile(const Instance& problem, index_t b, index_t tile_row,
                                     index_t tile_col, Compute alpha, Compute beta,
                                     const Epilogue& epilogue) {
  constexpr int BM = Policy::tile_m, BN = Policy::tile_n, BK = Policy::tile_k;
  constexpr int T = Policy::threads;
  static_assert(Policy::stages <= 2, "gpubatch: the SIMT GEMM kernel pipelines 1 or 2 stages");
  static_assert((BM * BK) % T == 0 && (BK * BN) % T == 0,
                "gpubatch: the policy's A and B tiles must divide evenly among its threads");
  using tiling = policy_tiling<Policy, Compute>;

  GPUBATCH_DYNAMIC_SHARED(unsigned char, tiled_shared, 16);
  Compute* const shared = reinterpret_cast<Compute*>(tiled_shared);
  constexpr int stage_elems = simt::stage_elements<Compute, BM, BN, BK>;

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
    Compute* const a_s = shared + stage * stage_elems;            // [BK][BM]
    Compute* const b_s = a_s + simt::stage_pitch<Compute, BM> * BK;  // [BK][BN]
    a_tile::store(a_plan, true, a_s, thread, a_regs);
    b_tile::store(b_plan, false, b_s, thread, b_regs);
  };

  const simt::lane_origin at = tiling::origin(thread);
  Compute acc[tiling::tm][tiling::tn];
  tiled_mainloop<Policy, tiling>(ceil_div(problem.k, BK), shared, at, fetch, stash, acc);

  using TC = std::remove_reference_t<decltype(problem.c(0, 0))>;
  if (problem.c.stride.col == 1) {
    store_lane_tile<tiling, TC>(acc, tile_row + at.row, tile_col + at.col, problem.m, problem.n,
                                [&](index_t row) {
                                  TC* const c_row = &problem.c(row, 0);
                                  return [=, &epilogue](index_t col) {
                                    return output_run<TC, Compute, Epilogue>{
                                        c_row + col, alpha, beta, &epilogue, b, row, col};
                                  };
                                });
    return;
  }
#pragma unroll
  for (int i = 0; i < tiling::tm; ++i) {
    const index_t row = tile_row + at.row + tiling::row(i);
#pragma unroll
    for (int j = 0; j < tiling::tn; ++j) {
      const index_t col = tile_col + at.col + tiling::col(j);
      if (row < problem.m && col < problem.n) {
        store_output(problem.c(row, col), acc[i][j], alpha, beta, epilogue, b, row, col);
      }
    }
  }
}

/// Uniform batches: one C tile per block; grid.x walks the tiles of a problem, grid.y the
/// problems of this launch (starting at `first_problem`).
template <class Policy, class Batch, class Compute, class Epilogue>
GPUBATCH_KERNEL void __launch_bounds__(Policy::threads, Policy::min_blocks_per_sm)
    tiled_gemm_kernel(Batch batch, index_t first_problem, index_t tiles_n, Compute alpha,
                      Compute beta, Epilogue epilogue) {
  tile_schedule::block_tile<Policy::tile_m, Policy::tile_n>(
      batch, first_problem, tiles_n,
      [&](const auto& problem, index_t b, index_t tile_row, index_t tile_col) {
        tiled_gemm_tile<Policy>(problem, b, tile_row, tile_col, alpha, beta, epilogue);
      });
}

/// Grouped batches: a grid of resident blocks, each walking the batch's C tiles
/// (detail/gemm/tile_schedule.hpp), so problems smaller than the bounds cost no blocks.
template <class Policy, class Batch, class Compute, class Epilogue>
GPUBATCH_KERNEL void __launch_bounds__(Policy::threads, Policy::min_blocks_per_sm)
    grouped_tiled_gemm_kernel(Batch batch, Compute alpha, Compute beta, Epilogue epilogue) {
  GPUBATCH_DYNAMIC_SHARED(unsigned char, walk_shared, 16);
  tile_schedule::walk_grouped_tiles<Policy::threads, Policy::tile_m, Policy::tile_n>(
      batch,
      tile_schedule::walk_storage_in<Policy::threads>(walk_shared,
                                                      Policy::template shared_bytes<Compute>()),
      [&](const auto& problem, index_t b, index_t tile_row, index_t tile_col) {
        tiled_gemm_tile<Policy>(problem, b, tile_row, tile_col, alpha, beta, epilogue);
      });
}

}  // namespace detail::cuda_gemm
GPUBATCH_NAMESPACE_END

GPUBATCH_KERNELS_END
