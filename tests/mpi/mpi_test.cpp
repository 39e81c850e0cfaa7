// gpubatch::mpi on the host backend, run under mpirun with 2 and 3 ranks (tests/mpi).
//
// Every rank runs the same test cases in the same order: checks never stop a test case early
// (CHECK, not REQUIRE), so one rank's failure cannot leave the others waiting in a collective.
#include <gpubatch/mpi.hpp>

#include "../support/catch.hpp"
#include "../support/catch_runner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using gpubatch::item_range;
namespace gmpi = gpubatch::mpi;

/// A seed drawn fresh on rank 0 and shared, so each run tests new data and every rank agrees.
std::uint32_t shared_seed(const gmpi::communicator& comm) {
  static std::uint32_t seed = [&] {
    std::uint32_t s = std::random_device{}();
    GPUBATCH_MPI_TRY(MPI_Bcast(&s, 1, MPI_UINT32_T, 0, comm.get()));
    return s;
  }();
  return seed;
}

/// Element e of item i of a batch: a random value of its own (a hash of the seed, the item and
/// the element), never zero.
float item_value(std::uint32_t seed, std::size_t item, std::size_t e) {
  std::uint64_t z = (std::uint64_t{seed} << 32) ^ (item * 0x9E3779B97F4A7C15ULL) ^ (e + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;  // splitmix64's finaliser
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  const float unit = static_cast<float>(z >> 40) * 0x1p-24F;  // [0, 1)
  return (0.5F + 1.5F * unit) * ((z & 1) != 0 ? -1.0F : 1.0F);
}

/// Rank r's contribution to element i of an allreduce.
float contribution(std::uint32_t seed, int rank, std::size_t i) {
  return item_value(seed + 17, i, static_cast<std::size_t>(rank));
}

template <class T>
double to_double(T value) {
  if constexpr (std::is_same_v<T, double>) {
    return value;
  } else {
    return gpubatch::convert<float>(value);
  }
}

/// Whether every rank holds the same bytes as rank 0.
bool same_on_every_rank(const void* data, std::size_t bytes, const gmpi::communicator& comm) {
  std::vector<char> root(bytes);
  if (bytes > 0) std::memcpy(root.data(), data, bytes);
  GPUBATCH_MPI_TRY(MPI_Bcast(root.data(), static_cast<int>(bytes), MPI_BYTE, 0, comm.get()));
  int same = bytes == 0 || std::memcmp(root.data(), data, bytes) == 0 ? 1 : 0, all = 0;
  GPUBATCH_MPI_TRY(MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, comm.get()));
  return all == 1;
}

}  // namespace

TEST_CASE("shard: contiguous, near-equal parts; the first ranks hold one item more", "[mpi]") {
  for (std::size_t items : {0, 1, 2, 3, 5, 7, 64, 1001}) {
    for (int ranks = 1; ranks <= 5; ++ranks) {
      std::size_t next = 0;
      for (int r = 0; r < ranks; ++r) {
        const item_range part = gmpi::shard(items, ranks, r);
        const std::size_t expected =
            items / static_cast<std::size_t>(ranks) +
            (static_cast<std::size_t>(r) < items % static_cast<std::size_t>(ranks) ? 1 : 0);
        CHECK(part.first == next);
        CHECK(part.count == expected);
        next = part.first + part.count;
      }
      CHECK(next == items);
    }
  }
  const gmpi::communicator world;
  const item_range mine = gmpi::shard(1001, world),
                   same = gmpi::shard(1001, world.size(), world.rank());
  CHECK(mine.first == same.first);
  CHECK(mine.count == same.count);
  CHECK_THROWS_AS(gmpi::shard(10, 0, 0), gpubatch::invalid_argument);
  CHECK_THROWS_AS(gmpi::shard(10, 3, 3), gpubatch::invalid_argument);
  CHECK_THROWS_AS(gmpi::shard(10, 3, -1), gpubatch::invalid_argument);
}

TEST_CASE("gather_batch and allgather_batch assemble the batch in order", "[mpi]") {
  const gmpi::communicator world;
  const std::uint32_t seed = shared_seed(world);
  INFO("seed " << seed << ", " << world.size() << " ranks");
  const auto ranks = static_cast<std::size_t>(world.size());
  // Fewer items than ranks (some shards empty), uneven shards, a batch of several MiB.
  for (std::size_t items :
       {std::size_t{0}, std::size_t{1}, ranks - 1, 2 * ranks + 1, std::size_t{1000}}) {
    for (std::size_t per_item : {std::size_t{1}, std::size_t{3}, std::size_t{1031}}) {
      INFO(items << " items of " << per_item);
      const item_range mine = gmpi::shard(items, world);
      std::vector<float> local(mine.count * per_item);
      for (std::size_t i = 0; i < mine.count; ++i)
        for (std::size_t e = 0; e < per_item; ++e)
          local[i * per_item + e] = item_value(seed, mine.first + i, e);
      std::vector<float> expected(items * per_item);
      for (std::size_t i = 0; i < items; ++i)
        for (std::size_t e = 0; e < per_item; ++e)
          expected[i * per_item + e] = item_value(seed, i, e);

      for (int root : {0, world.size() - 1}) {
        std::vector<float> output(world.rank() == root ? items * per_item : 0, std::nanf(""));
        gmpi::gather_batch(world, items, per_item, gpubatch::span<const float>(local),
                           gpubatch::span<float>(output), root);
        if (world.rank() == root) {
          CHECK(std::memcmp(output.data(), expected.data(), output.size() * sizeof(float)) == 0);
        }
      }
      std::vector<float> everywhere(items * per_item, std::nanf(""));
      gmpi::allgather_batch(world, items, per_item, gpubatch::span<const float>(local),
                            gpubatch::span<float>(everywhere));
      CHECK(std::memcmp(everywhere.data(), expected.data(), everywhere.size() * sizeof(float)) ==
            0);
    }
  }
}

TEST_CASE("gather_batch refuses what does not fit, alike on every rank, before communicating",
          "[mpi]") {
  const gmpi::communicator world;
  const std::size_t items = 10;
  const item_range mine = gmpi::shard(items, world);
  std::vector<float> local(mine.count * 2 + 1), output(items * 2);
  const auto expect = [](auto&& call, const std::string& parameter) {
    try {
      call();
      FAIL_CHECK("no exception");
    } catch (const gpubatch::invalid_argument& e) {
      CHECK(e.parameter() == parameter);
    }
  };
  const gpubatch::span<const float> wrong(local);
  const gpubatch::span<const float> right = wrong.subspan(0, mine.count * 2);
  const gpubatch::span<float> out(output);
  expect([&] { gmpi::gather_batch(world, items, 2, wrong, out); }, "local");
  expect([&] { gmpi::allgather_batch(world, items, 2, right, out.subspan(0, items * 2 - 1)); },
         "output");
  expect([&] { gmpi::gather_batch(world, items, 2, right, out, world.size()); }, "root");
  expect([&] { gmpi::gather_batch(world, items, 2, right, out, -1); }, "root");
  expect([&] { gmpi::gather_batch(world, items, 0, right, out); }, "elements_per_item");
  expect([&] { gmpi::gather_batch(world, std::size_t{1} << 31, 1, right, out); }, "items");
  const gpubatch::span<const float> on_device(local.data(), local.size() - 1,
                                              gpubatch::memory_space::device);
  expect([&] { gmpi::gather_batch(world, items, 2, on_device, out); }, "local");
  // The communicator still works: nothing was left half sent.
  CHECK_NOTHROW(world.barrier());
}

TEMPLATE_TEST_CASE("allreduce_mean: every rank gets the mean, against a float64 reference", "[mpi]",
                   float, double, gpubatch::half, gpubatch::bfloat16) {
  using T = TestType;
  const gmpi::communicator world;
  const std::uint32_t seed = shared_seed(world);
  INFO("seed " << seed << ", " << world.size() << " ranks");
  // The result is rounded once to T; its sum in float (half, bfloat16) or T adds a little.
  const double eps = std::is_same_v<T, double>           ? 0x1p-52
                     : std::is_same_v<T, float>          ? 0x1p-23
                     : std::is_same_v<T, gpubatch::half> ? 0x1p-10
                                                         : 0x1p-7;
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4099}}) {
    INFO(count << " elements");
    std::vector<T> values(count);
    for (std::size_t i = 0; i < count; ++i)
      values[i] = gpubatch::convert<T>(contribution(seed, world.rank(), i));
    gmpi::allreduce_mean(gpubatch::span<T>(values), world);
    double worst = 0;
    for (std::size_t i = 0; i < count; ++i) {
      double sum = 0, magnitude = 0;
      for (int r = 0; r < world.size(); ++r) {
        const double x = to_double(gpubatch::convert<T>(contribution(seed, r, i)));
        sum += x;
        magnitude += std::abs(x);
      }
      const double error = std::abs(to_double(values[i]) - sum / world.size());
      worst = std::max(worst, error / (magnitude / world.size()));
    }
    CHECK(worst <= 2 * eps * world.size());
    CHECK(same_on_every_rank(values.data(), count * sizeof(T), world));
  }
  // The host_exec overload is the same call.
  std::vector<T> one{gpubatch::convert<T>(float(world.rank() + 1))};
  gmpi::allreduce_mean(gpubatch::on_host, gpubatch::span<T>(one), world);
  CHECK(to_double(one[0]) == double(world.size() + 1) / 2);
}

TEST_CASE("allreduce_mean refuses device memory; MPI failures are mpi_error with MPI's text",
          "[mpi]") {
  const gmpi::communicator world;
  std::vector<float> values(4, 1.0F);
  try {
    gmpi::allreduce_mean(gpubatch::span<float>(values.data(), 4, gpubatch::memory_space::device),
                         world);
    FAIL_CHECK("no exception");
  } catch (const gpubatch::invalid_argument& e) {
    CHECK(e.parameter() == "values");
  }
  // An MPI call that fails (a negative count), on the error handler the communicator set.
  MPI_Datatype type = MPI_DATATYPE_NULL;
  try {
    GPUBATCH_MPI_TRY(MPI_Type_contiguous(-1, MPI_BYTE, &type));
    FAIL_CHECK("no exception");
  } catch (const gpubatch::mpi_error& e) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    MPI_Error_string(e.code(), text, &length);
    CHECK(e.code() != MPI_SUCCESS);
    CHECK(std::string(e.what()).find(std::string(text, static_cast<std::size_t>(length))) !=
          std::string::npos);
    CHECK(std::string(e.what()).find("`MPI_Type_contiguous(-1, MPI_BYTE, &type)`") != std::string::npos);
  }
  CHECK_THROWS_AS(gmpi::communicator(MPI_COMM_NULL), gpubatch::invalid_argument);
}

TEST_CASE("cuda_aware is false where MPI was built without CUDA", "[mpi]") {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  CHECK(gmpi::cuda_aware() == (MPIX_Query_cuda_support() == 1));
#else
  CHECK_FALSE(gmpi::cuda_aware());
#endif
}

int main(int argc, char* argv[]) {
  const gmpi::session mpi(argc, argv);
  return gpubatch::test::run_catch(argc, argv);
}
