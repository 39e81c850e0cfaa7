// allreduce_mean on device buffers through MPI, on the emulated device under mpirun (every rank
// its own emulated GPU): MPI here is not CUDA-aware, so the values travel through host memory
// and come back to the device. The values are still being written on the stream when the call
// starts, and the mean must be on the device when it returns.
#include <gpubatch/gpubatch.hpp>
#include <gpubatch/mpi.hpp>

#include "../support/catch.hpp"
#include "../support/catch_runner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

namespace {
namespace gmpi = gpubatch::mpi;

template <class T>
double to_double(T value) {
  if constexpr (std::is_same_v<T, double>) {
    return value;
  } else {
    return gpubatch::convert<float>(value);
  }
}

/// Rank r's value i: random, never zero, the same wherever it is computed.
float contribution(std::uint32_t seed, int rank, std::size_t i) {
  std::mt19937 engine(seed + static_cast<std::uint32_t>(rank) * 7919U);
  engine.discard(i);
  const float unit = std::uniform_real_distribution<float>(0.25F, 2.0F)(engine);
  return (i + static_cast<std::size_t>(rank)) % 2 == 0 ? unit : -unit;
}
}  // namespace

TEMPLATE_TEST_CASE("allreduce_mean of device buffers: staged through the host, ordered on the stream",
                   "[mpi]", float, double, gpubatch::half, gpubatch::bfloat16) {
  using T = TestType;
  const gmpi::communicator world;
  std::uint32_t seed = std::random_device{}();
  GPUBATCH_MPI_TRY(MPI_Bcast(&seed, 1, MPI_UINT32_T, 0, world.get()));
  INFO("seed " << seed << ", " << world.size() << " ranks");
  CHECK_FALSE(gmpi::cuda_aware());
  const double eps = std::is_same_v<T, double>                ? 0x1p-52
                     : std::is_same_v<T, float>               ? 0x1p-23
                     : std::is_same_v<T, gpubatch::half>      ? 0x1p-10
                                                              : 0x1p-7;
  const gpubatch::cuda_stream stream;
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1000}}) {
    INFO(count << " elements");
    gpubatch::pinned_buffer<T> mine(count, stream.exec());
    std::vector<T> back(count);
    for (std::size_t i = 0; i < count; ++i) {
      mine[i] = gpubatch::convert<T>(contribution(seed, world.rank(), i));
    }
    gpubatch::device_buffer<T> values(count, stream.exec());
    gpubatch::copy_async(stream.exec(), values, mine);  // issued, not waited for
    gmpi::allreduce_mean(stream.exec(), gpubatch::span<T>(values), world);
    gpubatch::copy(stream.exec(), back, values);
    double worst = 0;
    for (std::size_t i = 0; i < count; ++i) {
      double sum = 0, magnitude = 0;
      for (int r = 0; r < world.size(); ++r) {
        const double x = to_double(gpubatch::convert<T>(contribution(seed, r, i)));
        sum += x;
        magnitude += std::abs(x);
      }
      worst = std::max(worst, std::abs(to_double(back[i]) - sum / world.size()) /
                                  (magnitude / world.size()));
    }
    CHECK(worst <= 2 * eps * world.size());
  }
  // Host memory is not the device overload's: it says which parameter.
  std::vector<float> host(4, 1.0F);
  try {
    gmpi::allreduce_mean(stream.exec(), gpubatch::span<float>(host.data(), 4, gpubatch::memory_space::host), world);
    FAIL_CHECK("no exception");
  } catch (const gpubatch::invalid_argument& e) {
    CHECK(e.parameter() == "values");
  }
}

int main(int argc, char* argv[]) {
  const gmpi::session mpi(argc, argv);
  return gpubatch::test::run_catch(argc, argv);
}
