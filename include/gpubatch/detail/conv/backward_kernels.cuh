/// @file detail/conv/backward_kernels.cuh
/// @brief CUDA kernels of the convolution backward passes beyond the implicit GEMMs (which run
/// on implicit_gemm_kernel of detail/conv/kernels.cuh through the mappings of
/// detail/conv/backward_problem.hpp): the bias gradient and per-sample squared norms. Both
/// reduce in a fixed order (a strided per-thread sum, then a shared-memory tree), so results
/// are bitwise the same on every run and every device. Included only by nvcc translation units.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/detail/conv/problem.hpp>
#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/epilogue.hpp>
#include <gpubatch/numeric.hpp>

GPUBATCH_KERNELS_BEGIN

GPUBATCH_NAMESPACE_BEGIN
namespace detail::cuda_conv {

/// Sum of one value per thread, in a fixed tree order; the result is valid in thread 0.
template <int Threads, class Compute>
GPUBATCH_DEVICE Compute block_sum(Compute value, Compute* partial) {
  static_assert((Threads & (Threads - 1)) == 0, "gpubatch: block_sum needs a power of two");
  const int tid = static_cast<int>(threadIdx.x);
  partial[tid] = value;
  __syncthreads();
#pragma unroll
  for (int half = Threads / 2; half > 0; half /= 2) {
    if (tid < half) partial[tid] += partial[tid + half];
    __syncthreads();
  }
  return partial[0];
}

/// One block per output of the bias gradient: db[set * K + k] = alpha * (sum of dy over the
/// set's samples and every pixel) + beta * db, with one set (all samples) or one per sample.
template <int Threads, class TDY, class TB, class Compute>
GPUBATCH_KERNEL void __launch_bounds__(Threads)
    bias_gradient_kernel(conv::conv2d_geometry geo, const TDY* dy, TB* db, bool per_sample,
                         Compute alpha, Compute beta) {
  __shared__ Compute partial[Threads];
  const index_t out = static_cast<index_t>(blockIdx.x);
  const index_t channel = out % geo.k;
  const index_t first = per_sample ? out / geo.k : 0;
  const index_t samples = per_sample ? 1 : geo.n;
  const index_t pixels = geo.pixels();
  Compute sum = Compute(0);
  for (index_t e = threadIdx.x; e < samples * pixels; e += Threads) {
    const index_t local = e / pixels;
    sum += convert<Compute>(dy[geo.y_offset(first + local, channel, e - local * pixels)]);
  }
  sum = block_sum<Threads>(sum, partial);
  if (threadIdx.x == 0) {
    store_output(db[out], sum, alpha, beta, epilogue::identity{}, 0, 0, 0);
  }
}

/// One block per sample: norms[first + b] = the sum of squares of the b-th of the call's
/// per-sample gradients (`values`, `per_set` elements each).
template <int Threads, class Compute>
GPUBATCH_KERNEL void __launch_bounds__(Threads)
    squared_norms_kernel(const Compute* values, index_t per_set, Compute* norms, index_t first) {
  __shared__ Compute partial[Threads];
  const Compute* const set = values + static_cast<index_t>(blockIdx.x) * per_set;
  Compute sum = Compute(0);
  for (index_t e = threadIdx.x; e < per_set; e += Threads) sum += set[e] * set[e];
  sum = block_sum<Threads>(sum, partial);
  if (threadIdx.x == 0) {
    norms[first + static_cast<index_t>(blockIdx.x)] = sum;
  }
}

}  // namespace detail::cuda_conv
GPUBATCH_NAMESPACE_END

GPUBATCH_KERNELS_END
