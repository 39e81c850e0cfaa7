// One contract on both backends: what the CUDA backend refuses, gpubatch::on_host_checked
// refuses on the host, and a program written against on_host_checked runs unchanged on a GPU.
#include "../support/cuda_backend.hpp"

#include "../support/catch.hpp"
#include "../support/inputs.hpp"

#include <string>
#include <vector>

using gpubatch::test::Contains;
using gpubatch::index_t;
using gpubatch::op;
using gpubatch::test::test_backend;
using view = gpubatch::matrix_batch_view<float>;
using const_view = gpubatch::matrix_batch_view<const float>;

namespace {


/// The program under test: written once for any backend, data in the backend's buffers.
template <class Exec>
std::vector<float> linear_layer(Exec exec, const std::vector<float>& a, const std::vector<float>& b,
                                const std::vector<float>& bias, index_t m, index_t n, index_t k,
                                index_t count) {
  gpubatch::device_buffer<float> da(a.size(), exec), db(b.size(), exec), dbias(bias.size(), exec),
      dc(static_cast<std::size_t>(m * n * count), exec);
  gpubatch::copy(exec, da, a);
  gpubatch::copy(exec, db, b);
  gpubatch::copy(exec, dbias, bias);
  gpubatch::gemm(exec, op::none, op::transpose, 1.0F, const_view::packed(da, m, k, count),
                 const_view::packed(db, n, k, count), 0.0F, view::packed(dc, m, n, count),
                 gpubatch::epilogue::then(gpubatch::epilogue::bias_col<float>{dbias.data()},
                                          gpubatch::epilogue::relu{}));
  std::vector<float> c(dc.size());
  gpubatch::copy(exec, c, dc);
  return c;
}

}  // namespace

TEST_CASE("a program that passes on_host_checked gives the same result on the CUDA backend",
          "[contract]") {
  const index_t m = 33, n = 17, k = 65, count = 3;
  const auto a = gpubatch::test::random_inputs<float>(static_cast<std::size_t>(m * k * count), 1);
  const auto b = gpubatch::test::random_inputs<float>(static_cast<std::size_t>(n * k * count), 2);
  const auto bias = gpubatch::test::random_inputs<float>(static_cast<std::size_t>(n), 3);
  const std::vector<float> host = linear_layer(gpubatch::on_host_checked, a, b, bias, m, n, k, count);
  const std::vector<float> cuda = linear_layer(test_backend::exec(), a, b, bias, m, n, k, count);
  REQUIRE(host.size() == cuda.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < host.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(host[i] - cuda[i])));
  }
  CHECK(worst < 1e-4);
}

TEST_CASE("a bias in pageable host memory is refused by the CUDA backend and by on_host_checked",
          "[contract]") {
  gpubatch::device_buffer<float> da(16, test_backend::exec()), db(16, test_backend::exec()),
      dc(16, test_backend::exec());
  const std::vector<float> bias(4, 1.0F);
  try {
    gpubatch::gemm(test_backend::exec(), op::none, op::none, 1.0F, const_view::packed(da, 4, 4, 1),
                   const_view::packed(db, 4, 4, 1), 0.0F, view::packed(dc, 4, 4, 1),
                   gpubatch::epilogue::bias_col<float>{bias.data()});
    FAIL("no exception");
  } catch (const gpubatch::invalid_argument& e) {
    CHECK(e.parameter() == "epilogue.bias");
    CHECK_THAT(e.what(), Contains("cuda backend cannot access"));
  }
  gpubatch::device_buffer<float> ha(16, gpubatch::on_host), hb(16, gpubatch::on_host),
      hc(16, gpubatch::on_host);
  try {
    gpubatch::gemm(gpubatch::on_host_checked, op::none, op::none, 1.0F,
                   const_view::packed(ha, 4, 4, 1), const_view::packed(hb, 4, 4, 1), 0.0F,
                   view::packed(hc, 4, 4, 1), gpubatch::epilogue::bias_col<float>{bias.data()});
    FAIL("no exception");
  } catch (const gpubatch::invalid_argument& e) {
    CHECK(e.parameter() == "epilogue.bias");
  }
}

TEST_CASE("a null entry in a pinned pointer array is refused before the CUDA kernel runs",
          "[contract]") {
  gpubatch::device_buffer<float> a(32, test_backend::exec()), b(32, test_backend::exec()),
      c(32, test_backend::exec());
  gpubatch::pinned_buffer<const float*> pa(2, test_backend::exec()), pb(2, test_backend::exec());
  gpubatch::pinned_buffer<float*> pc(2, test_backend::exec());
  pa.data()[0] = a.data();
  pa.data()[1] = a.data() + 16;
  pb.data()[0] = b.data();
  pb.data()[1] = b.data() + 16;
  pc.data()[0] = nullptr;
  pc.data()[1] = c.data() + 16;
  try {
    gpubatch::gemm(test_backend::exec(), op::none, op::none, 1.0F,
                   gpubatch::pointer_matrix_batch_view<const float>(pa.data(), 4, 4, 4, 2),
                   gpubatch::pointer_matrix_batch_view<const float>(pb.data(), 4, 4, 4, 2), 0.0F,
                   gpubatch::pointer_matrix_batch_view<float>(pc.data(), 4, 4, 4, 2));
    FAIL("no exception");
  } catch (const gpubatch::invalid_argument& e) {
    CHECK(e.parameter() == "c");
    CHECK_THAT(e.what(), Contains("entry 0 of the pointer array is null"));
  }
  test_backend::synchronize();
}

#if defined(GPUBATCH_EMULATION)
TEST_CASE("repeated calls ask the runtime about the device once, not on every call",
          "[overhead]") {
  // Small batched work is where launch overhead dominates: after the first call, the dispatch
  // must answer from what it learned (architecture, shared memory, SMs, occupancy).
  const auto exec = test_backend::exec();
  gpubatch::device_buffer<float> a(256 * 256, exec), b(256 * 256, exec), c(256 * 256, exec);
  test_backend::from_host(a.data(), gpubatch::test::random_inputs<float>(a.size(), 21));
  test_backend::from_host(b.data(), gpubatch::test::random_inputs<float>(b.size(), 22));
  using problem = gpubatch::gemm_problem<const float, const float, float>;
  const std::vector<problem> host_problems{{40, 50, 60, a.data(), 60, b.data(), 50, c.data(), 50},
                                           {70, 20, 30, a.data(), 30, b.data(), 20, c.data(), 20}};
  gpubatch::device_buffer<problem> problems(host_problems.size(), exec);
  test_backend::from_host(problems.data(), host_problems);
  using tensor = gpubatch::tensor4d_view<float>;
  using const_tensor = gpubatch::tensor4d_view<const float>;
  const auto nhwc = gpubatch::tensor_layout::nhwc;

  const auto calls = [&] {
    gpubatch::gemm(exec, op::none, op::none, 1.0F, const_view::packed(a, 8, 8, 64),
                   const_view::packed(b, 8, 8, 64), 0.0F, view::packed(c, 8, 8, 64));  // tiny
    gpubatch::gemm(exec, op::none, op::transpose, 1.0F, const_view::packed(a, 200, 64, 1),
                   const_view::packed(b, 200, 64, 1), 0.0F, view::packed(c, 200, 200, 1));
    gpubatch::gemm_grouped(exec, gpubatch::grouped_gemm_layout{}, 1.0F, problems.data(), 2, 0.0F,
                           gpubatch::epilogue::identity{}, gpubatch::grouped_gemm_bounds{70, 50, 60});
    gpubatch::conv2d(exec, gpubatch::conv2d_params{}.with_padding(1, 1), 1.0F,
                     const_tensor(a.data(), 2, 16, 12, 12, nhwc),
                     const_tensor(b.data(), 16, 16, 3, 3, nhwc), 0.0F,
                     tensor(c.data(), 2, 16, 12, 12, nhwc));
  };
  calls();
  test_backend::synchronize();
  const long long after_first = gpubatch_emu::query_count();
  for (int i = 0; i < 3; ++i) calls();
  test_backend::synchronize();
  CHECK(gpubatch_emu::query_count() == after_first);
}
#endif
