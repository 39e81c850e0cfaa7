#include "../support/cuda_backend.hpp"

#include "containers.inc"

TEST_CASE("pinned_buffer on the CUDA backend is page-locked", "[containers]") {
  gpubatch::pinned_buffer<float> buffer(1024, test_backend::exec());
  CHECK(buffer.space() == gpubatch::memory_space::pinned);
  CHECK(gpubatch::memory_space_of(buffer.data()) == gpubatch::memory_space::pinned);
}

TEST_CASE("device_buffer memory is classified as device memory", "[containers]") {
  gpubatch::device_buffer<float> buffer(1024, test_backend::exec());
  test_backend::synchronize();
  CHECK(gpubatch::memory_space_of(buffer.data()) == gpubatch::memory_space::device);
}

TEST_CASE("fill refuses pageable host memory on the CUDA backend", "[containers][fill]") {
  std::vector<float> host(4, 0.0F);
  CHECK_THROWS_AS(gpubatch::fill(test_backend::exec(), host.data(), host.size(), 1.0F),
                  gpubatch::invalid_argument);
}
