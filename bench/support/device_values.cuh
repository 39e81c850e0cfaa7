// Pseudo-random benchmark inputs made on the device. A batch that fills an H100 is hundreds of
// megabytes: generating it on the host and uploading it took seconds per benchmark, longer than
// the timed runs; a kernel writes it in well under a millisecond. Every implementation of a
// benchmark reads the same values (same seed), and no input is constant, which can run faster
// than real data on some hardware.
#pragma once

#include "support/harness.hpp"

#include <gpubatch/error.hpp>
#include <gpubatch/numeric.hpp>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace gpubatch::bench {
namespace detail {

/// A 64-bit finalizer (splitmix64's): unrelated outputs for neighbouring indices and seeds.
__host__ __device__ inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

template <class T>
__global__ void uniform_values_kernel(T* out, std::size_t count, std::uint64_t seed, float lo,
                                      float width) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    // The top 24 bits: exactly representable in float, so the value is in [lo, lo + width).
    const float unit = static_cast<float>(mix(seed * 0x100000001B3ULL + i) >> 40) * (1.0F / 16777216.0F);
    out[i] = gpubatch::convert<T>(lo + width * unit);
  }
}

}  // namespace detail

/// @brief Fills `count` elements at device address `out` with pseudo-random values in
/// [lo, hi), a function of `seed` and the index alone; returns when they are written.
/// @throws cuda_error
template <class T>
void device_values(T* out, std::size_t count, unsigned seed, cudaStream_t stream,
                   float lo = -0.5F, float hi = 0.5F) {
  if (count == 0) return;
  constexpr unsigned threads = 256;
  const std::size_t wanted = (count + threads - 1) / threads;
  const unsigned blocks = wanted < 8192 ? static_cast<unsigned>(wanted) : 8192U;
  detail::uniform_values_kernel<T><<<blocks, threads, 0, stream>>>(out, count, seed, lo, hi - lo);
  GPUBATCH_CUDA_TRY(cudaGetLastError());
  GPUBATCH_CUDA_TRY(cudaStreamSynchronize(stream));
}

/// @brief Fills every copy of `buffers` with the same `count` pseudo-random elements of type T
/// (device_values into the first copy, then copied to the others).
/// @throws cuda_error
template <class T>
void device_values(rotating_buffers& buffers, std::size_t count, unsigned seed,
                   float lo = -0.5F, float hi = 0.5F) {
  device_values(static_cast<T*>(buffers.first()), count, seed, buffers.stream(), lo, hi);
  buffers.replicate_first();
}

}  // namespace gpubatch::bench
