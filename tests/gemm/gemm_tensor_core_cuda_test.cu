// The tensor-core kernel beyond what the per-type tests reach: f32 on TF32 tensor cores, user
// tensor-core policies (other tiles, warps and stage counts), the large default tile, and the
// refusal of f32 on tensor cores without allow_tf32.
#include "../support/cuda_backend.hpp"
#include "../support/race_check.hpp"
#include "gemm_check.hpp"

namespace {
using gpubatch::half;
using gpubatch::index_t;
using gpubatch::layout;
using gpubatch::op;
using gpubatch::tensor_core_policy;
using gpubatch::test::batch_form;
using gpubatch::test::check_gemm;
using gpubatch::test::gemm_case;
using gpubatch::test::test_backend;
using identity = gpubatch::epilogue::identity;

std::vector<op> staged_ops() {
  return gpubatch::test::unless_race_check<op>({op::none, op::transpose}, {op::none});
}
}  // namespace

TEST_CASE("gemm f32 on TF32 tensor cores: every op and layout, edge sizes", "[gemm][tensor_core]") {
  const op op_a = GENERATE(op::none, op::transpose);
  const op op_b = GENERATE(op::none, op::transpose);
  const layout la = GENERATE(layout::row_major, layout::col_major);
  const layout lb = GENERATE(layout::row_major, layout::col_major);
  for (const auto& s : gpubatch::test::edge_shapes()) {
    gemm_case c{s[0], s[1], s[2], 3, op_a, op_b, la, lb, layout::col_major, 1.0, -0.5};
    c.pad = s[0] % 2;
    c.allow_tf32 = true;
    check_gemm<test_backend, float, float>(c);
  }
}

TEST_CASE("gemm on tensor cores: every layout and transpose staged asynchronously",
          "[gemm][tensor_core]") {
  // Sizes that are whole 16-byte chunks along every dimension, so each operand takes the
  // cp.async path in its own orientation (K-major or M/N-major), next to a ragged shape where
  // the last chunk of every dimension goes element by element; C in both layouts reads its
  // accumulator tile in the matching orientation. The race check keeps op::none: the layouts
  // alone give each operand both orientations.
  const op op_a = GENERATE(from_range(staged_ops()));
  const op op_b = GENERATE(from_range(staged_ops()));
  const layout la = GENERATE(layout::row_major, layout::col_major);
  const layout lb = GENERATE(layout::row_major, layout::col_major);
  const batch_form form = GENERATE(batch_form::strided, batch_form::grouped);
  for (const auto& s : {std::array<index_t, 3>{80, 96, 112}, std::array<index_t, 3>{79, 97, 113}}) {
    gemm_case c{s[0], s[1], s[2], 2, op_a, op_b, la, lb, la, 1.0, -0.5, form};
    check_gemm<test_backend, half, float>(c);
    check_gemm<test_backend, std::int8_t, std::int32_t>(c);
    c.lc = lb;
    check_gemm<test_backend, gpubatch::bfloat16, gpubatch::bfloat16>(c);
    c.allow_tf32 = true;
    check_gemm<test_backend, float, float>(c);
  }
}

TEST_CASE("gemm f32 on TF32 tensor cores: batch forms and the large tile", "[gemm][tensor_core]") {
  const batch_form form = GENERATE(batch_form::strided, batch_form::pointer_array, batch_form::grouped);
  for (const auto& s : {std::array<index_t, 3>{200, 130, 70}, std::array<index_t, 3>{600, 520, 40}}) {
    gemm_case c{s[0], s[1], s[2], 2, op::none, op::transpose, layout::row_major, layout::row_major,
                layout::row_major, 0.5, 0.0, form};
    c.allow_tf32 = true;
    check_gemm<test_backend, float, float>(c);
  }
}

TEST_CASE("gemm f16, bf16 and int8: the large tensor-core tile", "[gemm][tensor_core]") {
  // Grouped int8 needs 96 KiB for the tile and 2 KiB for the walk: on a device of 99 KiB per
  // block it takes the medium tile instead.
  const batch_form form = GENERATE(batch_form::strided, batch_form::grouped);
  gemm_case c{600, 520, 72, 2, op::none, op::none, layout::row_major, layout::col_major,
              layout::row_major, 1.0, 0.5, form};
  check_gemm<test_backend, half, half>(c);
  check_gemm<test_backend, std::int8_t, std::int32_t>(c);
  c.op_a = op::transpose;
  check_gemm<test_backend, gpubatch::bfloat16, float>(c);
}

TEST_CASE("gemm with user tensor-core policies", "[gemm][tensor_core]") {
  using narrow = tensor_core_policy<32, 32, 32, 2, 2>;      // 2 warps, double buffered
  using deep = tensor_core_policy<128, 64, 64, 4, 4, 3>;    // 4 stages, 3 problems per launch
  const op op_a = GENERATE(op::none, op::transpose);
  const batch_form form = GENERATE(batch_form::strided, batch_form::grouped);
  // `deep` stages 4 x (128 + 64) x 64 f16 elements, 144 KiB per block (plus 2 KiB for a grouped
  // batch's walk): more than a device of 99 KiB per block has, which must say so.
  int device = 0, optin = 0;
  GPUBATCH_CUDA_TRY(cudaGetDevice(&device));
  GPUBATCH_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const bool deep_fits = optin >= 150 * 1024;
  // The race check keeps every other shape: still 1 x 1 x 1, ragged and multi-tile ones.
  for (const auto& s :
       gpubatch::test::sampled_in_race_check(gpubatch::test::edge_shapes(), 2)) {
    gemm_case c{s[0], s[1], s[2], 4, op_a, op::none, layout::row_major, layout::col_major,
                layout::row_major, 1.0, 0.5, form};
    c.pad = 1;
    check_gemm<test_backend, half, float, identity, narrow>(c);
    if (deep_fits) {
      check_gemm<test_backend, half, half, identity, deep>(c);
    } else {
      CHECK_THROWS_WITH((check_gemm<test_backend, half, half, identity, deep>(c)),
                        gpubatch::test::Contains("bytes of shared memory per block"));
    }
    check_gemm<test_backend, std::int8_t, std::int32_t, identity, narrow>(c);
  }
}

TEST_CASE("a tensor-core policy with f32 needs allow_tf32", "[gemm][tensor_core]") {
  const auto exec = test_backend::exec();
  gpubatch::device_buffer<float> a(16, exec), b(16, exec), c(16, exec);
  using view = gpubatch::matrix_batch_view<float>;
  try {
    gpubatch::gemm<tensor_core_policy<32, 32, 16, 2, 2>>(exec, op::none, op::none, 1.0f,
                                                         view::packed(a, 4, 4, 1),
                                                         view::packed(b, 4, 4, 1), 0.0f,
                                                         view::packed(c, 4, 4, 1));
    FAIL("expected gpubatch::invalid_argument");
  } catch (const gpubatch::invalid_argument& e) {
    CHECK(e.parameter() == "options");
  }
}
