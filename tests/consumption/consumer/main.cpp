// Calls the library the way a user would, and checks the result.
#include <gpubatch/gpubatch.hpp>

#include <cstdio>
#include <vector>

int main() {
  const auto checksum = gpubatch::with_best_available(nullptr, [](auto exec) {
    gpubatch::device_buffer<float> buffer(2 * 3 * 4, exec);
    gpubatch::fill(exec, buffer, 0.5F);
    std::vector<float> host(buffer.size());
    if constexpr (gpubatch::is_cuda_exec_v<decltype(exec)>) {
      GPUBATCH_CUDA_TRY(cudaMemcpy(host.data(), buffer.data(), buffer.size_bytes(),
                                   cudaMemcpyDeviceToHost));
    } else {
      const auto view = gpubatch::matrix_batch_view<float>::packed(buffer, 2, 3, 4);
      view(3, 1, 2) = 1.5F;  // the last element
      host.assign(buffer.data(), buffer.data() + buffer.size());
    }
    float sum = 0;
    for (float v : host) sum += v;
    return sum;
  });
  std::printf("gpubatch %s: checksum %.1f\n", GPUBATCH_VERSION_STRING, checksum);
  const bool on_host = gpubatch::best_available_backend() == gpubatch::backend::host;
  return checksum == (on_host ? 13.0F : 12.0F) ? 0 : 1;
}
