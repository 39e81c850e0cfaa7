/// @file detail/block_scan.cuh
/// @brief The block-wide prefix sum the grouped tile walk uses: CUB's BlockScan with nvcc; on
/// the emulated device (which cannot run CUB's warp-shuffle code), a plain shared-memory scan
/// with the same contract. Included only by CUDA translation units.
#pragma once

#include <gpubatch/config.hpp>

#if !defined(GPUBATCH_EMULATION)
#include <cub/block/block_scan.cuh>
#endif

GPUBATCH_NAMESPACE_BEGIN
namespace detail {

/// Inclusive sum of one value per thread of a block of `Threads` threads.
template <class T, int Threads>
struct block_inclusive_sum {
#if defined(GPUBATCH_EMULATION)
  struct storage {
    T values[Threads];
  };
#else
  using storage = typename cub::BlockScan<T, Threads>::TempStorage;
#endif

  /// Every thread of the block calls it (it synchronises the block): `inclusive` is the sum of
  /// the values of threads 0..threadIdx.x, `total` that of all threads.
  GPUBATCH_DEVICE static void run(storage& s, T value, T& inclusive, T& total) {
#if defined(GPUBATCH_EMULATION)
    const int thread = static_cast<int>(threadIdx.x);
    s.values[thread] = value;
    __syncthreads();
    inclusive = T(0);
    total = T(0);
    for (int t = 0; t < Threads; ++t) {
      if (t <= thread) inclusive += s.values[t];
      total += s.values[t];
    }
    __syncthreads();  // storage may be reused as soon as this returns
#else
    cub::BlockScan<T, Threads>(s).InclusiveSum(value, inclusive, total);
#endif
  }
};

}  // namespace detail
GPUBATCH_NAMESPACE_END
