// GEMM argument validation: each bad input raises invalid_argument naming the parameter, before
// anything is touched; empty problems are no-ops.
#include <gpubatch/gemm.hpp>

#include "../support/catch.hpp"
#include "../support/require_invalid.hpp"

#include <cmath>
#include <string>
#include <vector>

using gpubatch::index_t;
using gpubatch::layout;
using gpubatch::matrix_batch_view;
using gpubatch::op;

namespace {
using gpubatch::test::require_invalid;

struct operands {
  std::vector<float> a = std::vector<float>(64, 1.0F);
  std::vector<float> b = std::vector<float>(64, 1.0F);
  std::vector<float> c = std::vector<float>(64, -7.0F);
  matrix_batch_view<const float> view_a(index_t rows, index_t cols, index_t count = 1) const {
    return matrix_batch_view<const float>::packed(a.data(), rows, cols, count);
  }
  matrix_batch_view<const float> view_b(index_t rows, index_t cols, index_t count = 1) const {
    return matrix_batch_view<const float>::packed(b.data(), rows, cols, count);
  }
  matrix_batch_view<float> view_c(index_t rows, index_t cols, index_t count = 1) {
    return matrix_batch_view<float>::packed(c.data(), rows, cols, count);
  }
  [[nodiscard]] bool c_untouched() const {
    for (float v : c) if (v != -7.0F) return false;
    return true;
  }
};
}  // namespace

TEST_CASE("gemm rejects mismatched shapes and counts, naming the operand", "[gemm][validation]") {
  operands o;
  const auto host = gpubatch::on_host;
  require_invalid("b", [&] { gpubatch::gemm(host, op::none, op::none, 1.0F, o.view_a(2, 3), o.view_b(4, 2), 0.0F, o.view_c(2, 2)); });
  require_invalid("c", [&] { gpubatch::gemm(host, op::none, op::none, 1.0F, o.view_a(2, 3), o.view_b(3, 2), 0.0F, o.view_c(3, 2)); });
  require_invalid("c", [&] { gpubatch::gemm(host, op::transpose, op::none, 1.0F, o.view_a(2, 3), o.view_b(2, 2), 0.0F, o.view_c(2, 2)); });
  require_invalid("a", [&] { gpubatch::gemm(host, op::none, op::none, 1.0F, o.view_a(2, 2, 3), o.view_b(2, 2, 2), 0.0F, o.view_c(2, 2, 2)); });
  require_invalid("b", [&] { gpubatch::gemm(host, op::none, op::none, 1.0F, o.view_a(2, 2, 2), o.view_b(2, 2, 1), 0.0F, o.view_c(2, 2, 2)); });
  CHECK(o.c_untouched());
}

TEST_CASE("gemm rejects views in memory the backend cannot access", "[gemm][validation]") {
  operands o;
  const matrix_batch_view<const float> on_device(o.a.data(), 2, 2, 2, 4, 1, layout::row_major,
                                                 gpubatch::memory_space::device);
  require_invalid("a", [&] { gpubatch::gemm(gpubatch::on_host, op::none, op::none, 1.0F, on_device, o.view_b(2, 2), 0.0F, o.view_c(2, 2)); });
  CHECK(o.c_untouched());
}

TEST_CASE("gemm with m, n, k or batch = 0 touches nothing", "[gemm][validation]") {
  operands o;
  const auto host = gpubatch::on_host;
  gpubatch::gemm(host, op::none, op::none, 1.0F, o.view_a(0, 3), o.view_b(3, 2), 1.0F, o.view_c(0, 2));
  gpubatch::gemm(host, op::none, op::none, 1.0F, o.view_a(2, 3), o.view_b(3, 0), 1.0F, o.view_c(2, 0));
  gpubatch::gemm(host, op::none, op::none, 1.0F, o.view_a(2, 0), o.view_b(0, 2), 1.0F, o.view_c(2, 2));
  gpubatch::gemm(host, op::none, op::none, 1.0F, o.view_a(2, 2, 0), o.view_b(2, 2, 0), 1.0F, o.view_c(2, 2, 0));
  CHECK(o.c_untouched());
}

TEST_CASE("gemm with beta = 0 never reads C", "[gemm][validation]") {
  std::vector<float> a = {1, 2, 3, 4}, b = {1, 0, 0, 1};
  std::vector<float> c(4, std::nanf(""));
  gpubatch::gemm(gpubatch::on_host, op::none, op::none, 2.0F,
                 matrix_batch_view<const float>::packed(a.data(), 2, 2, 1),
                 matrix_batch_view<const float>::packed(b.data(), 2, 2, 1), 0.0F,
                 matrix_batch_view<float>::packed(c.data(), 2, 2, 1));
  CHECK(c == std::vector<float>{2, 4, 6, 8});
}

TEST_CASE("a stride-0 operand broadcasts one matrix across the batch", "[gemm]") {
  std::vector<float> a = {1, 2, 3, 4};                 // one 2 x 2 matrix for every problem
  std::vector<float> b = {1, 0, 0, 1, 2, 0, 0, 2};     // identity, then 2 x identity
  std::vector<float> c(8, -1.0F);
  gpubatch::gemm(gpubatch::on_host, op::none, op::none, 1.0F,
                 matrix_batch_view<const float>(a.data(), 2, 2, 2, 0, 2),
                 matrix_batch_view<const float>::packed(b.data(), 2, 2, 2), 0.0F,
                 matrix_batch_view<float>::packed(c.data(), 2, 2, 2));
  CHECK(c == std::vector<float>{1, 2, 3, 4, 2, 4, 6, 8});
}

TEST_CASE("a stride-0 C is rejected: every problem would write one matrix", "[gemm][validation]") {
  std::vector<float> a(8, 1.0F), b(8, 1.0F), c(4, -7.0F);
  const auto broadcast_c = matrix_batch_view<float>(c.data(), 2, 2, 2, 0, 2);
  require_invalid("c", [&] {
    gpubatch::gemm(gpubatch::on_host, op::none, op::none, 1.0F,
                   matrix_batch_view<const float>::packed(a.data(), 2, 2, 2),
                   matrix_batch_view<const float>::packed(b.data(), 2, 2, 2), 1.0F, broadcast_c);
  });
  for (float v : c) CHECK(v == -7.0F);
  // One problem may have any stride.
  gpubatch::gemm(gpubatch::on_host, op::none, op::none, 1.0F,
                 matrix_batch_view<const float>::packed(a.data(), 2, 2, 1),
                 matrix_batch_view<const float>::packed(b.data(), 2, 2, 1), 0.0F,
                 matrix_batch_view<float>(c.data(), 2, 2, 2, 0, 1));
  CHECK(c[0] == 2.0F);
}

TEST_CASE("gemm_grouped validates every problem on the host backend", "[gemm][validation]") {
  std::vector<float> a(16, 1.0F), b(16, 1.0F), c(16, -7.0F);
  using problem = gpubatch::gemm_problem<float, float, float>;
  std::vector<problem> problems = {{2, 2, 2, a.data(), 2, b.data(), 2, c.data(), 2},
                                   {2, -1, 2, a.data(), 2, b.data(), 2, c.data(), 2}};
  const gpubatch::grouped_gemm_layout layouts{};
  require_invalid("problems[1]", [&] { gpubatch::gemm_grouped(gpubatch::on_host, layouts, 1.0F, problems.data(), 2, 0.0F); });
  problems[1] = {2, 3, 2, a.data(), 2, b.data(), 2, c.data(), 2};  // ldb 2 < n = 3
  require_invalid("problems[1]", [&] { gpubatch::gemm_grouped(gpubatch::on_host, layouts, 1.0F, problems.data(), 2, 0.0F); });
  problems[1] = {2, 2, 2, nullptr, 2, b.data(), 2, c.data(), 2};
  require_invalid("problems[1]", [&] { gpubatch::gemm_grouped(gpubatch::on_host, layouts, 1.0F, problems.data(), 2, 0.0F); });
  require_invalid("problems", [&] { gpubatch::gemm_grouped(gpubatch::on_host, layouts, 1.0F, static_cast<const problem*>(nullptr), 2, 0.0F); });
  require_invalid("count", [&] { gpubatch::gemm_grouped(gpubatch::on_host, layouts, 1.0F, problems.data(), -1, 0.0F); });
  for (float v : c) CHECK(v == -7.0F);  // nothing ran: validation precedes computation
  // Problems with a zero size are skipped, the others computed.
  problems[1] = {0, 2, 2, nullptr, 0, nullptr, 0, nullptr, 0};
  gpubatch::gemm_grouped(gpubatch::on_host, layouts, 1.0F, problems.data(), 2, 0.0F);
  CHECK(c[0] == 2.0F);
}
