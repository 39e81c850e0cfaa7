// Best available, from a CUDA file: which backend it picks and why, the form that owns its
// stream, and OpenMP in the host code of a CUDA file. Built three ways: on the emulated device
// with a device, with none, without a driver, and with code too new for the device (the
// reason follows GPUBATCH_EMULATED_DEVICES and the compiled architecture); and by nvcc against
// the real CUDA runtime, run on whatever the machine has, never skipped.
#include <gpubatch/containers.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/fill.hpp>
#include <gpubatch/gemm.hpp>
#include <gpubatch/multi_device.hpp>
#include <gpubatch/transfer.hpp>

#include "../support/catch.hpp"
#include "../support/inputs.hpp"
#include "../support/require_invalid.hpp"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

using gpubatch::test::Contains;
using gpubatch::backend;
using gpubatch::backend_reason;

namespace {

/// The reason the machine should produce, found without gpubatch.
backend_reason expected_reason() {
#if defined(GPUBATCH_EMULATION)
  const char* env = std::getenv("GPUBATCH_EMULATED_DEVICES");
  const std::string devices = env != nullptr && *env != '\0' ? env : "h100";
  if (devices == "none") return backend_reason::no_device;
  if (devices == "no-driver") return backend_reason::no_driver;
  if (devices == "sm75" && GPUBATCH_EMULATION_ARCH > 75) return backend_reason::no_code_for_device;
  return backend_reason::cuda_usable;
#else
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
    (void)cudaGetLastError();
    return backend_reason::no_driver;
  }
  int count = 0;
  const cudaError_t counted = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  if (counted == cudaErrorInsufficientDriver) return backend_reason::driver_too_old;
  if (counted != cudaSuccess || count == 0) return backend_reason::no_device;
  return backend_reason::cuda_usable;
#endif
}


}  // namespace

TEST_CASE("best_available_choice says which backend a CUDA file runs, and why",
          "[execution][best_available]") {
  const gpubatch::backend_choice choice = gpubatch::best_available_choice();
  const backend_reason want = expected_reason();
  INFO(gpubatch::to_string(choice));
  CHECK(choice.reason == want);
  CHECK(choice.picked == (want == backend_reason::cuda_usable ? backend::cuda : backend::host));
  CHECK(gpubatch::best_available_backend() == choice.picked);
  CHECK_THAT(gpubatch::to_string(choice),
             Contains(std::string(gpubatch::to_string(choice.picked)) + " backend: ") &&
                 Contains(gpubatch::to_string(choice.reason)));
  if (choice.picked == backend::host) {
    CHECK(choice.cuda_status != cudaSuccess);  // the CUDA error behind the choice
  } else {
    CHECK(choice.device_arch >= 75);
  }
  // cuda_available asks only whether the process has a usable device.
  CHECK(gpubatch::cuda_available() == (want == backend_reason::cuda_usable ||
                                        want == backend_reason::no_code_for_device));
}

TEST_CASE("with_best_available(f) runs a GEMM on either machine and returns when it is done",
          "[execution][best_available]") {
  const gpubatch::index_t m = 17, n = 33, k = 9, count = 3;
  const std::vector<float> a = gpubatch::test::random_inputs<float>(static_cast<std::size_t>(m * k * count), 11);
  const std::vector<float> b = gpubatch::test::random_inputs<float>(static_cast<std::size_t>(k * n * count), 12);
  backend ran = backend::host;

  // The result comes back through a pinned buffer filled asynchronously: it is complete only
  // if the call waited for its own stream before returning.
  gpubatch::pinned_buffer<float> c = gpubatch::with_best_available([&](auto exec) {
    using exec_type = decltype(exec);
    ran = gpubatch::is_cuda_exec_v<exec_type> ? backend::cuda : backend::host;
    gpubatch::device_buffer<float> da(a.size(), exec), db(b.size(), exec),
        dc(static_cast<std::size_t>(m * n * count), exec);
    gpubatch::copy(exec, da, a);
    gpubatch::copy(exec, db, b);
    using view = gpubatch::matrix_batch_view<float>;
    gpubatch::gemm(exec, gpubatch::op::none, gpubatch::op::none, 1.0F,
                   view::packed(da, m, k, count), view::packed(db, k, n, count), 0.0F,
                   view::packed(dc, m, n, count));
    gpubatch::pinned_buffer<float> out(dc.size(), exec);
    gpubatch::copy_async(exec, out, dc);
    return out;
  });
  CHECK(ran == gpubatch::best_available_backend());

  double diff = 0.0, norm = 0.0;
  for (gpubatch::index_t p = 0; p < count; ++p)
    for (gpubatch::index_t i = 0; i < m; ++i)
      for (gpubatch::index_t j = 0; j < n; ++j) {
        double want = 0.0;
        for (gpubatch::index_t l = 0; l < k; ++l)
          want += double(a[static_cast<std::size_t>(p * m * k + i * k + l)]) *
                  double(b[static_cast<std::size_t>(p * k * n + l * n + j)]);
        const double got = c.data()[p * m * n + i * n + j];
        diff += (got - want) * (got - want);
        norm += want * want;
      }
  CHECK(std::sqrt(diff / norm) < 1e-6);
}

TEST_CASE("with_best_available(f) lets f's exception through and leaks nothing",
          "[execution][best_available]") {
  CHECK_THROWS_WITH(gpubatch::with_best_available([](auto exec) -> int {
                      gpubatch::device_buffer<float> scratch(1024, exec);
                      gpubatch::fill(exec, scratch.data(), scratch.size(), 1.0F);
                      throw std::runtime_error("stage failed");
                    }),
                    "stage failed");
}

TEST_CASE("the host code of a CUDA file runs the host backend on OpenMP threads",
          "[execution][openmp]") {
#if defined(_OPENMP)
  CHECK(gpubatch::detail::host_thread_count(gpubatch::host_exec{}) == omp_get_max_threads());
  int threads = 0;
#pragma omp parallel
  {
#pragma omp single
    threads = omp_get_num_threads();
  }
  CHECK(threads == omp_get_max_threads());
#elif defined(GPUBATCH_TEST_EXPECT_OPENMP)
  FAIL("this CUDA file's host code was compiled without OpenMP (gpubatch's target adds it)");
#else
  CHECK(gpubatch::detail::host_thread_count(gpubatch::host_exec{}) == 1);
#endif
}

TEST_CASE("cuda_devices() is every visible device, or names 'devices' when there is none",
          "[execution][multi_device]") {
  const backend_reason reason = expected_reason();
  if (reason == backend_reason::no_device || reason == backend_reason::no_driver ||
      reason == backend_reason::driver_too_old) {
    gpubatch::test::require_invalid("devices", [] { (void)gpubatch::cuda_devices(); });
  } else {
    int count = 0;
    GPUBATCH_CUDA_TRY(cudaGetDeviceCount(&count));
    const auto group = gpubatch::cuda_devices();
    REQUIRE(group.size() == static_cast<std::size_t>(count));
    for (std::size_t i = 0; i < group.size(); ++i) {
      CHECK(group[i].index == i);
      CHECK(group[i].device == static_cast<int>(i));
      CHECK(group[i].weight >= 1.0);
    }
  }
}
