// Transfers on the CUDA backend: the shared bodies, and what only a device can show.
#include "../support/cuda_backend.hpp"

#include "transfer.inc"

#include <string>

TEST_CASE("copy_async refuses pageable memory and says why", "[transfer][gpu]") {
  std::vector<float> pageable(256, 1.0F);
  gpubatch::device_buffer<float> device(256, test_backend::exec());
  const auto refused = [](auto&& call, const char* parameter) {
    try {
      call();
      FAIL("no exception");
    } catch (const gpubatch::invalid_argument& e) {
      CHECK(e.parameter() == parameter);
      const std::string what = e.what();
      CHECK(what.find("pageable") != std::string::npos);
      CHECK(what.find("blocks the calling thread") != std::string::npos);
    }
  };
  refused([&] { gpubatch::copy_async(test_backend::exec(), device, pageable); }, "src");
  refused([&] { gpubatch::copy_async(test_backend::exec(), pageable, device); }, "dst");
  // A gpubatch buffer of the host backend is pageable too.
  gpubatch::device_buffer<float> host_memory(256, gpubatch::on_host);
  refused([&] { gpubatch::copy_async(test_backend::exec(), device, host_memory); }, "src");
}

TEST_CASE("pooled and pinned buffers are page-locked and spans keep their space", "[transfer][gpu]") {
  gpubatch::pinned_pool pool(test_backend::exec());
  auto block = pool.allocate<float>(100);
  CHECK(gpubatch::memory_space_of(block.data()) == gpubatch::memory_space::pinned);
  gpubatch::device_buffer<float> device(100, test_backend::exec());
  const gpubatch::span<float> s(device);
  CHECK(s.space() == gpubatch::memory_space::device);
  CHECK(gpubatch::span<float>(block).space() == gpubatch::memory_space::pinned);
}

TEST_CASE("copy_async copies device to device", "[transfer][gpu]") {
  const auto values = gpubatch::test::random_values<float>(5000, 66);
  gpubatch::device_buffer<float> a(values.size(), test_backend::exec());
  gpubatch::device_buffer<float> b(values.size(), test_backend::exec());
  test_backend::from_host(a.data(), values);
  test_backend::from_host(b.data(), std::vector<float>(values.size(), -1.0F));
  gpubatch::copy_async(test_backend::exec(), b, a);
  CHECK(test_backend::to_host(b.data(), values.size()) == values);
}
