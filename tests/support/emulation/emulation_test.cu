// The emulated device fails where hardware fails: each seeded misuse below must end the way CUDA
// ends it (an error code, a failed launch, wrong data), and its correct twin must pass. Built
// for the emulated device only: on a GPU several of these kernels would hang or corrupt memory.
#include <gpubatch/containers.hpp>
#include <gpubatch/detail/gemm/warp_tiling.hpp>
#include <gpubatch/launch.hpp>
#include <gpubatch/numeric.hpp>
#include <gpubatch/stream.hpp>

#include "../catch.hpp"
#include <cuda_pipeline_primitives.h>
#include <mma.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace {

using gpubatch::launch;
using gpubatch::launch_config;

/// Ends a case whose kernel failed: the error is the context's until a reset.
void expect_failed_context(const gpubatch::cuda_stream& s, cudaError_t expected) {
  CHECK(cudaStreamSynchronize(s.get()) == expected);
  void* p = nullptr;
  CHECK(cudaMalloc(&p, 16) == expected);  // sticky: every call answers with it
  CHECK(cudaDeviceReset() == cudaSuccess);
  CHECK(cudaGetLastError() == cudaSuccess);
}

template <class T>
std::vector<T> download(const T* device, std::size_t count, const gpubatch::cuda_stream& s) {
  std::vector<T> host(count);
  GPUBATCH_CUDA_TRY(
      cudaMemcpyAsync(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost, s.get()));
  s.synchronize();
  return host;
}

enum class staging { waited, no_barrier, not_waited };

/// Each thread stages 4 floats with cp.async, then reads its neighbour's.
__global__ void neighbour_kernel(const float* in, float* out, staging how) {
  GPUBATCH_DYNAMIC_SHARED(float, stage, 16);
  const int t = static_cast<int>(threadIdx.x), n = static_cast<int>(blockDim.x);
  __pipeline_memcpy_async(stage + 4 * t, in + 4 * t, 16);
  __pipeline_commit();
  if (how != staging::not_waited) __pipeline_wait_prior(0);
  if (how == staging::waited) __syncthreads();
  out[t] = stage[4 * ((t + 1) % n)];
}

/// Each thread stages 4 floats with cp.async, zero-filling the last `zfill_floats`, and copies
/// its own stage out.
__global__ void zero_fill_kernel(const float* in, float* out, int zfill_floats) {
  GPUBATCH_DYNAMIC_SHARED(float, stage, 16);
  const int t = static_cast<int>(threadIdx.x);
  __pipeline_memcpy_async(stage + 4 * t, in + 4 * t, 16,
                          static_cast<std::size_t>(zfill_floats) * sizeof(float));
  __pipeline_commit();
  __pipeline_wait_prior(0);
  for (int i = 0; i < 4; ++i) out[4 * t + i] = stage[4 * t + i];
}

/// Each thread copies 4 floats with the kernels' 16-byte vector load and store, from `in_offset`
/// and to `out_offset` floats into the buffers.
__global__ void vector_copy_kernel(const float* in, float* out, int in_offset, int out_offset) {
  const int t = static_cast<int>(threadIdx.x);
  float v[4];
  gpubatch::detail::simt::read_piece<4>(in + in_offset + 4 * t, v);
  gpubatch::detail::simt::write_piece<4>(v, out + out_offset + 4 * t);
}

__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x < 32) __syncthreads();
  out[threadIdx.x] = 1.0F;
}

__global__ void write_kernel(float* out, float value) { out[threadIdx.x] = value; }

__global__ void trap_kernel() { __trap(); }

__global__ void shared_kernel(float* out) {
  GPUBATCH_DYNAMIC_SHARED(float, scratch, 16);
  scratch[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = scratch[blockDim.x - 1 - threadIdx.x];
}

/// One warp multiplies two 16 x 16 f16 tiles; `offset` (elements) misaligns A.
__global__ void wmma_kernel(const gpubatch::half* a, const gpubatch::half* b, float* c,
                            int offset, int lanes) {
  if (static_cast<int>(threadIdx.x) >= lanes) return;
  using namespace nvcuda;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 0.0F);
  wmma::load_matrix_sync(fa, a + offset, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}

}  // namespace

TEST_CASE("emulated cp.async: data lands at the wait, and reaches other threads at the barrier",
          "[emulation]") {
  const gpubatch::cuda_stream s;
  constexpr int threads = 64;
  std::vector<float> values(4 * threads);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.5F + static_cast<float>(i);
  gpubatch::device_buffer<float> in(values.size(), s.exec()), out(threads, s.exec());
  GPUBATCH_CUDA_TRY(cudaMemcpyAsync(in.data(), values.data(), values.size() * sizeof(float),
                                    cudaMemcpyHostToDevice, s.get()));
  const launch_config config{1, threads, 4 * threads * sizeof(float), s.get()};

  launch(neighbour_kernel, config, in.data(), out.data(), staging::waited);
  auto got = download(out.data(), threads, s);
  for (int t = 0; t < threads; ++t) CHECK(got[t] == values[4 * ((t + 1) % threads)]);

  // Without the barrier, a thread reads its neighbour's stage before the neighbour has waited
  // (or even issued): the bytes are shared memory's garbage, not the data.
  launch(neighbour_kernel, config, in.data(), out.data(), staging::no_barrier);
  got = download(out.data(), threads, s);
  CHECK(std::isnan(got[0]));

  // Copies never waited for fail the launch.
  launch(neighbour_kernel, config, in.data(), out.data(), staging::not_waited);
  expect_failed_context(s, cudaErrorLaunchFailure);
}

TEST_CASE("emulated cp.async: a zero fill reads only the bytes before it", "[emulation]") {
  const gpubatch::cuda_stream s;
  constexpr int threads = 32;
  std::vector<float> values(4 * threads);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.5F + static_cast<float>(i);
  gpubatch::device_buffer<float> in(values.size(), s.exec()), out(values.size(), s.exec());
  GPUBATCH_CUDA_TRY(cudaMemcpyAsync(in.data(), values.data(), values.size() * sizeof(float),
                                    cudaMemcpyHostToDevice, s.get()));
  const launch_config config{1, threads, 4 * threads * sizeof(float), s.get()};
  for (const int zfill : {0, 1, 2, 4}) {
    INFO("zero-filled floats " << zfill);
    launch(zero_fill_kernel, config, in.data(), out.data(), zfill);
    const auto got = download(out.data(), values.size(), s);
    for (std::size_t i = 0; i < values.size(); ++i) {
      CHECK(got[i] == (static_cast<int>(i % 4) < 4 - zfill ? values[i] : 0.0F));
    }
  }
  // A fill of all 16 bytes reads nothing, but still names device memory.
  launch(zero_fill_kernel, launch_config{1, 1, 16, s.get()}, values.data(), out.data(), 4);
  expect_failed_context(s, cudaErrorIllegalAddress);
}

TEST_CASE("emulated vector accesses: 16 bytes need 16-byte alignment", "[emulation]") {
  const gpubatch::cuda_stream s;
  constexpr int threads = 32;
  std::vector<float> values(4 * threads + 4);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.5F + static_cast<float>(i);
  gpubatch::device_buffer<float> in(values.size(), s.exec()), out(values.size(), s.exec());
  GPUBATCH_CUDA_TRY(cudaMemcpyAsync(in.data(), values.data(), values.size() * sizeof(float),
                                    cudaMemcpyHostToDevice, s.get()));
  const launch_config config{1, threads, 0, s.get()};
  launch(vector_copy_kernel, config, in.data(), out.data(), 4, 0);
  const auto got = download(out.data(), 4 * threads, s);
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == values[i + 4]);

  SECTION("a misaligned load") {
    launch(vector_copy_kernel, config, in.data(), out.data(), 1, 0);
    expect_failed_context(s, cudaErrorMisalignedAddress);
  }
  SECTION("a misaligned store") {
    launch(vector_copy_kernel, config, in.data(), out.data(), 0, 2);
    expect_failed_context(s, cudaErrorMisalignedAddress);
  }
}

TEST_CASE("emulated barriers: a divergent __syncthreads fails the launch", "[emulation]") {
  const gpubatch::cuda_stream s;
  gpubatch::device_buffer<float> out(64, s.exec());
  launch(divergent_barrier_kernel, launch_config{1, 64, 0, s.get()}, out.data());
  CHECK(cudaGetLastError() == cudaSuccess);  // the launch itself is valid
  expect_failed_context(s, cudaErrorLaunchFailure);
}

TEST_CASE("emulated launches: a trap is the context's error until reset", "[emulation]") {
  const gpubatch::cuda_stream s;
  launch(trap_kernel, launch_config{2, 32, 0, s.get()});
  expect_failed_context(s, cudaErrorLaunchFailure);
}

TEST_CASE("emulated launches: CUDA's configuration and shared-memory rules", "[emulation]") {
  const gpubatch::cuda_stream s;
  gpubatch::device_buffer<float> out(1024, s.exec());
  launch(write_kernel, launch_config{1, 1025, 0, s.get()}, out.data(), 1.0F);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  launch(write_kernel, launch_config{dim3(1, 65536), 32, 0, s.get()}, out.data(), 1.0F);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);

  // Above 48 KiB of dynamic shared memory a kernel opts in, up to the device's limit.
  const std::size_t big = 64 * 1024;
  launch(shared_kernel, launch_config{1, 256, big, s.get()}, out.data());
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  int device = 0, optin = 0;
  GPUBATCH_CUDA_TRY(cudaGetDevice(&device));
  GPUBATCH_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  CHECK(cudaFuncSetAttribute(shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             optin + 1) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  GPUBATCH_CUDA_TRY(cudaFuncSetAttribute(shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(big)));
  launch(shared_kernel, launch_config{1, 256, big, s.get()}, out.data());
  GPUBATCH_CUDA_TRY(cudaGetLastError());
  const auto got = download(out.data(), 256, s);
  for (int t = 0; t < 256; ++t) CHECK(got[t] == static_cast<float>(255 - t));
}

TEST_CASE("emulated streams: work is ordered across streams only by events", "[emulation]") {
  const gpubatch::cuda_stream producer, consumer;
  gpubatch::device_buffer<float> data(32, producer.exec());
  launch(write_kernel, launch_config{1, 32, 0, producer.get()}, data.data(), 1.0F);
  producer.synchronize();
  gpubatch::pinned_buffer<float> host(32, producer.exec());

  // Without an event the consumer may copy before the producer's kernel runs, and here it does.
  launch(write_kernel, launch_config{1, 32, 0, producer.get()}, data.data(), 2.0F);
  GPUBATCH_CUDA_TRY(cudaMemcpyAsync(host.data(), data.data(), 32 * sizeof(float),
                                    cudaMemcpyDeviceToHost, consumer.get()));
  consumer.synchronize();
  CHECK(host.data()[0] == 1.0F);
  producer.synchronize();

  // With it, never.
  gpubatch::cuda_event done;
  launch(write_kernel, launch_config{1, 32, 0, producer.get()}, data.data(), 3.0F);
  done.record(producer.get());
  done.make_wait(consumer.get());
  GPUBATCH_CUDA_TRY(cudaMemcpyAsync(host.data(), data.data(), 32 * sizeof(float),
                                    cudaMemcpyDeviceToHost, consumer.get()));
  consumer.synchronize();
  CHECK(host.data()[0] == 3.0F);
  CHECK(done.ready());
}

TEST_CASE("emulated wmma: the whole warp, aligned operands", "[emulation]") {
  const gpubatch::cuda_stream s;
  std::vector<gpubatch::half> a(16 * 16 + 8), b(16 * 16);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = __float2half(static_cast<float>(i % 7) - 3);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = __float2half(static_cast<float>(i % 5) - 2);
  gpubatch::device_buffer<gpubatch::half> da(a.size(), s.exec()), db(b.size(), s.exec());
  gpubatch::device_buffer<float> dc(16 * 16, s.exec());
  GPUBATCH_CUDA_TRY(cudaMemcpyAsync(da.data(), a.data(), a.size() * sizeof(a[0]),
                                    cudaMemcpyHostToDevice, s.get()));
  GPUBATCH_CUDA_TRY(cudaMemcpyAsync(db.data(), b.data(), b.size() * sizeof(b[0]),
                                    cudaMemcpyHostToDevice, s.get()));

  launch(wmma_kernel, launch_config{1, 32, 0, s.get()}, da.data(), db.data(), dc.data(), 0, 32);
  const auto c = download(dc.data(), 16 * 16, s);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      float expected = 0.0F;  // A row-major, B column-major
      for (int k = 0; k < 16; ++k) {
        expected += __half2float(a[i * 16 + k]) * __half2float(b[j * 16 + k]);
      }
      CHECK(c[i * 16 + j] == expected);
    }
  }

  SECTION("a pointer that is not 32-byte aligned") {
    launch(wmma_kernel, launch_config{1, 32, 0, s.get()}, da.data(), db.data(), dc.data(), 8, 32);
    expect_failed_context(s, cudaErrorMisalignedAddress);
  }
  SECTION("half a warp") {
    launch(wmma_kernel, launch_config{1, 32, 0, s.get()}, da.data(), db.data(), dc.data(), 0, 16);
    expect_failed_context(s, cudaErrorLaunchFailure);
  }
}
