/// @file detail/gemm/tile_schedule.cuh
/// @brief The device side of detail/gemm/tile_schedule.hpp: which C tiles a block of a tiled GEMM
/// kernel computes. One tile per block for uniform batches; for grouped ones, a walk over the
/// batch's tiles with the window of tile counts summed by a block scan (detail/block_scan.cuh).
/// Included only by CUDA translation units.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/detail/block_scan.cuh>
#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/detail/gemm/tile_schedule.hpp>

#include <cstdint>


GPUBATCH_NAMESPACE_BEGIN
namespace detail::tile_schedule {

/// Calls tile(problem_instance, problem_index, tile_row, tile_col) for the C tile this block owns
/// in a one-tile-per-block launch (grid.x: the tiles of a problem, `tiles_n` per row of tiles;
/// grid.y: the problems from `first_problem`), if the tile lies inside its problem.
template <int TileM, int TileN, class Batch, class Tile>
GPUBATCH_DEVICE void block_tile(const Batch& batch, index_t first_problem, index_t tiles_n,
                                Tile&& tile) {
  const index_t b = first_problem + blockIdx.y;
  const auto problem = batch.problem(b);
  const index_t tile_row = static_cast<index_t>(blockIdx.x / tiles_n) * TileM;
  const index_t tile_col = static_cast<index_t>(blockIdx.x % tiles_n) * TileN;
  if (tile_row < problem.m && tile_col < problem.n && problem.k > 0) {
    tile(problem, b, tile_row, tile_col);
  }
}

/// What the walk keeps in shared memory: the block scan's storage and the window's tile ends.
template <int Threads>
struct walk_storage {
  typename block_inclusive_sum<index_t, Threads>::storage scan;
  index_t ends[Threads];
};

/// The walk's storage sits after the tile's `tile_bytes` of dynamic shared memory, so that the
/// launch asks for all of the block's shared memory at once (no static part the dispatch could
/// miss when it checks the device's limit).
GPUBATCH_HOST_DEVICE constexpr std::int64_t walk_storage_offset(std::int64_t tile_bytes) {
  return (tile_bytes + 15) / 16 * 16;
}
/// Dynamic shared memory of a walking kernel whose tile needs `tile_bytes`.
template <int Threads>
GPUBATCH_HOST_DEVICE constexpr std::int64_t walk_shared_bytes(std::int64_t tile_bytes) {
  return walk_storage_offset(tile_bytes) + static_cast<std::int64_t>(sizeof(walk_storage<Threads>));
}
/// The walk's storage in the block's dynamic shared memory `shared`.
template <int Threads>
GPUBATCH_DEVICE walk_storage<Threads>& walk_storage_in(unsigned char* shared,
                                                       std::int64_t tile_bytes) {
  return *reinterpret_cast<walk_storage<Threads>*>(shared + walk_storage_offset(tile_bytes));
}

/// Calls tile(problem_instance, problem_index, tile_row, tile_col) for every C tile of `batch`
/// (a grouped batch; (TileM x TileN) tiles) this block is dealt, then waits for the whole block,
/// as the next tile reuses shared memory. Threads threads, one problem each per window.
template <int Threads, int TileM, int TileN, class Batch, class Tile>
GPUBATCH_DEVICE void walk_grouped_tiles(const Batch& batch, walk_storage<Threads>& storage,
                                        Tile&& tile) {
  using block_scan = block_inclusive_sum<index_t, Threads>;
  auto& scan_storage = storage.scan;
  index_t* const ends = storage.ends;
  const auto load = [&](index_t first, index_t* window_ends) {
    __syncthreads();  // every thread has finished reading the previous window
    const index_t p = first + static_cast<index_t>(threadIdx.x);
    index_t tiles = 0;
    if (p < batch.count) {
      const auto q = batch.problem(p);
      tiles = tiles_of(q.m, q.n, q.k, batch.bounds, TileM, TileN);
    }
    index_t inclusive = 0, total = 0;
    block_scan::run(scan_storage, tiles, inclusive, total);
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

}  // namespace detail::tile_schedule
GPUBATCH_NAMESPACE_END
