// Calls the library the way a user would, and checks the results. Compiled with strict
// warnings as errors (-Wconversion -Wsign-conversion -Wshadow ...), so the gpubatch templates
// instantiated here must not warn in a consumer's build.
#include <gpubatch/gpubatch.hpp>

#include "consumer_ops.hpp"

#include <cstddef>
#include <cstdio>
#include <vector>

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAILED: %s\n", what);
    ++failures;
  }
}

// C_i = A_i * B for two 2 x 3 matrices A_i and one 3 x 2 matrix B (batch stride 0).
void check_gemm() {
  std::vector<float> a(2 * 2 * 3);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i + 1);
  const std::vector<float> b = {1, 0, 0, 1, 1, 1};
  std::vector<float> c(2 * 2 * 2, -1.0F);
  const auto av = gpubatch::matrix_batch_view<const float>::packed(a, 2, 3, 2);
  const gpubatch::matrix_batch_view<const float> bv(b, 3, 2, 2, 0, 2);
  const auto cv = gpubatch::matrix_batch_view<float>::packed(c, 2, 2, 2);
  gpubatch::gemm(gpubatch::on_host, gpubatch::op::none, gpubatch::op::none, 1.0F, av, bv, 0.0F, cv);
  // Row (x, y, z) of A times B is (x + z, y + z).
  const std::vector<float> expected = {4, 5, 10, 11, 16, 17, 22, 23};
  check(c == expected, "gemm on_host");
}

// A 3 x 3 image convolved with a 2 x 2 filter of ones: the sums of its 2 x 2 windows.
void check_conv2d() {
  std::vector<float> x(9);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i + 1);
  const std::vector<float> w(4, 1.0F);
  std::vector<float> y(4);
  const auto nchw = gpubatch::tensor_layout::nchw;
  gpubatch::conv2d(gpubatch::on_host, gpubatch::conv2d_params{}, 1.0F,
                   gpubatch::tensor4d_view<const float>(x, 1, 1, 3, 3, nchw),
                   gpubatch::tensor4d_view<const float>(w, 1, 1, 2, 2, nchw), 0.0F,
                   gpubatch::tensor4d_view<float>(y, 1, 1, 2, 2, nchw));
  const std::vector<float> expected = {12, 16, 24, 28};
  check(y == expected, "conv2d on_host");
}

// fill and copy on the host backend, and the consumer's own library.
void check_fill_copy() {
  std::vector<float> source(10);
  gpubatch::fill(gpubatch::on_host, source.data(), source.size(), 2.5F);
  std::vector<float> target(source.size());
  gpubatch::copy(gpubatch::on_host, target, source);
  check(target == std::vector<float>(10, 2.5F), "fill and copy on_host");
  check(consumer::sum(target) == 25.0F, "consumer::sum (host gemm in a static library)");
}

}  // namespace

int main() {
  check_gemm();
  check_conv2d();
  check_fill_copy();

  const auto checksum = gpubatch::with_best_available(nullptr, [](auto exec) {
    gpubatch::device_buffer<float> buffer(2 * 3 * 4, exec);
    gpubatch::fill(exec, buffer, 0.5F);
    std::vector<float> host(buffer.size());
    if constexpr (gpubatch::is_cuda_exec_v<decltype(exec)>) {
      GPUBATCH_CUDA_TRY(cudaMemcpy(host.data(), buffer.data(), buffer.size_bytes(),
                                   cudaMemcpyDeviceToHost));
    } else {
      const auto view = gpubatch::matrix_batch_view<float>::packed(buffer, 2, 3, 4);
      view(3, 1, 2) = 1.5F;  // the last element
      host.assign(buffer.data(), buffer.data() + buffer.size());
    }
    float sum = 0;
    for (float v : host) sum += v;
    return sum;
  });
  std::printf("gpubatch %s: checksum %.1f\n", GPUBATCH_VERSION_STRING, static_cast<double>(checksum));
  const bool on_host = gpubatch::best_available_backend() == gpubatch::backend::host;
  check(checksum == (on_host ? 13.0F : 12.0F), "with_best_available checksum");
  return failures == 0 ? 0 : 1;
}
