/// @file gemm_problem.hpp
/// @brief Plain descriptions used by the GEMM entry points: one problem of a grouped batch,
/// the operand layouts a grouped batch shares, its size bounds, and GEMM options.
#pragma once

#include <gpubatch/views.hpp>

namespace gpubatch {

/// @brief One problem of a grouped GEMM: C (m x n) = op(A) (m x k) * op(B) (k x n), each with its
/// own sizes, leading dimensions and pointers. For the CUDA backend an array of these lives in
/// device memory; for the host backend, in host memory.
template <class TA, class TB, class TC>
struct gemm_problem {
  index_t m = 0;
  index_t n = 0;
  index_t k = 0;
  const TA* a = nullptr;
  index_t lda = 0;
  const TB* b = nullptr;
  index_t ldb = 0;
  TC* c = nullptr;
  index_t ldc = 0;
};

/// @brief Operand layouts and ops shared by every problem of a grouped GEMM.
struct grouped_gemm_layout {
  op op_a = op::none;
  layout a = layout::row_major;
  op op_b = op::none;
  layout b = layout::row_major;
  layout c = layout::row_major;
};

/// @brief Upper bounds on m, n and k over the problems of a grouped GEMM. The CUDA backend
/// chooses its kernel and sizes its grid from them instead of reading the descriptors back
/// (which would synchronise); it requires them. The host backend reads the descriptors
/// directly and ignores them.
struct grouped_gemm_bounds {
  index_t max_m = 0;
  index_t max_n = 0;
  index_t max_k = 0;
};

/// @brief Options that do not change what a GEMM computes, only how exactly.
struct gemm_options {
  /// f32 only: allow TF32 tensor cores (10-bit mantissa products, f32 accumulation).
  bool allow_tf32 = false;
};

}  // namespace gpubatch
