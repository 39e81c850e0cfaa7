/// @file detail/conv/backward_kernels.cuh
/// @brief CUDA kernels of the convolution backward passes beyond the implicit GEMMs (which run
/// on implicit_gemm_kernel of detail/conv/kernels.cuh through the mappings of
/// detail/conv/backward_problem.hpp): the bias gradient and per-sample squared norms, and the
/// filters turned for backward data as a forward convolution. The first two
/// reduce in a fixed order (a strided per-thread sum, then a shared-memory tree), so results
/// are bitwise the same on every run and every device. Included only by nvcc translation units.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/detail/conv/backward_problem.hpp>
#include <gpubatch/detail/conv/depthwise_tiles.hpp>
#include <gpubatch/detail/conv/problem.hpp>
#include <gpubatch/detail/conv/radix_walk.hpp>
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
  // Division-free index math (radix_walk): 64-bit division calls a subroutine, around which
  // the f64 kernel spilled.
  const index_t out = static_cast<index_t>(blockIdx.x);
  const radix_walk<2> place(blockIdx.x, 0, {geo.k});
  const index_t channel = place.digit[1];
  const index_t first = per_sample ? place.digit[0] : 0;
  const index_t samples = per_sample ? 1 : geo.n;
  const index_t pixels = geo.pixels();
  Compute sum = Compute(0);
  if (pixels > 0) {
    for (radix_walk<2> e(threadIdx.x, Threads, {pixels}); e.digit[0] < samples; e.advance()) {
      sum += convert<Compute>(dy[geo.y_offset(first + e.digit[0], channel, e.digit[1])]);
    }
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

/// Direct backward data, for depthwise layers and layers with few input channels per group
/// (at most direct_dgrad_max_channels; the stem's 3), whose implicit GEMM would fill one or a
/// few columns of its 64-wide tile and multiply the zeros between strides: one input element
/// per thread (grid-stride, storage order, so a warp's channels or columns are adjacent),
/// gathering its group's dy elements at the taps that reached it. A tap row's output row (and a
/// tap's output column) is found once, not per product, and only taps that land on a stride are
/// visited. Sums in a fixed order: tap rows, taps, then the group's output channels.
template <int Threads, class TDY, class TW, class TDX, class Compute, class Epilogue>
GPUBATCH_KERNEL void __launch_bounds__(Threads)
    depthwise_dgrad_kernel(conv::dgrad_batch<TDY, TW, TDX> batch, Compute alpha, Compute beta,
                           Epilogue epilogue) {
  const conv::conv2d_geometry& geo = batch.geo;
  const index_t plane = geo.h * geo.w;
  const index_t total = geo.n * geo.c * plane;
  const index_t cg = geo.cg(), kg = geo.kg();
  const index_t filter_stride = geo.gemm_k();            // between filters kl and kl + 1
  const index_t channel_stride = geo.y_channel_stride();  // between dy's channels
  const index_t step = static_cast<index_t>(gridDim.x) * Threads;
  for (index_t idx = static_cast<index_t>(blockIdx.x) * Threads + threadIdx.x; idx < total;
       idx += step) {
    index_t sample, c, pixel;
    if (geo.nhwc()) {
      c = idx % geo.c;
      pixel = (idx / geo.c) % plane;
      sample = idx / (geo.c * plane);
    } else {
      pixel = idx % plane;
      c = (idx / plane) % geo.c;
      sample = idx / (plane * geo.c);
    }
    const index_t ih = pixel / geo.w, iw = pixel % geo.w;
    const index_t group = c / cg, cl = c - group * cg;
    const TW* const w = batch.w + (batch.per_sample ? sample * geo.filter_set_size() : 0);
    const TDY* const dy = batch.dy + geo.y_offset(sample, group * kg, 0);
    Compute acc = Compute(0);
    // As geo.output_pixel_through, per tap row and tap, in 32-bit arithmetic (the dispatch
    // checks that the padded extents fit): the offset from the padded position only falls as
    // the tap index grows, so the first negative one ends the loop.
    const int ph = static_cast<int>(ih + geo.pad_h), pw = static_cast<int>(iw + geo.pad_w);
    const int stride_h = static_cast<int>(geo.stride_h), stride_w = static_cast<int>(geo.stride_w);
    const int dilation_h = static_cast<int>(geo.dilation_h);
    const int dilation_w = static_cast<int>(geo.dilation_w);
    for (int ir = 0; ir < static_cast<int>(geo.r); ++ir) {
      const int th = ph - ir * dilation_h;
      if (th < 0) break;
      const int op = th / stride_h;
      if (op * stride_h != th || op >= geo.p) continue;
      for (int is = 0; is < static_cast<int>(geo.s); ++is) {
        const int tw = pw - is * dilation_w;
        if (tw < 0) break;
        const int oq = tw / stride_w;
        if (oq * stride_w != tw || oq >= geo.q) continue;
        const index_t out = op * geo.q + oq;
        const TDY* const d = dy + (geo.nhwc() ? out * geo.k : out);
        const TW* const f = w + geo.w_offset(group * kg, cl, ir, is);
        // Not unrolled: one accumulator makes this a chain anyway, and the unrolled loop took
        // ptxas to 64 registers with spills (f64, sm_90) or 150 without a cap.
#pragma unroll 1
        for (index_t kl = 0; kl < kg; ++kl) {
          acc += convert<Compute>(d[kl * channel_stride]) * convert<Compute>(f[kl * filter_stride]);
        }
      }
    }
    store_output(batch.dx[geo.x_offset(sample, c, ih, iw)], acc, alpha, beta, epilogue, sample,
                 pixel, c);
  }
}

/// Depthwise backward filter of an NHWC layer summed over its samples, sliced
/// (conv::depthwise_wgrad_slices), for filters at most MaxS x MaxS: a thread takes one output
/// channel (adjacent threads adjacent channels, so its reads of dy and x coalesce across the
/// block's channel lanes) and strides through its block's slice of the output pixels with one
/// partial sum per filter tap in registers; the block's thread rows are then added in row order
/// through shared memory. One slice stores alpha * sum + beta * dw; several write their sums to
/// `workspace` ([slice][K][R * S]) for split_k_reduce_kernel. Fixed order throughout.
template <int Threads, int MaxS, class TX, class TDY, class TDW, class Compute>
GPUBATCH_KERNEL void __launch_bounds__(Threads, 1)
    depthwise_wgrad_sliced_kernel(conv::wgrad_batch<TX, TDY, TDW> batch,
                                  conv::depthwise_wgrad_slices slices, Compute* workspace,
                                  Compute alpha, Compute beta) {
  __shared__ Compute partial[Threads];
  const conv::conv2d_geometry& geo = batch.geo;
  const int lane = static_cast<int>(threadIdx.x), row = static_cast<int>(threadIdx.y);
  const index_t k = static_cast<index_t>(blockIdx.x) * slices.lanes_c + lane;
  const bool real = k < geo.k;
  // The channel's input channel: 32-bit division once (K < 2^31: the grid's chunks).
  const auto multiplier = static_cast<std::uint32_t>(geo.kg());
  const index_t c = real ? static_cast<std::uint32_t>(k) / multiplier : 0;
  // 32-bit tap and in-sample offsets (depthwise_wgrad_slices::fits).
  const auto height = static_cast<int>(geo.h), width = static_cast<int>(geo.w);
  const auto filter_h = static_cast<int>(geo.r), filter_w = static_cast<int>(geo.s);
  const auto pixel_stride = static_cast<int>(geo.c);
  const auto dilation_h = static_cast<int>(geo.dilation_h), dilation_w = static_cast<int>(geo.dilation_w);
  const int tap_row_step = dilation_h * width * pixel_stride, tap_step = dilation_w * pixel_stride;
  Compute sums[MaxS][MaxS];
#pragma unroll
  for (int ir = 0; ir < MaxS; ++ir) {
#pragma unroll
    for (int is = 0; is < MaxS; ++is) sums[ir][is] = Compute(0);
  }
  const index_t begin = static_cast<index_t>(blockIdx.y) * slices.per_slice;
  const index_t end = begin + slices.per_slice < slices.total ? begin + slices.per_slice : slices.total;
  index_t flat = begin + row;
  if (real && flat < end) {
    // NHWC: the walk's (sample, p, q) elements are consecutive pixels of dy, K apart.
    const TDY* d_at = batch.dy + (batch.first_sample * geo.pixels() + flat) * geo.k + k;
    const index_t d_step = static_cast<index_t>(slices.lanes_p) * geo.k;
    const index_t sample_size = geo.h * geo.w * geo.c;
    const TX* const x_channel = batch.x + batch.first_sample * sample_size + c;
    for (radix_walk<3> e(static_cast<std::uint32_t>(flat), static_cast<std::uint32_t>(slices.lanes_p),
                         {geo.p, geo.q});
         flat < end; e.advance(), flat += slices.lanes_p, d_at += d_step) {
      const Compute d = convert<Compute>(*d_at);
      const TX* const xs = x_channel + e.digit[0] * sample_size;
      const auto ih0 = static_cast<int>(e.digit[1] * geo.stride_h - geo.pad_h);
      const auto iw0 = static_cast<int>(e.digit[2] * geo.stride_w - geo.pad_w);
      const int origin = (ih0 * width + iw0) * pixel_stride;  // below 0 in the padding
#pragma unroll
      for (int ir = 0; ir < MaxS; ++ir) {
        if (ir >= filter_h) break;
        const bool row_inside = static_cast<unsigned>(ih0 + ir * dilation_h) < static_cast<unsigned>(height);
        const int row_offset = origin + ir * tap_row_step;
#pragma unroll
        for (int is = 0; is < MaxS; ++is) {
          if (is >= filter_w) break;
          // A tap in the padding reads the channel's first element of the sample instead (a
          // line the block reads anyway) and adds nothing: no branch around the load, whose
          // address math the compiler would otherwise repeat in every branch.
          const bool inside =
              row_inside && static_cast<unsigned>(iw0 + is * dilation_w) < static_cast<unsigned>(width);
          const Compute v = convert<Compute>(xs[inside ? row_offset + is * tap_step : 0]);
          sums[ir][is] += (inside ? d : Compute(0)) * v;
        }
      }
    }
  }
  // Each tap's sums of the block's thread rows, added in row order by row 0.
  const index_t window = geo.r * geo.s;
#pragma unroll
  for (int ir = 0; ir < MaxS; ++ir) {
#pragma unroll
    for (int is = 0; is < MaxS; ++is) {
      if (ir < filter_h && is < filter_w) {
        partial[row * slices.lanes_c + lane] = sums[ir][is];
        __syncthreads();
        if (row == 0 && real) {
          Compute sum = Compute(0);
          for (int r = 0; r < slices.lanes_p; ++r) sum += partial[r * slices.lanes_c + lane];
          const index_t t = ir * filter_w + is;
          if (slices.slices > 1) {
            workspace[(static_cast<index_t>(blockIdx.y) * geo.k + k) * window + t] = sum;
          } else {
            // Depthwise filters have one input channel: a set is K x R x S.
            store_output(batch.dw[k * window + t], sum, alpha, beta, epilogue::identity{}, 0, k, t);
          }
        }
        __syncthreads();  // partial is reused by the next tap
      }
    }
  }
}

/// Depthwise backward filter: one block per (filter set, output channel), its threads striding
/// over the set's samples and output pixels with one partial sum per filter tap (at most
/// MaxTaps, all in registers), each tap then reduced by block_sum. Fixed order throughout. One
/// block per SM is all it asks (__launch_bounds__'s second argument): given only the thread
/// count, ptxas held the 49-tap kernels to 80 (f32) and 128 (f64) registers on sm_80, and they
/// spilled.
template <int Threads, int MaxTaps, class TX, class TDY, class TDW, class Compute>
GPUBATCH_KERNEL void __launch_bounds__(Threads, 1)
    depthwise_wgrad_kernel(conv::wgrad_batch<TX, TDY, TDW> batch, Compute alpha, Compute beta) {
  __shared__ Compute partial[Threads];
  const conv::conv2d_geometry& geo = batch.geo;
  // Division-free index math (radix_walk) and 32-bit tap math: 64-bit division calls a
  // subroutine, around which the f64 kernel with 49 taps spilled.
  // One block per (set, k), so K, and the groups (= C <= K), are below 2^31: 32-bit division.
  const auto channels = static_cast<std::uint32_t>(geo.k);
  const std::uint32_t multiplier = channels / static_cast<std::uint32_t>(geo.groups);
  const index_t k = blockIdx.x % channels;
  const index_t set = blockIdx.x / channels;
  const index_t first = batch.per_sample ? set : 0;
  const index_t samples = batch.per_sample ? 1 : batch.samples;
  const index_t window = geo.r * geo.s;
  const index_t c = static_cast<std::uint32_t>(k) / multiplier;
  const int taps_s = static_cast<int>(geo.s);  // a filter row, at most MaxTaps
  Compute sums[MaxTaps];
#pragma unroll
  for (int t = 0; t < MaxTaps; ++t) sums[t] = Compute(0);
  for (radix_walk<3> e(threadIdx.x, Threads, {geo.p > 0 ? geo.p : 1, geo.q > 0 ? geo.q : 1});
       geo.pixels() > 0 && e.digit[0] < samples; e.advance()) {
    const index_t sample = batch.first_sample + first + e.digit[0];
    const index_t op = e.digit[1], oq = e.digit[2];
    const index_t pixel = op * geo.q + oq;
    const Compute d = convert<Compute>(batch.dy[geo.y_offset(sample, k, pixel)]);
#pragma unroll
    for (int t = 0; t < MaxTaps; ++t) {
      if (t >= window) break;
      const index_t ih = op * geo.stride_h - geo.pad_h + (t / taps_s) * geo.dilation_h;
      const index_t iw = oq * geo.stride_w - geo.pad_w + (t % taps_s) * geo.dilation_w;
      if (ih >= 0 && ih < geo.h && iw >= 0 && iw < geo.w) {
        sums[t] += d * convert<Compute>(batch.x[geo.x_offset(sample, c, ih, iw)]);
      }
    }
  }
  // Depthwise filters have one input channel: a set is K x R x S (filter_set_size, whose
  // C / groups would divide in 64 bits).
  TDW* const out = batch.dw + set * (geo.k * window) + k * window;
  // Unrolled, so every partial sum stays in a register (window is uniform across the block).
#pragma unroll
  for (int t = 0; t < MaxTaps; ++t) {
    if (t < window) {
      const Compute sum = block_sum<Threads>(sums[t], partial);
      if (threadIdx.x == 0) {
        store_output(out[t], sum, alpha, beta, epilogue::identity{},
                     batch.per_sample ? batch.first_sample + set : 0, k, t);
      }
      __syncthreads();  // partial is reused by the next tap
    }
  }
}

/// A layer's filters turned for backward data as a forward convolution of dy
/// (conv::dgrad_as_fprop): element (c, kl, r, s) of the forward filters (C filters of K/g
/// channels, in `forward`'s layout) is the layer's filter group * K/g + kl at input channel
/// c - group * C/g and tap (R - 1 - r, S - 1 - s), group = c / (C/g). One element per thread,
/// grid-stride in the order they are stored.
template <int Threads, class T>
GPUBATCH_KERNEL void __launch_bounds__(Threads)
    turn_filters_kernel(conv::conv2d_geometry layer, conv::conv2d_geometry forward, const T* w,
                        T* out) {
  const index_t per_filter = forward.gemm_k();
  const index_t total = forward.k * per_filter;
  const index_t step = static_cast<index_t>(gridDim.x) * Threads;
  for (index_t idx = static_cast<index_t>(blockIdx.x) * Threads + threadIdx.x; idx < total;
       idx += step) {
    const index_t c = idx / per_filter;
    index_t kl, r, s;
    forward.decode_filter_index(idx - c * per_filter, kl, r, s);
    const index_t group = c / layer.cg();
    out[idx] = w[layer.w_offset(group * layer.kg() + kl, c - group * layer.cg(), layer.r - 1 - r,
                                layer.s - 1 - s)];
  }
}

}  // namespace detail::cuda_conv
GPUBATCH_NAMESPACE_END

GPUBATCH_KERNELS_END
