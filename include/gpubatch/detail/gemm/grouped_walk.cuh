/// @file detail/gemm/grouped_walk.cuh
/// @brief The device side of detail/gemm/tile_schedule.hpp: one block's walk over the C tiles of
/// a grouped batch, the window of tile counts loaded and summed with a CUB block scan. Included
/// only by translation units compiled by nvcc.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/detail/gemm/tile_schedule.hpp>

#include <cub/block/block_scan.cuh>

namespace gpubatch::detail::tile_schedule {

/// Calls tile(problem_instance, problem_index, tile_row, tile_col) for every C tile of `batch`
/// (a grouped batch; (TileM x TileN) tiles) this block is dealt, then waits for the whole block,
/// as the next tile reuses shared memory. Threads threads, one problem each per window.
template <int Threads, int TileM, int TileN, class Batch, class Tile>
GPUBATCH_DEVICE void walk_grouped_tiles(const Batch& batch, Tile&& tile) {
  using block_scan = cub::BlockScan<index_t, Threads>;
  __shared__ typename block_scan::TempStorage scan_storage;
  __shared__ index_t ends[Threads];
  const auto load = [&](index_t first, index_t* window_ends) {
    __syncthreads();  // every thread has finished reading the previous window
    const index_t p = first + static_cast<index_t>(threadIdx.x);
    index_t tiles = 0;
    if (p < batch.count) {
      const auto q = batch.problem(p);
      tiles = tiles_of(q.m, q.n, q.k, batch.bounds, TileM, TileN);
    }
    index_t inclusive = 0, total = 0;
    block_scan(scan_storage).InclusiveSum(tiles, inclusive, total);
    window_ends[threadIdx.x] = inclusive;
    __syncthreads();
    return total;
  };
  tile_walk<Threads> walk{0, 0, load(0, ends)};
  for (index_t t = blockIdx.x; walk.seek(t, batch.count, ends, load); t += gridDim.x) {
    const tile_place at = walk.place(t, ends);
    const auto problem = batch.problem(at.problem);
    const index_t tiles_n = ceil_div(problem.n, TileN);
    tile(problem, at.problem, at.tile / tiles_n * TileM, at.tile % tiles_n * TileN);
    __syncthreads();
  }
}

}  // namespace gpubatch::detail::tile_schedule
