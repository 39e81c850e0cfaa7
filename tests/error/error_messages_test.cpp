// One test per message a user is likely to meet first: each asserts the words that make it
// useful (the call that failed, the parameter the caller wrote, what to do next).
#include <gpubatch/containers.hpp>
#include <gpubatch/detail/transfer/plan.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>

#include "../support/catch.hpp"

#include <cstddef>
#include <limits>
#include <string>

using gpubatch::test::Contains;

TEST_CASE("a CUDA error on a machine without a usable GPU says to use the host backend",
          "[error][messages]") {
  for (const cudaError_t code : {cudaErrorInsufficientDriver, cudaErrorNoDevice}) {
    const gpubatch::cuda_error e(code, "cudaStreamCreate(&stream)", "app.cpp", 7);
    CHECK_THAT(e.what(), Contains("cudaStreamCreate(&stream)") && Contains("app.cpp:7") &&
                             Contains("gpubatch::on_host") &&
                             Contains("gpubatch::with_best_available"));
  }
  const gpubatch::cuda_error image(cudaErrorNoKernelImageForDevice, "launch", "app.cu", 3);
  CHECK_THAT(image.what(), Contains("CMAKE_CUDA_ARCHITECTURES"));
  const gpubatch::cuda_error other(cudaErrorInvalidValue, "cudaMemcpy", "app.cpp", 1);
  CHECK_THAT(other.what(), !Contains("on_host"));
}

TEST_CASE("a failed allocation names the CUDA call, not a variable", "[error][messages]") {
  if (gpubatch::cuda_available()) {
    // With a driver the allocation succeeds; the message path is the no-driver one below.
    CHECK_NOTHROW(gpubatch::pinned_buffer<float>(16, gpubatch::on(nullptr)));
    return;
  }
  try {
    gpubatch::pinned_buffer<float> buffer(16, gpubatch::on(nullptr));
    FAIL("no exception without a CUDA driver");
  } catch (const gpubatch::cuda_error& e) {
    CHECK_THAT(e.what(), Contains("cudaMallocHost") && !Contains("`status`") &&
                             Contains("gpubatch::on_host"));
  }
}

TEST_CASE("a size that overflows std::size_t is reported as such, with the element count",
          "[error][messages]") {
  const std::size_t count = std::numeric_limits<std::size_t>::max() / 2;
  try {
    gpubatch::device_buffer<double> buffer(count, gpubatch::on_host);
    FAIL("no exception");
  } catch (const gpubatch::out_of_memory& e) {
    CHECK_THAT(e.what(), Contains(std::to_string(count) + " elements of 8 bytes") &&
                             Contains("overflows std::size_t") &&
                             !Contains("18446744073709551615 bytes"));
    CHECK(e.bytes_requested() == std::numeric_limits<std::size_t>::max());
  }
}

TEST_CASE("an asynchronous copy between two pageable ranges names src and says dst is too",
          "[error][messages]") {
  try {
    (void)gpubatch::detail::plan_cuda_copy(gpubatch::memory_space::host,
                                           gpubatch::memory_space::host,
                                           gpubatch::detail::copy_mode::async);
    FAIL("no exception");
  } catch (const gpubatch::invalid_argument& e) {
    CHECK(e.parameter() == "src");
    CHECK_THAT(e.what(), Contains("'src': is pageable host memory, and so is dst") &&
                             Contains("gpubatch::copy"));
  }
}
