// An owning temporary as the source of an asynchronous copy would be freed before the copy
// runs: the overload that would take it is deleted.
#include <gpubatch/transfer.hpp>

#include <vector>

int main() {
  gpubatch::pinned_buffer<float> destination(4, gpubatch::on_host);
  gpubatch::copy_async(gpubatch::on_host, destination, std::vector<float>(4, 1.0F));
}
