// An owning temporary as the source of copy_to_host_async, staged or not, would be freed before
// the copy runs: the overload that would take it is deleted.
#include <gpubatch/transfer.hpp>

#include <utility>
#include <vector>

int main() {
  gpubatch::pinned_pool<gpubatch::host_exec> pool(gpubatch::on_host);
  std::vector<float> destination(4);
  auto result = gpubatch::copy_to_host_async(gpubatch::on_host, std::move(destination),
                                             std::vector<float>(4, 1.0F),
                                             gpubatch::stage_through(pool));
  (void)result;
}
