// Host batches larger than the last-level cache: square problems with beta = 0 write C with
// non-temporal stores where a problem's C is aligned to the vector, plainly where it is not
// (padded leading dimensions) or where C is read (beta != 0); problems of one block on the
// blocked path fetch the next problem's operands as they compute. Every case is checked against
// the float64 reference like the rest of the GEMM tests.
#include "../support/host_backend.hpp"

#include "gemm_check.hpp"

#include <gpubatch/detail/host/cache.hpp>

namespace {
using gpubatch::index_t;
using gpubatch::layout;
using gpubatch::op;
using gpubatch::test::batch_form;
using gpubatch::test::gemm_case;
using gpubatch::test::test_backend;
namespace host_cache = gpubatch::detail::host_cache;

/// Problems of m x n x k whose A, B and C together just exceed the last-level cache (at least
/// 3, when the cache size is unknown and nothing streams).
template <class T>
index_t count_past_cache(index_t m, index_t n, index_t k) {
  const auto per_problem = static_cast<std::size_t>(m * k + k * n + m * n) * sizeof(T);
  return static_cast<index_t>(host_cache::last_level_bytes() / per_problem) + 3;
}
}  // namespace

TEMPLATE_TEST_CASE("host gemm: batches past the last-level cache", "[gemm][streamed]", float,
                   double) {
  const index_t n = GENERATE(4, 8, 16, 32);
  const index_t count = count_past_cache<TestType>(n, n, n);
  const auto bytes = static_cast<std::size_t>(3 * n * n * count) * sizeof(TestType);
#if GPUBATCH_HOST_STREAM_STORES
  // Where the CPU describes its caches (every x86 CPU this builds for), these batches stream.
  REQUIRE(host_cache::last_level_bytes() > 0);
  REQUIRE(host_cache::streams(bytes));
#endif
  CAPTURE(bytes, host_cache::last_level_bytes());

  SECTION("packed strided batch: every C streamed") {
    const double alpha = GENERATE(1.0, -0.75);  // without and with the multiply by alpha
    gemm_case c{n, n, n, count, op::none, op::none, layout::row_major, layout::row_major,
                layout::row_major, alpha, 0.0};
    gpubatch::test::check_gemm<test_backend, TestType, TestType>(c);
  }
  SECTION("padded leading dimensions: rows off the vector grid, stored plainly") {
    gemm_case c{n, n, n, count, op::none, op::none, layout::row_major, layout::row_major,
                layout::row_major, -0.75, 0.0};
    c.pad = 1;
    gpubatch::test::check_gemm<test_backend, TestType, TestType>(c);
  }
  SECTION("pointer array") {
    gemm_case c{n, n, n, count, op::none, op::none, layout::row_major, layout::row_major,
                layout::row_major, 1.0, 0.0, batch_form::pointer_array};
    gpubatch::test::check_gemm<test_backend, TestType, TestType>(c);
  }
  SECTION("beta != 0 reads C: nothing streamed") {
    gemm_case c{n, n, n, count, op::none, op::none, layout::row_major, layout::row_major,
                layout::row_major, 1.0, 0.5};
    gpubatch::test::check_gemm<test_backend, TestType, TestType>(c);
  }
}

TEMPLATE_TEST_CASE("host gemm: blocked problems past the last-level cache", "[gemm][streamed]",
                   float, double) {
  // 40 x 36 x 20: one block per problem, with ragged micro-tile strips on both sides.
  const index_t m = 40, n = 36, k = 20;
  const index_t count = count_past_cache<TestType>(m, n, k);
#if GPUBATCH_HOST_STREAM_STORES
  const auto bytes = static_cast<std::size_t>((m * k + k * n + m * n) * count) * sizeof(TestType);
  REQUIRE(host_cache::streams(bytes));
#endif
  const op op_b = GENERATE(op::none, op::transpose);
  const double beta = GENERATE(0.0, 0.5);
  gemm_case c{m, n, k, count, op::none, op_b, layout::row_major, layout::row_major,
              layout::row_major, -0.75, beta};
  gpubatch::test::check_gemm<test_backend, TestType, TestType>(c);
}
