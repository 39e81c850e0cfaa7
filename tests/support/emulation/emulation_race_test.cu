// The race check has to catch races: each kernel here has one, and ThreadSanitizer must report
// it (CTest passes these cases only when its report is in the output; tests/CMakeLists.txt).
// Built only for the ThreadSanitizer pass.
#include <gpubatch/containers.hpp>
#include <gpubatch/launch.hpp>
#include <gpubatch/stream.hpp>

#include "../catch.hpp"

namespace {
/// Thread t writes slot t, then reads slot t + 1 without a barrier in between.
__global__ void missing_barrier_kernel(float* out) {
  GPUBATCH_DYNAMIC_SHARED(float, slots, 16);
  const unsigned t = threadIdx.x;
  slots[t] = static_cast<float>(t);
  out[t] = slots[(t + 1) % blockDim.x];
}

/// Every block writes the same elements.
__global__ void blocks_collide_kernel(float* out) {
  out[threadIdx.x] = static_cast<float>(blockIdx.x);
}
}  // namespace

TEST_CASE("race check: a missing __syncthreads is reported", "[emulation][race]") {
  const gpubatch::cuda_stream s;
  gpubatch::device_buffer<float> out(64, s.exec());
  gpubatch::launch(missing_barrier_kernel,
                   gpubatch::launch_config{1, 64, 64 * sizeof(float), s.get()}, out.data());
  s.synchronize();
}

TEST_CASE("race check: blocks writing the same element are reported", "[emulation][race]") {
  const gpubatch::cuda_stream s;
  gpubatch::device_buffer<float> out(32, s.exec());
  gpubatch::launch(blocks_collide_kernel, gpubatch::launch_config{2, 32, 0, s.get()}, out.data());
  s.synchronize();
}
