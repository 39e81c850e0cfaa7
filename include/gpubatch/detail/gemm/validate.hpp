/// @file detail/gemm/validate.hpp
/// @brief Host-side GEMM argument checks, run once before anything is launched.
#pragma once

#include <gpubatch/detail/host/checked.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/gemm_problem.hpp>
#include <gpubatch/memory_space.hpp>
#include <gpubatch/views.hpp>

#include <string>
#include <type_traits>
#include <utility>

GPUBATCH_NAMESPACE_BEGIN
namespace detail {

/// Shape of a GEMM batch after validation.
struct gemm_shape {
  index_t m, n, k, count;
  [[nodiscard]] bool empty() const { return m == 0 || n == 0 || k == 0 || count == 0; }
};

inline std::string shape_string(index_t rows, index_t cols) {
  return std::to_string(rows) + " x " + std::to_string(cols);
}

/// The memory behind `address` must be readable (or writable) by the backend `exec` selects,
/// and, with gpubatch::on_host_checked, by the CUDA backend too.
template <class Exec>
void require_accessible(const Exec& exec, const char* parameter, memory_space stated,
                        const void* address) {
  const memory_space space = stated == memory_space::unknown ? memory_space_of(address) : stated;
  if (!is_accessible<Exec>(space)) {
    throw invalid_argument(parameter, std::string("is in ") + to_string(space) + " memory, which the " +
                                          (is_cuda_exec_v<Exec> ? "cuda" : "host") +
                                          " backend cannot access");
  }
  require_cuda_rules(exec, parameter, space, address);
}

/// Whether a batch view has a batch stride (strided batches; pointer arrays have none).
template <class View, class = void>
struct has_batch_stride : std::false_type {};
template <class View>
struct has_batch_stride<View, std::void_t<decltype(std::declval<const View&>().batch_stride())>>
    : std::true_type {};

/// Checks op(A) (m x k) * op(B) (k x n) -> C (m x n) for views with rows(), cols() and count().
template <class VA, class VB, class VC>
gemm_shape check_gemm_shapes(op op_a, op op_b, const VA& a, const VB& b, const VC& c) {
  const index_t m = op_a == op::none ? a.rows() : a.cols();
  const index_t k = op_a == op::none ? a.cols() : a.rows();
  const index_t kb = op_b == op::none ? b.rows() : b.cols();
  const index_t n = op_b == op::none ? b.cols() : b.rows();
  if (kb != k) {
    throw invalid_argument("b", "op(B) is " + shape_string(kb, n) + " but op(A) is " +
                                    shape_string(m, k) + ": inner dimensions differ");
  }
  if (c.rows() != m || c.cols() != n) {
    throw invalid_argument("c", "C is " + shape_string(c.rows(), c.cols()) + " but op(A) * op(B) is " +
                                    shape_string(m, n));
  }
  if (a.count() != c.count()) {
    throw invalid_argument("a", "batch of " + std::to_string(a.count()) + " matrices, but C has " +
                                    std::to_string(c.count()));
  }
  if (b.count() != c.count()) {
    throw invalid_argument("b", "batch of " + std::to_string(b.count()) + " matrices, but C has " +
                                    std::to_string(c.count()));
  }
  if constexpr (has_batch_stride<VC>::value) {
    // Every problem would write the one C at once: a race on the device, and on the host a
    // result that depends on the order the problems run in.
    if (c.count() > 1 && c.batch_stride() == 0 && m * n > 0) {
      throw invalid_argument("c", "has batch stride 0: " + std::to_string(c.count()) +
                                      " problems would write one C (only inputs may be broadcast)");
    }
  }
  return {m, n, k, c.count()};
}

/// Checks one problem of a grouped batch (host backend: the descriptors are host memory).
template <class TA, class TB, class TC>
void check_grouped_problem(const gemm_problem<TA, TB, TC>& p, const grouped_gemm_layout& layouts,
                           index_t index) {
  const std::string where = "problems[" + std::to_string(index) + "]";
  if (p.m < 0 || p.n < 0 || p.k < 0) {
    throw invalid_argument(where, "negative size m x n x k = " + std::to_string(p.m) + " x " +
                                      std::to_string(p.n) + " x " + std::to_string(p.k));
  }
  if (p.m == 0 || p.n == 0 || p.k == 0) {
    return;  // nothing to compute, nothing is touched
  }
  // Stored shapes: op(A) is m x k, so A is m x k or k x m; likewise B and C.
  const auto check_ld = [&](const char* name, const void* data, index_t ld, layout order, op o,
                            index_t rows, index_t cols) {
    const index_t stored_rows = o == op::none ? rows : cols;
    const index_t stored_cols = o == op::none ? cols : rows;
    const index_t minor = order == layout::row_major ? stored_cols : stored_rows;
    if (data == nullptr) {
      throw invalid_argument(where, std::string(name) + " is null");
    }
    if (ld < minor) {
      throw invalid_argument(where, std::string("ld") + name + " = " + std::to_string(ld) +
                                        " is smaller than " + std::to_string(minor) + " (" +
                                        to_string(order) + ")");
    }
  };
  check_ld("a", p.a, p.lda, layouts.a, layouts.op_a, p.m, p.k);
  check_ld("b", p.b, p.ldb, layouts.b, layouts.op_b, p.k, p.n);
  check_ld("c", p.c, p.ldc, layouts.c, op::none, p.m, p.n);
}

/// gpubatch::on_host_checked: what the CUDA backend assumes of a grouped problem. Its m, n and k
/// are within `bounds` (the GPU skips a problem outside them), and its matrices are in memory
/// the GPU can reach.
template <class Exec, class TA, class TB, class TC>
void check_grouped_problem_for_cuda(const Exec& exec, const gemm_problem<TA, TB, TC>& p,
                                    const grouped_gemm_bounds& bounds, index_t index) {
  const std::string where = "problems[" + std::to_string(index) + "]";
  if (p.m > bounds.max_m || p.n > bounds.max_n || p.k > bounds.max_k) {
    throw invalid_argument(where, "m x n x k = " + std::to_string(p.m) + " x " +
                                      std::to_string(p.n) + " x " + std::to_string(p.k) +
                                      " exceeds bounds " + std::to_string(bounds.max_m) + " x " +
                                      std::to_string(bounds.max_n) + " x " +
                                      std::to_string(bounds.max_k) +
                                      " (the CUDA backend would skip it)");
  }
  if (p.m == 0 || p.n == 0 || p.k == 0) {
    return;
  }
  require_cuda_rules(exec, (where + ".a").c_str(), memory_space_of(p.a), p.a);
  require_cuda_rules(exec, (where + ".b").c_str(), memory_space_of(p.b), p.b);
  require_cuda_rules(exec, (where + ".c").c_str(), memory_space_of(p.c), p.c);
}

}  // namespace detail
GPUBATCH_NAMESPACE_END
