// Two emulated devices, an H100-class one and an sm_75 one (GPUBATCH_EMULATED_DEVICES=h100,sm75;
// tests/CMakeLists.txt), with code built for sm_90: each device has its own properties and
// memory, and the older device cannot run the code, which must fail as CUDA fails, clearly.
#include <gpubatch/containers.hpp>
#include <gpubatch/gemm.hpp>
#include <gpubatch/launch.hpp>
#include <gpubatch/stream.hpp>

#include "../catch.hpp"

#include <vector>

namespace {
__global__ void one_kernel(float* out) { out[threadIdx.x] = 1.0F; }

/// Makes `device` current for a scope.
struct on_device {
  explicit on_device(int device) { GPUBATCH_CUDA_TRY(cudaSetDevice(device)); }
  ~on_device() { (void)cudaSetDevice(0); }
  on_device(const on_device&) = delete;
  on_device& operator=(const on_device&) = delete;
};
}  // namespace

TEST_CASE("emulated devices: each its own properties and memory", "[emulation]") {
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  REQUIRE(count == 2);
  int major = 0, optin = 0;
  GPUBATCH_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 1));
  GPUBATCH_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 1));
  CHECK(major == 7);
  CHECK(optin == 64 * 1024);
  CHECK(cudaSetDevice(2) == cudaErrorInvalidDevice);
  (void)cudaGetLastError();

  const on_device second(1);
  const gpubatch::cuda_stream s;
  gpubatch::device_buffer<float> buffer(32, s.exec());
  cudaPointerAttributes attributes{};
  GPUBATCH_CUDA_TRY(cudaPointerGetAttributes(&attributes, buffer.data()));
  CHECK(attributes.type == cudaMemoryTypeDevice);
  CHECK(attributes.device == 1);
}

TEST_CASE("emulated devices: sm_90 code does not launch on an sm_75 device", "[emulation]") {
  const on_device second(1);
  const gpubatch::cuda_stream s;
  gpubatch::device_buffer<float> a(64, s.exec()), b(64, s.exec()), c(64, s.exec());
  gpubatch::launch(one_kernel, gpubatch::launch_config{1, 32, 0, s.get()}, c.data());
  CHECK(cudaGetLastError() == cudaErrorNoKernelImageForDevice);
  // The library reports it as a cuda_error naming the code, and the device stays usable.
  using view = gpubatch::matrix_batch_view<float>;
  try {
    gpubatch::gemm(s.exec(), gpubatch::op::none, gpubatch::op::none, 1.0F,
                   gpubatch::matrix_batch_view<const float>::packed(a.data(), 8, 8, 1),
                   gpubatch::matrix_batch_view<const float>::packed(b.data(), 8, 8, 1), 0.0F,
                   view::packed(c.data(), 8, 8, 1));
    FAIL("expected gpubatch::cuda_error");
  } catch (const gpubatch::cuda_error& e) {
    CHECK(e.code() == cudaErrorNoKernelImageForDevice);
  }
  s.synchronize();
}

TEST_CASE("emulated devices: a stream belongs to its device", "[emulation]") {
  const gpubatch::cuda_stream first;  // device 0
  gpubatch::device_buffer<float> out(32, first.exec());
  const on_device second(1);
  gpubatch::launch(one_kernel, gpubatch::launch_config{1, 32, 0, first.get()}, out.data());
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
}
