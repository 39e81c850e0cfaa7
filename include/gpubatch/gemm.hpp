/// @file gemm.hpp
/// @brief Batched GEMM on both backends: C_i = epilogue(alpha * op(A_i) * op(B_i) + beta * C_i)
/// for every problem i of a strided, pointer-array or grouped batch.
///
/// Types (A, B -> accumulate -> C): f64 -> f64 -> f64; f32 -> f32 -> f32 (TF32 tensor cores
/// by opt-in); f16 -> f32 -> f16 or f32; bf16 -> f32 -> bf16 or f32; int8 -> int32 -> int32.
/// Alpha, beta and the epilogue work in the accumulate type.
///
/// With beta = 0, C is never read (it may be uninitialised). m, n, k or batch = 0 is a no-op
/// that touches nothing (C is not scaled by beta when k = 0).
#pragma once

#include <gpubatch/detail/epilogue/validate.hpp>
#include <gpubatch/detail/gemm/host.hpp>
#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/detail/gemm/validate.hpp>
#include <gpubatch/epilogue.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/gemm_policy.hpp>
#include <gpubatch/gemm_problem.hpp>
#include <gpubatch/numeric.hpp>
#include <gpubatch/views.hpp>

#include <cstdint>
#include <string>
#include <type_traits>

#if GPUBATCH_CUDA_COMPILER
#include <gpubatch/detail/gemm/dispatch.cuh>
#endif

GPUBATCH_NAMESPACE_BEGIN

namespace detail {
template <class TA, class TB, class TC, class Epilogue>
constexpr void check_gemm_types() {
  using A = std::remove_const_t<TA>;
  using B = std::remove_const_t<TB>;
  static_assert(std::is_same_v<A, B>, "gpubatch::gemm: A and B must have the same element type");
  static_assert(!std::is_const_v<TC>, "gpubatch::gemm: C must be writable (not a view of const)");
  static_assert(is_supported_element_v<A>,
                "gpubatch::gemm: supported element types are double, float, gpubatch::half, "
                "gpubatch::bfloat16 and std::int8_t");
  using compute = compute_type_t<A>;
  static_assert(supported_output_v<A, TC>,
                "gpubatch::gemm: unsupported output type; C may be: double for double inputs; "
                "float for float; half or float for half; bfloat16 or float for bfloat16; "
                "int32_t for int8");
  static_assert(std::is_trivially_copyable_v<Epilogue>,
                "gpubatch::gemm: the epilogue must be trivially copyable (it is passed to kernels "
                "by value)");
  static_assert(std::is_invocable_r_v<compute, const Epilogue&, compute, index_t, index_t, index_t>,
                "gpubatch::gemm: the epilogue must be callable as "
                "epilogue(value, batch, row, col) with value in the accumulate type");
}

template <class Policy, class Exec, class Batch, class Compute, class Epilogue>
void run_gemm(Exec exec, const Batch& batch, Compute alpha, Compute beta, const Epilogue& epilogue,
              const gemm_options& options) {
  if constexpr (is_cuda_exec_v<Exec>) {
#if GPUBATCH_CUDA_COMPILER
    cuda_gemm::dispatch<Policy>(exec.stream(), batch, alpha, beta, epilogue, options);
#endif
  } else {
    (void)options;  // TF32 is a tensor-core mode; the host backend always computes in f32
    host_gemm::run(exec, batch, alpha, beta, epilogue);
  }
}
}  // namespace detail

/// @brief Strided-batch GEMM: C_i = epilogue(alpha * op(A_i) * op(B_i) + beta * C_i).
///
/// A batch stride of 0 in `a` or `b` broadcasts one matrix across the batch without copying it.
/// Each view carries its own layout (row- or column-major) and leading dimension.
///
/// @tparam Policy a gemm_policy (SIMT) or tensor_core_policy to force on the CUDA backend; `void`
///         (the default) lets the run-time heuristic pick among the compiled defaults: tensor
///         cores for f16, bf16 and int8 (and f32 with options.allow_tf32), SIMT for f32 and
///         f64, the tiny-matrix kernel for problems up to 32 x 32 x 64 (uniform f64, f32, f16
///         and bf16 batches of at least 8 x 8 take one problem per block on small tiles instead:
///         default_small_tile_policy). Ignored by the host backend.
/// @param exec gpubatch::on_host or gpubatch::on(stream)
/// @param op_a, op_b whether A and B are read transposed
/// @param alpha, beta scalars in the accumulate type
/// @param a, b, c the batches; op(A) is m x k, op(B) k x n, C m x n, all with the same count
/// @param epilogue applied to every element before it is stored (see epilogue.hpp); a bias or
///        residual must be non-null and readable by the backend (device memory for the CUDA
///        backend; gpubatch::on_host_checked applies that rule on the host)
/// @param options e.g. allow_tf32 for f32 on tensor cores
/// @throws invalid_argument naming the parameter: mismatched shapes or counts, or a view in
///         memory the backend cannot access
/// @throws cuda_error if a launch fails; error if f16, bf16 or int8 (default policy) or a
///         tensor_core_policy meets a GPU below compute capability 8.0
template <class Policy = void, class Exec, class TA, class TB, class TC,
          class Epilogue = epilogue::identity>
void gemm(Exec exec, op op_a, op op_b, detail::scalar_t<TA> alpha,
          const matrix_batch_view<TA>& a, const matrix_batch_view<TB>& b,
          detail::scalar_t<TA> beta, const matrix_batch_view<TC>& c,
          Epilogue epilogue = {}, gemm_options options = {}) {
  static_assert(is_execution_v<Exec>, "gpubatch::gemm: the first argument must be an execution "
                                      "argument (gpubatch::on_host or gpubatch::on(stream))");
  detail::require_cuda_compiler<Exec>();
  detail::check_gemm_types<TA, TB, TC, Epilogue>();
  using A = std::remove_const_t<TA>;
  using B = std::remove_const_t<TB>;

  const detail::gemm_shape shape = detail::check_gemm_shapes(op_a, op_b, a, b, c);
  if (shape.empty()) {
    return;
  }
  detail::require_accessible(exec, "a", a.space(), a.data());
  detail::require_accessible(exec, "b", b.space(), b.data());
  detail::require_accessible(exec, "c", c.space(), c.data());

  const detail::strided_gemm_batch<A, B, TC> batch{
      shape.m,
      shape.n,
      shape.k,
      shape.count,
      {a.data(), detail::operand_strides(a.order(), op_a, a.ld())},
      a.batch_stride(),
      {b.data(), detail::operand_strides(b.order(), op_b, b.ld())},
      b.batch_stride(),
      {c.data(), detail::operand_strides(c.order(), op::none, c.ld())},
      c.batch_stride()};
  detail::check_epilogue(exec, epilogue, "epilogue");
  detail::run_gemm<Policy>(exec, batch, alpha, beta, epilogue, options);
}

/// @brief Pointer-array GEMM: uniform shapes, one pointer per problem for each operand.
///
/// The pointer arrays must be accessible to the backend (device memory for the CUDA backend).
/// A null entry is an invalid_argument naming the operand wherever the host can read the array:
/// always on the host backend, for pinned or managed arrays on the CUDA backend. An array in
/// device memory is not read back (a copy and a synchronisation per call); a null entry there
/// faults in the kernel (cudaErrorIllegalAddress at the next synchronisation).
/// @throws invalid_argument as for the strided form, and for a null entry
template <class Policy = void, class Exec, class TA, class TB, class TC,
          class Epilogue = epilogue::identity>
void gemm(Exec exec, op op_a, op op_b, detail::scalar_t<TA> alpha,
          const pointer_matrix_batch_view<TA>& a, const pointer_matrix_batch_view<TB>& b,
          detail::scalar_t<TA> beta,
          const pointer_matrix_batch_view<TC>& c, Epilogue epilogue = {},
          gemm_options options = {}) {
  static_assert(is_execution_v<Exec>, "gpubatch::gemm: the first argument must be an execution "
                                      "argument (gpubatch::on_host or gpubatch::on(stream))");
  detail::require_cuda_compiler<Exec>();
  detail::check_gemm_types<TA, TB, TC, Epilogue>();
  using A = std::remove_const_t<TA>;
  using B = std::remove_const_t<TB>;

  const detail::gemm_shape shape = detail::check_gemm_shapes(op_a, op_b, a, b, c);
  if (shape.empty()) {
    return;
  }
  detail::require_accessible(exec, "a", a.space(), a.pointers());
  detail::require_accessible(exec, "b", b.space(), b.pointers());
  detail::require_accessible(exec, "c", c.space(), c.pointers());
  detail::check_pointer_entries(exec, "a", a);
  detail::check_pointer_entries(exec, "b", b);
  detail::check_pointer_entries(exec, "c", c);

  const detail::array_gemm_batch<A, B, TC> batch{
      shape.m,
      shape.n,
      shape.k,
      shape.count,
      reinterpret_cast<const A* const*>(a.pointers()),
      detail::operand_strides(a.order(), op_a, a.ld()),
      reinterpret_cast<const B* const*>(b.pointers()),
      detail::operand_strides(b.order(), op_b, b.ld()),
      c.pointers(),
      detail::operand_strides(c.order(), op::none, c.ld())};
  detail::check_epilogue(exec, epilogue, "epilogue");
  detail::run_gemm<Policy>(exec, batch, alpha, beta, epilogue, options);
}

/// @brief Grouped GEMM: every problem its own m, n, k, leading dimensions and pointers; the
/// layouts and ops in `layouts` apply to all. Mixture-of-experts layers and ragged batches.
///
/// On the CUDA backend `problems` is in device memory and the call does not synchronise: the
/// kernel and its grid are chosen from `bounds`, which must be upper bounds of every problem's
/// m, n and k (a problem outside them is a precondition violation; it is skipped, its C left
/// as it was). On the host backend `problems` is in host memory, each problem is validated,
/// and `bounds` is ignored; gpubatch::on_host_checked asks for what the CUDA backend needs:
/// descriptors in a device_buffer or pinned memory, bounds, every problem within them.
///
/// @param problems `count` problem descriptors
/// @throws invalid_argument naming the parameter: a negative count, a null descriptor array,
///         missing bounds (CUDA), or (host) a bad problem, named by its index
template <class Policy = void, class Exec, class TA, class TB, class TC,
          class Epilogue = epilogue::identity>
void gemm_grouped(Exec exec, const grouped_gemm_layout& layouts,
                  detail::scalar_t<TA> alpha,
                  const gemm_problem<TA, TB, TC>* problems, index_t count,
                  detail::scalar_t<TA> beta, Epilogue epilogue = {},
                  grouped_gemm_bounds bounds = {}, gemm_options options = {}) {
  static_assert(is_execution_v<Exec>, "gpubatch::gemm_grouped: the first argument must be an "
                                      "execution argument (gpubatch::on_host or gpubatch::on(stream))");
  detail::require_cuda_compiler<Exec>();
  detail::check_gemm_types<TA, TB, TC, Epilogue>();
  detail::require_nonnegative("count", count);
  if (count == 0) {
    return;
  }
  if (problems == nullptr) {
    throw invalid_argument("problems", "null descriptor array for " + std::to_string(count) +
                                           " problems");
  }
  detail::require_accessible(exec, "problems", memory_space::unknown, problems);
  if (is_cuda_exec_v<Exec> || detail::applies_cuda_rules(exec)) {
    if (bounds.max_m <= 0 || bounds.max_n <= 0 || bounds.max_k <= 0) {
      throw invalid_argument("bounds", "the CUDA backend needs positive upper bounds on m, n and "
                                       "k (got " + std::to_string(bounds.max_m) + ", " +
                                       std::to_string(bounds.max_n) + ", " +
                                       std::to_string(bounds.max_k) + ")");
    }
  }
  if constexpr (is_host_exec_v<Exec>) {
    for (index_t i = 0; i < count; ++i) {
      detail::check_grouped_problem(problems[i], layouts, i);
      if (exec.cuda_memory_rules) {
        detail::check_grouped_problem_for_cuda(exec, problems[i], bounds, i);
      }
    }
  }
  const detail::grouped_gemm_batch<TA, TB, TC> batch{count, problems, layouts, bounds};
  detail::check_epilogue(exec, epilogue, "epilogue");
  detail::run_gemm<Policy>(exec, batch, alpha, beta, epilogue, options);
}

GPUBATCH_NAMESPACE_END
