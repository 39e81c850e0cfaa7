// How the CUDA tiled kernels share out a grouped batch's C tiles (detail/gemm/tile_schedule.hpp),
// run on the host: every block of a launch walks its tiles as the device does, with the window of
// tile counts summed serially where the device uses a block scan. Every tile of every problem
// must be dealt exactly once, inside its problem, none of an empty problem or of one that breaks
// the bounds, and no block may read a descriptor twice.
#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/detail/gemm/tile_schedule.hpp>
#include <gpubatch/gemm_problem.hpp>

#include "../support/catch.hpp"

#include <map>
#include <random>
#include <utility>
#include <vector>

using gpubatch::index_t;
namespace detail = gpubatch::detail;
namespace schedule = gpubatch::detail::tile_schedule;

namespace {

using problem = gpubatch::gemm_problem<float, float, float>;
using batch_type = detail::grouped_gemm_batch<float, float, float>;

struct tile_shape {
  int m, n;
};

/// Random shapes within (and some beyond) the bounds: empty ones, k = 0 ones, ones exactly at the
/// bounds, and, when `empty_run` > 0, that many empty problems in a row from a third of the way in
/// (windows without a single tile; all of them when empty_run >= count).
std::vector<problem> ragged_problems(index_t count, const gpubatch::grouped_gemm_bounds& bounds,
                                     index_t empty_run, unsigned seed) {
  std::mt19937 engine(seed);
  std::uniform_int_distribution<int> kind(0, 9);
  const auto upto = [&](index_t hi) {
    return std::uniform_int_distribution<index_t>(1, hi)(engine);
  };
  std::vector<problem> problems(static_cast<std::size_t>(count));
  const index_t run_start = empty_run >= count ? 0 : count / 3;
  for (index_t i = 0; i < count; ++i) {
    problem& p = problems[static_cast<std::size_t>(i)];
    p.m = upto(bounds.max_m);
    p.n = upto(bounds.max_n);
    p.k = upto(bounds.max_k);
    switch (kind(engine)) {
      case 0: p.m = 0; break;
      case 1: p.k = 0; break;
      case 2: p.m = bounds.max_m, p.n = bounds.max_n, p.k = bounds.max_k; break;
      case 3: p.n = bounds.max_n + 1; break;  // breaks the bounds: skipped
      default: break;
    }
    if (i >= run_start && i < run_start + empty_run) p.n = 0;
  }
  return problems;
}

/// Walks every block of a `grid`-block launch over `batch`; returns how often each
/// (problem, tile) was dealt. Checks each tile lies inside its problem and counts each block's
/// window loads.
template <int Window>
std::map<std::pair<index_t, index_t>, int> walk_launch(const batch_type& batch, tile_shape tile,
                                                       index_t grid) {
  std::map<std::pair<index_t, index_t>, int> dealt;
  const index_t windows = detail::ceil_div(batch.count, Window);
  for (index_t block = 0; block < grid; ++block) {
    index_t loads = 0;
    // The device load: thread i sums problem first + i; an inclusive scan over the threads.
    const auto load = [&](index_t first, index_t* ends) {
      ++loads;
      index_t sum = 0;
      for (int i = 0; i < Window; ++i) {
        const index_t p = first + i;
        if (p < batch.count) {
          const auto q = batch.problem(p);
          sum += schedule::tiles_of(q.m, q.n, q.k, batch.bounds, tile.m, tile.n);
        }
        ends[i] = sum;
      }
      return sum;
    };
    index_t ends[Window];
    schedule::tile_walk<Window> walk{0, 0, load(0, ends)};
    for (index_t t = block; walk.seek(t, batch.count, ends, load); t += grid) {
      const schedule::tile_place at = walk.place(t, ends);
      REQUIRE(at.problem >= 0);
      REQUIRE(at.problem < batch.count);
      const auto q = batch.problem(at.problem);
      const index_t tiles = schedule::tiles_of(q.m, q.n, q.k, batch.bounds, tile.m, tile.n);
      REQUIRE(at.tile >= 0);
      REQUIRE(at.tile < tiles);
      const index_t tiles_n = detail::ceil_div(q.n, tile.n);
      CHECK(at.tile / tiles_n * tile.m < q.m);
      CHECK(at.tile % tiles_n * tile.n < q.n);
      ++dealt[{at.problem, at.tile}];
    }
    CHECK(loads <= windows);  // the window only moves forward: each descriptor read once
  }
  return dealt;
}

template <int Window>
void check_launches(index_t count, index_t empty_run, unsigned seed) {
  const gpubatch::grouped_gemm_bounds bounds{300, 200, 50};
  const auto problems = ragged_problems(count, bounds, empty_run, seed);
  const batch_type batch{count, problems.data(), {}, bounds};
  for (const tile_shape tile : {tile_shape{64, 64}, tile_shape{128, 128}, tile_shape{32, 64}}) {
    index_t expected_total = 0;
    for (const problem& p : problems) {
      expected_total += schedule::tiles_of(p.m, p.n, p.k, bounds, tile.m, tile.n);
    }
    for (const index_t resident : {index_t{1}, index_t{7}, index_t{264}, index_t{1} << 20}) {
      const index_t grid = schedule::walking_grid(count, bounds, tile.m, tile.n, resident);
      INFO("count " << count << ", window " << Window << ", tile " << tile.m << " x " << tile.n
                    << ", grid " << grid);
      const auto dealt = walk_launch<Window>(batch, tile, grid);
      index_t total = 0;
      for (const auto& [place, times] : dealt) {
        CHECK(times == 1);
        total += times;
      }
      CHECK(total == expected_total);
    }
  }
}

}  // namespace

TEST_CASE("tile schedule: tiles of a problem", "[gemm][tile_schedule]") {
  const gpubatch::grouped_gemm_bounds bounds{100, 80, 30};
  CHECK(schedule::tiles_of(100, 80, 30, bounds, 64, 32) == 2 * 3);
  CHECK(schedule::tiles_of(1, 1, 1, bounds, 64, 64) == 1);
  CHECK(schedule::tiles_of(65, 64, 1, bounds, 64, 64) == 2);
  CHECK(schedule::tiles_of(0, 80, 30, bounds, 64, 64) == 0);
  CHECK(schedule::tiles_of(10, 0, 30, bounds, 64, 64) == 0);
  CHECK(schedule::tiles_of(10, 10, 0, bounds, 64, 64) == 0);
  CHECK(schedule::tiles_of(101, 10, 10, bounds, 64, 64) == 0);
  CHECK(schedule::tiles_of(10, 81, 10, bounds, 64, 64) == 0);
  CHECK(schedule::tiles_of(10, 10, 31, bounds, 64, 64) == 0);
}

TEST_CASE("tile schedule: the problem holding a window's tile", "[gemm][tile_schedule]") {
  // Problems of 0, 0, 3, 0, 2 and 1 tiles.
  const index_t ends[] = {0, 0, 3, 3, 5, 6};
  const int expected[] = {2, 2, 2, 4, 4, 5};
  for (index_t local = 0; local < 6; ++local) {
    CHECK(schedule::entry_of(ends, 6, local) == expected[local]);
  }
  const index_t one[] = {4};
  CHECK(schedule::entry_of(one, 1, 3) == 0);
}

TEST_CASE("tile schedule: grid size", "[gemm][tile_schedule]") {
  const gpubatch::grouped_gemm_bounds bounds{256, 128, 64};  // 4 x 2 tiles of 64 x 64
  CHECK(schedule::walking_grid(3, bounds, 64, 64, 264) == 24);
  CHECK(schedule::walking_grid(33, bounds, 64, 64, 264) == 264);
  CHECK(schedule::walking_grid(33, bounds, 64, 64, 264 * 2) == 33 * 8);
  CHECK(schedule::walking_grid(index_t{1} << 60, {index_t{1} << 40, index_t{1} << 40, 1}, 64, 64,
                               264) == 264);  // count x tiles would overflow
  CHECK(schedule::walking_grid(0, bounds, 64, 64, 264) == 1);
  CHECK(schedule::walking_grid(5, bounds, 64, 64, 0) == 1);
}

TEST_CASE("tile schedule: every tile of a ragged grouped batch dealt exactly once",
          "[gemm][tile_schedule]") {
  for (const index_t count : {1, 3, 17, 127, 128, 129, 300}) {
    check_launches<128>(count, 0, static_cast<unsigned>(count));
    check_launches<32>(count, 0, static_cast<unsigned>(count) + 1);
  }
  // Whole windows without a tile, in the middle of the batch.
  check_launches<32>(200, 70, 5);
  check_launches<128>(700, 300, 6);
  // A batch with no tile at all.
  check_launches<32>(40, 40, 7);
}
