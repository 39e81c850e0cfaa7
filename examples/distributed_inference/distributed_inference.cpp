// gpubatch across processes: data-parallel inference with MPI.
//
// Every rank builds the same small MLP (the weights come from a fixed seed) and the same
// synthetic batch of feature vectors, takes its shard of the batch (gpubatch::mpi::shard: near-
// equal, contiguous parts, the first ranks one item more), streams it through a pipeline on its
// best backend, and rank 0 gathers the shards into the whole batch's output. Rank 0 then runs
// the whole batch again in one process and checks that both outputs are bitwise equal: every
// item is its own small problem of a batched GEMM, so neither the shard nor the chunk an item
// lands in changes its arithmetic.
//   layer 1   64 -> 128, a batched GEMM (one 1 x 64 by 64 x 128 product per item, the weights
//             broadcast) with bias and ReLU fused
//   layer 2   128 -> 16, the same with bias only
//
// An exception escaping a rank's work ends the job (gpubatch::mpi::run_or_abort): the rank
// prints "gpubatch: rank R failed: ..." and MPI_Abort makes mpirun end every rank, so no rank
// is left waiting in the gather. --fail-rank R --fail-after-chunks K makes rank R's pipeline
// stage throw at its chunk K to show it.
//
//   mpirun -np 2 distributed_inference [--items N] [--chunk C] [--fail-rank R]
//                                      [--fail-after-chunks K]
//     N items (default 5003), C items per chunk (default 256)
#include <gpubatch/gpubatch.hpp>
#include <gpubatch/mpi.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using gpubatch::index_t;
using gpubatch::matrix_batch_view;
namespace epilogue = gpubatch::epilogue;

constexpr index_t inputs = 64, hidden = 128, outputs = 16;

struct options {
  std::size_t items = 5003;  // odd: the shards differ by one item
  std::size_t chunk = 256;
  int fail_rank = -1;
  std::size_t fail_after_chunks = 0;
};

options parse(int argc, char** argv) {
  options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 < argc && (arg == "--items" || arg == "--chunk" || arg == "--fail-rank" ||
                         arg == "--fail-after-chunks")) {
      char* end = nullptr;
      const long long value = std::strtoll(argv[++i], &end, 10);
      if (*end != '\0' || value < (arg == "--items" || arg == "--chunk" ? 1 : 0)) {
        throw gpubatch::invalid_argument(arg, std::string(argv[i]) + " is not a valid count");
      }
      if (arg == "--items") opt.items = static_cast<std::size_t>(value);
      if (arg == "--chunk") opt.chunk = static_cast<std::size_t>(value);
      if (arg == "--fail-rank") opt.fail_rank = static_cast<int>(value);
      if (arg == "--fail-after-chunks") opt.fail_after_chunks = static_cast<std::size_t>(value);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--items N] [--chunk C] [--fail-rank R] [--fail-after-chunks K]\n",
                   argv[0]);
      std::exit(arg == "--help" ? 0 : 2);
    }
  }
  return opt;
}

std::vector<float> random(std::size_t n, unsigned seed, float scale) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(engine);
  return v;
}

/// The network's weights in the backend's memory, and the pipeline stage that runs it.
template <class Exec>
struct mlp {
  gpubatch::device_buffer<float> w1, b1, w2, b2;
  int fail_rank = -1, rank = 0;
  std::size_t fail_after_chunks = 0;

  mlp(Exec exec, const options& opt, int this_rank)
      : w1(upload(exec, random(inputs * hidden, 1, 0.2F))),
        b1(upload(exec, random(hidden, 2, 0.1F))),
        w2(upload(exec, random(hidden * outputs, 3, 0.1F))),
        b2(upload(exec, random(outputs, 4, 0.1F))),
        fail_rank(opt.fail_rank),
        rank(this_rank),
        fail_after_chunks(opt.fail_after_chunks) {}

  static gpubatch::device_buffer<float> upload(Exec exec, const std::vector<float>& v) {
    gpubatch::device_buffer<float> buffer(v.size(), exec);
    gpubatch::copy(exec, gpubatch::span<float>(buffer),
                   gpubatch::span<const float>(v.data(), v.size(), gpubatch::memory_space::host));
    return buffer;
  }

  void operator()(Exec exec, const gpubatch::pipeline_chunk<float, float>& chunk) const {
    if (rank == fail_rank && chunk.index >= fail_after_chunks) {
      throw std::runtime_error("injected failure (--fail-rank " + std::to_string(rank) +
                               " --fail-after-chunks " + std::to_string(fail_after_chunks) + ")");
    }
    const auto n = static_cast<index_t>(chunk.items);
    const gpubatch::span<float> h = chunk.workspace_as<float>();  // hidden activations
    // Per item: [1 x 64] * [64 x 128] (the weights broadcast: batch stride 0), then [1 x 128] *
    // [128 x 16].
    const auto x = matrix_batch_view<const float>::packed(chunk.input, 1, inputs, n);
    const matrix_batch_view<const float> w1v(w1.data(), inputs, hidden, hidden, 0, n,
                                             gpubatch::layout::row_major, w1.space());
    const auto hv = matrix_batch_view<float>::packed(h, 1, hidden, n);
    gpubatch::gemm(exec, gpubatch::op::none, gpubatch::op::none, 1.0F, x, w1v, 0.0F, hv,
                   epilogue::then(epilogue::bias_col<float>{b1.data()}, epilogue::relu{}));
    const gpubatch::span<const float> h_read(h);
    const auto hin = matrix_batch_view<const float>::packed(h_read, 1, hidden, n);
    const matrix_batch_view<const float> w2v(w2.data(), hidden, outputs, outputs, 0, n,
                                             gpubatch::layout::row_major, w2.space());
    const auto y = matrix_batch_view<float>::packed(chunk.output, 1, outputs, n);
    gpubatch::gemm(exec, gpubatch::op::none, gpubatch::op::none, 1.0F, hin, w2v, 0.0F, y,
                   epilogue::bias_col<float>{b2.data()});
  }
};

/// Runs items [range.first, range.first + range.count) of `batch` through the network.
template <class Exec>
std::vector<float> infer(Exec exec, const mlp<Exec>& net, const std::vector<float>& batch,
                         gpubatch::item_range range, std::size_t chunk) {
  std::vector<float> out(range.count * outputs, std::nanf(""));  // poison: a missed item shows
  if (range.count == 0) return out;                              // more ranks than items
  const gpubatch::span<const float> in =
      gpubatch::span<const float>(batch).subspan(range.first * inputs, range.count * inputs);
  gpubatch::pipeline_options popt;
  popt.chunk_items = chunk;
  gpubatch::run_pipeline(
      exec, gpubatch::item_shape{inputs, outputs, gpubatch::workspace_of<float>(hidden)}, in, out,
      net, popt);
  return out;
}

template <class Exec>
int run(Exec exec, const options& opt, const gpubatch::mpi::communicator& world) {
  if constexpr (gpubatch::is_host_exec_v<Exec>) {
    exec.cuda_memory_rules = true;  // what runs here runs on a GPU
  }
  const mlp<Exec> net(exec, opt, world.rank());
  const std::vector<float> batch =
      random(opt.items * inputs, 2026, 1.0F);  // the same on every rank

  const gpubatch::item_range mine = gpubatch::mpi::shard(opt.items, world);
  const std::vector<float> local = infer(exec, net, batch, mine, opt.chunk);
  std::vector<float> gathered(world.rank() == 0 ? opt.items * outputs : 0, std::nanf(""));
  gpubatch::mpi::gather_batch(world, opt.items, outputs, gpubatch::span<const float>(local),
                              gpubatch::span<float>(gathered));
  std::printf("rank %d: items %zu to %zu on the %s backend\n", world.rank(), mine.first,
              mine.first + mine.count, gpubatch::is_cuda_exec_v<Exec> ? "cuda" : "host");
  std::fflush(stdout);
  if (world.rank() != 0) return 0;

  // The whole batch in this one process, in chunks that fall elsewhere: bitwise the same.
  const std::vector<float> single = infer(exec, net, batch, {0, opt.items}, opt.chunk + 7);
  const bool same = std::memcmp(gathered.data(), single.data(), single.size() * sizeof(float)) == 0;
  std::printf("%d ranks, %zu items: the gathered output %s the single-process output\n",
              world.size(), opt.items, same ? "equals (bitwise)" : "DIFFERS FROM");
  return same ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const gpubatch::mpi::session mpi(argc, argv);
    const gpubatch::mpi::communicator world;
    // An exception on one rank ends the job: its peers would wait in the gather for ever.
    // mpirun exits non-zero if any rank does: rank 0's check decides.
    return gpubatch::mpi::run_or_abort(world, [&] {
      const options opt = parse(argc, argv);
      if (world.rank() == 0)
        std::printf("%s\n", gpubatch::to_string(gpubatch::best_available_choice()).c_str());
      return gpubatch::with_best_available([&](auto exec) { return run(exec, opt, world); });
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distributed_inference: %s\n", e.what());
    return 1;
  }
}
