#include "../support/host_backend.hpp"

#include "containers.inc"

TEST_CASE("pinned_buffer on the host backend holds ordinary host memory", "[containers]") {
  gpubatch::pinned_buffer<double> buffer(5, gpubatch::on_host);
  CHECK(buffer.space() == gpubatch::memory_space::host);
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = 0.5 * static_cast<double>(i);
  double sum = 0;
  for (double v : buffer) sum += v;
  CHECK(sum == 5.0);
  gpubatch::pinned_buffer<double> moved(std::move(buffer));
  CHECK(moved.size() == 5);
}

TEST_CASE("the CUDA backend reports a missing device as cuda_error", "[containers]") {
  if (gpubatch::cuda_available()) {
    SUCCEED("a device is present; the gpu tests cover the CUDA backend");
    return;
  }
  CHECK_THROWS_AS(gpubatch::device_buffer<float>(16, gpubatch::on(nullptr)), gpubatch::cuda_error);
  CHECK_THROWS_AS(gpubatch::pinned_buffer<float>(16, gpubatch::on(nullptr)), gpubatch::cuda_error);
}

TEST_CASE("fill refuses device memory on the host backend", "[containers][fill]") {
  float value = 0;
  try {
    gpubatch::fill(gpubatch::on_host, &value, 1, 1.0F, gpubatch::memory_space::device);
    FAIL("no exception");
  } catch (const gpubatch::invalid_argument& e) {
    CHECK(e.parameter() == "first");
  }
  CHECK(value == 0);
}
