// The views' index math runs unchanged inside a kernel, and views build from thrust vectors.
#include <gpubatch/gpubatch.hpp>

#include "../support/catch.hpp"
#if !defined(GPUBATCH_EMULATION)
// Thrust's CUDA backend needs nvcc: the emulated device runs the view code without it.
#include <thrust/device_vector.h>
#include <thrust/host_vector.h>
#endif

#include <vector>

#include "../support/cuda_backend.hpp"
#include "../support/random.hpp"

namespace {
using gpubatch::test::test_backend;

/// out(b, i, j) = 2 * in(b, i, j) for every element, one thread per element.
__global__ void twice(gpubatch::matrix_batch_view<const float> in,
                      gpubatch::matrix_batch_view<float> out) {
  const gpubatch::index_t total = in.count() * in.rows() * in.cols();
  const gpubatch::index_t e = static_cast<gpubatch::index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e < total) {
    const gpubatch::index_t b = e / (in.rows() * in.cols());
    const gpubatch::index_t i = (e / in.cols()) % in.rows();
    const gpubatch::index_t j = e % in.cols();
    out(b, i, j) = 2.0F * in.matrix(b)(i, j);
  }
}
}  // namespace

TEST_CASE("matrix_batch_view works inside a kernel, transposing layouts", "[views][gpu]") {
  const gpubatch::index_t rows = 17, cols = 33, count = 3;
  const auto values = gpubatch::test::random_values<float>(rows * cols * count, 11);
#if defined(GPUBATCH_EMULATION)
  gpubatch::device_buffer<float> input(values.size(), test_backend::exec());
  test_backend::from_host(input.data(), values);
#else
  thrust::device_vector<float> input(values.begin(), values.end());
#endif
  gpubatch::device_buffer<float> output(values.size(), test_backend::exec());
  gpubatch::fill(test_backend::exec(), output, -1.0F);

  const gpubatch::matrix_batch_view<const float> in =
      gpubatch::matrix_batch_view<const float>::packed(input, rows, cols, count);
  CHECK(in.space() == gpubatch::memory_space::device);
  const auto out = gpubatch::matrix_batch_view<float>::packed(output, rows, cols, count,
                                                              gpubatch::layout::col_major);
  const auto total = static_cast<unsigned>(rows * cols * count);
  gpubatch::launch(twice,
                   gpubatch::launch_config{(total + 127) / 128, 128, 0, test_backend::stream().get()},
                   in, out);
  GPUBATCH_CUDA_TRY(cudaGetLastError());

  const auto result = test_backend::to_host(output.data(), values.size());
  for (gpubatch::index_t b = 0; b < count; ++b)
    for (gpubatch::index_t i = 0; i < rows; ++i)
      for (gpubatch::index_t j = 0; j < cols; ++j)
        REQUIRE(result[b * rows * cols + i + j * rows] == 2.0F * values[(b * rows + i) * cols + j]);
}

#if !defined(GPUBATCH_EMULATION)
TEST_CASE("views build from thrust::host_vector as host memory", "[views][gpu]") {
  thrust::host_vector<double> host(24, 1.0);
  const auto view = gpubatch::matrix_batch_view<double>::packed(host, 2, 3, 4);
  CHECK(view.space() == gpubatch::memory_space::host);
}
#endif
