// gpubatch::on_host_checked: the host backend refusing what the CUDA backend would refuse, with
// the same results where it accepts; and the crash cases both backends now report as errors
// (null pointer-array entries, null biases).
#include <gpubatch/containers.hpp>
#include <gpubatch/conv.hpp>
#include <gpubatch/fill.hpp>
#include <gpubatch/gemm.hpp>
#include <gpubatch/pinned_pool.hpp>
#include <gpubatch/transfer.hpp>

#include "../support/catch.hpp"
#include "../support/inputs.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

using gpubatch::test::Contains;
using gpubatch::index_t;
using gpubatch::op;
using view = gpubatch::matrix_batch_view<float>;
using const_view = gpubatch::matrix_batch_view<const float>;

namespace {

template <class F>
void require_invalid(const std::string& parameter, F&& call, const char* words = nullptr) {
  try {
    call();
    FAIL("no exception");
  } catch (const gpubatch::invalid_argument& e) {
    CHECK(e.parameter() == parameter);
    if (words != nullptr) {
      CHECK_THAT(e.what(), Contains(words));
    }
  }
}


template <class Buffer>
void upload(Buffer& buffer, const std::vector<float>& values) {
  gpubatch::copy(gpubatch::on_host, buffer, values);
}

constexpr index_t m = 17, n = 5, k = 33, count = 3;

}  // namespace

TEST_CASE("on_host_checked refuses GEMM operands in memory a GPU could not read",
          "[checked]") {
  std::vector<float> a = gpubatch::test::random_inputs<float>(m * k * count, 1), b = gpubatch::test::random_inputs<float>(k * n * count, 2);
  std::vector<float> c(m * n * count, 0.0F);
  // Plain vectors: fine on the host backend, refused in checked mode, as on a GPU.
  CHECK_NOTHROW(gpubatch::gemm(gpubatch::on_host, op::none, op::none, 1.0F,
                               const_view::packed(a, m, k, count),
                               const_view::packed(b, k, n, count), 0.0F,
                               view::packed(c, m, n, count)));
  require_invalid("a", [&] {
    gpubatch::gemm(gpubatch::on_host_checked, op::none, op::none, 1.0F,
                   const_view::packed(a, m, k, count), const_view::packed(b, k, n, count), 0.0F,
                   view::packed(c, m, n, count));
  }, "on_host_checked");

  // The same data in the host backend's device_buffers: accepted, and the same result.
  gpubatch::device_buffer<float> da(a.size(), gpubatch::on_host), db(b.size(), gpubatch::on_host),
      dc(c.size(), gpubatch::on_host);
  upload(da, a);
  upload(db, b);
  gpubatch::fill(gpubatch::on_host, dc, std::numeric_limits<float>::quiet_NaN());
  gpubatch::gemm(gpubatch::on_host_checked, op::none, op::none, 1.0F,
                 const_view::packed(da, m, k, count), const_view::packed(db, k, n, count), 0.0F,
                 view::packed(dc, m, n, count));
  CHECK(std::vector<float>(dc.data(), dc.data() + dc.size()) == c);

  // C in pageable memory is named as C.
  require_invalid("c", [&] {
    gpubatch::gemm(gpubatch::on_host_checked, op::none, op::none, 1.0F,
                   const_view::packed(da, m, k, count), const_view::packed(db, k, n, count), 0.0F,
                   view::packed(c, m, n, count));
  });
}

TEST_CASE("on_host_checked refuses a bias a GPU could not read; on_host accepts it", "[checked]") {
  gpubatch::device_buffer<float> da(m * k, gpubatch::on_host), db(k * n, gpubatch::on_host),
      dc(m * n, gpubatch::on_host);
  upload(da, gpubatch::test::random_inputs<float>(m * k, 3));
  upload(db, gpubatch::test::random_inputs<float>(k * n, 4));
  const std::vector<float> bias = gpubatch::test::random_inputs<float>(n, 5);
  const auto run = [&](gpubatch::host_exec exec, const float* b) {
    gpubatch::gemm(exec, op::none, op::none, 1.0F, const_view::packed(da, m, k, 1),
                   const_view::packed(db, k, n, 1), 0.0F, view::packed(dc, m, n, 1),
                   gpubatch::epilogue::then(gpubatch::epilogue::bias_col<float>{b},
                                            gpubatch::epilogue::relu{}));
  };
  CHECK_NOTHROW(run(gpubatch::on_host, bias.data()));
  require_invalid("epilogue.first.bias", [&] { run(gpubatch::on_host_checked, bias.data()); });
  gpubatch::device_buffer<float> device_bias(bias.size(), gpubatch::on_host);
  upload(device_bias, bias);
  CHECK_NOTHROW(run(gpubatch::on_host_checked, device_bias.data()));
}

TEST_CASE("on_host_checked applies the CUDA backend's rules to asynchronous copies",
          "[checked]") {
  std::vector<float> pageable = gpubatch::test::random_inputs<float>(64, 6);
  gpubatch::device_buffer<float> device(64, gpubatch::on_host);
  gpubatch::pinned_buffer<float> pinned(64, gpubatch::on_host);
  CHECK_NOTHROW(gpubatch::copy_async(gpubatch::on_host, device, pageable));
  require_invalid("src", [&] { gpubatch::copy_async(gpubatch::on_host_checked, device, pageable); },
                  "pageable");
  std::vector<float> other(64);
  require_invalid("src", [&] { gpubatch::copy_async(gpubatch::on_host_checked, other, pageable); },
                  "and so is dst");
  // What a GPU accepts: pinned to device, device to pinned, a registered vector, a blocking copy.
  gpubatch::copy(gpubatch::on_host, pinned, pageable);
  CHECK_NOTHROW(gpubatch::copy_async(gpubatch::on_host_checked, device, pinned));
  CHECK_NOTHROW(gpubatch::copy_async(gpubatch::on_host_checked, pinned, device));
  CHECK_NOTHROW(gpubatch::copy(gpubatch::on_host_checked, other, device));
  {
    const gpubatch::host_registration registered = gpubatch::register_host(gpubatch::on_host, pageable);
    CHECK_NOTHROW(gpubatch::copy_async(gpubatch::on_host_checked, device, pageable));
  }
  // The registration is gone with its object.
  require_invalid("src", [&] { gpubatch::copy_async(gpubatch::on_host_checked, device, pageable); });
  // Blocks of a host pinned_pool count as pinned memory.
  gpubatch::pinned_pool<gpubatch::host_exec> pool(gpubatch::on_host);
  auto block = pool.allocate<float>(64);
  // Values of its own (a new block holds whatever was there, NaNs included, which compare
  // unequal to themselves), other than the device's.
  const std::vector<float> staged = gpubatch::test::random_inputs<float>(64, 7);
  std::copy(staged.begin(), staged.end(), block.data());
  CHECK_NOTHROW(gpubatch::copy_async(gpubatch::on_host_checked, device, block));
  CHECK(std::vector<float>(device.data(), device.data() + device.size()) == staged);
}

TEST_CASE("on_host_checked asks a grouped GEMM for what the CUDA backend needs", "[checked]") {
  gpubatch::device_buffer<float> a(8 * 8, gpubatch::on_host), b(8 * 8, gpubatch::on_host),
      c(8 * 8, gpubatch::on_host);
  upload(a, gpubatch::test::random_inputs<float>(64, 7));
  upload(b, gpubatch::test::random_inputs<float>(64, 8));
  using problem = gpubatch::gemm_problem<const float, const float, float>;
  const problem p{8, 8, 8, a.data(), 8, b.data(), 8, c.data(), 8};
  const gpubatch::grouped_gemm_layout layouts{};
  std::vector<problem> host_problems{p, p};
  gpubatch::device_buffer<problem> problems(2, gpubatch::on_host);
  gpubatch::copy(gpubatch::on_host, problems, host_problems);
  const gpubatch::grouped_gemm_bounds bounds{8, 8, 8};

  CHECK_NOTHROW(gpubatch::gemm_grouped(gpubatch::on_host, layouts, 1.0F, host_problems.data(), 2, 0.0F));
  require_invalid("bounds", [&] {
    gpubatch::gemm_grouped(gpubatch::on_host_checked, layouts, 1.0F, problems.data(), 2, 0.0F);
  });
  require_invalid("problems", [&] {
    gpubatch::gemm_grouped(gpubatch::on_host_checked, layouts, 1.0F, host_problems.data(), 2, 0.0F,
                           gpubatch::epilogue::identity{}, bounds);
  });
  require_invalid("problems[0]", [&] {
    gpubatch::gemm_grouped(gpubatch::on_host_checked, layouts, 1.0F, problems.data(), 2, 0.0F,
                           gpubatch::epilogue::identity{}, gpubatch::grouped_gemm_bounds{8, 8, 4});
  }, "exceeds bounds");
  CHECK_NOTHROW(gpubatch::gemm_grouped(gpubatch::on_host_checked, layouts, 1.0F, problems.data(), 2,
                                       0.0F, gpubatch::epilogue::identity{}, bounds));
}

TEST_CASE("a null entry in a pointer-array batch is an error, not a crash", "[checked]") {
  std::vector<float> a = gpubatch::test::random_inputs<float>(4 * 4 * 3, 9), b = gpubatch::test::random_inputs<float>(4 * 4 * 3, 10);
  std::vector<float> c(4 * 4 * 3);
  std::vector<const float*> pa{a.data(), a.data() + 16, a.data() + 32};
  std::vector<const float*> pb{b.data(), nullptr, b.data() + 32};
  std::vector<float*> pc{c.data(), c.data() + 16, c.data() + 32};
  using pview = gpubatch::pointer_matrix_batch_view<const float>;
  require_invalid("b", [&] {
    gpubatch::gemm(gpubatch::on_host, op::none, op::none, 1.0F, pview(pa.data(), 4, 4, 4, 3),
                   pview(pb.data(), 4, 4, 4, 3), 0.0F,
                   gpubatch::pointer_matrix_batch_view<float>(pc.data(), 4, 4, 4, 3));
  }, "entry 1 of the pointer array is null");
}

TEST_CASE("a null bias is an error, not a crash, for GEMM and convolution", "[checked]") {
  std::vector<float> a = gpubatch::test::random_inputs<float>(16, 11), b = gpubatch::test::random_inputs<float>(16, 12), c(16);
  require_invalid("epilogue", [&] {
    gpubatch::gemm(gpubatch::on_host, op::none, op::none, 1.0F, const_view::packed(a, 4, 4, 1),
                   const_view::packed(b, 4, 4, 1), 0.0F, view::packed(c, 4, 4, 1),
                   gpubatch::epilogue::bias_col<float>{nullptr});
  }, "bias_col's bias pointer is null");
  std::vector<float> x = gpubatch::test::random_inputs<float>(2 * 3 * 5 * 5, 13), w = gpubatch::test::random_inputs<float>(4 * 3 * 3 * 3, 14);
  std::vector<float> y(2 * 4 * 3 * 3);
  using tensor = gpubatch::tensor4d_view<float>;
  using const_tensor = gpubatch::tensor4d_view<const float>;
  require_invalid("epilogue.first", [&] {
    gpubatch::conv2d(gpubatch::on_host, gpubatch::conv2d_params{}, 1.0F,
                     const_tensor(x.data(), 2, 3, 5, 5, gpubatch::tensor_layout::nchw),
                     const_tensor(w.data(), 4, 3, 3, 3, gpubatch::tensor_layout::nchw), 0.0F,
                     tensor(y.data(), 2, 4, 3, 3, gpubatch::tensor_layout::nchw),
                     gpubatch::epilogue::then(gpubatch::epilogue::bias_col<float>{nullptr},
                                              gpubatch::epilogue::relu{}));
  });
}
