// The CUDA tiny-matrix kernel's block logic (detail/gemm/tiny_block.hpp), run on the host: every
// block of a launch is emulated phase by phase (descriptor table, then per K chunk the staging
// by every thread and the accumulation by every thread, then the stores), with the launch
// geometry the dispatcher computes. Ragged grouped batches (empty problems, problems that break
// the promised bounds, padded leading dimensions) and uniform batches must match a float64
// reference; every output must be owned by exactly one thread; staging must stay inside the
// block's shared-memory budget and the accumulation must read only staged slots.
#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/detail/gemm/tiny_block.hpp>
#include <gpubatch/epilogue.hpp>
#include <gpubatch/gemm_policy.hpp>
#include <gpubatch/gemm_problem.hpp>

#include "../support/catch.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

using gpubatch::index_t;
using gpubatch::layout;
using gpubatch::op;
namespace detail = gpubatch::detail;
namespace tiny = gpubatch::detail::tiny;

namespace {

struct launch_geometry {
  int threads;
  int outputs_per_thread;
  int max_problems;  ///< the policy's problems per block
};

/// Runs `batch` as tiny_gemm_kernel does, one emulated block after another. Staging buffers are
/// poisoned before every chunk, so an accumulation that reads a slot nobody staged turns NaN.
template <int MaxProblems, class Batch>
void run_blocks(const Batch& batch, const tiny::block_bounds& bounds, launch_geometry g,
                float alpha, float beta) {
  const index_t kc = std::min<index_t>(bounds.max_k, 32);
  const index_t budget = 48 * 1024 / static_cast<index_t>(sizeof(float));
  const index_t ppb = tiny::problems_per_block(bounds, kc, g.threads, g.outputs_per_thread,
                                               g.max_problems, budget);
  REQUIRE(g.max_problems <= MaxProblems);
  REQUIRE(ppb >= 1);
  REQUIRE(ppb <= g.max_problems);
  const index_t a_elems = ppb * bounds.max_m * tiny::a_pitch(kc);
  const index_t staged = a_elems + ppb * bounds.max_n * kc;
  REQUIRE(staged <= budget);
  constexpr index_t guard = 64;
  const float poison = std::numeric_limits<float>::quiet_NaN();

  using instance = decltype(batch.problem(0));
  for (index_t first = 0; first < batch.count; first += ppb) {
    const int problems = static_cast<int>(std::min<index_t>(ppb, batch.count - first));
    tiny::block_table<instance, MaxProblems> table{};
    for (int l = 0; l < problems; ++l) tiny::fetch_problem(batch, first, l, bounds, table);
    tiny::finish_table(problems, kc, table);
    REQUIRE(table.outputs() <= static_cast<index_t>(g.threads) * g.outputs_per_thread);

    // Ownership: every output of every usable problem exactly once.
    std::vector<std::vector<tiny::owned_output>> own(static_cast<std::size_t>(g.threads));
    std::vector<int> owners(static_cast<std::size_t>(table.outputs()), 0);
    for (int t = 0; t < g.threads; ++t) {
      for (int r = 0; r < g.outputs_per_thread; ++r) {
        const index_t e = t + static_cast<index_t>(r) * g.threads;
        const tiny::owned_output o = tiny::output_of(table, e);
        own[static_cast<std::size_t>(t)].push_back(o);
        if (o.local < 0) {
          REQUIRE(e >= table.outputs());
          continue;
        }
        const auto& p = table.problem[o.local];
        REQUIRE(o.row < p.m);
        REQUIRE(o.col < p.n);
        REQUIRE(table.output_begin[o.local] + o.row * p.n + o.col == e);
        ++owners[static_cast<std::size_t>(e)];
      }
    }
    for (const int n : owners) REQUIRE(n == 1);

    std::vector<std::vector<float>> acc(static_cast<std::size_t>(g.threads),
                                        std::vector<float>(static_cast<std::size_t>(g.outputs_per_thread), 0.0F));
    std::vector<float> shared(static_cast<std::size_t>(staged + guard), poison);
    for (index_t k0 = 0; k0 < table.k_max; k0 += kc) {
      std::fill(shared.begin(), shared.end(), poison);  // a chunk may use only what it staged
      for (int t = 0; t < g.threads; ++t) {
        tiny::stage_chunk(table, k0, kc, t, g.threads, shared.data(), shared.data() + a_elems);
      }
      for (index_t x = staged; x < staged + guard; ++x) REQUIRE(std::isnan(shared[static_cast<std::size_t>(x)]));
      for (int t = 0; t < g.threads; ++t) {
        for (int r = 0; r < g.outputs_per_thread; ++r) {
          const tiny::owned_output& o = own[static_cast<std::size_t>(t)][static_cast<std::size_t>(r)];
          if (o.local < 0) continue;
          float& sum = acc[static_cast<std::size_t>(t)][static_cast<std::size_t>(r)];
          sum = tiny::accumulate_chunk(table, o, k0, kc, shared.data(), shared.data() + a_elems, sum);
          REQUIRE_FALSE(std::isnan(sum));
        }
      }
    }
    for (int t = 0; t < g.threads; ++t) {
      for (int r = 0; r < g.outputs_per_thread; ++r) {
        const tiny::owned_output& o = own[static_cast<std::size_t>(t)][static_cast<std::size_t>(r)];
        if (o.local < 0) continue;
        const auto& p = table.problem[o.local];
        detail::store_output(p.c(o.row, o.col), acc[static_cast<std::size_t>(t)][static_cast<std::size_t>(r)],
                             alpha, beta, gpubatch::epilogue::identity{}, first + o.local, o.row,
                             o.col);
      }
    }
  }
}

/// One stored matrix of a ragged batch.
struct stored {
  index_t rows, cols, ld;
  layout order;
  index_t at(index_t i, index_t j) const { return order == layout::row_major ? i * ld + j : i + j * ld; }
  index_t size() const { return std::max<index_t>(order == layout::row_major ? rows * ld : cols * ld, 1); }
};

stored make(index_t rows, index_t cols, layout order, index_t pad) {
  return {rows, cols, std::max<index_t>((order == layout::row_major ? cols : rows) + pad, 1), order};
}

/// A ragged grouped batch: random shapes within (and, for the problem `breaking`, beyond) the
/// bounds, some empty; every problem's C poisoned (beta = 0) or random (beta != 0).
void check_ragged(unsigned seed, index_t count, tiny::block_bounds bounds, gpubatch::grouped_gemm_layout lay,
                  float alpha, float beta, launch_geometry g, index_t breaking) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1.0F, 1.0F);
  std::uniform_int_distribution<int> pad_of(0, 3);
  struct owned {
    index_t m, n, k;
    stored a, b, c;
    std::vector<float> av, bv, cv, c0;
  };
  std::vector<owned> data;
  std::vector<gpubatch::gemm_problem<float, float, float>> problems;
  for (index_t i = 0; i < count; ++i) {
    index_t m = std::uniform_int_distribution<index_t>(0, bounds.max_m)(rng);
    index_t n = std::uniform_int_distribution<index_t>(0, bounds.max_n)(rng);
    index_t k = std::uniform_int_distribution<index_t>(0, bounds.max_k)(rng);
    if (i % 5 == 1) m = bounds.max_m, n = bounds.max_n, k = bounds.max_k;  // full-size ones
    if (i % 5 == 2) m = std::max<index_t>(m, 1), n = std::max<index_t>(n, 1), k = 0;  // C untouched
    if (i == breaking) m = bounds.max_m + 1, n = std::max<index_t>(n, 1), k = std::max<index_t>(k, 1);
    owned o{m, n, k, {}, {}, {}, {}, {}, {}, {}};
    o.a = make(lay.op_a == op::none ? m : k, lay.op_a == op::none ? k : m, lay.a, pad_of(rng));
    o.b = make(lay.op_b == op::none ? k : n, lay.op_b == op::none ? n : k, lay.b, pad_of(rng));
    o.c = make(m, n, lay.c, pad_of(rng));
    o.av.resize(static_cast<std::size_t>(o.a.size()));
    o.bv.resize(static_cast<std::size_t>(o.b.size()));
    for (auto& x : o.av) x = value(rng);
    for (auto& x : o.bv) x = value(rng);
    o.cv.resize(static_cast<std::size_t>(o.c.size()));
    for (auto& x : o.cv) x = beta == 0.0F ? std::numeric_limits<float>::quiet_NaN() : value(rng);
    o.c0 = o.cv;
    data.push_back(std::move(o));
  }
  for (auto& o : data) {
    problems.push_back({o.m, o.n, o.k, o.av.data(), o.a.ld, o.bv.data(), o.b.ld, o.cv.data(), o.c.ld});
  }
  const detail::grouped_gemm_batch<float, float, float> batch{
      count, problems.data(), lay, gpubatch::grouped_gemm_bounds{bounds.max_m, bounds.max_n, bounds.max_k}};
  run_blocks<64>(batch, bounds, g, alpha, beta);

  for (index_t i = 0; i < count; ++i) {
    const owned& o = data[static_cast<std::size_t>(i)];
    INFO("problem " << i << ": " << o.m << " x " << o.n << " x " << o.k);
    const bool computed = i != breaking && o.m > 0 && o.n > 0 && o.k > 0;
    for (index_t x = 0; x < o.c.size(); ++x) {
      const index_t i_row = o.c.order == layout::row_major ? x / o.c.ld : x % o.c.ld;
      const index_t j_col = o.c.order == layout::row_major ? x % o.c.ld : x / o.c.ld;
      const float got = o.cv[static_cast<std::size_t>(x)];
      const float before = o.c0[static_cast<std::size_t>(x)];
      if (!computed || i_row >= o.m || j_col >= o.n) {
        // Outside the matrix, or a problem that must be skipped: bit for bit what was there.
        REQUIRE((std::isnan(before) ? std::isnan(got) : got == before));
        continue;
      }
      double sum = 0;
      for (index_t p = 0; p < o.k; ++p) {
        const double a = o.av[static_cast<std::size_t>(lay.op_a == op::none ? o.a.at(i_row, p) : o.a.at(p, i_row))];
        const double b = o.bv[static_cast<std::size_t>(lay.op_b == op::none ? o.b.at(p, j_col) : o.b.at(j_col, p))];
        sum += a * b;
      }
      double expected = alpha * sum;
      if (beta != 0.0F) expected += beta * static_cast<double>(before);
      INFO("C(" << i_row << ", " << j_col << ")");
      REQUIRE(std::abs(got - expected) <= 1e-5 * (1.0 + std::abs(expected)) * std::sqrt(static_cast<double>(o.k) + 1.0));
    }
  }
}

}  // namespace

TEST_CASE("tiny block: ragged grouped batches, every layout and op", "[gemm][tiny]") {
  const op op_a = GENERATE(op::none, op::transpose);
  const op op_b = GENERATE(op::none, op::transpose);
  const layout lc = GENERATE(layout::row_major, layout::col_major);
  const layout la = op_a == op::none ? layout::row_major : layout::col_major;
  const layout lb = op_b == op::none ? layout::col_major : layout::row_major;
  const gpubatch::grouped_gemm_layout lay{op_a, la, op_b, lb, lc};
  using policy = gpubatch::default_gemm_policy<float, 90, gpubatch::size_class::tiny>::type;
  const launch_geometry default_tiny{policy::threads, policy::accumulators_per_thread,
                                     policy::problems_per_block};
  for (const auto bounds : {tiny::block_bounds{32, 32, 64}, tiny::block_bounds{8, 8, 8},
                            tiny::block_bounds{3, 17, 33}, tiny::block_bounds{1, 1, 1}}) {
    CAPTURE(bounds.max_m, bounds.max_n, bounds.max_k);
    check_ragged(11, 37, bounds, lay, 0.75F, 0.0F, default_tiny, 6);
    check_ragged(12, 23, bounds, lay, -1.0F, 0.5F, default_tiny, -1);
  }
}

TEST_CASE("tiny block: launch geometries other than the default", "[gemm][tiny]") {
  const gpubatch::grouped_gemm_layout lay{op::none, layout::row_major, op::transpose,
                                          layout::row_major, layout::row_major};
  // One warp with more problems per block than threads (a thread stages several problems), odd
  // shapes deeper than one K chunk, one large problem per block of 8 warps.
  check_ragged(21, 101, {4, 4, 4}, lay, 1.0F, 0.0F, {32, 32, 48}, 3);
  check_ragged(22, 19, {5, 7, 70}, lay, 1.0F, 1.0F, {64, 16, 8}, -1);
  check_ragged(23, 9, {32, 32, 64}, lay, 1.0F, 0.0F, {256, 4, 8}, -1);
}

TEST_CASE("tiny block: uniform strided batches", "[gemm][tiny]") {
  for (const index_t n : {4, 8, 16, 32}) {
    CAPTURE(n);
    const index_t count = 29;
    std::mt19937 rng(static_cast<unsigned>(n));
    std::uniform_real_distribution<float> value(-1.0F, 1.0F);
    std::vector<float> a(static_cast<std::size_t>(n * n * count)), b(a.size()),
        c(a.size(), std::numeric_limits<float>::quiet_NaN());
    for (auto& x : a) x = value(rng);
    for (auto& x : b) x = value(rng);
    const detail::strided_gemm_batch<float, float, float> batch{
        n, n, n, count,
        {a.data(), detail::operand_strides(layout::row_major, op::none, n)}, n * n,
        {b.data(), detail::operand_strides(layout::col_major, op::transpose, n)}, n * n,
        {c.data(), detail::operand_strides(layout::row_major, op::none, n)}, n * n};
    run_blocks<16>(batch, {n, n, n}, {128, 8, 16}, 1.0F, 0.0F);
    for (index_t p = 0; p < count; ++p)
      for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < n; ++j) {
          double sum = 0;
          for (index_t q = 0; q < n; ++q) {
            sum += static_cast<double>(a[static_cast<std::size_t>(p * n * n + i * n + q)]) *
                   b[static_cast<std::size_t>(p * n * n + q * n + j)];  // col-major B^T: row-major B
          }
          REQUIRE(std::abs(c[static_cast<std::size_t>(p * n * n + i * n + j)] - sum) <= 1e-5 * static_cast<double>(n));
        }
  }
}

TEST_CASE("tiny block: problems per block respect registers, shared memory and the policy",
          "[gemm][tiny]") {
  const index_t budget = 48 * 1024 / 4;
  CHECK(tiny::problems_per_block({32, 32, 64}, 32, 128, 8, 4, budget) == 1);
  CHECK(tiny::problems_per_block({8, 8, 8}, 8, 128, 8, 4, budget) == 4);
  CHECK(tiny::problems_per_block({8, 8, 8}, 8, 128, 8, 64, budget) == 16);
  // shared-bound: 4 A rows of 33 (the odd pitch) and 32 B rows of 4 per problem
  CHECK(tiny::problems_per_block({4, 4, 64}, 32, 128, 8, 1000, budget) == 47);
  CHECK(tiny::problems_per_block({1, 1, 1}, 1, 32, 1, 4, budget) == 4);
}

TEST_CASE("tiny block: shared memory capped so the policy's blocks fit one SM", "[gemm][tiny]") {
  // (shared memory per SM, reserved per block) of sm_90, sm_80, sm_86/89 and sm_75
  CHECK(tiny::shared_cap(233472, 1024, 4) == 48 * 1024);  // no opt-in: 48 KiB at most
  CHECK(tiny::shared_cap(167936, 1024, 4) == 40 * 1024);
  CHECK(tiny::shared_cap(102400, 1024, 4) == 24 * 1024);
  CHECK(tiny::shared_cap(65536, 0, 4) == 16 * 1024);

  using policy = gpubatch::default_gemm_policy<float, 80, gpubatch::size_class::tiny>::type;
  const index_t sm80_cap = tiny::shared_cap(167936, 1024, policy::min_blocks_per_sm);
  const index_t table = 2048;  // about the table of 16 strided problems
  bool cap_bit = false;
  for (const index_t bytes : {index_t{4}, index_t{8}}) {
    for (const index_t m : {1, 2, 3, 8, 13, 32}) {
      for (const index_t n : {1, 4, 7, 16, 32}) {
        for (const index_t k : {1, 5, 32, 64}) {
          CAPTURE(bytes, m, n, k);
          const tiny::block_bounds bounds{m, n, k};
          const auto plan = [&](index_t cap) {
            return tiny::plan_launch(bounds, 1000, policy::tile_k, policy::threads,
                                     policy::accumulators_per_thread, policy::problems_per_block,
                                     table, bytes, cap);
          };
          const tiny::launch_plan capped = plan(sm80_cap), uncapped = plan(48 * 1024);
          REQUIRE(capped.k_chunk == std::min<index_t>(k, 32));
          REQUIRE(capped.problems_per_block >= 1);
          // Four blocks (with their reserved KiB) fit sm_80's 164 KiB, or one problem alone
          // needs more than a quarter of it.
          if (capped.problems_per_block > 1) {
            REQUIRE(policy::min_blocks_per_sm * (capped.shared_bytes + 1024) <= 167936);
          }
          REQUIRE(capped.shared_bytes ==
                  table + capped.problems_per_block *
                              (m * tiny::a_pitch(capped.k_chunk) + n * capped.k_chunk) * bytes);
          REQUIRE(capped.problems_per_block <= uncapped.problems_per_block);
          cap_bit = cap_bit || capped.problems_per_block < uncapped.problems_per_block;
        }
      }
    }
  }
  CHECK(cap_bit);  // some shapes do lose problems per block to the cap on sm_80
  // 8 x 8 x 32 f64: 520 staged elements (8 A rows of 33, 32 B rows of 8) per problem
  const auto f64_8x8 = [&](index_t cap) {
    return tiny::plan_launch({8, 8, 32}, 1000, 32, 128, 8, 16, table, 8, cap).problems_per_block;
  };
  CHECK(f64_8x8(sm80_cap) == 9);
  CHECK(f64_8x8(48 * 1024) == 11);
  // never more problems per block than the batch has
  CHECK(tiny::plan_launch({8, 8, 8}, 3, 32, 128, 8, 16, table, 4, sm80_cap).problems_per_block ==
        3);
}
