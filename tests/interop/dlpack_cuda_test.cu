// DLPack with CUDA memory: device buffers export as kDLCUDA on the device holding them, pinned
// buffers as kDLCUDAHost; imported views of them run a GEMM on the CUDA backend; a tensor on
// another device than the current one is refused. (On the emulated device with two devices.)
#include <gpubatch/dlpack.hpp>

#include "../support/catch.hpp"
#include "../support/cuda_backend.hpp"
#include "../support/random.hpp"
#include "../support/require_invalid.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

using gpubatch::from_dlpack;
using gpubatch::matrix_batch_view;
using gpubatch::memory_space;
using gpubatch::to_dlpack;
using gpubatch::test::require_invalid;
using gpubatch::test::test_backend;

namespace {
int current_device() {
  int device = -1;
  GPUBATCH_CUDA_TRY(cudaGetDevice(&device));
  return device;
}
}  // namespace

TEST_CASE("device buffers cross DLPack as kDLCUDA, and a GEMM runs on views of them",
          "[dlpack]") {
  const std::int64_t count = 3, m = 9, n = 7, k = 5;
  const auto a_values = gpubatch::test::random_values<float>(count * m * k, 31);
  const auto b_values = gpubatch::test::random_values<float>(count * n * k, 32);
  gpubatch::device_buffer<float> a(a_values.size(), test_backend::exec());
  gpubatch::device_buffer<float> b(b_values.size(), test_backend::exec());
  gpubatch::device_buffer<float> c(count * m * n, test_backend::exec());
  test_backend::from_host(a.data(), a_values);
  test_backend::from_host(b.data(), b_values);
  test_backend::from_host(c.data(), std::vector<float>(c.size(), std::nanf("")));
  float* const c_memory = c.data();

  // A in C order; B stored (count, n, k) and handed over transposed: (count, k, n).
  DLManagedTensor* at = to_dlpack(std::move(a), {count, m, k});
  DLManagedTensor* bt = to_dlpack(std::move(b), {count, k, n}, {n * k, 1, k});
  DLManagedTensor* ct = to_dlpack(std::move(c), {count, m, n});
  for (const DLManagedTensor* t : {at, bt, ct}) {
    CHECK(t->dl_tensor.device.device_type == kDLCUDA);
    CHECK(t->dl_tensor.device.device_id == current_device());
  }
  CHECK(ct->dl_tensor.data == c_memory);

  const auto av = from_dlpack<matrix_batch_view<const float>>(at);
  const auto bv = from_dlpack<matrix_batch_view<const float>>(bt);
  const auto cv = from_dlpack<matrix_batch_view<float>>(ct);
  CHECK(av.space() == memory_space::device);
  CHECK(bv.order() == gpubatch::layout::col_major);
  CHECK(cv.data() == c_memory);
  gpubatch::gemm(test_backend::exec(), gpubatch::op::none, gpubatch::op::none, 1.0F, av, bv, 0.0F,
                 cv);
  const auto got = test_backend::to_host(c_memory, static_cast<std::size_t>(count * m * n));

  double error = 0, norm = 0;
  for (std::int64_t p = 0; p < count; ++p) {
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double expected = 0;
        for (std::int64_t l = 0; l < k; ++l) {
          expected += static_cast<double>(a_values[(p * m + i) * k + l]) *
                      static_cast<double>(b_values[(p * n + j) * k + l]);
        }
        const double value = got[(p * m + i) * n + j];
        REQUIRE(std::isfinite(value));
        error += (value - expected) * (value - expected);
        norm += expected * expected;
      }
    }
  }
  CHECK(std::sqrt(error / norm) < 1e-5);
  for (DLManagedTensor* t : {at, bt, ct}) {
    t->deleter(t);  // frees the device memory on the buffer's stream
  }
  test_backend::synchronize();

  gpubatch::pinned_buffer<double> pinned(6, test_backend::exec());
  DLManagedTensor* pt = to_dlpack(std::move(pinned), {2, 3});
  CHECK(pt->dl_tensor.device.device_type == kDLCUDAHost);
  CHECK(from_dlpack<gpubatch::span<double>>(pt).space() == memory_space::pinned);
  pt->deleter(pt);
}

TEST_CASE("a kDLCUDA tensor must be on the current device", "[dlpack][validation]") {
  int devices = 0;
  GPUBATCH_CUDA_TRY(cudaGetDeviceCount(&devices));
  std::vector<float> unused(6, 1.0F);
  std::int64_t shape[] = {2, 3};
  const DLTensor elsewhere{unused.data(), {kDLCUDA, devices}, 2, {kDLFloat, 32, 1}, shape,
                           nullptr, 0};
  require_invalid("tensor.device", "is not the current CUDA device", [&] {
    (void)from_dlpack<matrix_batch_view<float>>(elsewhere);
  });
  if (devices < 2) {
    return;
  }
  // A buffer on device 1: exported with its device, refused while device 0 is current. The
  // buffer is freed on its stream, so the stream outlives the tensor.
  GPUBATCH_CUDA_TRY(cudaSetDevice(1));
  {
    const gpubatch::cuda_stream stream;
    DLManagedTensor* t = to_dlpack(gpubatch::device_buffer<float>(6, stream.exec()), {2, 3});
    CHECK(t->dl_tensor.device.device_id == 1);
    CHECK(from_dlpack<matrix_batch_view<float>>(t).data() == t->dl_tensor.data);
    GPUBATCH_CUDA_TRY(cudaSetDevice(0));
    require_invalid("tensor.device", "kDLCUDA device 1 is not the current CUDA device (0)",
                    [&] { (void)from_dlpack<matrix_batch_view<float>>(t); });
    GPUBATCH_CUDA_TRY(cudaSetDevice(1));
    t->deleter(t);
    stream.synchronize();
  }
  GPUBATCH_CUDA_TRY(cudaSetDevice(0));
}
