/// @file detail/conv/host.hpp
/// @brief The host backend of convolution. Three paths, chosen by layer shape:
///  - depthwise (one input channel per group): direct loops, vectorised across channels (NHWC)
///    or across output columns (NCHW);
///  - direct, for groups with few output channels, where a GEMM micro-tile would idle;
///  - implicit GEMM for the rest: im2col panels gathered chunk by chunk into a per-thread
///    scratch and multiplied by the host GEMM's register-blocked micro-kernel against filters
///    packed once per call.
/// Parallel (OpenMP) across samples, groups, output rows and output-channel blocks.
#pragma once

#include <gpubatch/detail/conv/problem.hpp>
#include <gpubatch/detail/gemm/host.hpp>
#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/detail/host/parallel.hpp>
#include <gpubatch/detail/host/unroll.hpp>
#include <gpubatch/execution.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>

#if defined(_OPENMP)
#include <omp.h>
#endif

GPUBATCH_NAMESPACE_BEGIN
namespace detail::host_conv {

using conv::fprop_batch;
using conv::fprop_gemm;

/// Threads a call may use.
inline int thread_count(host_exec exec) {
#if defined(_OPENMP)
  return exec.max_threads > 0 ? exec.max_threads : omp_get_max_threads();
#else
  (void)exec;
  return 1;
#endif
}

/// Blocking of the implicit-GEMM path, on top of the GEMM micro-tile (tuning<Compute>).
struct blocking {
  /// Reduction chunk: an A block of mc x kc (256 KiB of f32) stays in L2, and the B strip chunk
  /// (kc x nr) streams from L2 as well. Each chunk loads and stores the block's sums once, so
  /// longer chunks pay off: 512 ran 2% to 5% faster than 256 on ResNet-50's 3x3 layers, and 128
  /// (a B strip chunk within L1) 3% to 17% slower.
  static constexpr index_t kc = 512;
  /// Reduction chunk of the backward passes' mapped GEMMs, which pack both operands per chunk
  /// (their speed was measured at 256; 512 was no faster).
  static constexpr index_t packed_kc = 256;
  /// Reduction chunk of a filter gradient whose B is packed as one panel (wgrad_b_panel): the
  /// stem's panel of 160 columns is 40 KiB of f32 at 64 steps, within a 48 KiB L1 (160 KiB at
  /// 256). The stem's time over oneDNN's, paired: 1.07 to 1.14 at 64, 1.16 at 32, 1.28 at
  /// 128, 1.00 to 1.31 at 256.
  static constexpr index_t panel_kc = 64;
  /// Rows of C that one task of a filter gradient covers when its B is packed, so that B is
  /// packed once for every row (the task's sums, packed_b_rows x nc: 512 KiB of f32).
  static constexpr index_t packed_b_rows = 512;
  /// Output channels one task covers; its accumulators (mc x nc) are reused across chunks.
  static constexpr index_t nc = 256;
  /// Scratch of one pass of a strided backward-data phase run forward (phase_via_fprop): what
  /// a call holds beyond its tensors (each block is read back from it while still in L1 and L2).
  static constexpr index_t phase_scratch_bytes = index_t{8} << 20;
  /// Samples a sample-minor strip holds at most (the micro-tile's rows, MR <= 8): a pass of
  /// that many samples or a multiple keeps every strip whole.
  static constexpr index_t sample_strip = 8;
};

/// The outputs o in [0, outputs) whose input o * stride + offset lies in [0, extent), as
/// [first, last) (first == last when none does).
inline std::pair<index_t, index_t> outputs_inside(index_t offset, index_t stride, index_t extent,
                                                  index_t outputs) {
  const index_t first = offset >= 0 ? 0 : ceil_div(-offset, stride);
  const index_t top = extent - 1 - offset;  // the largest o * stride inside
  const index_t last = top < 0 ? 0 : std::min(outputs, top / stride + 1);
  return {std::min(first, last), last};
}

/// Uninitialised host storage for a call's scratch (packed filters, partial sums), aligned as
/// the micro-kernels load it.
template <class T>
host_gemm::aligned_array<T> uninitialised(index_t count) {
  return host_gemm::allocate_aligned<T>(static_cast<std::size_t>(count > 0 ? count : 1));
}

// ---------------------------------------------------------------------------------------------
// Depthwise: every output channel reads one input channel (C / groups = 1).

/// One set's filters as [r * S + s][k], so that a pixel's K outputs accumulate as one vector
/// loop; `rotated`: each filter turned 180 degrees (tap r * S + s takes tap R * S - 1 -
/// (r * S + s)), as backward data run as a forward convolution reads them.
template <class Compute, class TX, class TW, class TY>
void pack_depthwise_set(const fprop_batch<TX, TW, TY>& batch, index_t set, bool rotated,
                        Compute* out) {
  const auto& geo = batch.geo;
  const index_t window = geo.r * geo.s;
  const TW* const w = batch.filters_of(set);
  // Blocks of 16 channels: their filters are one contiguous run of 16 x window inputs, and each
  // tap's 16 outputs one contiguous store (a channel at a time, every output was a store to a
  // different cache line: a quarter of a small layer's time).
  constexpr index_t block = 16;
  for (index_t k0 = 0; k0 < geo.k; k0 += block) {
    const index_t k1 = std::min(geo.k, k0 + block);
    for (index_t rs = 0; rs < window; ++rs) {
      const index_t tap = rotated ? window - 1 - rs : rs;
      for (index_t ik = k0; ik < k1; ++ik) out[rs * geo.k + ik] = convert<Compute>(w[ik * window + tap]);
    }
  }
}

/// The calling thread's copy of a depthwise layer's filters for `sample`, packed as
/// pack_depthwise_set lays them out, in its scratch slot 0. Each thread packs its own copy
/// when it first needs a set in a call (`call`: a number no other call shares), never one
/// another thread wrote: one shared copy, packed before the parallel loop, cost a small
/// layer a quarter of its time (the packing thread's stores waited on the lines the other
/// cores had read in the previous call, and every other thread waited on it).
template <class Compute, class TX, class TW, class TY>
const Compute* depthwise_filters_for(const fprop_batch<TX, TW, TY>& batch, index_t sample,
                                     bool rotated, std::uint64_t call) {
  thread_local std::uint64_t packed_call = 0;
  thread_local index_t packed_set = -1;
  const index_t set = batch.per_sample ? sample : 0;
  const index_t count = batch.geo.r * batch.geo.s * batch.geo.k;
  Compute* const out = host_gemm::scratch<Compute>(static_cast<std::size_t>(count), 0);
  if (packed_call != call || packed_set != set) {
    pack_depthwise_set(batch, set, rotated, out);
    packed_call = call;
    packed_set = set;
  }
  return out;
}

/// A number that identifies one depthwise call among all calls of the process (never 0).
inline std::uint64_t next_depthwise_call() {
  static std::atomic<std::uint64_t> calls{0};
  return calls.fetch_add(1, std::memory_order_relaxed) + 1;
}

/// A per-thread row of at least `count` zeros, never written after it is zeroed: what the
/// padding of a depthwise layer's input rows reads.
template <class Compute>
const Compute* zero_row(index_t count) {
  thread_local host_gemm::aligned_array<Compute> zeros;
  thread_local index_t capacity = 0;
  if (capacity < count) {
    zeros = uninitialised<Compute>(count);
    std::fill(zeros.get(), zeros.get() + count, Compute(0));
    capacity = count;
  }
  return zeros.get();
}

/// Copies `count` elements; up to 256 bytes as fixed-size pieces the compiler turns into
/// vector moves, the last piece overlapping the one before it. The gathers copy runs of a few
/// dozen bytes (the stem's filter row: 7 pixels of 3 channels), where a call of memcpy per run
/// showed: the stem's forward pass ran 1.13x to 1.18x oneDNN's time with it (paired), 0.99x to
/// 1.02x with this. Longer runs still go to memcpy, whose call they amortise.
template <class T>
inline void copy_run(T* to, const T* from, index_t count) {
  static_assert(std::is_trivially_copyable_v<T>);
  auto* const dst = reinterpret_cast<unsigned char*>(to);
  const auto* const src = reinterpret_cast<const unsigned char*>(from);
  const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(T);
  if (bytes > 256) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const auto pieces = [&](auto size) {  // bytes >= size: whole pieces, then an overlapping one
    constexpr std::size_t piece = decltype(size)::value;
    std::size_t e = 0;
    for (; e + piece <= bytes; e += piece) std::memcpy(dst + e, src + e, piece);
    if (e < bytes) std::memcpy(dst + bytes - piece, src + bytes - piece, piece);
  };
  if (bytes >= 64) {
    pieces(std::integral_constant<std::size_t, 64>{});
  } else if (bytes >= 32) {
    pieces(std::integral_constant<std::size_t, 32>{});
  } else if (bytes >= 16) {
    pieces(std::integral_constant<std::size_t, 16>{});
  } else if (bytes >= 8) {
    pieces(std::integral_constant<std::size_t, 8>{});
  } else {
    for (std::size_t e = 0; e < bytes; ++e) dst[e] = src[e];
  }
}

#if defined(__GNUC__)
/// Pins a loaded vector to a register: without it GCC folds the load into each multiply-add
/// that uses it, loading the same input S times and making the loop wait on loads. (A vector
/// wider than the instruction set's registers is left alone.)
template <class Vec>
inline void in_register(Vec& v) {
#if defined(__x86_64__) || defined(__i386__)
  if constexpr (sizeof(Vec) <= static_cast<std::size_t>(host_gemm::vector_bytes)) {
    asm("" : "+x"(v));
    return;
  }
#endif
  (void)v;
}

/// One output row of an NHWC depthwise layer with one output channel per input channel and
/// input of the compute type, its sums in registers, a vector of channels each: filters 3, 5 or
/// 7 wide at stride 1 or 2 without dilation in tiles of 7 output pixels (below); other filters
/// up to 8 pixels at a time, every filter tap loaded once for them all, the pixels whose taps
/// all fall inside the input row without a bounds check. Returns the first channel it left to
/// the caller (the channels past the last whole vector).
template <class Compute, class TX, class TW, class TY, class Epilogue>
index_t depthwise_nhwc_row(const fprop_batch<TX, TW, TY>& batch, const Compute* set,
                           index_t sample, index_t op, Compute alpha, Compute beta,
                           const Epilogue& epilogue) {
  constexpr int lanes = host_gemm::vector_bytes / static_cast<int>(sizeof(Compute));
  using vec = typename host_gemm::vector_of<Compute, host_gemm::vector_bytes>::type;
  constexpr bool plain = std::is_same_v<TY, Compute> && std::is_same_v<Epilogue, epilogue::identity>;
  constexpr index_t max_filter_rows = 16;
  const auto& geo = batch.geo;
  if (geo.r > max_filter_rows) return 0;  // the caller's loop does it all
  const index_t whole = geo.k / lanes * lanes;
  const vec alpha_v = host_gemm::splat<vec>(alpha);
  const vec beta_v = host_gemm::splat<vec>(beta);
  const index_t pixel_step = geo.stride_w * geo.c;  // between adjacent output columns' inputs
  const index_t tap_step = geo.dilation_w * geo.c;   // between adjacent taps' inputs
  // Input pixels of a row that 8 output columns read.
  const index_t span = 7 * geo.stride_w + (geo.s - 1) * geo.dilation_w + 1;
  const index_t filter_w = geo.s, channels = geo.k, width_in = geo.w;
  const index_t stride_w = geo.stride_w, dilation_w = geo.dilation_w;
  // The input rows the output row reads (null in the padding), resolved once.
  const Compute* rows[max_filter_rows];
  index_t valid_rows = 0;
  index_t row_ih[max_filter_rows];           // each row's index in the input
  const Compute* row_taps[max_filter_rows];  // each row's filter taps
  for (index_t ir = 0; ir < geo.r; ++ir) {
    const index_t ih = op * geo.stride_h - geo.pad_h + ir * geo.dilation_h;
    if (ih < 0 || ih >= geo.h) continue;
    rows[valid_rows] = reinterpret_cast<const Compute*>(batch.x + geo.x_offset(sample, 0, ih, 0));
    row_ih[valid_rows] = ih;
    row_taps[valid_rows++] = set + ir * filter_w * channels;
  }
  const bool accumulate = beta != Compute(0);
  // The sums of channels [ik, ik + lanes) of output pixel `pixel`, at yp, scaled and stored.
  const auto store_at = [&](TY* yp, index_t pixel, index_t ik, const vec& acc) {
    if constexpr (plain) {
      vec out = alpha_v * acc;
      if (accumulate) {
        vec old;
        std::memcpy(&old, yp, sizeof(vec));
        out += beta_v * old;
      }
      std::memcpy(yp, &out, sizeof(vec));
    } else {
      alignas(64) Compute sums[lanes];
      std::memcpy(sums, &acc, sizeof(vec));
      const conv::conv_position pos = batch.position(sample, pixel, ik);
      for (int l = 0; l < lanes; ++l) {
        store_output(yp[l], sums[l], alpha, beta, epilogue, pos.batch, pos.row, ik + l);
      }
    }
  };
  const auto store = [&](index_t oq, index_t ik, const vec& acc) {
    const index_t pixel = op * geo.q + oq;
    store_at(batch.y + geo.y_offset(sample, ik, pixel), pixel, ik, acc);
  };
  // Filters S wide at horizontal stride Stride, without dilation: tiles of 7 output columns
  // (MobileNet and ResNet widths are multiples of 7, so no narrow tail tile runs short of
  // independent sums) by V channel vectors, each input pixel loaded once into a register and
  // multiplied by every tap that reads it (S / Stride multiply-adds per load, where a load per
  // multiply-add bound the general path). A tile's input pixels are looked up in a table of T
  // pointers per filter row, the padding's pointing at a row of zeros: the edge tiles run the
  // same branch-free code as the others, where per-tap bounds tests had made them the slowest
  // part of narrow layers. Columns past the row's end are computed but not stored.
  const auto tiled = [&](auto filter_width, auto stride) {
    constexpr int S = decltype(filter_width)::value, Stride = decltype(stride)::value;
    constexpr int P = 7;
    constexpr int T = (P - 1) * Stride + S;  // input pixels one tile row reads
    // Two channel vectors at a time where 32 registers hold their 14 sums and 2 S taps. (With
    // 16, two vectors by 4 columns measured 0.84x to 0.92x the time on MobileNetV2's 112 x 112
    // stride-2 and 56 x 56 layers, 1.05x to 1.2x on its 28 x 28 to 7 x 7 ones.)
    constexpr int wide = host_gemm::vector_registers == 32 ? 2 : 1;
    const Compute* const zeros = zero_row<Compute>(whole);
    const Compute* pixels[max_filter_rows][T];
    // The pixels the next tile reads and this one does not: prefetched while this one runs,
    // every line of its channel vectors, into L2 (locality 2) rather than L1. Into L1, on a
    // Zen 4 core, MobileNetV2's stride-2 112 x 112 layer took 1.4x to 1.6x the time (paired
    // against oneDNN: 1.0x, then 0.61x to 0.71x) and the stride-2 56 x 56 one up to 1.2x.
    const Compute* ahead_rows[max_filter_rows];
    // Only the input rows the previous output row did not read come from memory: the last
    // Stride of them (a thread's output rows are consecutive).
    const index_t fresh_row = valid_rows - std::min<index_t>(Stride, valid_rows);
    index_t oq0 = 0, count = 0, ahead = 0;
    const auto channels_at = [&](auto vectors, index_t ik) {
      constexpr int V = decltype(vectors)::value;
      vec acc[V][P] = {};
      for (index_t v = 0; v < valid_rows; ++v) {
        vec w[V][S];
        GPUBATCH_HOST_UNROLL(8)
        for (int is = 0; is < S; ++is) {
          GPUBATCH_HOST_UNROLL(2)
          for (int c = 0; c < V; ++c) {
            std::memcpy(&w[c][is], row_taps[v] + ik + c * lanes + is * channels, sizeof(vec));
          }
        }
        if (ahead > 0 && v >= fresh_row) {
          const Compute* const next = ahead_rows[v] + ik;
          for (index_t u = 0; u < ahead; ++u) {
            GPUBATCH_HOST_UNROLL(2)
            for (int c = 0; c < V; ++c) __builtin_prefetch(next + u * geo.c + c * lanes, 0, 2);
          }
        }
        GPUBATCH_HOST_UNROLL(32)
        for (int u = 0; u < T; ++u) {
          const Compute* const pixel = pixels[v][u] + ik;
          GPUBATCH_HOST_UNROLL(2)
          for (int c = 0; c < V; ++c) {
            vec x;
            std::memcpy(&x, pixel + c * lanes, sizeof(vec));
            in_register(x);
            GPUBATCH_HOST_UNROLL(8)
            for (int is = 0; is < S; ++is) {
              const int d = u - is;  // Stride times the column this tap serves
              if (d >= 0 && d % Stride == 0 && d / Stride < P) acc[c][d / Stride] += x * w[c][is];
            }
          }
        }
      }
      const index_t pixel0 = op * geo.q + oq0;
      TY* const y0 = batch.y + geo.y_offset(sample, ik, pixel0);
      const auto store_column = [&](int j) {
        GPUBATCH_HOST_UNROLL(2)
        for (int c = 0; c < V; ++c) {
          store_at(y0 + j * channels + c * lanes, pixel0 + j, ik + c * lanes, acc[c][j]);
        }
      };
      // Unrolled, so that the sums are indexed by constants and stay in registers.
      GPUBATCH_HOST_UNROLL(8)
      for (int j = 0; j < P; ++j) {
        if (j < count) store_column(j);
      }
    };
    for (; oq0 < geo.q; oq0 += P) {
      count = std::min<index_t>(P, geo.q - oq0);
      const index_t iw0 = oq0 * Stride - geo.pad_w;
      for (index_t v = 0; v < valid_rows; ++v) {
        for (int u = 0; u < T; ++u) {
          const index_t iw = iw0 + u;
          pixels[v][u] = iw >= 0 && iw < width_in ? rows[v] + iw * geo.c : zeros;
        }
      }
      const index_t ahead_from = std::clamp<index_t>(iw0 + T, 0, width_in);
      ahead = std::min<index_t>(width_in - ahead_from, P * Stride);
      for (index_t v = 0; v < valid_rows; ++v) ahead_rows[v] = rows[v] + ahead_from * geo.c;
      if (ahead == 0 && op + 1 < geo.p && valid_rows > 0 &&
          row_ih[valid_rows - 1] + geo.stride_h < geo.h) {
        // The row's last tile: the next output row's first tile instead (the caller's next
        // task), from the rows it will read that this one does not. Without it, a layer
        // streaming from memory (stride 2: 4 tiles a row) waited on every row's first tile.
        ahead = std::min<index_t>(width_in, T - geo.pad_w);
        const index_t next_row = geo.stride_h * geo.w * geo.c;
        for (index_t v = 0; v < valid_rows; ++v) ahead_rows[v] = rows[v] + next_row;
      }
      index_t ik = 0;
      for (; ik + wide * lanes <= whole; ik += wide * lanes) {
        channels_at(std::integral_constant<int, wide>{}, ik);
      }
      if constexpr (wide > 1) {
        for (; ik < whole; ik += lanes) channels_at(std::integral_constant<int, 1>{}, ik);
      }
    }
    return whole;
  };
  if (dilation_w == 1) {
    using one = std::integral_constant<int, 1>;
    using two = std::integral_constant<int, 2>;
    const auto width = [&](auto stride) -> index_t {
      switch (filter_w) {
        case 3: return tiled(std::integral_constant<int, 3>{}, stride);
        case 5: return tiled(std::integral_constant<int, 5>{}, stride);
        case 7: return tiled(std::integral_constant<int, 7>{}, stride);
        default: return -1;
      }
    };
    const index_t done = stride_w == 1 ? width(one{}) : stride_w == 2 ? width(two{}) : -1;
    if (done >= 0) return done;
  }
  // Output columns [oq0, oq0 + P): P accumulator chains per channel vector. Checked: some tap
  // of some column may fall outside the input row.
  const auto columns = [&](auto width, auto checked, index_t oq0) {
    constexpr int P = decltype(width)::value;
    const index_t iw0 = oq0 * stride_w - geo.pad_w;  // column oq0's tap 0
    // The next block's inputs, prefetched while this one is computed: a layer streaming from
    // memory (MobileNetV2's first depthwise layers) otherwise waits on every line it reads.
    const bool prefetch = P == 8 && iw0 + P * stride_w >= 0 && iw0 + P * stride_w + span <= width_in;
    for (index_t ik = 0; ik < whole; ik += lanes) {
      vec acc[P] = {};
      for (index_t v = 0; v < valid_rows; ++v) {
        // Offsets from the row's start (the block's first tap may lie left of it: padding).
        const index_t first = iw0 * geo.c + ik;
        const Compute* const taps = row_taps[v] + ik;
        if (prefetch) {
          const Compute* const next = rows[v] + first + P * pixel_step;
          for (index_t t = 0; t < span; ++t) __builtin_prefetch(next + t * geo.c, 0, 3);
        }
        for (index_t is = 0; is < filter_w; ++is) {
          vec wv;
          std::memcpy(&wv, taps + is * channels, sizeof(vec));
          const index_t tap = first + is * tap_step;
          for (int j = 0; j < P; ++j) {
            if constexpr (decltype(checked)::value) {
              const index_t iw = iw0 + j * stride_w + is * dilation_w;
              if (iw < 0 || iw >= width_in) continue;
            }
            vec xv;
            std::memcpy(&xv, rows[v] + tap + j * pixel_step, sizeof(vec));
            acc[j] += xv * wv;
          }
        }
      }
      for (int j = 0; j < P; ++j) store(oq0 + j, ik, acc[j]);
    }
  };
  // Columns [lo, hi) have every tap inside the input row; blocks reaching outside are checked
  // (still 8 chains wide: one column at a time, the edges took a third of a 14-wide layer).
  const index_t lo = std::min(geo.q, ceil_div(geo.pad_w, geo.stride_w));
  const index_t last_start = geo.w - 1 + geo.pad_w - (geo.s - 1) * geo.dilation_w;
  const index_t hi = last_start < 0 ? lo : std::clamp(last_start / geo.stride_w + 1, lo, geo.q);
  index_t oq = 0;
  const auto block = [&](auto width) {
    if (oq >= lo && oq + decltype(width)::value <= hi) {
      columns(width, std::false_type{}, oq);
    } else {
      columns(width, std::true_type{}, oq);
    }
    oq += decltype(width)::value;
  };
  while (oq + 8 <= geo.q) block(std::integral_constant<int, 8>{});
  if (oq + 4 <= geo.q) block(std::integral_constant<int, 4>{});
  if (oq + 2 <= geo.q) block(std::integral_constant<int, 2>{});
  if (oq + 1 <= geo.q) block(std::integral_constant<int, 1>{});
  return whole;
}
#endif

/// A depthwise layer; `rotated`: its filters turned 180 degrees (pack_depthwise_set).
template <class Compute, class TX, class TW, class TY, class Epilogue>
void depthwise(host_exec exec, const fprop_batch<TX, TW, TY>& batch, Compute alpha, Compute beta,
               const Epilogue& epilogue, bool rotated = false) {
  const auto& geo = batch.geo;
  const index_t window = geo.r * geo.s;
  const index_t multiplier = geo.kg();  // output channels per input channel
  if (geo.nhwc()) {
    // One task per output row; a pixel's K accumulators form one vector loop over channels.
    const std::uint64_t call = next_depthwise_call();
    host_parallel_for(exec, geo.n * geo.p, schedule::uniform, [&](index_t task) {
      const index_t sample = task / geo.p, op = task % geo.p;
      const Compute* const set = depthwise_filters_for<Compute>(batch, sample, rotated, call);
      index_t first_channel = 0;  // channels before it are done
#if defined(__GNUC__)
      if constexpr (std::is_same_v<TX, Compute>) {
        if (multiplier == 1) {
          first_channel = depthwise_nhwc_row(batch, set, sample, op, alpha, beta, epilogue);
        }
      }
#endif
      if (first_channel == geo.k) return;
      Compute* const acc = host_gemm::scratch<Compute>(static_cast<std::size_t>(geo.k), 1);
      for (index_t oq = 0; oq < geo.q; ++oq) {
        std::fill(acc + first_channel, acc + geo.k, Compute(0));
        for (index_t ir = 0; ir < geo.r; ++ir) {
          const index_t ih = op * geo.stride_h - geo.pad_h + ir * geo.dilation_h;
          if (ih < 0 || ih >= geo.h) continue;
          for (index_t is = 0; is < geo.s; ++is) {
            const index_t iw = oq * geo.stride_w - geo.pad_w + is * geo.dilation_w;
            if (iw < 0 || iw >= geo.w) continue;
            const TX* const xp = batch.x + geo.x_offset(sample, 0, ih, iw);
            const Compute* const wp = set + (ir * geo.s + is) * geo.k;
            if (multiplier == 1) {
              for (index_t ik = first_channel; ik < geo.k; ++ik) acc[ik] += convert<Compute>(xp[ik]) * wp[ik];
            } else {
              for (index_t ik = first_channel; ik < geo.k; ++ik) {
                acc[ik] += convert<Compute>(xp[ik / multiplier]) * wp[ik];
              }
            }
          }
        }
        const index_t pixel = op * geo.q + oq;
        TY* const yp = batch.y + geo.y_offset(sample, 0, pixel);
        const conv::conv_position pos = batch.position(sample, pixel, 0);
        for (index_t ik = first_channel; ik < geo.k; ++ik) {
          store_output(yp[ik], acc[ik], alpha, beta, epilogue, pos.batch, pos.row, ik);
        }
      }
    });
  } else {
    // One task per output plane; each filter tap adds a shifted input row to the plane.
    host_parallel_for(exec, geo.n * geo.k, schedule::uniform, [&](index_t task) {
      const index_t sample = task / geo.k, ik = task % geo.k;
      const TW* const filter = batch.filters_of(batch.per_sample ? sample : 0) + ik * window;
      Compute* const acc = host_gemm::scratch<Compute>(static_cast<std::size_t>(geo.pixels()), 1);
      std::fill(acc, acc + geo.pixels(), Compute(0));
      const TX* const plane = batch.x + geo.x_offset(sample, ik / multiplier, 0, 0);
      for (index_t ir = 0; ir < geo.r; ++ir) {
        for (index_t is = 0; is < geo.s; ++is) {
          const index_t rs = ir * geo.s + is;
          const Compute wv = convert<Compute>(filter[rotated ? window - 1 - rs : rs]);
          // Output columns whose tap lands inside the row: 0 <= oq * stride + shift < W.
          const index_t shift = is * geo.dilation_w - geo.pad_w;
          const std::pair<index_t, index_t> inside =
              outputs_inside(shift, geo.stride_w, geo.w, geo.q);
          const index_t q_begin = inside.first, q_end = inside.second;
          for (index_t op = 0; op < geo.p; ++op) {
            const index_t ih = op * geo.stride_h - geo.pad_h + ir * geo.dilation_h;
            if (ih < 0 || ih >= geo.h) continue;
            const TX* const row = plane + ih * geo.w;
            Compute* const out = acc + op * geo.q;
            for (index_t oq = q_begin; oq < q_end; ++oq) {
              out[oq] += wv * convert<Compute>(row[oq * geo.stride_w + shift]);
            }
          }
        }
      }
      TY* const yp = batch.y + geo.y_offset(sample, ik, 0);
      for (index_t pixel = 0; pixel < geo.pixels(); ++pixel) {
        const conv::conv_position pos = batch.position(sample, pixel, ik);
        store_output(yp[pixel], acc[pixel], alpha, beta, epilogue, pos.batch, pos.row, ik);
      }
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Direct: groups with few output channels (a GEMM micro-tile would be mostly padding).

/// Filters as [set][group][r][s][c][j]: the group's output channels j innermost.
template <class Compute, class TX, class TW, class TY>
host_gemm::aligned_array<Compute> pack_direct_filters(const fprop_batch<TX, TW, TY>& batch) {
  const auto& geo = batch.geo;
  const index_t sets = batch.per_sample ? geo.n : 1;
  const index_t cg = geo.cg(), kg = geo.kg();
  auto packed = uninitialised<Compute>(sets * geo.filter_set_size());
  Compute* out = packed.get();
  for (index_t set = 0; set < sets; ++set) {
    const TW* const w = batch.filters_of(set);
    for (index_t g = 0; g < geo.groups; ++g) {
      for (index_t ir = 0; ir < geo.r; ++ir) {
        for (index_t is = 0; is < geo.s; ++is) {
          for (index_t ic = 0; ic < cg; ++ic) {
            for (index_t j = 0; j < kg; ++j) {
              *out++ = convert<Compute>(w[geo.w_offset(g * kg + j, ic, ir, is)]);
            }
          }
        }
      }
    }
  }
  return packed;
}

template <class Compute, class TX, class TW, class TY, class Epilogue>
void direct(host_exec exec, const fprop_batch<TX, TW, TY>& batch, Compute alpha, Compute beta,
            const Epilogue& epilogue) {
  const auto& geo = batch.geo;
  const auto packed = pack_direct_filters<Compute>(batch);
  const Compute* const filters = packed.get();
  const index_t cg = geo.cg(), kg = geo.kg();
  const index_t channel_stride = geo.nhwc() ? 1 : geo.h * geo.w;
  // One task per (sample, group, output row).
  host_parallel_for(exec, geo.n * geo.groups * geo.p, schedule::uniform, [&](index_t task) {
    const index_t op = task % geo.p;
    const index_t g = (task / geo.p) % geo.groups;
    const index_t sample = task / (geo.p * geo.groups);
    const Compute* const group_filters =
        filters + ((batch.per_sample ? sample : 0) * geo.groups + g) * geo.r * geo.s * cg * kg;
    Compute* const acc = host_gemm::scratch<Compute>(static_cast<std::size_t>(kg), 1);
    for (index_t oq = 0; oq < geo.q; ++oq) {
      std::fill(acc, acc + kg, Compute(0));
      for (index_t ir = 0; ir < geo.r; ++ir) {
        const index_t ih = op * geo.stride_h - geo.pad_h + ir * geo.dilation_h;
        if (ih < 0 || ih >= geo.h) continue;
        for (index_t is = 0; is < geo.s; ++is) {
          const index_t iw = oq * geo.stride_w - geo.pad_w + is * geo.dilation_w;
          if (iw < 0 || iw >= geo.w) continue;
          const TX* const xp = batch.x + geo.x_offset(sample, g * cg, ih, iw);
          const Compute* wp = group_filters + (ir * geo.s + is) * cg * kg;
          for (index_t ic = 0; ic < cg; ++ic, wp += kg) {
            const Compute xv = convert<Compute>(xp[ic * channel_stride]);
            for (index_t j = 0; j < kg; ++j) acc[j] += xv * wp[j];
          }
        }
      }
      const index_t pixel = op * geo.q + oq;
      for (index_t j = 0; j < kg; ++j) {
        const index_t ik = g * kg + j;
        const conv::conv_position pos = batch.position(sample, pixel, ik);
        store_output(batch.y[geo.y_offset(sample, ik, pixel)], acc[j], alpha, beta, epilogue,
                     pos.batch, pos.row, pos.col);
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Implicit GEMM: im2col chunks through the host GEMM micro-kernel.

/// Gathers rows [i0, i0 + rows) x reduction indices [k0, k0 + kc) of the im2col matrix A into
/// MR-row strips, k-major (the host GEMM's packed-A format), zero for padding and missing rows.
template <class Compute, class TX, class TW, class TY>
void pack_a(const fprop_gemm<TX, TW, TY>& g, index_t i0, index_t rows, index_t k0, index_t kc,
            Compute* out) {
  constexpr int mr = host_gemm::tuning<Compute>::mr;
  const auto& geo = g.geo;
  using cursor = typename fprop_gemm<TX, TW, TY>::row_cursor;
  for (index_t s0 = 0; s0 < rows; s0 += mr, out += kc * mr) {
    cursor cur[mr];
    for (int r = 0; r < mr; ++r) {
      cur[r] = s0 + r < rows ? g.row(i0 + s0 + r) : cursor{nullptr, 0, 0};
    }
    if (geo.nhwc()) {
      // Row by row: for each filter tap, a run of C/g adjacent channels is copied at once.
      const index_t cg = geo.cg();
      for (int r = 0; r < mr; ++r) {
        Compute* const column = out + r;
        if (cur[r].base == nullptr) {
          for (index_t kk = 0; kk < kc; ++kk) column[kk * mr] = Compute(0);
          continue;
        }
        index_t kk = k0;
        const index_t tap = kk / cg;
        index_t ic = kk - tap * cg, ir = tap / geo.s, is = tap % geo.s;
        while (kk < k0 + kc) {
          const index_t run = std::min(cg - ic, k0 + kc - kk);
          const index_t ih = cur[r].ih0 + ir * geo.dilation_h;
          const index_t iw = cur[r].iw0 + is * geo.dilation_w;
          Compute* const dst = column + (kk - k0) * mr;
          if (ih >= 0 && ih < geo.h && iw >= 0 && iw < geo.w) {
            const TX* const src = cur[r].base + (ih * geo.w + iw) * geo.c + ic;
            for (index_t t = 0; t < run; ++t) dst[t * mr] = convert<Compute>(src[t]);
          } else {
            for (index_t t = 0; t < run; ++t) dst[t * mr] = Compute(0);
          }
          kk += run;
          ic = 0;
          if (++is == geo.s) {
            is = 0;
            ++ir;
          }
        }
      }
    } else {
      // kk by kk: the strip's rows are mostly adjacent output columns of one output row, so
      // for a tap inside the input they read one strided run of x.
      const index_t window = geo.r * geo.s;
      const index_t sw = geo.stride_w;
      const bool one_row = cur[0].base != nullptr && cur[mr - 1].base == cur[0].base &&
                           cur[mr - 1].ih0 == cur[0].ih0 &&
                           cur[mr - 1].iw0 == cur[0].iw0 + (mr - 1) * sw;
      index_t ic = k0 / window, ir = (k0 % window) / geo.s, is = k0 % geo.s;
      for (index_t kk = 0; kk < kc; ++kk) {
        Compute* const dst = out + kk * mr;
        const index_t ih = cur[0].ih0 + ir * geo.dilation_h;
        const index_t iw = cur[0].iw0 + is * geo.dilation_w;
        if (one_row && ih >= 0 && ih < geo.h && iw >= 0 && iw + (mr - 1) * sw < geo.w) {
          const TX* const src = cur[0].base + (ic * geo.h + ih) * geo.w + iw;
          for (int r = 0; r < mr; ++r) dst[r] = convert<Compute>(src[r * sw]);
        } else if (one_row && (ih < 0 || ih >= geo.h)) {
          for (int r = 0; r < mr; ++r) dst[r] = Compute(0);
        } else {
          for (int r = 0; r < mr; ++r) {
            const index_t rh = cur[r].ih0 + ir * geo.dilation_h;
            const index_t rw = cur[r].iw0 + is * geo.dilation_w;
            const bool inside =
                cur[r].base != nullptr && rh >= 0 && rh < geo.h && rw >= 0 && rw < geo.w;
            dst[r] = inside ? convert<Compute>(cur[r].base[(ic * geo.h + rh) * geo.w + rw])
                            : Compute(0);
          }
        }
        if (++is == geo.s) {
          is = 0;
          if (++ir == geo.r) {
            ir = 0;
            ++ic;
          }
        }
      }
    }
  }
}

/// Filter taps whose inputs lie next to each other in an NHWC input: a whole filter row when
/// the layer has one group and no horizontal dilation (its S taps' C channels are S * C
/// consecutive elements of x), else one tap (its C/g channels).
inline index_t taps_per_line(const conv::conv2d_geometry& geo) {
  return geo.groups == 1 && geo.dilation_w == 1 ? geo.s : 1;
}

/// Whether gemm_block reads an NHWC layer's input in place, a line of taps at a time: the
/// input is of the compute type and a line is long enough (16 elements) that its reduction
/// outweighs the micro-kernel's load and store of its accumulators.
template <class Compute, class TX>
bool taps_in_place(const conv::conv2d_geometry& geo) {
  return std::is_same_v<TX, Compute> && geo.nhwc() && taps_per_line(geo) * geo.cg() >= 16;
}

/// gemm_block for taps_in_place layers. The reduction runs a line of taps at a time (see
/// taps_per_line; in chunks of at most kc elements): for a strip of MR output pixels whose
/// line falls inside the input at pixels a fixed distance apart (adjacent output columns, say),
/// the line's rows of A are MR runs of x, which the micro-kernel reads where they lie; only
/// other strips (at an edge of the input or of an output row) are gathered, zero-filled where a
/// tap falls in the padding. im2col packing had copied every element of A into the
/// micro-kernel's layout one at a time, which cost as much as the multiply-adds of a layer with
/// 64 output channels. Lines shorter than kc (a filter row of 7 taps x 3 channels in a stem
/// layer) go to the micro-kernel several filter rows at a time, as runs an input row apart:
/// one call per strip sums them in registers instead of loading and storing its sums per line.
/// Sums accumulate in `sums` (row pitch ldc).
template <class Compute, class TX, class TW, class TY>
void taps_block(const fprop_gemm<TX, TW, TY>& g, const Compute* packed_b, index_t i0,
                index_t rows, index_t cols, Compute* sums, index_t ldc) {
  constexpr int mr = host_gemm::tuning<Compute>::mr;
  constexpr int nr = host_gemm::tuning<Compute>::nr;
  constexpr index_t max_rows = host_gemm::tuning<Compute>::mc;
  using cursor = typename fprop_gemm<TX, TW, TY>::row_cursor;
  const auto& geo = g.geo;
  const index_t cg = geo.cg(), gk = g.k();
  const index_t taps = taps_per_line(geo);
  const index_t line = taps * cg;  // reduction elements of a line
  const index_t kc = std::min(blocking::kc, line);
  // Lines per micro-kernel call: whole filter rows while they fit in kc, else one.
  const index_t max_lines = taps == geo.s ? std::max<index_t>(1, blocking::kc / line) : 1;
  const index_t line_step = geo.dilation_h * geo.w * geo.c;  // x from one filter row's line to the next
  const index_t a_strips = ceil_div(rows, mr);
  const index_t b_strips = ceil_div(cols, nr);
  cursor cur[max_rows];
  for (index_t r = 0; r < a_strips * mr; ++r) cur[r] = r < rows ? g.row(i0 + r) : cursor{nullptr, 0, 0};
  // Per strip, where the micro-kernel reads this chunk's A: in place, or gathered into
  // `gathered`; the distance between its rows and between its runs (lines).
  const Compute* strip_a[max_rows / mr];
  index_t strip_row[max_rows / mr];
  index_t strip_run[max_rows / mr];
  Compute* const gathered =
      host_gemm::scratch<Compute>(static_cast<std::size_t>(a_strips * mr * kc * max_lines), 0);
  bool first = true;
  for (index_t tap0 = 0; tap0 < geo.r * geo.s;) {
    const index_t ir = tap0 / geo.s, is0 = tap0 % geo.s;
    const index_t lines = std::min(max_lines, geo.r - ir);  // filter rows ir, ir + 1, ...
    for (index_t c0 = 0; c0 < line; c0 += kc, first = false) {
      const index_t kcur = std::min(kc, line - c0);
      for (index_t si = 0; si < a_strips; ++si) {
        // Each row's first line of x (its first tap's pixel), null unless all of its lines
        // are inside.
        const Compute* run[mr];
        bool in_place = true;
        for (int r = 0; r < mr; ++r) {
          const cursor& row = cur[si * mr + r];
          const index_t ih = row.ih0 + ir * geo.dilation_h;
          const index_t iw = row.iw0 + is0 * geo.dilation_w;
          const bool inside = row.base != nullptr && ih >= 0 &&
                              ih + (lines - 1) * geo.dilation_h < geo.h && iw >= 0 &&
                              iw + (taps - 1) * geo.dilation_w < geo.w;
          run[r] = inside ? reinterpret_cast<const Compute*>(row.base + (ih * geo.w + iw) * geo.c + c0)
                          : nullptr;
          // In place when the runs lie a fixed distance apart (adjacent output columns, and
          // across output rows when the layer maps them to adjacent input pixels).
          in_place = in_place && inside && (r < 2 || run[r] - run[r - 1] == run[1] - run[0]);
        }
        if (in_place) {
          strip_a[si] = run[0];
          strip_row[si] = run[1] - run[0];
          strip_run[si] = line_step;
          continue;
        }
        // Gathered row by row, each row's lines back to back.
        Compute* const out = gathered + si * mr * kcur * lines;
        for (int r = 0; r < mr; ++r) {
          const cursor& row = cur[si * mr + r];
          for (index_t l = 0; l < lines; ++l) {
            Compute* const dst = out + (r * lines + l) * kcur;
            const index_t ih = row.ih0 + (ir + l) * geo.dilation_h;
            const bool row_inside = row.base != nullptr && ih >= 0 && ih < geo.h;
            const index_t iw0 = row.iw0 + is0 * geo.dilation_w;
            if (row_inside && iw0 >= 0 && iw0 + (taps - 1) * geo.dilation_w < geo.w) {
              const TX* const from = row.base + (ih * geo.w + iw0) * geo.c + c0;
              copy_run(dst, reinterpret_cast<const Compute*>(from), kcur);
              continue;
            }
            // Tap by tap: the part of the chunk each tap holds, zero where it falls outside.
            for (index_t e = c0; e < c0 + kcur;) {
              const index_t t = e / cg, channel = e - t * cg;
              const index_t count = std::min(cg - channel, c0 + kcur - e);
              const index_t iw = row.iw0 + (is0 + t) * geo.dilation_w;
              if (row_inside && iw >= 0 && iw < geo.w) {
                const TX* const from = row.base + (ih * geo.w + iw) * geo.c + channel;
                copy_run(dst + (e - c0), reinterpret_cast<const Compute*>(from), count);
              } else {
                std::fill(dst + (e - c0), dst + (e - c0) + count, Compute(0));
              }
              e += count;
            }
          }
        }
        strip_a[si] = out;
        strip_row[si] = kcur * lines;
        strip_run[si] = kcur;
      }
      for (index_t sj = 0; sj < b_strips; ++sj) {
        const Compute* const b = packed_b + sj * nr * gk + (tap0 * cg + c0) * nr;
        for (index_t si = 0; si < a_strips; ++si) {
          host_gemm::strips<Compute> s{strip_a[si], strip_row[si], 1, b, nr};
          s.runs = lines;
          s.a_run = strip_run[si];
          s.b_run = kcur * nr;
          host_gemm::micro_kernel<Compute, true>(kcur, s, sums + si * mr * ldc + sj * nr, ldc,
                                                 /*accumulate=*/!first);
        }
      }
    }
    tap0 += taps * lines;
  }
}

/// Whether none of values[0, count) is inf or NaN (x - x is 0 exactly for all others).
template <class Compute>
bool all_finite(const Compute* values, index_t count) {
  index_t e = 0;
  bool finite = true;
#if defined(__GNUC__)
  // Whole vectors summed lane by lane (a scalar loop cost 8% of a 3x3 x 512 layer).
  using vec = typename host_gemm::vector_of<Compute, host_gemm::vector_bytes>::type;
  constexpr index_t lanes = host_gemm::tuning<Compute>::lanes;
  vec sums{};
  for (; e + lanes <= count; e += lanes) {
    vec v;
    std::memcpy(&v, values + e, sizeof(vec));
    sums += v - v;
  }
  Compute lane_sums[lanes];
  std::memcpy(lane_sums, &sums, sizeof(vec));
  for (index_t l = 0; l < lanes; ++l) finite = finite && lane_sums[l] == Compute(0);
#endif
  for (; e < count; ++e) finite = finite && values[e] - values[e] == Compute(0);
  return finite;
}

/// Whether gemm_block takes an implicit GEMM's rows in sample-minor order (block row i: output
/// pixel i / N of sample i % N, N the GEMM's samples): taps_in_place layers whose samples fill
/// whole micro-tile strips. A strip is then one output pixel of MR samples, so its rows read x
/// one sample apart and share which taps fall in the padding.
template <class Compute, class TX, class TW, class TY>
bool sample_minor(const fprop_gemm<TX, TW, TY>& g) {
  return taps_in_place<Compute, TX>(g.geo) && g.samples % host_gemm::tuning<Compute>::mr == 0;
}

/// Whether gemm_block takes a problem's rows in sample-minor order: only where no filter is inf
/// or NaN, as it then skips the products of the padding.
template <class Compute, class TX, class TW, class TY>
bool rows_sample_minor(const fprop_gemm<TX, TW, TY>& g, bool finite_filters) {
  return finite_filters && sample_minor<Compute>(g);
}

/// The implicit GEMM's row of block row i in sample-minor order.
template <class TX, class TW, class TY>
index_t sample_minor_row(const fprop_gemm<TX, TW, TY>& g, index_t i) {
  return (i % g.samples) * g.geo.pixels() + i / g.samples;
}

/// Whether `rows` rows `distance` elements apart crowd the L1 cache's sets: more than two of
/// them start within a cache line of each other modulo 4 KiB (the span of an L1 way's sets on
/// x86 and most ARM cores). A sample-minor strip's rows lie one sample apart, and H W C is a
/// multiple of 1024 on most layers of a convolutional network (every ResNet-50 layer but
/// res5's), which puts all of them in the same sets.
template <class Compute>
bool rows_alias_in_l1(index_t distance, int rows) {
  constexpr index_t way_bytes = 4096, line_bytes = 64;
  const index_t step = distance * static_cast<index_t>(sizeof(Compute)) % way_bytes;
  for (int r = 0; r < rows; ++r) {
    int close = 0;
    for (int q = 0; q < rows; ++q) {
      const index_t offset = ((q - r) * step % way_bytes + way_bytes) % way_bytes;
      close += std::min(offset, way_bytes - offset) < line_bytes ? 1 : 0;
    }
    if (close > 2) return true;
  }
  return false;
}

/// taps_block for a sample-minor block (see sample_minor): every strip reads x in place, and
/// only over its taps inside the input. The padding's zero products are skipped instead of
/// gathered and computed (18% of the multiply-adds of a 3x3 layer with a 7x7 output), and no
/// strip is gathered for straddling an edge or an output row. Strip si's sums go to
/// sums[si] (row pitch ld[si]); a strip with no tap inside the input gets zeros.
template <class Compute, class TX, class TW, class TY>
void taps_block_sample_minor(const fprop_gemm<TX, TW, TY>& g, const Compute* packed_b,
                             index_t i0, index_t rows, index_t cols, Compute* const* sums,
                             const index_t* ld) {
  constexpr int mr = host_gemm::tuning<Compute>::mr;
  constexpr int nr = host_gemm::tuning<Compute>::nr;
  constexpr index_t max_strips = host_gemm::tuning<Compute>::mc / mr;
  const auto& geo = g.geo;
  const index_t cg = geo.cg(), gk = g.k();
  const index_t taps = taps_per_line(geo);
  const index_t line = taps * cg;
  const index_t kc = std::min(blocking::kc, line);
  const index_t max_lines = taps == geo.s ? std::max<index_t>(1, blocking::kc / line) : 1;
  const index_t line_step = geo.dilation_h * geo.w * geo.c;
  const index_t sample_step = geo.x_offset(1, 0, 0, 0);  // between a strip's rows
  const index_t a_strips = rows / mr;
  const index_t b_strips = ceil_div(cols, nr);
  // Per strip: its pixel's first sample, and the filter rows [r_lo, r_hi) and columns
  // [s_lo, s_hi) whose taps read inside the input.
  typename fprop_gemm<TX, TW, TY>::row_cursor cur[max_strips];
  index_t r_lo[max_strips], r_hi[max_strips], s_lo[max_strips], s_hi[max_strips];
  bool started[max_strips];
  const auto first_inside = [](index_t start, index_t step) {
    return start >= 0 ? index_t{0} : ceil_div(-start, step);  // first tap with start + t step >= 0
  };
  for (index_t si = 0; si < a_strips; ++si) {
    cur[si] = g.row(sample_minor_row(g, i0 + si * mr));
    r_lo[si] = first_inside(cur[si].ih0, geo.dilation_h);
    r_hi[si] = std::min(geo.r, cur[si].ih0 >= geo.h ? 0 : ceil_div(geo.h - cur[si].ih0, geo.dilation_h));
    s_lo[si] = first_inside(cur[si].iw0, geo.dilation_w);
    s_hi[si] = std::min(geo.s, cur[si].iw0 >= geo.w ? 0 : ceil_div(geo.w - cur[si].iw0, geo.dilation_w));
    started[si] = false;
  }
  const Compute* strip_a[max_strips];
  const Compute* strip_b[max_strips];
  index_t strip_k[max_strips], strip_runs[max_strips];
  // Column strips in pairs, each pair once per half of the A strip (micro_kernel_wide), where
  // the strip's rows of x and of the sums both alias in L1 (rows_alias_in_l1) and the chunk's
  // filters fit in half of it. The sums one call stores (MR rows, a cache line or two each)
  // then land in the sets of the A rows the next column strip was to read again, and evict
  // them. Measured on a 1x1 64 -> 64 layer at 56 x 56: 0.91x to 0.95x the time; where the
  // filters stream from L2 instead (64 -> 256, 256 -> 64, the stem), twice the filter loads per
  // multiply-add cost 1.01x to 1.04x, so those keep one column strip per call. AVX-512 only:
  // 16 accumulators, 4 filter vectors and a broadcast need more than 16 registers.
  const index_t chunk_filter_bytes = kc * std::min(max_lines, geo.r) * b_strips * nr *
                                     static_cast<index_t>(sizeof(Compute));
  const bool wide = host_gemm::vector_registers == 32 && b_strips >= 2 &&
                    chunk_filter_bytes <= 16 * 1024 && rows_alias_in_l1<Compute>(sample_step, mr) &&
                    rows_alias_in_l1<Compute>(ld[0], mr);
  for (index_t tap0 = 0; tap0 < geo.r * geo.s;) {
    const index_t ir = tap0 / geo.s, is0 = tap0 % geo.s;
    const index_t lines = std::min(max_lines, geo.r - ir);
    for (index_t c0 = 0; c0 < line; c0 += kc) {
      const index_t kcur = std::min(kc, line - c0);
      for (index_t si = 0; si < a_strips; ++si) {
        // Lines (filter rows) and elements of the chunk inside the input.
        const index_t l0 = std::max<index_t>(0, r_lo[si] - ir);
        const index_t l1 = std::min(lines, r_hi[si] - ir);
        // A line's elements: taps is0 .. is0 + taps - 1, cg channels each.
        const index_t e_lo = std::max(c0, (std::max(s_lo[si], is0) - is0) * cg);
        const index_t e_hi = std::min(c0 + kcur, (std::min(s_hi[si], is0 + taps) - is0) * cg);
        strip_k[si] = l0 < l1 && e_lo < e_hi ? e_hi - e_lo : 0;
        if (strip_k[si] == 0) continue;
        const index_t ih = cur[si].ih0 + (ir + l0) * geo.dilation_h;
        const index_t iw = cur[si].iw0 + is0 * geo.dilation_w;
        // Element e of the line lies at (ih * W + iw) * C + e: the taps of a line are adjacent
        // pixels (taps_per_line); e_lo is inside the input.
        strip_a[si] = reinterpret_cast<const Compute*>(cur[si].base) + ((ih * geo.w + iw) * geo.c + e_lo);
        strip_b[si] = packed_b + ((tap0 + l0 * taps) * cg + e_lo) * nr;
        strip_runs[si] = l1 - l0;
      }
      // Each A strip (2 to 16 KiB on ResNet-50) against every column strip while it is in L1,
      // the block's filter chunk (16 to 512 KiB) streaming from L2, so a strip's sums reach y
      // as whole rows of the block. Measured against column strips outer: 0.84x the time on
      // res2's 64 -> 256 and 64 -> 64 layers, 0.89x on the stem, 0.94x to 0.99x on the others.
      for (index_t si = 0; si < a_strips; ++si) {
        if (strip_k[si] == 0) continue;
        index_t sj = 0;
        for (; wide && sj + 2 <= b_strips; sj += 2) {
          for (int r0 = 0; r0 < mr; r0 += host_gemm::wide_rows<Compute>) {
            host_gemm::strips<Compute> s{strip_a[si] + r0 * sample_step, sample_step, 1,
                                         strip_b[si] + sj * nr * gk, nr};
            s.runs = strip_runs[si];
            s.a_run = line_step;
            s.b_run = line * nr;
            host_gemm::micro_kernel_wide(strip_k[si], s, nr * gk, sums[si] + r0 * ld[si] + sj * nr,
                                         ld[si], /*accumulate=*/started[si]);
          }
        }
        for (; sj < b_strips; ++sj) {
          host_gemm::strips<Compute> s{strip_a[si], sample_step, 1, strip_b[si] + sj * nr * gk, nr};
          s.runs = strip_runs[si];
          s.a_run = line_step;
          s.b_run = line * nr;
          host_gemm::micro_kernel<Compute, true>(strip_k[si], s, sums[si] + sj * nr, ld[si],
                                                 /*accumulate=*/started[si]);
        }
      }
      for (index_t si = 0; si < a_strips; ++si) started[si] = started[si] || strip_k[si] > 0;
    }
    tap0 += taps * lines;
  }
  for (index_t si = 0; si < a_strips; ++si) {
    if (started[si]) continue;
    for (int r = 0; r < mr; ++r) {
      std::fill(sums[si] + r * ld[si], sums[si] + r * ld[si] + b_strips * nr, Compute(0));
    }
  }
}

/// Output block [i0, i0 + rows) x [j0, j0 + cols) of one implicit GEMM, `packed_b` pointing at
/// the packed strip of column j0; `finite_filters`: no filter is inf or NaN.
template <class Compute, class TX, class TW, class TY, class Epilogue>
void gemm_block(const fprop_gemm<TX, TW, TY>& g, const Compute* packed_b, bool finite_filters,
                index_t i0, index_t rows, index_t j0, index_t cols, Compute alpha, Compute beta,
                const Epilogue& epilogue) {
  constexpr int mr = host_gemm::tuning<Compute>::mr;
  constexpr int nr = host_gemm::tuning<Compute>::nr;
  const index_t gk = g.k();
  const index_t kc = std::min(blocking::kc, gk);
  const index_t a_strips = ceil_div(rows, mr);
  const index_t b_strips = ceil_div(cols, nr);
  const bool in_place = taps_in_place<Compute, TX>(g.geo);
  if (rows_sample_minor<Compute>(g, finite_filters)) {
    // Straight to y when it is of the compute type, the call overwrites it (beta = 0) and the
    // block covers whole strips of columns; else to a scratch tile.
    constexpr index_t max_strips = host_gemm::tuning<Compute>::mc / mr;
    const bool to_y = std::is_same_v<TY, Compute> && beta == Compute(0) && cols % nr == 0;
    const index_t ldc = b_strips * nr;
    Compute* const tile =
        to_y ? nullptr : host_gemm::scratch<Compute>(static_cast<std::size_t>(a_strips * mr * ldc), 1);
    Compute* strip_sums[max_strips] = {};
    index_t strip_ld[max_strips] = {};
    for (index_t si = 0; si < a_strips; ++si) {
      if (to_y) {
        strip_sums[si] = reinterpret_cast<Compute*>(&g.c(sample_minor_row(g, i0 + si * mr), j0));
        strip_ld[si] = g.geo.pixels() * g.geo.k;  // between samples of an NHWC output
      } else {
        strip_sums[si] = tile + si * mr * ldc;
        strip_ld[si] = ldc;
      }
    }
    taps_block_sample_minor(g, packed_b, i0, rows, cols, strip_sums, strip_ld);
    if (to_y && std::is_same_v<Epilogue, epilogue::identity> && alpha == Compute(1)) {
      return;
    }
    for (index_t r = 0; r < rows; ++r) {
      const index_t row = sample_minor_row(g, i0 + r);
      TY* const out = &g.c(row, j0);
      const conv::conv_position pos = g.position(row, j0);
      const Compute* const acc = to_y ? reinterpret_cast<const Compute*>(out) : tile + r * ldc;
      host_gemm::store_contiguous(out, cols, acc, alpha, beta, epilogue, pos.batch, pos.row, pos.col);
    }
    return;
  }
  // An NHWC output of the compute type that the call overwrites (beta = 0), in whole
  // micro-tiles: the sums accumulate in y itself, and only alpha and the epilogue, when there
  // are any, take another pass. The pass from a scratch tile to y had been an eighth of a 1x1
  // layer's time.
  if constexpr (std::is_same_v<TY, Compute>) {
    if (in_place && g.geo.nhwc() && beta == Compute(0) && rows % mr == 0 && cols % nr == 0) {
      TY* const out = &g.c(i0, j0);
      const index_t ldy = g.geo.k;  // between pixels (and samples) of an NHWC output
      taps_block(g, packed_b, i0, rows, cols, out, ldy);
      if (std::is_same_v<Epilogue, epilogue::identity> && alpha == Compute(1)) {
        return;
      }
      for (index_t r = 0; r < rows; ++r) {
        const conv::conv_position pos = g.position(i0 + r, j0);
        host_gemm::store_contiguous(out + r * ldy, cols, out + r * ldy, alpha, beta, epilogue,
                                    pos.batch, pos.row, pos.col);
      }
      return;
    }
  }
  const index_t ldc = b_strips * nr;
  Compute* const sums = host_gemm::scratch<Compute>(static_cast<std::size_t>(a_strips * mr * ldc), 1);
  if (in_place) {
    taps_block(g, packed_b, i0, rows, cols, sums, ldc);
  } else {
    Compute* const a = host_gemm::scratch<Compute>(static_cast<std::size_t>(a_strips * mr * kc), 0);
    alignas(64) Compute acc[mr * nr];
    for (index_t k0 = 0; k0 < gk; k0 += kc) {
      const index_t kcur = std::min(kc, gk - k0);
      pack_a(g, i0, rows, k0, kcur, a);
      for (index_t sj = 0; sj < b_strips; ++sj) {
        const Compute* const b = packed_b + sj * nr * gk + k0 * nr;
        for (index_t si = 0; si < a_strips; ++si) {
          host_gemm::micro_kernel(kcur, host_gemm::strips<Compute>{a + si * mr * kcur, 1, mr, b, nr}, acc, nr,
                                  /*accumulate=*/false);
          Compute* const tile = sums + si * mr * ldc + sj * nr;
          for (int r = 0; r < mr; ++r) {
            for (int c = 0; c < nr; ++c) {
              tile[r * ldc + c] = k0 == 0 ? acc[r * nr + c] : tile[r * ldc + c] + acc[r * nr + c];
            }
          }
        }
      }
    }
  }
  const index_t stride = g.geo.y_channel_stride();
  for (index_t r = 0; r < rows; ++r) {
    TY* const out = &g.c(i0 + r, j0);
    const conv::conv_position pos = g.position(i0 + r, j0);
    const Compute* const acc = sums + r * ldc;
    if (stride == 1) {  // NHWC: a pixel's channels are contiguous
      host_gemm::store_contiguous(out, cols, acc, alpha, beta, epilogue, pos.batch, pos.row, pos.col);
      continue;
    }
    for (index_t c = 0; c < cols; ++c) {
      store_output(out[c * stride], acc[c], alpha, beta, epilogue, pos.batch, pos.row, pos.col + c);
    }
  }
}

/// A uniform batch's implicit-GEMM filters in the micro-kernel's NR-column strips (every
/// problem's back to back), and whether each problem's are all finite: only then may a
/// sample-minor block skip the padding's products, as the zeros times a filter of inf or NaN
/// would not be zero.
template <class Compute>
struct gemm_filters {
  host_gemm::aligned_array<Compute> strips;
  host_gemm::aligned_array<bool> finite;  ///< per problem
};

/// Whether `run` takes a layer of this geometry to the implicit GEMM (else depthwise or direct).
template <class Compute>
bool takes_implicit_gemm(const conv::conv2d_geometry& geo) {
  return geo.cg() != 1 && 2 * geo.kg() >= host_gemm::tuning<Compute>::nr;
}

/// Packs a batch's implicit-GEMM filters; pack_strip(i, j0, cols, out) writes columns
/// [j0, j0 + cols) of problem i's filter matrix (all gemm_k steps) as one NR-column strip,
/// k-major. A strip per task: a layer with one group and large filters (3x3 x 512 x 512:
/// 9 MiB) is packed by every thread, not by one.
template <class Compute, class TX, class TW, class TY, class PackStrip>
gemm_filters<Compute> pack_gemm_filters(host_exec exec, const fprop_batch<TX, TW, TY>& batch,
                                        const PackStrip& pack_strip) {
  constexpr int nr = host_gemm::tuning<Compute>::nr;
  const index_t count = batch.count();
  const index_t gn = batch.geo.kg(), gk = batch.geo.gemm_k();
  const index_t strips = ceil_div(gn, nr);
  const index_t packed_size = strips * nr * gk;
  gemm_filters<Compute> packed{uninitialised<Compute>(count * packed_size), uninitialised<bool>(count)};
  const auto strip_finite = uninitialised<bool>(count * strips);
  host_parallel_for(exec, count * strips, schedule::uniform, [&](index_t task) {
    const index_t i = task / strips, strip = task % strips;
    Compute* const out = packed.strips.get() + i * packed_size + strip * nr * gk;
    pack_strip(i, strip * nr, std::min<index_t>(nr, gn - strip * nr), out);
    strip_finite[task] = all_finite(out, nr * gk);
  });
  for (index_t i = 0; i < count; ++i) {
    packed.finite[i] = std::all_of(strip_finite.get() + i * strips,
                                   strip_finite.get() + (i + 1) * strips, [](bool f) { return f; });
  }
  return packed;
}

/// A batch's implicit-GEMM filters as stored (filter matrices K/g x gemm_k, rows contiguous).
template <class Compute, class TX, class TW, class TY>
gemm_filters<Compute> pack_gemm_filters(host_exec exec, const fprop_batch<TX, TW, TY>& batch) {
  const index_t gk = batch.geo.gemm_k();
  return pack_gemm_filters<Compute>(exec, batch, [&](index_t i, index_t j0, index_t cols, Compute* out) {
    host_gemm::pack_b<Compute>(matrix_ref<const TW>{batch.problem(i).w, {1, gk}}, gk, j0, cols, out);
  });
}

/// What implicit_gemm does after a block by default: nothing.
struct no_block_hook {
  template <class Gemm>
  void operator()(const Gemm&, index_t, index_t, index_t, index_t, bool) const {}
};

/// The implicit GEMMs of a batch on filters pack_gemm_filters packed for it;
/// after_block(problem, i0, rows, j0, cols, minor) runs on the thread that computed each block,
/// right after it, while its outputs are still cached (minor: the block's rows were in
/// sample-minor order, see rows_sample_minor).
template <class Compute, class TX, class TW, class TY, class Epilogue,
          class AfterBlock = no_block_hook>
void implicit_gemm(host_exec exec, const fprop_batch<TX, TW, TY>& batch, Compute alpha,
                   Compute beta, const Epilogue& epilogue, const gemm_filters<Compute>& filters,
                   const AfterBlock& after_block = {}) {
  constexpr int nr = host_gemm::tuning<Compute>::nr;
  const index_t count = batch.count();
  const index_t gm = batch.gemm_m(), gn = batch.geo.kg(), gk = batch.geo.gemm_k();
  const index_t packed_size = ceil_div(gn, nr) * nr * gk;
  const index_t mc = std::min<index_t>(host_gemm::tuning<Compute>::mc, gm);
  const index_t nc = std::min<index_t>(blocking::nc, ceil_div(gn, nr) * nr);
  const index_t m_blocks = ceil_div(gm, mc), n_blocks = ceil_div(gn, nc);
  const index_t per_problem = m_blocks * n_blocks;
  // Consecutive tasks share a filter block, which stays in cache while they run.
  host_parallel_for(exec, count * per_problem, schedule::dynamic, [&](index_t task) {
    const index_t i = task / per_problem, block = task % per_problem;
    const index_t i0 = (block % m_blocks) * mc, j0 = (block / m_blocks) * nc;
    const auto g = batch.problem(i);
    const index_t rows = std::min(mc, gm - i0), cols = std::min(nc, gn - j0);
    gemm_block(g, filters.strips.get() + i * packed_size + j0 * gk, filters.finite[i], i0, rows,
               j0, cols, alpha, beta, epilogue);
    after_block(g, i0, rows, j0, cols, rows_sample_minor<Compute>(g, filters.finite[i]));
  });
}

/// The implicit GEMMs of a batch, its filters packed by pack_strip (see pack_gemm_filters).
template <class Compute, class TX, class TW, class TY, class Epilogue, class PackStrip>
void implicit_gemm(host_exec exec, const fprop_batch<TX, TW, TY>& batch, Compute alpha,
                   Compute beta, const Epilogue& epilogue, const PackStrip& pack_strip) {
  implicit_gemm(exec, batch, alpha, beta, epilogue, pack_gemm_filters<Compute>(exec, batch, pack_strip));
}

/// One uniform convolution (shared or per-sample filters) on the best path for its shape.
/// `prepacked`: the batch's implicit-GEMM filters, packed by an earlier pack_gemm_filters (shared
/// filters packed once for many calls), or null to pack them in this call.
template <class Compute, class TX, class TW, class TY, class Epilogue>
void run(host_exec exec, const fprop_batch<TX, TW, TY>& batch, Compute alpha, Compute beta,
         const Epilogue& epilogue, const gemm_filters<Compute>* prepacked = nullptr) {
  const auto& geo = batch.geo;
  if (geo.n == 0 || geo.k == 0 || geo.gemm_k() == 0 || geo.pixels() == 0) {
    return;
  }
  if (geo.cg() == 1) {
    depthwise(exec, batch, alpha, beta, epilogue);
  } else if (!takes_implicit_gemm<Compute>(geo)) {
    direct(exec, batch, alpha, beta, epilogue);
  } else if (prepacked != nullptr) {
    implicit_gemm(exec, batch, alpha, beta, epilogue, *prepacked);
  } else {
    implicit_gemm(exec, batch, alpha, beta, epilogue, pack_gemm_filters<Compute>(exec, batch));
  }
}

/// A grouped batch: many problems run side by side, each on one thread; a few run one after
/// another, each across all threads.
template <class Compute, class TX, class TW, class TY, class Epilogue>
void run(host_exec exec, const conv::grouped_fprop_batch<TX, TW, TY>& batch, Compute alpha,
         Compute beta, const Epilogue& epilogue) {
  if (batch.problem_count >= 4 * static_cast<index_t>(thread_count(exec))) {
    host_parallel_for(exec, batch.problem_count, schedule::dynamic, [&](index_t i) {
      run(exec, batch.descriptor(i), alpha, beta, epilogue);  // nested loops run serially
    });
  } else {
    for (index_t i = 0; i < batch.problem_count; ++i) {
      run(exec, batch.descriptor(i), alpha, beta, epilogue);
    }
  }
}

}  // namespace detail::host_conv
GPUBATCH_NAMESPACE_END
