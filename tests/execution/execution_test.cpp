#include <gpubatch/execution.hpp>
#include <gpubatch/stream.hpp>

#include "../support/catch.hpp"

#include <type_traits>

TEST_CASE("execution traits classify the two backends", "[execution]") {
  STATIC_REQUIRE(gpubatch::is_execution_v<gpubatch::host_exec>);
  STATIC_REQUIRE(gpubatch::is_execution_v<const gpubatch::cuda_exec&>);
  STATIC_REQUIRE_FALSE(gpubatch::is_execution_v<int>);
  STATIC_REQUIRE(gpubatch::is_cuda_exec_v<gpubatch::cuda_exec>);
  STATIC_REQUIRE_FALSE(gpubatch::is_cuda_exec_v<gpubatch::host_exec>);
  STATIC_REQUIRE(gpubatch::is_host_exec_v<decltype(gpubatch::on_host)>);
  STATIC_REQUIRE(std::is_trivially_copyable_v<gpubatch::cuda_exec>);
}

TEST_CASE("on(stream) binds the CUDA backend to the caller's stream", "[execution]") {
  auto* const fake_stream = reinterpret_cast<cudaStream_t>(0x1234);
  CHECK(gpubatch::on(fake_stream).stream() == fake_stream);
}

TEST_CASE("cuda_available is noexcept and stable", "[execution]") {
  STATIC_REQUIRE(noexcept(gpubatch::cuda_available()));
  const bool first = gpubatch::cuda_available();
  CHECK(gpubatch::cuda_available() == first);
}

TEST_CASE("a host-compiled translation unit always picks the host backend", "[execution]") {
  CHECK(gpubatch::best_available_backend() == gpubatch::backend::host);
  const auto picked = gpubatch::with_best_available(nullptr, [](auto exec) {
    return gpubatch::is_host_exec_v<decltype(exec)> ? gpubatch::backend::host
                                                    : gpubatch::backend::cuda;
  });
  CHECK(picked == gpubatch::backend::host);
  CHECK(std::string(gpubatch::to_string(picked)) == "host");
}

TEST_CASE("streams, events and timers report a missing device as cuda_error", "[execution]") {
  if (gpubatch::cuda_available()) {
    gpubatch::cuda_stream stream;
    gpubatch::event_timer timer;
    timer.start(stream.get());
    timer.stop(stream.get());
    CHECK(timer.elapsed_ms() >= 0.0F);
    gpubatch::cuda_stream moved = std::move(stream);
    CHECK(moved.get() != nullptr);
  } else {
    CHECK_THROWS_AS(gpubatch::cuda_stream{}, gpubatch::cuda_error);
    CHECK_THROWS_AS(gpubatch::cuda_event{}, gpubatch::cuda_error);
    CHECK_THROWS_AS(gpubatch::event_timer{}, gpubatch::cuda_error);
  }
}
