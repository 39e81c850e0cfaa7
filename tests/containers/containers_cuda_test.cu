#include "../support/cuda_backend.hpp"

#include <algorithm>
#include <vector>

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
  try {
    gpubatch::fill(test_backend::exec(), host.data(), host.size(), 1.0F);
    FAIL("no exception");
  } catch (const gpubatch::invalid_argument& e) {
    CHECK(e.parameter() == "first");
  }
}

TEST_CASE("fill of a device buffer on the host backend names the buffer", "[containers][fill]") {
  gpubatch::device_buffer<float> buffer(4, test_backend::exec());
  test_backend::synchronize();
  try {
    gpubatch::fill(gpubatch::on_host, buffer, 1.0F);
    FAIL("no exception");
  } catch (const gpubatch::invalid_argument& e) {
    CHECK(e.parameter() == "buffer");
    CHECK_THAT(e.what(), gpubatch::test::Contains("host backend cannot write"));
  }
}

TEST_CASE("device_buffer::resize on another stream waits for the old stream's work",
          "[containers]") {
  // On the emulated device each stream runs only when forced, so s2 runs first here: without
  // the wait, the old memory is freed on s2 before s1's fill writes it.
  const gpubatch::cuda_stream s1, s2;
  const std::size_t n = std::size_t{1} << 14;
  gpubatch::device_buffer<float> dropped(n, s1.exec());
  gpubatch::fill(s1.exec(), dropped.data(), n, 2.0F);
  dropped.resize(0, s2.exec());
  s2.synchronize();
  s1.synchronize();
  CHECK(dropped.empty());

  gpubatch::device_buffer<float> kept(n, s1.exec());
  gpubatch::fill(s1.exec(), kept.data(), n, 3.0F);
  kept.resize(n / 2, s2.exec());  // the copy of the kept half also waits for the fill
  CHECK(kept.stream() == s2.get());
  std::vector<float> host(n / 2, 0.0F);
  GPUBATCH_CUDA_TRY(cudaMemcpyAsync(host.data(), kept.data(), host.size() * sizeof(float),
                                    cudaMemcpyDeviceToHost, s2.get()));
  s2.synchronize();
  CHECK(std::all_of(host.begin(), host.end(), [](float v) { return v == 3.0F; }));
}
