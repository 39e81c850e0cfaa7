/// @file detail/gemm/problem.hpp
/// @brief The GEMM index math both backends share: operands reduced to (row, column) strides,
/// the three batch forms behind one interface, the epilogue store, and launch splitting.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/gemm_problem.hpp>
#include <gpubatch/numeric.hpp>
#include <gpubatch/views.hpp>

GPUBATCH_NAMESPACE_BEGIN
namespace detail {

GPUBATCH_HOST_DEVICE constexpr index_t ceil_div(index_t a, index_t b) { return (a + b - 1) / b; }

/// Distances between consecutive rows and columns of a matrix.
struct strides2 {
  index_t row;
  index_t col;
};

/// Strides of op(X) for X stored in `order` with leading dimension `ld`: every combination of
/// layout and transpose becomes one (row, col) stride pair, so kernels have a single code path.
GPUBATCH_HOST_DEVICE constexpr strides2 operand_strides(layout order, op o, index_t ld) {
  const strides2 s = order == layout::row_major ? strides2{ld, 1} : strides2{1, ld};
  return o == op::transpose ? strides2{s.col, s.row} : s;
}

/// A matrix addressed through strides; element (i, j) is data[i * row + j * col].
template <class T>
struct matrix_ref {
  T* data;
  strides2 stride;
  GPUBATCH_HOST_DEVICE T& operator()(index_t i, index_t j) const {
    return data[i * stride.row + j * stride.col];
  }
};

/// One problem of a batch, ready to compute: C (m x n) = op(A) (m x k) * op(B) (k x n).
template <class TA, class TB, class TC>
struct gemm_instance {
  index_t m;
  index_t n;
  index_t k;
  matrix_ref<const TA> a;
  matrix_ref<const TB> b;
  matrix_ref<TC> c;
};

/// Strided batch: problem i's operands at a constant distance from problem 0's.
template <class TA, class TB, class TC>
struct strided_gemm_batch {
  static constexpr bool uniform = true;
  index_t m, n, k, count;
  matrix_ref<const TA> a;
  index_t a_batch_stride;
  matrix_ref<const TB> b;
  index_t b_batch_stride;
  matrix_ref<TC> c;
  index_t c_batch_stride;

  GPUBATCH_HOST_DEVICE gemm_instance<TA, TB, TC> problem(index_t i) const {
    return {m,
            n,
            k,
            {a.data + i * a_batch_stride, a.stride},
            {b.data + i * b_batch_stride, b.stride},
            {c.data + i * c_batch_stride, c.stride}};
  }
};

/// Pointer-array batch: uniform shapes, one pointer per problem and operand.
template <class TA, class TB, class TC>
struct array_gemm_batch {
  static constexpr bool uniform = true;
  index_t m, n, k, count;
  const TA* const* a;
  strides2 a_stride;
  const TB* const* b;
  strides2 b_stride;
  TC* const* c;
  strides2 c_stride;

  GPUBATCH_HOST_DEVICE gemm_instance<TA, TB, TC> problem(index_t i) const {
    return {m, n, k, {a[i], a_stride}, {b[i], b_stride}, {c[i], c_stride}};
  }
};

/// Grouped batch: every problem its own shape, leading dimensions and pointers, read from the
/// descriptor array where the problem is computed (device memory for the CUDA backend).
template <class TA, class TB, class TC>
struct grouped_gemm_batch {
  static constexpr bool uniform = false;
  index_t count;
  const gemm_problem<TA, TB, TC>* problems;
  grouped_gemm_layout layouts;
  grouped_gemm_bounds bounds;

  GPUBATCH_HOST_DEVICE gemm_instance<TA, TB, TC> problem(index_t i) const {
    const gemm_problem<TA, TB, TC> p = problems[i];
    return {p.m,
            p.n,
            p.k,
            {p.a, operand_strides(layouts.a, layouts.op_a, p.lda)},
            {p.b, operand_strides(layouts.b, layouts.op_b, p.ldb)},
            {p.c, operand_strides(layouts.c, op::none, p.ldc)}};
  }
};

/// Finishes one output element: out = epilogue(alpha * acc + beta * out). C is read only when
/// beta != 0, so with beta = 0 it may hold anything, NaN included.
template <class TC, class Compute, class Epilogue>
GPUBATCH_HOST_DEVICE void store_output(TC& out, Compute acc, Compute alpha, Compute beta,
                                       const Epilogue& epilogue, index_t batch, index_t row,
                                       index_t col) {
  Compute value = alpha * acc;
  if (beta != Compute(0)) {
    value += beta * convert<Compute>(out);
  }
  out = convert<TC>(epilogue(value, batch, row, col));
}

/// A contiguous run of outputs that a kernel's epilogue finishes together: where it starts, and
/// how its element j is finished (store_output's arithmetic, the epilogue seeing
/// (batch, row, col + j) along a row, (batch, row + j, col) `Down` a column). The run's address
/// and epilogue position are found once, where element by element each output found its own (a
/// convolution's, with a 64-bit division).
template <class TC, class Compute, class Epilogue, bool Down = false>
struct output_run {
  TC* out;  ///< the run's first output
  Compute alpha, beta;
  const Epilogue* epilogue;
  index_t batch, row, col;

  /// Whether finishing reads the output (beta != 0).
  GPUBATCH_HOST_DEVICE bool reads_output() const { return beta != Compute(0); }
  template <class Accumulator>
  GPUBATCH_HOST_DEVICE void finish(TC& dst, Accumulator value, int j) const {
    store_output(dst, static_cast<Compute>(value), alpha, beta, *epilogue, batch,
                 Down ? row + j : row, Down ? col : col + j);
  }
};

/// A slice of a batch handled by one kernel launch.
struct launch_slice {
  index_t first;  ///< first problem group of the slice
  index_t count;  ///< problem groups in the slice
};

/// Launches needed for `groups` problem groups when one launch takes at most `per_launch`.
GPUBATCH_HOST_DEVICE constexpr index_t launch_count(index_t groups, index_t per_launch) {
  return groups <= 0 ? 0 : ceil_div(groups, per_launch);
}

/// The slice of launch `launch` (0-based) of launch_count(groups, per_launch).
GPUBATCH_HOST_DEVICE constexpr launch_slice slice_of_launch(index_t groups, index_t per_launch,
                                                            index_t launch) {
  const index_t first = launch * per_launch;
  const index_t left = groups - first;
  return {first, left < per_launch ? left : per_launch};
}

}  // namespace detail
GPUBATCH_NAMESPACE_END
