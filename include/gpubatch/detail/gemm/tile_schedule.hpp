/// @file detail/gemm/tile_schedule.hpp
/// @brief How the CUDA tiled kernels share out the C tiles of a grouped batch: a grid sized to
/// what the GPU holds at once, each block walking batch tiles blockIdx.x, blockIdx.x + gridDim.x,
/// ... in problem order, so no block is spent on tiles a smaller problem does not have.
///
/// Batch tile t is found from prefix sums of the problems' tile counts, read a window of
/// `Window` consecutive problems at a time (one problem per thread, in shared memory on the
/// device). A block's tiles only increase, so its window only moves forward, and every block
/// reads each descriptor at most once. The walk is block-uniform: every thread of a block takes
/// the same steps, which keeps the barriers of the device window load legal. The host tests walk
/// every block of a launch through this code.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/gemm_problem.hpp>
#include <gpubatch/numeric.hpp>

GPUBATCH_NAMESPACE_BEGIN
namespace detail::tile_schedule {

/// C tiles of one problem of a grouped batch for a (tile_m x tile_n) tile: none when it is empty
/// (m, n or k <= 0: a no-op) or breaks the launch's bounds (a precondition violation, skipped
/// whole rather than partly computed).
GPUBATCH_HOST_DEVICE constexpr index_t tiles_of(index_t m, index_t n, index_t k,
                                                const grouped_gemm_bounds& bounds, int tile_m,
                                                int tile_n) {
  if (m <= 0 || n <= 0 || k <= 0 || m > bounds.max_m || n > bounds.max_n || k > bounds.max_k) {
    return 0;
  }
  return ceil_div(m, tile_m) * ceil_div(n, tile_n);
}

/// The first entry i of `ends` (inclusive prefix sums, `size` entries, non-decreasing) with
/// ends[i] > local, for local < ends[size - 1]: the problem holding the window's tile `local`.
GPUBATCH_HOST_DEVICE int entry_of(const index_t* ends, int size, index_t local) {
  int lo = 0, hi = size - 1;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (ends[mid] > local) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

/// Where a batch tile lies: its problem and its index among that problem's tiles (row-major over
/// the problem's tile grid).
struct tile_place {
  index_t problem;
  index_t tile;
};

/// One block's position in the walk: the window of problems [first, first + Window) whose tile
/// prefix sums are loaded, the tiles of all problems before it, and the window's own tiles.
template <int Window>
struct tile_walk {
  index_t first;
  index_t before;
  index_t total;

  /// Moves the window forward until it holds batch tile `t` or no problem is left; returns
  /// whether tile t exists. `load(first, ends)` fills `ends` with the inclusive prefix sums of
  /// the tiles of problems first, first + 1, ... (0 past the batch) and returns their total.
  template <class Load>
  GPUBATCH_HOST_DEVICE bool seek(index_t t, index_t count, index_t* ends, Load&& load) {
    while (t >= before + total && first + Window < count) {
      before += total;
      first += Window;
      total = load(first, ends);
    }
    return t < before + total;
  }

  /// The place of batch tile `t`, which seek has brought into the window.
  GPUBATCH_HOST_DEVICE tile_place place(index_t t, const index_t* ends) const {
    const index_t local = t - before;
    const int entry = entry_of(ends, Window, local);
    return {first + entry, local - (entry == 0 ? 0 : ends[entry - 1])};
  }
};

/// Blocks of a walking launch: as many as the GPU holds at once (`resident`, from the kernel's
/// occupancy), fewer when the bounds allow fewer tiles in all, at least one. No product is
/// formed past `resident`, so none can overflow.
GPUBATCH_HOST_DEVICE constexpr index_t walking_grid(index_t count,
                                                    const grouped_gemm_bounds& bounds,
                                                    int tile_m, int tile_n, index_t resident) {
  const index_t tiles_m = ceil_div(bounds.max_m, tile_m);
  const index_t tiles_n = ceil_div(bounds.max_n, tile_n);
  if (count <= 0 || tiles_m <= 0 || tiles_n <= 0 || resident <= 0) return 1;
  if (tiles_m > resident / tiles_n) return resident;  // one problem alone fills the GPU
  const index_t per_problem = tiles_m * tiles_n;
  return count > resident / per_problem ? resident : count * per_problem;
}

}  // namespace detail::tile_schedule
GPUBATCH_NAMESPACE_END
