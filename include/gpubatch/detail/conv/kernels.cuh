/// @file detail/conv/kernels.cuh
/// @brief CUDA convolution kernels; included only by translation units compiled by nvcc.
///
/// - implicit_gemm_kernel: the GEMM tile machinery of detail/gemm/kernels.cuh (a TileM x TileN
///   output tile per block in warp tiles of TM x TN accumulators per thread, K steps staged in shared memory
///   with register-prefetched double buffering) over an implicit-GEMM mapping
///   (detail/conv/problem.hpp): A is gathered from x on the fly, with zero padding, dilation and
///   stride resolved per element, so NCHW and NHWC need no layout pass and no im2col buffer.
///   Each thread resolves its A rows (sample, input origin) once per block; only the reduction
///   index is decoded per K step. grid.x walks output tiles, grid.y implicit GEMMs (groups, or
///   (sample, group) pairs with per-sample filters, or grouped problems), grid.z split-K slices.
/// - tensor_core_conv_kernel: the same implicit GEMM on tensor cores (f16, bf16, int8, TF32)
///   through the tensor-core main loop of detail/gemm/tensor_core.cuh; with NHWC and channels per
///   group a multiple of 16 bytes the gather is copied in 16-byte cp.async chunks.
/// - split_k_reduce_kernel: sums the split-K slices and applies the epilogue.
/// - depthwise_tiled_kernel: NHWC depthwise layers, a row of 4 output pixels by a vector of
///   channels per thread, the filters staged in shared memory (detail/conv/depthwise_tiles.hpp).
/// - depthwise_kernel: one output element per thread, channels (NHWC) or output columns (NCHW)
///   adjacent across a warp so loads and stores coalesce; NCHW layers, and NHWC layers the
///   tiled kernel's limits leave out.
///
/// The index math, padding predicates and the epilogue store are the __host__ __device__ code
/// of detail/conv/problem.hpp and detail/gemm/problem.hpp that the host tests exercise.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/detail/conv/depthwise_tiles.hpp>
#include <gpubatch/detail/conv/problem.hpp>
#include <gpubatch/detail/conv/radix_walk.hpp>
#include <gpubatch/detail/gemm/kernels.cuh>
#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/detail/gemm/tensor_core.cuh>

#include <cstdint>
#include <type_traits>

GPUBATCH_KERNELS_BEGIN

GPUBATCH_NAMESPACE_BEGIN
namespace detail::cuda_conv {

/// How a launch divides the reduction: `count` slices of `chunk` elements (a multiple of the K
/// tile). With count > 1 every slice writes its partial sums to `workspace`, laid out
/// [slice][implicit GEMM][m][n] over the call's `problems` GEMMs, and split_k_reduce_kernel
/// finishes them.
template <class Compute>
struct split_k {
  index_t count;
  index_t chunk;
  Compute* workspace;
  index_t problems;
};

/// One output tile of one implicit GEMM per block. Every problem of a launch has the same
/// m and n (uniform batches) or at most the bounds the grid was sized from (grouped batches).
template <class Policy, class Batch, class Compute, class Epilogue>
GPUBATCH_KERNEL void __launch_bounds__(Policy::threads, Policy::min_blocks_per_sm)
    implicit_gemm_kernel(Batch batch, index_t first_problem, index_t tiles_n,
                         split_k<Compute> split, Compute alpha, Compute beta, Epilogue epilogue) {
  constexpr int BM = Policy::tile_m, BN = Policy::tile_n, BK = Policy::tile_k;
  constexpr int T = Policy::threads;
  static_assert(Policy::stages <= 2, "gpubatch: the SIMT convolution kernel pipelines 1 or 2 stages");
  static_assert((BM * BK) % T == 0 && (BK * BN) % T == 0,
                "gpubatch: the policy's A and B tiles must divide evenly among its threads");
  using tiling = cuda_gemm::policy_tiling<Policy, Compute>;
  constexpr int a_per_thread = BM * BK / T;
  constexpr int b_per_thread = BK * BN / T;
  constexpr int stage_elems = simt::stage_elements<Compute, BM, BN, BK>;

  GPUBATCH_DYNAMIC_SHARED(unsigned char, conv_shared, 16);
  Compute* const shared = reinterpret_cast<Compute*>(conv_shared);

  const index_t index = first_problem + blockIdx.y;
  const auto g = batch.problem(index);
  using mapping = std::remove_cv_t<decltype(g)>;
  const index_t m = g.m(), n = g.n(), k = g.k();
  const index_t tile_row = static_cast<index_t>(blockIdx.x / tiles_n) * BM;
  const index_t tile_col = static_cast<index_t>(blockIdx.x % tiles_n) * BN;
  if (tile_row >= m || tile_col >= n || k <= 0 || !batch.within_bounds(index)) {
    return;  // a problem smaller than (or breaking) the grid's bounds, or an empty group
  }
  const index_t k_begin = static_cast<index_t>(blockIdx.z) * split.chunk;
  const index_t k_end = k_begin + split.chunk < k ? k_begin + split.chunk : k;
  const int tid = static_cast<int>(threadIdx.x);

  // A elements of this thread: fixed (row, kk-offset) positions in the tile. Consecutive threads
  // walk kk when the gather is contiguous along kk (NHWC channels), else the rows (NCHW
  // output columns), so warps read adjacent addresses: the element-wise walk of
  // simt::position_of, whose staged addresses the host tests check for bank conflicts.
  const bool a_k_fast = g.a_k_contiguous();
  const bool b_k_fast = g.b_k_contiguous();
  typename mapping::row_cursor a_rows[a_per_thread];
  int a_row_in_tile[a_per_thread];
  int a_kk_in_tile[a_per_thread];
#pragma unroll
  for (int r = 0; r < a_per_thread; ++r) {
    const simt::tile_position at = simt::position_of<BM, BK, T, 1>(a_k_fast, tid, r);
    a_row_in_tile[r] = at.row;
    a_kk_in_tile[r] = at.col;
    a_rows[r] = g.row(tile_row + a_row_in_tile[r]);  // resolved once: sample, input origin
  }

  Compute a_regs[a_per_thread];
  Compute b_regs[b_per_thread];
  const auto fetch = [&](index_t kt) {
    const index_t k0 = k_begin + kt * BK;
#pragma unroll
    for (int r = 0; r < a_per_thread; ++r) {
      const index_t kk = k0 + a_kk_in_tile[r];
      const auto* const p = kk < k_end ? g.a(a_rows[r], kk) : nullptr;
      a_regs[r] = p != nullptr ? convert<Compute>(*p) : Compute(0);
    }
#pragma unroll
    for (int r = 0; r < b_per_thread; ++r) {
      // consecutive threads walk B's contiguous dimension
      const simt::tile_position at = simt::position_of<BK, BN, T, 1>(!b_k_fast, tid, r);
      const index_t kk = k0 + at.row;
      const index_t j = tile_col + at.col;
      const auto* const p = (kk < k_end && j < n) ? g.b(kk, j) : nullptr;
      b_regs[r] = p != nullptr ? convert<Compute>(*p) : Compute(0);
    }
  };
  const auto stash = [&](int stage) {
    Compute* const a_s = shared + stage * stage_elems;            // [BK][BM]
    Compute* const b_s = a_s + simt::stage_pitch<Compute, BM> * BK;  // [BK][BN]
#pragma unroll
    for (int r = 0; r < a_per_thread; ++r) {
      a_s[simt::staged_offset<BM, BK, Compute>(true, {a_row_in_tile[r], a_kk_in_tile[r]})] =
          a_regs[r];
    }
#pragma unroll
    for (int r = 0; r < b_per_thread; ++r) {
      b_s[simt::staged_offset<BK, BN, Compute>(
          false, simt::position_of<BK, BN, T, 1>(!b_k_fast, tid, r))] = b_regs[r];
    }
  };

  const simt::lane_origin at = tiling::origin(tid);
  const index_t k_tiles = k_end > k_begin ? ceil_div(k_end - k_begin, BK) : 0;
  Compute acc[tiling::tm][tiling::tn];
  cuda_gemm::tiled_mainloop<Policy, tiling>(k_tiles, shared, at, fetch, stash, acc);

  using TY = std::remove_reference_t<decltype(g.c(0, 0))>;
  if (split.count == 1 && (n == 1 || &g.c(tile_row, 1) - &g.c(tile_row, 0) == 1)) {
    // NHWC: an output pixel's channels are consecutive; its sample and pixel are found once.
    cuda_gemm::store_lane_tile<tiling, TY>(
        acc, tile_row + at.row, tile_col + at.col, m, n, [&](index_t row) {
          const conv::conv_position pos = g.position(row, 0);
          TY* const y_row = &g.c(row, 0);
          return [=, &epilogue](index_t col) {
            return output_run<TY, Compute, Epilogue>{y_row + col, alpha, beta, &epilogue,
                                                     pos.batch, pos.row, pos.col + col};
          };
        });
    return;
  }
#pragma unroll
  for (int i = 0; i < tiling::tm; ++i) {
    const index_t row = tile_row + at.row + tiling::row(i);
#pragma unroll
    for (int j = 0; j < tiling::tn; ++j) {
      const index_t col = tile_col + at.col + tiling::col(j);
      if (row < m && col < n) {
        if (split.count > 1) {
          split.workspace[((static_cast<index_t>(blockIdx.z) * split.problems + index) * m + row) * n + col] =
              acc[i][j];
        } else {
          const conv::conv_position pos = g.position(row, col);
          store_output(g.c(row, col), acc[i][j], alpha, beta, epilogue, pos.batch, pos.row,
                       pos.col);
        }
      }
    }
  }
}

/// One output tile of one implicit GEMM per block on tensor cores (no split-K): grid.x walks
/// output tiles, grid.y implicit GEMMs, as implicit_gemm_kernel. The gather (A) is staged as
/// StagingA: K-major for NHWC, M-major for NCHW (consecutive output columns are consecutive
/// input elements); the filters (B) are K-major.
template <class Policy, tensor_core::staging StagingA, class Batch, class Compute, class Epilogue>
GPUBATCH_KERNEL void __launch_bounds__(Policy::threads, Policy::min_blocks_per_sm)
    tensor_core_conv_kernel(Batch batch, index_t first_problem, index_t tiles_n, Compute alpha,
                            Compute beta, Epilogue epilogue) {
#if GPUBATCH_DEVICE_CODE && GPUBATCH_DEVICE_ARCH < 800
  (void)batch, (void)first_problem, (void)tiles_n, (void)alpha, (void)beta, (void)epilogue;
  __trap();  // dispatch never launches it below sm_80
#else
  const index_t index = first_problem + blockIdx.y;
  const auto g = batch.problem(index);
  using mapping = std::remove_cv_t<decltype(g)>;
  using TX = std::remove_const_t<std::remove_pointer_t<decltype(g.x)>>;
  using TW = std::remove_const_t<std::remove_pointer_t<decltype(g.w)>>;
  using G = tensor_core::geometry<Policy, TX, StagingA, tensor_core::staging::k_major>;
  const index_t m = g.m(), n = g.n(), k = g.k();
  const index_t tile_row = static_cast<index_t>(blockIdx.x / tiles_n) * G::bm;
  const index_t tile_col = static_cast<index_t>(blockIdx.x % tiles_n) * G::bn;
  if (tile_row >= m || tile_col >= n || k <= 0 || !batch.within_bounds(index)) {
    return;  // a problem smaller than (or breaking) the grid's bounds, or an empty group
  }
  GPUBATCH_DYNAMIC_SHARED(unsigned char, tensor_core_conv_shared, 128);
  // Forward propagation's B is the filter memory read as is: n filters of k elements.
  const auto a = tensor_core::gather_source<mapping, const TX>::make(g, G::vector, G::bk);
  const auto b = tensor_core::matrix_source<TW>::make(g.b(0, 0), n, k, k, 1);
  const bool cols_contiguous = n > 1 && &g.c(tile_row, 1) - &g.c(tile_row, 0) == 1;
  const auto* const c_tile =
      tensor_core::mainloop<G>(a, b, k, tile_row, tile_col, tensor_core_conv_shared);
  using TY = std::remove_reference_t<decltype(g.c(0, 0))>;
  if (cols_contiguous) {  // NHWC: an output pixel's channels are consecutive
    tensor_core::store_runs<G, TY>(
        c_tile, tile_row, tile_col, m, n, [&](index_t row, index_t col) {
          const conv::conv_position pos = g.position(row, col);
          return output_run<TY, Compute, Epilogue>{&g.c(row, col), alpha, beta, &epilogue,
                                                   pos.batch, pos.row, pos.col};
        });
    return;
  }
  tensor_core::for_each_output<G>(c_tile, tile_row, tile_col, m, n, cols_contiguous,
                                  [&](index_t row, index_t col, auto value) {
                                    const conv::conv_position pos = g.position(row, col);
                                    store_output(g.c(row, col), static_cast<Compute>(value), alpha,
                                                 beta, epilogue, pos.batch, pos.row, pos.col);
                                  });
#endif
}

/// Sums the split-K slices of every output of a uniform batch (m x n per implicit GEMM) and
/// stores them through the epilogue (zero sums with no slices: a stride phase no filter tap
/// reaches). Consecutive threads take consecutive output channels.
template <int Threads, class Batch, class Compute, class Epilogue>
GPUBATCH_KERNEL void __launch_bounds__(Threads)
    split_k_reduce_kernel(Batch batch, split_k<Compute> split, index_t m, index_t n,
                          Compute alpha, Compute beta, Epilogue epilogue) {
  const index_t total = split.problems * m * n;
  const index_t step = static_cast<index_t>(gridDim.x) * Threads;
  for (index_t idx = static_cast<index_t>(blockIdx.x) * Threads + threadIdx.x; idx < total;
       idx += step) {
    const index_t problem = idx / (m * n);
    const index_t row = (idx / n) % m;
    const index_t col = idx % n;
    Compute sum = Compute(0);
    for (index_t z = 0; z < split.count; ++z) sum += split.workspace[z * total + idx];
    const auto g = batch.problem(problem);
    const conv::conv_position pos = g.position(row, col);
    store_output(g.c(row, col), sum, alpha, beta, epilogue, pos.batch, pos.row, pos.col);
  }
}

/// Depthwise (one input channel per group, any channel multiplier): one output per thread,
/// grid-stride over N * K * P * Q outputs in storage order. Output channel ik = ic * multiplier
/// + j, so the walk's digits are (sample, p, q, ic, j) for NHWC and (sample, ic, j, p, q) for
/// NCHW.
template <int Threads, class TX, class TW, class TY, class Compute, class Epilogue>
GPUBATCH_KERNEL void __launch_bounds__(Threads)
    depthwise_kernel(conv::fprop_batch<TX, TW, TY> batch, Compute alpha, Compute beta,
                     Epilogue epilogue) {
  const conv::conv2d_geometry& geo = batch.geo;
  const index_t multiplier = geo.kg();
  const auto start = static_cast<std::uint32_t>(blockIdx.x * Threads + threadIdx.x);
  if (geo.n <= 0 || static_cast<index_t>(start) >= geo.n * geo.k * geo.pixels()) return;
  const auto stride = static_cast<std::uint32_t>(gridDim.x * Threads);
  const bool nhwc = geo.nhwc();
  radix_walk<5> walk(start, stride,
                     {nhwc ? geo.p : geo.groups, nhwc ? geo.q : multiplier,
                      nhwc ? geo.groups : geo.p, nhwc ? multiplier : geo.q});
  for (; walk.digit[0] < geo.n; walk.advance()) {
    const index_t sample = walk.digit[0];
    const index_t op = nhwc ? walk.digit[1] : walk.digit[3];
    const index_t oq = nhwc ? walk.digit[2] : walk.digit[4];
    const index_t ic = nhwc ? walk.digit[3] : walk.digit[1];
    const index_t ik = ic * multiplier + (nhwc ? walk.digit[4] : walk.digit[2]);
    const index_t pixel = op * geo.q + oq;
    const TW* const filter = batch.filters_of(sample);
    Compute acc = Compute(0);
    for (index_t ir = 0; ir < geo.r; ++ir) {
      const index_t ih = op * geo.stride_h - geo.pad_h + ir * geo.dilation_h;
      if (ih < 0 || ih >= geo.h) continue;
      for (index_t is = 0; is < geo.s; ++is) {
        const index_t iw = oq * geo.stride_w - geo.pad_w + is * geo.dilation_w;
        if (iw < 0 || iw >= geo.w) continue;
        acc += convert<Compute>(batch.x[geo.x_offset(sample, ic, ih, iw)]) *
               convert<Compute>(filter[geo.w_offset(ik, 0, ir, is)]);
      }
    }
    const conv::conv_position pos = batch.position(sample, pixel, ik);
    store_output(batch.y[geo.y_offset(sample, ik, pixel)], acc, alpha, beta, epilogue, pos.batch,
                 pos.row, pos.col);
  }
}

/// Depthwise NHWC, tiled (conv::depthwise_tiles): a thread sums depthwise_tiles::run adjacent
/// output pixels of a row for `Vector` adjacent channels. Per filter tap it loads the tap's
/// `Vector` weights once, from the block's tap-major copy in shared memory, and each pixel's
/// inputs as one load of `Vector` channels (16 bytes where Vector > 1), `run` of them
/// independent, so the loads of a tap are in flight together. Vector > 1 needs one output
/// channel per input channel, K a multiple of Vector and x and y aligned to whole vectors;
/// Vector = 1 takes any channel multiplier (output channel ik reads input ik / multiplier).
template <int Threads, int Vector, class TX, class TW, class TY, class Compute, class Epilogue>
GPUBATCH_KERNEL void __launch_bounds__(Threads, conv::depthwise_tiles::blocks_per_sm)
    depthwise_tiled_kernel(conv::fprop_batch<TX, TW, TY> batch, conv::depthwise_tiles tiles,
                           Compute alpha, Compute beta, Epilogue epilogue) {
  constexpr int run = conv::depthwise_tiles::run;
  GPUBATCH_DYNAMIC_SHARED(unsigned char, depthwise_shared, 32);  // whole f32 vectors of 8
  Compute* const taps_s = reinterpret_cast<Compute*>(depthwise_shared);
  const conv::conv2d_geometry& geo = batch.geo;
  bool active = false;
  const conv::depthwise_tile t =
      tiles.tile(geo, blockIdx.x, blockIdx.y, threadIdx.x, threadIdx.y, active);

  // The chunk's filters, tap-major: element tap * chunk + j is tap `tap` of the chunk's
  // channel j (zero past K), turned where asked. Thread t copies channel t % chunk at taps
  // t / chunk, t / chunk + Threads / chunk, ... (chunk is a power of two, at most Threads):
  // conflict-free shared stores, and no division per element. The global reads stride over
  // the [K][R * S] filters; the lines they touch stay in L1 for the next taps.
  const index_t chunk = tiles.chunk(), first = static_cast<index_t>(blockIdx.y) * chunk;
  const TW* const filters = batch.filters_of(t.sample) + geo.w_offset(first, 0, 0, 0);
  {
    const auto lanes = static_cast<unsigned>(chunk), taps = static_cast<unsigned>(tiles.taps);
    const unsigned thread = threadIdx.y * blockDim.x + threadIdx.x;
    const unsigned j = thread % lanes;
    const bool real = first + j < geo.k;
    const TW* const own = real ? filters + j * taps : filters;
    for (unsigned tap = thread / lanes; tap < taps; tap += Threads / lanes) {
      const unsigned read = tiles.turned ? taps - 1 - tap : tap;
      taps_s[tap * lanes + j] = real ? convert<Compute>(own[read]) : Compute(0);
    }
  }
  __syncthreads();
  if (!active) return;

  const index_t ic = Vector > 1 ? t.channel : t.channel / geo.kg();
  const Compute* const my_taps = taps_s + (t.channel - first);
  // Within an input row, 32-bit columns and offsets (depthwise_tiles::fits).
  const auto width = static_cast<int>(geo.w), channels = static_cast<int>(geo.c);
  const auto stride_w = static_cast<int>(geo.stride_w), dilation_w = static_cast<int>(geo.dilation_w);
  const auto filter_w = static_cast<int>(geo.s);
  const auto column0 = static_cast<int>(t.oq * geo.stride_w - geo.pad_w);
  Compute acc[run][Vector] = {};
  for (index_t ir = 0; ir < geo.r; ++ir) {
    const index_t ih = t.op * geo.stride_h - geo.pad_h + ir * geo.dilation_h;
    if (ih < 0 || ih >= geo.h) continue;
    const TX* const row = batch.x + geo.x_offset(t.sample, ic, ih, 0);
    const Compute* const row_taps = my_taps + ir * geo.s * chunk;
    for (int is = 0; is < filter_w; ++is) {
      Compute f[Vector];
      simt::read_piece<Vector>(row_taps + is * chunk, f);
      const int first_column = column0 + is * dilation_w;
#pragma unroll
      for (int p = 0; p < run; ++p) {
        const int iw = first_column + p * stride_w;
        // Padding, or a pixel past Q (computed, never stored).
        if (static_cast<unsigned>(iw) >= static_cast<unsigned>(width)) continue;
        TX in[Vector];
        simt::read_piece<Vector>(row + iw * channels, in);
#pragma unroll
        for (int v = 0; v < Vector; ++v) acc[p][v] += convert<Compute>(in[v]) * f[v];
      }
    }
  }
#pragma unroll
  for (int p = 0; p < run; ++p) {
    const index_t oq = t.oq + p;
    if (oq >= geo.q) break;
    const index_t pixel = t.op * geo.q + oq;
    TY* const out = batch.y + geo.y_offset(t.sample, t.channel, pixel);
    const conv::conv_position pos = batch.position(t.sample, pixel, t.channel);
    TY values[Vector];
    if (beta != Compute(0)) simt::read_piece<Vector>(out, values);
#pragma unroll
    for (int v = 0; v < Vector; ++v) {
      store_output(values[v], acc[p][v], alpha, beta, epilogue, pos.batch, pos.row, pos.col + v);
    }
    simt::write_piece<Vector>(values, out);
  }
}

}  // namespace detail::cuda_conv
GPUBATCH_NAMESPACE_END

GPUBATCH_KERNELS_END
