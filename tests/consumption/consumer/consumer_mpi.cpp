// The consumer's use of the optional MPI component: one process (an MPI singleton) shards a
// batch, gathers it and averages a buffer.
#include <gpubatch/mpi.hpp>

#include <vector>

int main(int argc, char** argv) {
  const gpubatch::mpi::session session(argc, argv);
  const gpubatch::mpi::communicator world;
  return gpubatch::mpi::run_or_abort(world, [&] {
    const gpubatch::item_range mine = gpubatch::mpi::shard(5, world);
    std::vector<float> local(mine.count * 2, 1.5F), all(world.rank() == 0 ? 10 : 0, 0.0F);
    gpubatch::mpi::gather_batch(world, 5, 2, gpubatch::span<const float>(local),
                                gpubatch::span<float>(all));
    std::vector<double> values{2.0, -3.0};
    gpubatch::mpi::allreduce_mean(gpubatch::span<double>(values), world);
    const bool gathered = world.size() != 1 || (all.size() == 10 && all[9] == 1.5F);
    return gathered && values[0] == 2.0 && values[1] == -3.0 ? 0 : 1;
  });
}
