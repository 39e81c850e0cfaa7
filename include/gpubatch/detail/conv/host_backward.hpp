/// @file detail/conv/host_backward.hpp
/// @brief The host backend of the convolution backward passes: the implicit GEMMs of
/// detail/conv/backward_problem.hpp through the host GEMM's register-blocked micro-kernel,
/// both operands gathered chunk by chunk into per-thread scratch; the bias gradient; and
/// per-sample squared norms of filter gradients.
///
/// Work is split over output blocks only (OpenMP across implicit GEMMs and blocks), each block
/// reducing in one fixed order, so results do not depend on the thread count.
#pragma once

#include <gpubatch/detail/conv/backward_problem.hpp>
#include <gpubatch/detail/conv/host.hpp>
#include <gpubatch/detail/gemm/host.hpp>
#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/detail/host/parallel.hpp>
#include <gpubatch/execution.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

GPUBATCH_NAMESPACE_BEGIN
namespace detail::host_conv {

/// Rows [i0, i0 + rows) x reduction [k0, k0 + kc) of a mapping's A into MR-row strips, k-major
/// (the micro-kernel's packed-A format), zero where the mapping reports an implicit zero.
template <class Compute, class Mapping>
void pack_mapped_a(const Mapping& g, index_t i0, index_t rows, index_t k0, index_t kc,
                   Compute* out) {
  constexpr int mr = host_gemm::tuning<Compute>::mr;
  using cursor = typename Mapping::row_cursor;
  for (index_t s0 = 0; s0 < rows; s0 += mr, out += kc * mr) {
    cursor cur[mr];
    for (int r = 0; r < mr; ++r) {
      cur[r] = g.row(s0 + r < rows ? i0 + s0 + r : g.m());  // past m(): a null cursor
    }
    for (index_t kk = 0; kk < kc; ++kk) {
      Compute* const dst = out + kk * mr;
      for (int r = 0; r < mr; ++r) {
        const auto* const p = g.a(cur[r], k0 + kk);
        dst[r] = p != nullptr ? convert<Compute>(*p) : Compute(0);
      }
    }
  }
}

/// Columns [j0, j0 + cols) x reduction [k0, k0 + kc) of a mapping's B into NR-column strips,
/// k-major (the packed-B format), zero past the last column.
template <class Compute, class Mapping>
void pack_mapped_b(const Mapping& g, index_t j0, index_t cols, index_t k0, index_t kc,
                   Compute* out) {
  constexpr int nr = host_gemm::tuning<Compute>::nr;
  for (index_t s0 = 0; s0 < cols; s0 += nr, out += kc * nr) {
    for (index_t kk = 0; kk < kc; ++kk) {
      Compute* const dst = out + kk * nr;
      for (int c = 0; c < nr; ++c) {
        const auto* const p = s0 + c < cols ? g.b(k0 + kk, j0 + s0 + c) : nullptr;
        dst[c] = p != nullptr ? convert<Compute>(*p) : Compute(0);
      }
    }
  }
}

/// dgrad's A gathers dy: the reduction index is decoded once per step (not per row) and
/// advanced incrementally; with NHWC a tap's run of output channels is contiguous in dy, so
/// each row resolves its output pixel once per tap and copies the run.
template <class Compute, class TDY, class TW, class TDX>
void pack_mapped_a(const conv::dgrad_gemm<TDY, TW, TDX>& g, index_t i0, index_t rows, index_t k0,
                   index_t kc, Compute* out) {
  constexpr int mr = host_gemm::tuning<Compute>::mr;
  const conv::conv2d_geometry& geo = g.geo;
  const index_t kg = geo.kg();
  using cursor = typename conv::dgrad_gemm<TDY, TW, TDX>::row_cursor;
  // The dy pixel a row reads through tap (ir, is), or -1 where none does.
  const auto pixel_of = [&](const cursor& cur, index_t ir, index_t is) -> index_t {
    return cur.base == nullptr ? -1 : geo.output_pixel_through(cur.ph, cur.pw, ir, is);
  };
  for (index_t s0 = 0; s0 < rows; s0 += mr, out += kc * mr) {
    cursor cur[mr];
    for (int r = 0; r < mr; ++r) cur[r] = g.row(s0 + r < rows ? i0 + s0 + r : g.m());
    index_t kl, ir, is;
    g.decode(k0, kl, ir, is);
    if (geo.nhwc()) {
      for (index_t kk = 0; kk < kc;) {
        const index_t run = std::min(kg - kl, kc - kk);
        for (int r = 0; r < mr; ++r) {
          const index_t pixel = pixel_of(cur[r], ir, is);
          Compute* const dst = out + kk * mr + r;
          if (pixel < 0) {
            for (index_t t = 0; t < run; ++t) dst[t * mr] = Compute(0);
          } else {
            const TDY* const src = cur[r].base + pixel * geo.k + kl;
            for (index_t t = 0; t < run; ++t) dst[t * mr] = convert<Compute>(src[t]);
          }
        }
        kk += run;
        kl = 0;
        if (++is == geo.s) {
          is = 0;
          ++ir;
        }
      }
    } else {
      for (index_t kk = 0; kk < kc; ++kk) {
        Compute* const dst = out + kk * mr;
        for (int r = 0; r < mr; ++r) {
          const index_t pixel = pixel_of(cur[r], ir, is);
          dst[r] = pixel < 0 ? Compute(0)
                             : convert<Compute>(cur[r].base[kl * geo.pixels() + pixel]);
        }
        if (++is == geo.s) {
          is = 0;
          if (++ir == geo.r) {
            ir = 0;
            ++kl;
          }
        }
      }
    }
  }
}

/// dgrad's B is the group's filters read across: a step's columns (input channels) are
/// contiguous with KRSC filters, R * S apart with KCRS.
template <class Compute, class TDY, class TW, class TDX>
void pack_mapped_b(const conv::dgrad_gemm<TDY, TW, TDX>& g, index_t j0, index_t cols, index_t k0,
                   index_t kc, Compute* out) {
  constexpr int nr = host_gemm::tuning<Compute>::nr;
  const conv::conv2d_geometry& geo = g.geo;
  const index_t window = geo.r * geo.s;
  const index_t column_stride = geo.nhwc() ? 1 : window;
  for (index_t s0 = 0; s0 < cols; s0 += nr, out += kc * nr) {
    const index_t valid = std::min<index_t>(nr, cols - s0);
    index_t kl, ir, is;
    g.decode(k0, kl, ir, is);
    for (index_t kk = 0; kk < kc; ++kk) {
      const index_t tap = ir * geo.s + is;
      const TW* const src = g.w + kl * geo.gemm_k() + (geo.nhwc() ? tap * geo.cg() : tap) +
                            (j0 + s0) * column_stride;
      Compute* const dst = out + kk * nr;
      for (index_t c = 0; c < valid; ++c) dst[c] = convert<Compute>(src[c * column_stride]);
      for (index_t c = valid; c < nr; ++c) dst[c] = Compute(0);
      if (geo.nhwc()) {
        if (++kl == geo.kg()) {
          kl = 0;
          if (++is == geo.s) {
            is = 0;
            ++ir;
          }
        }
      } else if (++is == geo.s) {
        is = 0;
        if (++ir == geo.r) {
          ir = 0;
          ++kl;
        }
      }
    }
  }
}

/// wgrad's A is dy read across the output channels (rows) of a group: contiguous with NHWC;
/// with NCHW each row is one contiguous plane per sample.
template <class Compute, class TX, class TDY, class TDW>
void pack_mapped_a(const conv::wgrad_gemm<TX, TDY, TDW>& g, index_t i0, index_t rows, index_t k0,
                   index_t kc, Compute* out) {
  constexpr int mr = host_gemm::tuning<Compute>::mr;
  const conv::conv2d_geometry& geo = g.geo;
  const index_t pixels = geo.pixels();
  for (index_t s0 = 0; s0 < rows; s0 += mr, out += kc * mr) {
    const index_t valid = std::min<index_t>(mr, rows - s0);
    const index_t channel0 = g.group * geo.kg() + i0 + s0;
    index_t local = k0 / pixels;
    index_t pixel = k0 - local * pixels;
    for (index_t kk = 0; kk < kc; ++kk) {
      Compute* const dst = out + kk * mr;
      const index_t sample = g.first_sample + local;
      if (geo.nhwc()) {
        const TDY* const src = g.dy + (sample * pixels + pixel) * geo.k + channel0;
        for (index_t r = 0; r < valid; ++r) dst[r] = convert<Compute>(src[r]);
      } else {
        const TDY* const src = g.dy + (sample * geo.k + channel0) * pixels + pixel;
        for (index_t r = 0; r < valid; ++r) dst[r] = convert<Compute>(src[r * pixels]);
      }
      for (index_t r = valid; r < mr; ++r) dst[r] = Compute(0);
      if (++pixel == pixels) {
        pixel = 0;
        ++local;
      }
    }
  }
}

/// The filter gradient's reduction steps in order from step k0: step kk is output pixel
/// (op, oq) of the call's sample `local`.
struct output_pixel_walk {
  const conv::conv2d_geometry& geo;
  index_t local, op, oq;

  output_pixel_walk(const conv::conv2d_geometry& g, index_t k0) : geo(g) {
    local = k0 / g.pixels();
    const index_t pixel = k0 - local * g.pixels();
    op = pixel / g.q;
    oq = pixel - op * g.q;
  }
  void next() {
    if (++oq == geo.q) {
      oq = 0;
      if (++op == geo.p) {
        op = 0;
        ++local;
      }
    }
  }
};

/// NHWC wgrad's B: a strip's columns j = (r * S + s) * C/g + c fall into runs that are
/// contiguous pieces of x: consecutive channels of one tap, or, with one group and no
/// horizontal dilation, of consecutive taps of one filter row (the stem's 3 channels x 7
/// taps). A step costs one bounds test and one copy per run, not per element; a run that
/// crosses the input's edge is copied tap by tap. Strips are `width` columns wide (NR, or the
/// whole block for wgrad_b_panel's row-major panel of pitch `width`).
template <class Compute, class TX, class TDY, class TDW>
void pack_wgrad_b_nhwc(const conv::wgrad_gemm<TX, TDY, TDW>& g, index_t j0, index_t cols,
                       index_t k0, index_t kc, Compute* out,
                       index_t width = host_gemm::tuning<Compute>::nr) {
  const conv::conv2d_geometry& geo = g.geo;
  const index_t cg = geo.cg();
  const bool rows_contiguous = geo.groups == 1 && geo.dilation_w == 1;
  struct x_run {
    int first, count;  ///< where in a step of the packed block it goes (strip s0: s0 * kc + c)
    index_t row_off, col_off;  ///< the first tap's offsets from the output pixel's origin
    index_t channel;           ///< the first element's channel
    index_t taps;              ///< taps the run spans
  };
  const auto copy = [](Compute* to, const TX* from, index_t count) {
    if constexpr (std::is_same_v<TX, Compute>) {
      copy_run(to, from, count);
    } else {
      for (index_t t = 0; t < count; ++t) to[t] = convert<Compute>(from[t]);
    }
  };
  // Every strip's runs, then one walk over the steps for all of them (a walk per strip had
  // cost a bounds test and a pixel decode per strip and step).
  x_run runs[blocking::nc];
  int run_count = 0;
  for (index_t s0 = 0; s0 < cols; s0 += width) {
    const int valid = static_cast<int>(std::min<index_t>(width, cols - s0));
    for (int c = 0; c < valid;) {
      index_t ic, ir, is;
      geo.decode_filter_index(j0 + s0 + c, ic, ir, is);
      const index_t reach = rows_contiguous ? (geo.s - is) * cg - ic : cg - ic;
      const int count = static_cast<int>(std::min<index_t>(valid - c, reach));
      runs[run_count++] = {static_cast<int>(s0 * kc + c), count, ir * geo.dilation_h - geo.pad_h,
                           is * geo.dilation_w - geo.pad_w, g.group * cg + ic,
                           ceil_div(ic + count, cg)};
      c += count;
    }
  }
  const index_t last = (ceil_div(cols, width) - 1) * width;  // the last strip's first column
  const int last_valid = static_cast<int>(cols - last);
  output_pixel_walk at(geo, k0);
  for (index_t kk = 0; kk < kc; ++kk, at.next()) {
    Compute* const dst = out + kk * width;
    const TX* const sample = g.x + geo.x_offset(g.first_sample + at.local, 0, 0, 0);
    const index_t h0 = at.op * geo.stride_h, w0 = at.oq * geo.stride_w;
    for (int u = 0; u < run_count; ++u) {
      const x_run& run = runs[u];
      const index_t ih = h0 + run.row_off, iw = w0 + run.col_off;
      Compute* const to = dst + run.first;
      if (ih < 0 || ih >= geo.h) {
        std::fill(to, to + run.count, Compute(0));
      } else if (iw >= 0 && iw + run.taps - 1 < geo.w) {
        copy(to, sample + (ih * geo.w + iw) * geo.c + run.channel, run.count);
      } else {
        // Tap by tap (consecutive taps of a row here: the horizontal dilation is 1).
        const index_t first_channel = run.channel - g.group * cg;
        for (index_t e = 0; e < run.count;) {
          const index_t t = (first_channel + e) / cg, channel = first_channel + e - t * cg;
          const index_t piece = std::min<index_t>(cg - channel, run.count - e);
          const index_t w = iw + t;
          if (w >= 0 && w < geo.w) {
            copy(to + e, sample + (ih * geo.w + w) * geo.c + g.group * cg + channel, piece);
          } else {
            std::fill(to + e, to + e + piece, Compute(0));
          }
          e += piece;
        }
      }
    }
    std::fill(dst + last * kc + last_valid, dst + last * kc + width, Compute(0));
  }
}

/// wgrad's B is the im2col matrix of x (reduction = output pixels, columns = filter taps).
/// NCHW: each column's tap is decoded once per strip and the output pixel advanced
/// incrementally, leaving one bounds test and one load per element.
template <class Compute, class TX, class TDY, class TDW>
void pack_mapped_b(const conv::wgrad_gemm<TX, TDY, TDW>& g, index_t j0, index_t cols, index_t k0,
                   index_t kc, Compute* out) {
  constexpr int nr = host_gemm::tuning<Compute>::nr;
  const conv::conv2d_geometry& geo = g.geo;
  if (geo.nhwc()) {
    pack_wgrad_b_nhwc(g, j0, cols, k0, kc, out);
    return;
  }
  const index_t channel_stride = geo.h * geo.w;
  for (index_t s0 = 0; s0 < cols; s0 += nr, out += kc * nr) {
    index_t row_off[nr], col_off[nr], chan_off[nr];
    bool valid[nr];
    for (int c = 0; c < nr; ++c) {
      valid[c] = s0 + c < cols;
      index_t ic = 0, ir = 0, is = 0;
      if (valid[c]) geo.decode_filter_index(j0 + s0 + c, ic, ir, is);
      row_off[c] = ir * geo.dilation_h - geo.pad_h;
      col_off[c] = is * geo.dilation_w - geo.pad_w;
      chan_off[c] = (g.group * geo.cg() + ic) * channel_stride;
    }
    output_pixel_walk at(geo, k0);
    for (index_t kk = 0; kk < kc; ++kk, at.next()) {
      Compute* const dst = out + kk * nr;
      const TX* const sample = g.x + geo.x_offset(g.first_sample + at.local, 0, 0, 0);
      const index_t h0 = at.op * geo.stride_h, w0 = at.oq * geo.stride_w;
      for (int c = 0; c < nr; ++c) {
        const index_t ih = h0 + row_off[c], iw = w0 + col_off[c];
        const bool inside = valid[c] && ih >= 0 && ih < geo.h && iw >= 0 && iw < geo.w;
        dst[c] = inside ? convert<Compute>(sample[chan_off[c] + ih * geo.w + iw]) : Compute(0);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Stride-1 backward data as a forward convolution.

/// The layer's filter taps that a forward geometry's taps stand for: forward tap (r, s) is the
/// layer's (rows[r], cols[s]).
struct tap_map {
  const index_t* rows;
  const index_t* cols;
};

/// Columns [j0, j0 + cols) (the layer's input channels) of one group's filter matrix in a
/// forward geometry whose output is dx (dgrad_as_fprop, phase_as_fprop), as one NR-column
/// strip: its step kk (forward tap (r, s), channel kl = an output channel of the layer) reads
/// the layer's filter kl at tap (taps.rows[r], taps.cols[s]); for dgrad_as_fprop that is
/// (R-1-r, S-1-s), the filter turned 180 degrees.
template <class Compute, class TW>
void pack_rotated_strip(const conv::conv2d_geometry& geo, const conv::conv2d_geometry& forward,
                        const tap_map& taps, const TW* group_filters, index_t j0, index_t cols,
                        Compute* out) {
  constexpr int nr = host_gemm::tuning<Compute>::nr;
  const index_t step = geo.nhwc() ? 1 : geo.r * geo.s;  // between a tap's input channels
  for (index_t kk = 0; kk < forward.gemm_k(); ++kk) {
    index_t kl, ir, is;
    forward.decode_filter_index(kk, kl, ir, is);
    const TW* const src = group_filters + geo.w_offset(kl, j0, taps.rows[ir], taps.cols[is]);
    Compute* const dst = out + kk * nr;
    for (index_t c = 0; c < cols; ++c) dst[c] = convert<Compute>(src[c * step]);
    for (index_t c = cols; c < nr; ++c) dst[c] = Compute(0);
  }
}

/// The implicit-GEMM filters (pack_gemm_filters' layout) of a batch in a forward geometry whose
/// output is dx, filters_of(i) the layer's filters of problem i's group. Each call reads the
/// filters and writes the strips once, so packing waits on memory: NHWC filters of the compute
/// type are read in storage order, a task's run of filters into every strip, with the next
/// filter fetched ahead and each strip's next pieces fetched for writing (ResNet-50's res5, 9 MiB
/// of filters: 11% of its backward-data time, from 21% strip by strip). Other filters are
/// packed strip by strip (pack_rotated_strip).
template <class Compute, class TDY, class TW, class TY, class FiltersOf>
gemm_filters<Compute> pack_rotated_filters(host_exec exec, const fprop_batch<TDY, TW, TY>& batch,
                                           const conv::conv2d_geometry& geo, const tap_map& taps,
                                           const FiltersOf& filters_of) {
  constexpr int nr = host_gemm::tuning<Compute>::nr;
  const conv::conv2d_geometry& forward = batch.geo;
  const index_t count = batch.count();
  if constexpr (std::is_same_v<TW, Compute>) {
    if (geo.nhwc()) {
      const index_t kg = forward.cg();  // the layer's output channels of a group: steps per tap
      const index_t gn = forward.kg();  // its input channels of a group: columns
      const index_t gk = forward.gemm_k();
      const index_t strips = ceil_div(gn, nr);
      const index_t packed_size = strips * nr * gk;
      constexpr index_t filters_per_task = 32;
      const index_t blocks = ceil_div(kg, filters_per_task);
      gemm_filters<Compute> packed{uninitialised<Compute>(count * packed_size),
                                   uninitialised<bool>(count)};
      const auto block_finite = uninitialised<bool>(count * blocks);
      host_parallel_for(exec, count * blocks, schedule::uniform, [&](index_t task) {
        const index_t i = task / blocks, kl0 = (task % blocks) * filters_per_task;
        const TW* const w = filters_of(i);
        Compute* const out = packed.strips.get() + i * packed_size;
        bool finite = true;
        for (index_t kl = kl0; kl < std::min(kg, kl0 + filters_per_task); ++kl) {
          // The next filter, while this one is copied; each strip's piece two filters on below.
          if (kl + 1 < kg) {
            const auto* const next = reinterpret_cast<const char*>(w + geo.w_offset(kl + 1, 0, 0, 0));
            const index_t bytes = geo.gemm_k() * static_cast<index_t>(sizeof(TW));
            for (index_t e = 0; e < bytes; e += 64) __builtin_prefetch(next + e, 0, 3);
          }
          for (index_t ir = 0; ir < forward.r; ++ir) {
            for (index_t is = 0; is < forward.s; ++is) {
              const TW* const src = w + geo.w_offset(kl, 0, taps.rows[ir], taps.cols[is]);
              finite = finite && all_finite(src, gn);
              const index_t step = (ir * forward.s + is) * kg + kl;
              for (index_t j = 0; j < strips; ++j) {
                Compute* const dst = out + (j * gk + step) * nr;
                const auto* const ahead = reinterpret_cast<const char*>(dst + 2 * nr);
                for (std::size_t e = 0; e < nr * sizeof(Compute); e += 64) {
                  __builtin_prefetch(ahead + e, 1, 3);
                }
                const index_t cols = std::min<index_t>(nr, gn - j * nr);
                copy_run(dst, src + j * nr, cols);
                for (index_t c = cols; c < nr; ++c) dst[c] = Compute(0);
              }
            }
          }
        }
        block_finite[task] = finite;
      });
      for (index_t i = 0; i < count; ++i) {
        packed.finite[i] = std::all_of(block_finite.get() + i * blocks,
                                       block_finite.get() + (i + 1) * blocks,
                                       [](bool f) { return f; });
      }
      return packed;
    }
  }
  return pack_gemm_filters<Compute>(exec, batch, [&](index_t i, index_t j0, index_t cols, Compute* out) {
    pack_rotated_strip<Compute>(geo, forward, taps, filters_of(i), j0, cols, out);
  });
}

// ---------------------------------------------------------------------------------------------
// Strided backward data, one stride phase at a time.

/// The input pixels (h, w) with h = a (mod stride_h) and w = b (mod stride_w) of a strided
/// layer: each tap either reaches all of them through whole output pixels or none, so dx of a
/// phase is an implicit GEMM over that phase's taps alone. The plain dgrad GEMM runs every tap
/// for every pixel and multiplies zeros for the taps between strides (3/4 of a 3x3 stride-2
/// layer's products).
struct dgrad_phase {
  index_t a = 0, b = 0;       ///< residues of h and w
  index_t rows = 0, cols = 0;  ///< input rows and columns in the phase
  std::vector<index_t> taps;  ///< the taps r * S + s that reach it, in filter order
  std::vector<index_t> tap_rows, tap_cols;  ///< their filter rows r and columns s, ascending
};

/// Every phase of a layer (stride_h * stride_w of them; one for stride 1).
inline std::vector<dgrad_phase> dgrad_phases(const conv::conv2d_geometry& geo) {
  const auto residue = [](index_t v, index_t m) { return ((v % m) + m) % m; };
  std::vector<dgrad_phase> phases;
  for (index_t a = 0; a < geo.stride_h; ++a) {
    for (index_t b = 0; b < geo.stride_w; ++b) {
      dgrad_phase ph;
      ph.a = a;
      ph.b = b;
      ph.rows = a < geo.h ? ceil_div(geo.h - a, geo.stride_h) : 0;
      ph.cols = b < geo.w ? ceil_div(geo.w - b, geo.stride_w) : 0;
      for (index_t ir = 0; ir < geo.r; ++ir) {
        if (residue(a + geo.pad_h - ir * geo.dilation_h, geo.stride_h) == 0) {
          ph.tap_rows.push_back(ir);
        }
      }
      for (index_t is = 0; is < geo.s; ++is) {
        if (residue(b + geo.pad_w - is * geo.dilation_w, geo.stride_w) == 0) {
          ph.tap_cols.push_back(is);
        }
      }
      for (const index_t ir : ph.tap_rows) {
        for (const index_t is : ph.tap_cols) ph.taps.push_back(ir * geo.s + is);
      }
      phases.push_back(std::move(ph));
    }
  }
  return phases;
}

/// One phase's dgrad for one group over samples [first_sample, first_sample + samples): rows
/// are the phase's input pixels, the reduction runs tap-major over its taps (kk = t * K/g + kl),
/// columns are the group's input channels.
template <class TDY, class TW, class TDX>
struct dgrad_phase_gemm {
  conv::conv2d_geometry geo;
  const TDY* dy;  ///< dy of sample 0 of the call
  const TW* w;    ///< this group's filters
  TDX* dx;        ///< dx of sample 0 of the call
  index_t group, first_sample, samples;
  const dgrad_phase* phase;

  index_t m() const { return samples * phase->rows * phase->cols; }
  index_t n() const { return geo.cg(); }
  index_t k() const { return static_cast<index_t>(phase->taps.size()) * geo.kg(); }

  /// Sample (within the call) and input position of row i.
  void locate(index_t i, index_t& sample, index_t& ih, index_t& iw) const {
    const index_t plane = phase->rows * phase->cols;
    const index_t local = i / plane, rest = i - local * plane;
    const index_t u = rest / phase->cols;
    sample = first_sample + local;
    ih = phase->a + u * geo.stride_h;
    iw = phase->b + (rest - u * phase->cols) * geo.stride_w;
  }
  index_t c_col_stride() const { return geo.nhwc() ? 1 : geo.h * geo.w; }
  TDX& c(index_t i, index_t j) const {
    index_t sample, ih, iw;
    locate(i, sample, ih, iw);
    return dx[geo.x_offset(sample, group * geo.cg() + j, ih, iw)];
  }
  conv::conv_position position(index_t i, index_t j) const {
    index_t sample, ih, iw;
    locate(i, sample, ih, iw);
    return {sample, ih * geo.w + iw, group * geo.cg() + j};
  }
};

/// A phase's A: row r's dy pixel through each tap resolved once per tap, then a run of output
/// channels copied (contiguous with NHWC, a plane apart with NCHW); zero where the tap lands
/// beyond the output.
template <class Compute, class TDY, class TW, class TDX>
void pack_mapped_a(const dgrad_phase_gemm<TDY, TW, TDX>& g, index_t i0, index_t rows, index_t k0,
                   index_t kc, Compute* out) {
  constexpr int mr = host_gemm::tuning<Compute>::mr;
  const conv::conv2d_geometry& geo = g.geo;
  const index_t kg = geo.kg();
  const index_t channel_stride = geo.nhwc() ? 1 : geo.pixels();
  const index_t pixel_stride = geo.nhwc() ? geo.k : 1;
  for (index_t s0 = 0; s0 < rows; s0 += mr, out += kc * mr) {
    const TDY* base[mr];
    index_t ph[mr], pw[mr];
    for (int r = 0; r < mr; ++r) {
      base[r] = nullptr;
      if (s0 + r >= rows) continue;
      index_t sample, ih, iw;
      g.locate(i0 + s0 + r, sample, ih, iw);
      base[r] = g.dy + geo.y_offset(sample, g.group * kg, 0);
      ph[r] = ih + geo.pad_h;
      pw[r] = iw + geo.pad_w;
    }
    index_t t = k0 / kg, kl = k0 - t * kg;
    for (index_t kk = 0; kk < kc;) {
      const index_t run = std::min(kg - kl, kc - kk);
      const index_t tap = g.phase->taps[static_cast<std::size_t>(t)];
      const index_t ir = tap / geo.s, is = tap - ir * geo.s;
      for (int r = 0; r < mr; ++r) {
        Compute* const dst = out + kk * mr + r;
        const index_t pixel =
            base[r] == nullptr ? -1 : geo.output_pixel_through(ph[r], pw[r], ir, is);
        if (pixel < 0) {
          for (index_t u = 0; u < run; ++u) dst[u * mr] = Compute(0);
        } else {
          const TDY* const src = base[r] + pixel * pixel_stride + kl * channel_stride;
          for (index_t u = 0; u < run; ++u) dst[u * mr] = convert<Compute>(src[u * channel_stride]);
        }
      }
      kk += run;
      kl = 0;
      ++t;
    }
  }
}

/// A phase's B: the group's filters at the phase's taps, a step's columns (input channels)
/// contiguous with KRSC filters, R * S apart with KCRS.
template <class Compute, class TDY, class TW, class TDX>
void pack_mapped_b(const dgrad_phase_gemm<TDY, TW, TDX>& g, index_t j0, index_t cols, index_t k0,
                   index_t kc, Compute* out) {
  constexpr int nr = host_gemm::tuning<Compute>::nr;
  const conv::conv2d_geometry& geo = g.geo;
  const index_t kg = geo.kg();
  for (index_t s0 = 0; s0 < cols; s0 += nr, out += kc * nr) {
    const int valid = static_cast<int>(std::min<index_t>(nr, cols - s0));
    index_t t = k0 / kg, kl = k0 - t * kg;
    for (index_t kk = 0; kk < kc; ++kk) {
      const index_t tap = g.phase->taps[static_cast<std::size_t>(t)];
      const index_t ir = tap / geo.s, is = tap - ir * geo.s;
      const TW* const src = g.w + geo.w_offset(kl, j0 + s0, ir, is);
      const index_t step = geo.nhwc() ? 1 : geo.r * geo.s;
      Compute* const dst = out + kk * nr;
      for (int c = 0; c < valid; ++c) dst[c] = convert<Compute>(src[c * step]);
      for (int c = valid; c < nr; ++c) dst[c] = Compute(0);
      if (++kl == kg) {
        kl = 0;
        ++t;
      }
    }
  }
}

/// One phase of a dgrad call as run_mapped's uniform batch: one GEMM per group over all
/// samples (shared filters), or per (sample, group) with per-sample filters.
template <class TDY, class TW, class TDX>
struct dgrad_phase_batch {
  const conv::dgrad_batch<TDY, TW, TDX>* call;
  const dgrad_phase* phase;

  index_t count() const { return call->count(); }
  index_t gemm_m() const { return (call->per_sample ? 1 : call->geo.n) * phase->rows * phase->cols; }
  index_t gemm_n() const { return call->geo.cg(); }
  index_t gemm_k() const { return static_cast<index_t>(phase->taps.size()) * call->geo.kg(); }
  dgrad_phase_gemm<TDY, TW, TDX> problem(index_t index) const {
    const conv::conv2d_geometry& geo = call->geo;
    const index_t group = index % geo.groups;
    const index_t first = call->per_sample ? index / geo.groups : 0;
    const TW* const set = call->per_sample ? call->w + first * geo.filter_set_size() : call->w;
    return {geo,   call->dy, set + group * geo.kg() * geo.gemm_k(), call->dx, group, first,
            call->per_sample ? 1 : geo.n, phase};
  }
};

/// A stride phase of a strided layer as a stride-1 forward convolution of dy: its output is the
/// phase's dx pixels (rows x cols, packed), its filters the layer's at the phase's taps with
/// input and output channels swapped, turned around (forward tap (r, s) is the layer's tap
/// (rows[r], cols[s])).
struct phase_forward {
  conv::conv2d_geometry geo;
  std::vector<index_t> rows, cols;
  tap_map taps() const { return {rows.data(), cols.data()}; }
};

/// The forward convolution of a phase, or empty where the phase has no taps or would need
/// negative padding (dy rows beyond those the phase reaches). Along one axis: the phase's
/// pixel u (input a + u * stride) takes tap r_j (ascending, j < m) from output row
/// u + e_j, e_j = (a + pad - r_j * dilation) / stride. The taps lie stride / gcd apart, so the
/// e_j fall by dilation / gcd from one to the next (gcd of dilation and stride): the forward
/// filter is the taps in reverse, at that dilation, with leading padding -e_(m-1).
inline std::optional<phase_forward> phase_as_fprop(const conv::conv2d_geometry& geo,
                                                   const dgrad_phase& phase) {
  if (phase.tap_rows.empty() || phase.tap_cols.empty() || phase.rows == 0 || phase.cols == 0 ||
      geo.p == 0 || geo.q == 0) {
    return std::nullopt;
  }
  struct axis {
    index_t begin, end, dilation;
  };
  const auto along = [](const std::vector<index_t>& taps, index_t residue, index_t pad,
                        index_t dilation, index_t stride, index_t outputs, index_t pixels) {
    const auto m = static_cast<index_t>(taps.size());
    const index_t last = (residue + pad - taps.back() * dilation) / stride;  // exact
    const index_t step = m > 1 ? (taps[1] - taps[0]) * dilation / stride : 1;
    const index_t begin = -last;
    // Forward rows: outputs + begin + end - step * (m - 1), which must be the phase's pixels.
    return axis{begin, pixels - outputs - begin + step * (m - 1), step};
  };
  const axis h = along(phase.tap_rows, phase.a, geo.pad_h, geo.dilation_h, geo.stride_h, geo.p,
                       phase.rows);
  const axis w = along(phase.tap_cols, phase.b, geo.pad_w, geo.dilation_w, geo.stride_w, geo.q,
                       phase.cols);
  if (h.begin < 0 || h.end < 0 || w.begin < 0 || w.end < 0) {
    return std::nullopt;
  }
  const conv2d_params params = conv2d_params{}
                                   .with_padding(h.begin, h.end, w.begin, w.end)
                                   .with_dilation(h.dilation, w.dilation)
                                   .with_groups(geo.groups);
  phase_forward f{conv::make_geometry(geo.n, geo.k, geo.p, geo.q, geo.c,
                                      static_cast<index_t>(phase.tap_rows.size()),
                                      static_cast<index_t>(phase.tap_cols.size()), params,
                                      geo.order),
                  {phase.tap_rows.rbegin(), phase.tap_rows.rend()},
                  {phase.tap_cols.rbegin(), phase.tap_cols.rend()}};
  if (f.geo.p != phase.rows || f.geo.q != phase.cols) {
    return std::nullopt;
  }
  return f;
}

/// One phase of a strided dgrad on the forward implicit GEMM (phase_as_fprop; taps_in_place
/// layers), which reads dy in place where the phase GEMM gathers it element by element: into
/// a scratch of the compute type, a pass of samples at a time (at most `scratch_bytes`, unless
/// one sample is more), each block's pixels stored to dx through alpha, beta and the epilogue
/// as soon as it is done.
template <class Compute, class TDY, class TW, class TDX, class Epilogue>
void phase_via_fprop(host_exec exec, const conv::dgrad_batch<TDY, TW, TDX>& batch,
                     const dgrad_phase& phase, const phase_forward& forward, Compute alpha,
                     Compute beta, const Epilogue& epilogue, index_t scratch_bytes) {
  const conv::conv2d_geometry& geo = batch.geo;
  const index_t plane = phase.rows * phase.cols;
  const index_t sample_bytes = plane * geo.c * static_cast<index_t>(sizeof(Compute));
  index_t pass = std::max<index_t>(1, scratch_bytes / sample_bytes);
  if (pass >= blocking::sample_strip) {
    pass -= pass % blocking::sample_strip;  // sample-minor strips stay whole
  }
  pass = std::min(pass, geo.n);
  const auto scratch = uninitialised<Compute>(pass * plane * geo.c);
  const tap_map taps = forward.taps();
  const auto filters_of = [&](index_t sample, index_t group) {
    return batch.w + (batch.per_sample ? sample * geo.filter_set_size() : 0) +
           group * geo.kg() * geo.gemm_k();
  };
  std::optional<gemm_filters<Compute>> packed;  // shared filters: once for every pass
  for (index_t first = 0; first < geo.n; first += pass) {
    conv::conv2d_geometry fg = forward.geo;
    fg.n = std::min(pass, geo.n - first);
    const fprop_batch<TDY, TW, Compute> fb{fg, batch.dy + first * geo.pixels() * geo.k, batch.w,
                                           scratch.get(), batch.per_sample};
    const auto problem_filters = [&](index_t i) {
      return filters_of(batch.per_sample ? first + i / geo.groups : 0, i % geo.groups);
    };
    // A block's rows to dx as soon as it is done, from the scratch while it is still in L1 and
    // L2 (a pass over the whole scratch afterwards waited on dx's misses for an eighth of the
    // time of ResNet-50's res3 stride-2 layer).
    const auto to_dx = [&](const fprop_gemm<TDY, TW, Compute>& g, index_t i0, index_t rows,
                           index_t j0, index_t cols, bool minor) {
      const index_t channel = g.group * geo.cg() + j0;
      for (index_t r = i0; r < i0 + rows; ++r) {
        const index_t row = minor ? sample_minor_row(g, r) : r;
        const index_t sample = first + g.first_sample + row / plane, pixel = row % plane;
        const index_t u = pixel / phase.cols, v = pixel - u * phase.cols;
        const index_t ih = phase.a + u * geo.stride_h, iw = phase.b + v * geo.stride_w;
        host_gemm::store_contiguous(batch.dx + geo.x_offset(sample, channel, ih, iw), cols,
                                    &g.c(row, j0), alpha, beta, epilogue, sample,
                                    ih * geo.w + iw, channel);
      }
    };
    if (batch.per_sample || !packed) {
      packed = pack_rotated_filters<Compute>(exec, fb, geo, taps, problem_filters);
    }
    implicit_gemm(exec, fb, Compute(1), Compute(0), epilogue::identity{}, *packed, to_dx);
  }
}

/// An operand the micro-kernel can read where it lies: A's element (row r, step p) at
/// data[r * row + p * step], B's (step p, column c) at data[p * step + c]. Null: pack it.
template <class T>
struct in_place {
  const T* data = nullptr;
  index_t row = 0, step = 0;
};

/// Whether a layer's gathers are plain matrices: NHWC, 1 x 1 filters, stride 1, no padding
/// (every pixel of x is the same pixel of y), as in ResNet's bottleneck convolutions.
inline bool plain_matrices(const conv::conv2d_geometry& g) {
  return g.nhwc() && g.r == 1 && g.s == 1 && g.stride_h == 1 && g.stride_w == 1 &&
         g.pad_h == 0 && g.pad_w == 0 && g.p == g.h && g.q == g.w;
}

template <class Compute, class Mapping>
in_place<Compute> a_in_place(const Mapping&) {
  return {};
}
template <class Compute, class Mapping>
in_place<Compute> b_in_place(const Mapping&) {
  return {};
}

/// wgrad of an NHWC layer: A is dy transposed (rows: output channels, steps: the call's
/// pixels, consecutive across samples, K apart), whatever the filter; with a plain layer B is x
/// (steps: pixels, C apart).
template <class Compute, class TX, class TDY, class TDW>
in_place<Compute> a_in_place(const conv::wgrad_gemm<TX, TDY, TDW>& g) {
  if constexpr (std::is_same_v<TDY, Compute>) {
    if (g.geo.nhwc()) {
      return {g.dy + g.first_sample * g.geo.pixels() * g.geo.k + g.group * g.geo.kg(), 1, g.geo.k};
    }
  }
  return {};
}
template <class Compute, class TX, class TDY, class TDW>
in_place<Compute> b_in_place(const conv::wgrad_gemm<TX, TDY, TDW>& g) {
  if constexpr (std::is_same_v<TX, Compute>) {
    if (plain_matrices(g.geo)) {
      return {g.x + g.first_sample * g.geo.h * g.geo.w * g.geo.c + g.group * g.geo.cg(), 0, g.geo.c};
    }
  }
  return {};
}

/// Whether wgrad's B strips are read in x where it lies, tap by tap: NHWC x of the compute
/// type whose groups' channels fill whole NR-column strips (C/g a multiple of NR), so that a
/// strip's step (an output pixel) is NR consecutive channels of one input pixel; the steps of
/// an output row lie stride_w * C apart, those of consecutive rows stride_h * W * C apart.
/// Only where a step is at most 256 bytes: the rows of x a pass reads are then spread over the
/// L1 cache's sets and stay there while every strip of A passes them; 1 or 2 KiB apart (256 or
/// 512 channels of f32) they share a few sets and evict each other, and reading them in place
/// measured no faster than packing them (ResNet-50's res4 and res5 3 x 3 layers).
/// Plain layers have their own in-place B (b_in_place).
template <class Compute, class Mapping>
bool b_taps_in_place(const Mapping&) {
  return false;
}
template <class Compute, class TX, class TDY, class TDW>
bool b_taps_in_place(const conv::wgrad_gemm<TX, TDY, TDW>& g) {
  if constexpr (std::is_same_v<TX, Compute>) {
    constexpr index_t most_step_bytes = 256;
    const conv::conv2d_geometry& geo = g.geo;
    return geo.nhwc() && geo.cg() % host_gemm::tuning<Compute>::nr == 0 && !plain_matrices(geo) &&
           geo.stride_w * geo.c * static_cast<index_t>(sizeof(Compute)) <= most_step_bytes;
  }
  return false;
}

/// Any filter gradient (the mappings wgrad_b_panel admits).
template <class Mapping>
struct is_wgrad_gemm : std::false_type {};
template <class TX, class TDY, class TDW>
struct is_wgrad_gemm<conv::wgrad_gemm<TX, TDY, TDW>> : std::true_type {};

/// A filter gradient whose x is of the compute type (the only mappings b_taps_in_place admits).
template <class Compute, class Mapping>
struct wgrad_with_x_of : std::false_type {};
template <class Compute, class TDY, class TDW>
struct wgrad_with_x_of<Compute, conv::wgrad_gemm<Compute, TDY, TDW>> : std::true_type {};

/// Whether mapped_block packs wgrad's B as one row-major panel across its block's columns
/// rather than in NR-column strips: NHWC x whose filter row is one run of fewer than NR
/// consecutive elements (one group, no horizontal dilation; the stem's 7 taps x 3 channels).
/// Strips cut such runs at every strip edge and walk a pass's output pixels once per strip; the
/// panel copies each filter row once per pixel, and the micro-kernel reads its strips a panel
/// row apart.
template <class Compute, class Mapping>
bool wgrad_b_panel(const Mapping&) {
  return false;
}
template <class Compute, class TX, class TDY, class TDW>
bool wgrad_b_panel(const conv::wgrad_gemm<TX, TDY, TDW>& g) {
  const conv::conv2d_geometry& geo = g.geo;
  return geo.nhwc() && geo.groups == 1 && geo.dilation_w == 1 &&
         geo.s * geo.c < host_gemm::tuning<Compute>::nr;
}

/// mapped_block for b_taps_in_place layers: no B is packed. A pass's reduction steps are
/// walked an output row at a time, whole rows of one sample as one call of the run-summing
/// micro-kernel (a run per row), and the steps whose input falls in the padding are skipped
/// rather than multiplied as zeros: packing x was a quarter of a 3 x 3 layer's filter gradient.
/// Each sum still adds its products in reduction order.
template <class Compute, class TX, class TDY, class TDW, class Store>
void wgrad_taps_block(const conv::wgrad_gemm<TX, TDY, TDW>& g, index_t i0, index_t rows,
                      index_t j0, index_t cols, index_t k_begin, index_t k_end, Store&& store) {
  constexpr int mr = host_gemm::tuning<Compute>::mr;
  constexpr int nr = host_gemm::tuning<Compute>::nr;
  const conv::conv2d_geometry& geo = g.geo;
  const index_t kc = std::max<index_t>(1, std::min(blocking::packed_kc, k_end - k_begin));
  const index_t a_strips = ceil_div(rows, mr);
  const index_t b_strips = cols / nr;  // whole: cols and C/g are multiples of NR
  const index_t ldc = b_strips * nr;
  Compute* const a = host_gemm::scratch<Compute>(static_cast<std::size_t>(a_strips * mr * kc), 0);
  Compute* const sums =
      host_gemm::scratch<Compute>(static_cast<std::size_t>(a_strips * mr * ldc), 2);
  std::fill(sums, sums + a_strips * mr * ldc, Compute(0));
  const in_place<Compute> a_direct = a_in_place<Compute>(g);
  const index_t full_a = a_direct.data != nullptr ? rows / mr : 0;
  const index_t pixels = geo.pixels();
  for (index_t k0 = k_begin; k0 < k_end; k0 += kc) {
    const index_t kcur = std::min(kc, k_end - k0);
    if (full_a < a_strips) pack_mapped_a(g, i0 + full_a * mr, rows - full_a * mr, k0, kcur, a);
    // Strip si's A from reduction step kk on, and the step between its runs (an output row).
    const auto a_strip = [&](index_t si, index_t kk) {
      return si < full_a ? a_direct.data + (i0 + si * mr) * a_direct.row + kk * a_direct.step
                         : a + (si - full_a) * mr * kcur + (kk - k0) * mr;
    };
    const auto a_step = [&](index_t si) { return si < full_a ? a_direct.step : index_t{mr}; };
    for (index_t sj = 0; sj < b_strips; ++sj) {
      index_t ic, ir, is;
      geo.decode_filter_index(j0 + sj * nr, ic, ir, is);
      const index_t row_off = ir * geo.dilation_h - geo.pad_h;
      const index_t col_off = is * geo.dilation_w - geo.pad_w;
      // (No structured bindings: C++17 lambdas cannot capture them.)
      const std::pair<index_t, index_t> op_inside =
          outputs_inside(row_off, geo.stride_h, geo.h, geo.p);
      const std::pair<index_t, index_t> oq_inside =
          outputs_inside(col_off, geo.stride_w, geo.w, geo.q);
      const index_t p_first = op_inside.first, p_last = op_inside.second;
      const index_t q_first = oq_inside.first, q_last = oq_inside.second;
      if (p_first == p_last || q_first == q_last) continue;  // the tap sees only padding
      const index_t channel = g.group * geo.cg() + ic;
      // Output rows [op_a, op_b) of sample `local`, columns [oq_a, oq_b), as one call per A strip.
      const auto rows_of = [&](index_t local, index_t op_a, index_t op_b, index_t oq_a,
                               index_t oq_b) {
        op_a = std::max(op_a, p_first);
        op_b = std::min(op_b, p_last);
        oq_a = std::max(oq_a, q_first);
        oq_b = std::min(oq_b, q_last);
        if (op_a >= op_b || oq_a >= oq_b) return;
        const index_t kk = local * pixels + op_a * geo.q + oq_a;
        const TX* const b =
            g.x + geo.x_offset(g.first_sample + local, channel, op_a * geo.stride_h + row_off,
                               oq_a * geo.stride_w + col_off);
        for (index_t si = 0; si < a_strips; ++si) {
          host_gemm::strips<Compute> s{a_strip(si, kk), si < full_a ? a_direct.row : 1,
                                       a_step(si),      b,
                                       geo.stride_w * geo.c};
          s.runs = op_b - op_a;
          s.a_run = geo.q * a_step(si);
          s.b_run = geo.stride_h * geo.w * geo.c;
          host_gemm::micro_kernel<Compute, true>(oq_b - oq_a, s, sums + si * mr * ldc + sj * nr,
                                                 ldc, /*accumulate=*/true);
        }
      };
      for (index_t kk = k0; kk < k0 + kcur;) {
        const index_t local = kk / pixels, pixel = kk - local * pixels;
        const index_t op = pixel / geo.q, oq = pixel - op * geo.q;
        const index_t left = k0 + kcur - kk;
        const index_t whole = oq == 0 ? std::min(geo.p - op, left / geo.q) : 0;
        if (whole > 0) {
          rows_of(local, op, op + whole, 0, geo.q);
          kk += whole * geo.q;
        } else {
          const index_t end = std::min(geo.q, oq + left);
          rows_of(local, op, op + 1, oq, end);
          kk += end - oq;
        }
      }
    }
  }
  for (index_t r = 0; r < rows; ++r) store(r, sums + r * ldc);
}

/// Output block [i0, i0 + rows) x [j0, j0 + cols) of one mapped implicit GEMM over reduction
/// steps [k_begin, k_end), in passes of blocking::packed_kc (panel_kc where B is one panel) in
/// order; store(r, sums) takes row r's `cols` sums.
template <class Compute, class Mapping, class Store>
void mapped_block(const Mapping& g, index_t i0, index_t rows, index_t j0, index_t cols,
                  index_t k_begin, index_t k_end, Store&& store) {
  if constexpr (wgrad_with_x_of<Compute, Mapping>::value) {
    if (b_taps_in_place<Compute>(g)) {
      wgrad_taps_block<Compute>(g, i0, rows, j0, cols, k_begin, k_end, store);
      return;
    }
  }
  constexpr int mr = host_gemm::tuning<Compute>::mr;
  constexpr int nr = host_gemm::tuning<Compute>::nr;
  // Whole strips of an operand that lies as a plain matrix are read in place; the rest packed
  // (B in strips, or as one panel).
  const in_place<Compute> a_direct = a_in_place<Compute>(g);
  const in_place<Compute> b_direct = b_in_place<Compute>(g);
  const bool b_panel = b_direct.data == nullptr && wgrad_b_panel<Compute>(g);
  const index_t length = k_end - k_begin;
  const index_t kc =
      std::max<index_t>(1, std::min(b_panel ? blocking::panel_kc : blocking::packed_kc, length));
  const index_t a_strips = ceil_div(rows, mr);
  const index_t b_strips = ceil_div(cols, nr);
  const index_t ldc = b_strips * nr;
  const index_t full_a = a_direct.data != nullptr ? rows / mr : 0;
  const index_t full_b = b_direct.data != nullptr ? cols / nr : 0;
  Compute* const a = host_gemm::scratch<Compute>(static_cast<std::size_t>(a_strips * mr * kc), 0);
  Compute* const b = host_gemm::scratch<Compute>(static_cast<std::size_t>(b_strips * nr * kc), 1);
  Compute* const sums =
      host_gemm::scratch<Compute>(static_cast<std::size_t>(a_strips * mr * ldc), 2);
  if (length <= 0) {
    std::fill(sums, sums + a_strips * mr * ldc, Compute(0));
  }
  for (index_t k0 = k_begin; k0 < k_end; k0 += kc) {
    const index_t kcur = std::min(kc, k_end - k0);
    if (full_a < a_strips) pack_mapped_a(g, i0 + full_a * mr, rows - full_a * mr, k0, kcur, a);
    if constexpr (is_wgrad_gemm<Mapping>::value) {
      if (b_panel) pack_wgrad_b_nhwc(g, j0, cols, k0, kcur, b, ldc);
    }
    if (full_b < b_strips && !b_panel) {
      pack_mapped_b(g, j0 + full_b * nr, cols - full_b * nr, k0, kcur, b);
    }
    for (index_t sj = 0; sj < b_strips; ++sj) {
      const bool b_read_in_place = sj < full_b;
      const Compute* const b_strip =
          b_read_in_place ? b_direct.data + k0 * b_direct.step + j0 + sj * nr
          : b_panel       ? b + sj * nr
                          : b + (sj - full_b) * nr * kcur;
      const index_t b_step = b_read_in_place ? b_direct.step : b_panel ? ldc : nr;
      for (index_t si = 0; si < a_strips; ++si) {
        const host_gemm::strips<Compute> operands =
            si < full_a ? host_gemm::strips<Compute>{a_direct.data + (i0 + si * mr) * a_direct.row +
                                                         k0 * a_direct.step,
                                                     a_direct.row, a_direct.step, b_strip, b_step}
                        : host_gemm::strips<Compute>{a + (si - full_a) * mr * kcur, 1, mr,
                                                     b_strip, b_step};
        host_gemm::micro_kernel(kcur, operands, sums + si * mr * ldc + sj * nr, ldc,
                                /*accumulate=*/k0 > k_begin);
      }
    }
  }
  for (index_t r = 0; r < rows; ++r) store(r, sums + r * ldc);
}

/// Row `row` of a mapped GEMM's C from column j0 on: `count` sums through store_output's
/// arithmetic, the row's address and epilogue coordinates resolved once (not per element).
template <class Compute, class Mapping, class Epilogue>
void store_mapped_row(const Mapping& g, index_t row, index_t j0, index_t count, const Compute* acc,
                      Compute alpha, Compute beta, const Epilogue& epilogue) {
  auto* const out = &g.c(row, j0);
  const conv::conv_position pos = g.position(row, j0);
  const index_t stride = g.c_col_stride();
  if (stride == 1) {
    host_gemm::store_contiguous(out, count, acc, alpha, beta, epilogue, pos.batch, pos.row,
                                pos.col);
    return;
  }
  for (index_t c = 0; c < count; ++c) {
    store_output(out[c * stride], acc[c], alpha, beta, epilogue, pos.batch, pos.row, pos.col + c);
  }
}

/// Every implicit GEMM of a backward batch (dgrad_batch, wgrad_batch), in output blocks spread
/// over the threads; blocks shrink until there are a few per thread. With `split_reduction`
/// the reduction is also cut, into the fixed chunks of a deterministic pass
/// (deterministic_chunk), whose sums are added in order at the end: a long reduction (the
/// filter gradient's N * P * Q) then feeds every thread with full blocks, and the order of every
/// sum depends on the problem alone, never on the thread count.
template <class Compute, class Batch, class Epilogue>
void run_mapped(host_exec exec, const Batch& batch, Compute alpha, Compute beta,
                const Epilogue& epilogue, bool split_reduction = false) {
  constexpr int mr = host_gemm::tuning<Compute>::mr;
  constexpr int nr = host_gemm::tuning<Compute>::nr;
  const index_t count = batch.count(), gm = batch.gemm_m(), gn = batch.gemm_n();
  const index_t gk = batch.gemm_k();
  if (count == 0 || gm == 0 || gn == 0) {
    return;
  }
  const index_t chunks = split_reduction ? conv::deterministic_chunks(gk) : 1;
  const index_t chunk = chunks > 1 ? conv::deterministic_chunk(gk) : gk;
  index_t mc = std::min<index_t>(host_gemm::tuning<Compute>::mc, ceil_div(gm, mr) * mr);
  if (split_reduction && b_in_place<Compute>(batch.problem(0)).data == nullptr &&
      !b_taps_in_place<Compute>(batch.problem(0))) {
    // Each task packs B (wgrad: the im2col of x) for its columns and reduction chunk, whatever
    // its rows: one task over every row, up to blocking::packed_b_rows, packs it once instead of
    // once per tuning::mc rows (a quarter of the packing on a 512-channel layer).
    mc = std::min<index_t>(blocking::packed_b_rows, ceil_div(gm, mr) * mr);
  }
  index_t nc = std::min<index_t>(blocking::nc, ceil_div(gn, nr) * nr);
  const auto threads = static_cast<index_t>(host_thread_count(exec));
  const auto tasks = [&] { return count * chunks * ceil_div(gm, mc) * ceil_div(gn, nc); };
  // At least 4 tasks per thread, and then, below 16 per thread, blocks are halved until the
  // threads' shares come within 5% of each other: 9 equal tasks on 2 threads (ResNet-50's res4
  // filter gradient) had left one thread idle for a tenth of the call. Shares as the dynamic
  // schedule hands tasks out (in order, each to the thread that is free first), a task's cost
  // its outputs times its reduction steps.
  const auto uneven = [&] {
    const index_t t = tasks();
    if (t < 4 * threads) return true;
    if (t >= 16 * threads) return false;
    const index_t m_blocks = ceil_div(gm, mc), per_problem = m_blocks * ceil_div(gn, nc) * chunks;
    std::vector<double> share(static_cast<std::size_t>(threads), 0.0);
    double total = 0;
    for (index_t task = 0; task < t; ++task) {
      const index_t rest = task % per_problem, z = rest % chunks, block = rest / chunks;
      const index_t i0 = (block % m_blocks) * mc, j0 = (block / m_blocks) * nc;
      const double cost = static_cast<double>(std::min(mc, gm - i0) * std::min(nc, gn - j0)) *
                          static_cast<double>(std::min(chunk, gk - z * chunk));
      *std::min_element(share.begin(), share.end()) += cost;
      total += cost;
    }
    return *std::max_element(share.begin(), share.end()) > 1.05 * total / static_cast<double>(threads);
  };
  while (uneven() && (nc > nr || mc > mr)) {
    if (nc > nr) {
      nc = ceil_div(nc / 2, nr) * nr;
    } else {
      mc = ceil_div(mc / 2, mr) * mr;
    }
  }
  const index_t m_blocks = ceil_div(gm, mc), n_blocks = ceil_div(gn, nc);
  const index_t per_problem = m_blocks * n_blocks * chunks;
  // Every chunk's blocks write all of its sums: nothing to clear first (megabytes per call).
  const auto partial = uninitialised<Compute>(chunks > 1 ? count * chunks * gm * gn : 0);
  host_parallel_for(exec, count * per_problem, schedule::dynamic, [&](index_t task) {
    const index_t i = task / per_problem, rest = task % per_problem;
    const index_t z = rest % chunks, block = rest / chunks;
    const index_t i0 = (block % m_blocks) * mc, j0 = (block / m_blocks) * nc;
    const auto g = batch.problem(i);
    const index_t k_begin = z * chunk, k_end = std::min(gk, k_begin + chunk);
    const index_t rows = std::min(mc, gm - i0), cols = std::min(nc, gn - j0);
    if (chunks > 1) {
      Compute* const out = partial.get() + (i * chunks + z) * gm * gn;
      mapped_block<Compute>(g, i0, rows, j0, cols, k_begin, k_end,
                            [&](index_t r, const Compute* sums) {
                              std::copy(sums, sums + cols, out + (i0 + r) * gn + j0);
                            });
    } else {
      mapped_block<Compute>(g, i0, rows, j0, cols, k_begin, k_end,
                            [&](index_t r, const Compute* sums) {
                              store_mapped_row(g, i0 + r, j0, cols, sums, alpha, beta, epilogue);
                            });
    }
  });
  if (chunks > 1) {
    // The chunks' sums of a row, added in chunk order: the same order whatever the threads.
    host_parallel_for(exec, count * gm, schedule::uniform, [&](index_t task) {
      const index_t i = task / gm, row = task % gm;
      Compute* const sum = host_gemm::scratch<Compute>(static_cast<std::size_t>(gn), 0);
      const Compute* const first = partial.get() + (i * chunks * gm + row) * gn;
      std::fill(sum, sum + gn, Compute(0));
      for (index_t z = 0; z < chunks; ++z) {
        const Compute* const part = first + z * gm * gn;
        for (index_t col = 0; col < gn; ++col) sum[col] += part[col];
      }
      store_mapped_row(batch.problem(i), row, 0, gn, sum, alpha, beta, epilogue);
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Depthwise (one input channel per group): direct loops, as the forward pass runs them.

/// dx of a depthwise layer: every input element gathers the dy elements its channel's filters
/// sent it to. NHWC: one task per input row, a pixel's channels as one vector loop; NCHW: one
/// task per input plane, each tap scattering a shifted dy row into it.
template <class Compute, class TDY, class TW, class TDX, class Epilogue>
void depthwise_dgrad(host_exec exec, const conv::dgrad_batch<TDY, TW, TDX>& batch, Compute alpha,
                     Compute beta, const Epilogue& epilogue) {
  const conv::conv2d_geometry& geo = batch.geo;
  const index_t m = geo.kg();  // output channels per input channel
  const index_t window = geo.r * geo.s;
  const auto filters_of = [&](index_t sample) {
    return batch.w + (batch.per_sample ? sample * geo.filter_set_size() : 0);
  };
  if (geo.nhwc()) {
    // Filters as [set][r * S + s][k], so that a tap's K weights are one vector loop.
    const index_t sets = batch.per_sample ? geo.n : 1;
    const auto packed = uninitialised<Compute>(sets * window * geo.k);
    for (index_t set = 0; set < sets; ++set) {
      const TW* const w = filters_of(set);
      for (index_t k = 0; k < geo.k; ++k) {
        for (index_t rs = 0; rs < window; ++rs) {
          packed[(set * window + rs) * geo.k + k] = convert<Compute>(w[k * window + rs]);
        }
      }
    }
    host_parallel_for(exec, geo.n * geo.h, schedule::uniform, [&](index_t task) {
      const index_t sample = task / geo.h, ih = task % geo.h;
      const Compute* const w = packed.get() + (batch.per_sample ? sample : 0) * window * geo.k;
      Compute* const acc = host_gemm::scratch<Compute>(static_cast<std::size_t>(geo.c), 0);
      for (index_t iw = 0; iw < geo.w; ++iw) {
        std::fill(acc, acc + geo.c, Compute(0));
        for (index_t ir = 0; ir < geo.r; ++ir) {
          for (index_t is = 0; is < geo.s; ++is) {
            const index_t out = geo.output_pixel_through(ih + geo.pad_h, iw + geo.pad_w, ir, is);
            if (out < 0) continue;
            const TDY* const d = batch.dy + geo.y_offset(sample, 0, out);
            const Compute* const tap = w + (ir * geo.s + is) * geo.k;
            if (m == 1) {
              for (index_t c = 0; c < geo.c; ++c) acc[c] += convert<Compute>(d[c]) * tap[c];
            } else {
              for (index_t k = 0; k < geo.k; ++k) acc[k / m] += convert<Compute>(d[k]) * tap[k];
            }
          }
        }
        const index_t pixel = ih * geo.w + iw;
        TDX* const out = batch.dx + geo.x_offset(sample, 0, ih, iw);
        for (index_t c = 0; c < geo.c; ++c) {
          store_output(out[c], acc[c], alpha, beta, epilogue, sample, pixel, c);
        }
      }
    });
  } else {
    const index_t plane = geo.h * geo.w;
    host_parallel_for(exec, geo.n * geo.c, schedule::uniform, [&](index_t task) {
      const index_t sample = task / geo.c, c = task % geo.c;
      const TW* const w = filters_of(sample);
      Compute* const acc = host_gemm::scratch<Compute>(static_cast<std::size_t>(plane), 0);
      std::fill(acc, acc + plane, Compute(0));
      for (index_t k = c * m; k < (c + 1) * m; ++k) {
        const TDY* const d = batch.dy + geo.y_offset(sample, k, 0);
        for (index_t ir = 0; ir < geo.r; ++ir) {
          for (index_t is = 0; is < geo.s; ++is) {
            const Compute wv = convert<Compute>(w[k * window + ir * geo.s + is]);
            for (index_t op = 0; op < geo.p; ++op) {
              const index_t ih = op * geo.stride_h - geo.pad_h + ir * geo.dilation_h;
              if (ih < 0 || ih >= geo.h) continue;
              const TDY* const row = d + op * geo.q;
              Compute* const target = acc + ih * geo.w;
              for (index_t oq = 0; oq < geo.q; ++oq) {
                const index_t iw = oq * geo.stride_w - geo.pad_w + is * geo.dilation_w;
                if (iw >= 0 && iw < geo.w) target[iw] += wv * convert<Compute>(row[oq]);
              }
            }
          }
        }
      }
      TDX* const out = batch.dx + geo.x_offset(sample, c, 0, 0);
      for (index_t pixel = 0; pixel < plane; ++pixel) {
        store_output(out[pixel], acc[pixel], alpha, beta, epilogue, sample, pixel, c);
      }
    });
  }
}

/// dw of a depthwise layer, summed over the batch or per sample: every filter tap reduces over
/// all output pixels. NHWC: one task per block of channels (and sample), a pixel's channels as
/// one vector loop; NCHW: one task per channel (and sample). Each sum runs in one fixed order.
#if defined(__GNUC__)
/// Channels per block of depthwise_wgrad_nhwc: fixed, not per instruction set, so which
/// channels fall in the partial last block never depends on build flags.
inline constexpr index_t depthwise_wgrad_lanes = 16;

template <class Compute>
using depthwise_wgrad_vec = typename host_gemm::vector_of<
    Compute, static_cast<int>(depthwise_wgrad_lanes * sizeof(Compute))>::type;

/// Interior run of depthwise_wgrad_nhwc: `count` output pixels whose `Taps` taps all lie
/// inside the input, the accumulators in registers (Taps is a compile-time count so the tap
/// loop unrolls). from[t] is tap t's input at the run's first pixel; pixels are `step` apart in
/// x, `dy_step` apart in dy. (5 x 5 filters, 14 x 14 x 576, batch 8 on AVX2: 0.8x to 0.85x the
/// time of whole 16-channel blocks, whose 9 sums had spilled.)
template <int Taps, class Compute>
void depthwise_wgrad_run(const Compute* dy, index_t dy_step, const Compute* const* from,
                         index_t step, index_t count, depthwise_wgrad_vec<Compute>* acc) {
  using vec = depthwise_wgrad_vec<Compute>;
  // A block's Taps sums and its gradient in registers where a block is one of 32 (AVX-512);
  // else a native vector of the block at a time (9 taps of a 16-channel block in AVX2's
  // 16 registers would spill).
  using part_vec = std::conditional_t<host_gemm::vector_registers == 32, vec,
                                      typename host_gemm::vector_of<Compute, host_gemm::vector_bytes>::type>;
  constexpr int parts = static_cast<int>(sizeof(vec) / sizeof(part_vec));
  constexpr index_t part_lanes = depthwise_wgrad_lanes / parts;
  for (int part = 0; part < parts; ++part) {
    const index_t c0 = part * part_lanes;
    part_vec sums[Taps];
    for (int t = 0; t < Taps; ++t) {
      std::memcpy(&sums[t], reinterpret_cast<const Compute*>(&acc[t]) + c0, sizeof(part_vec));
    }
    const Compute* d = dy + c0;
    for (index_t i = 0; i < count; ++i, d += dy_step) {
      part_vec dv;
      std::memcpy(&dv, d, sizeof(part_vec));
      for (int t = 0; t < Taps; ++t) {
        part_vec x;
        std::memcpy(&x, from[t] + i * step + c0, sizeof(part_vec));
        sums[t] += dv * x;
      }
    }
    for (int t = 0; t < Taps; ++t) {
      std::memcpy(reinterpret_cast<Compute*>(&acc[t]) + c0, &sums[t], sizeof(part_vec));
    }
  }
}

/// A whole output row of depthwise_wgrad_rows_3x3 for a 3 x 3 filter without horizontal dilation
/// at horizontal stride Stride (1 or 2): a pixel's 9 inputs stay in registers for the next
/// pixel's taps that read them (6 of 9 at stride 1, 3 at stride 2), so a pixel loads 3 or 6
/// inputs instead of 9, and the inputs left or right of the row are read from a vector of zeros
/// (a pointer select, no branch), so the edge columns need no separate path. rows[r]: filter
/// row r's input row at column 0 (a row of zeros above or below the input); tap (r, s) of
/// output column i reads column first + i * Stride + s, columns `c` apart. Each tap's sum runs
/// over the columns in order.
template <int Stride, class Compute>
void depthwise_wgrad_row_3x3(const Compute* dy, index_t dy_step, const Compute* const* rows,
                             const Compute* zeros, index_t c, index_t first, index_t width_in,
                             index_t count, Compute* acc) {
  using vec = depthwise_wgrad_vec<Compute>;
  const auto input = [&](int r, index_t column) {
    return column >= 0 && column < width_in ? rows[r] + column * c : zeros;
  };
  vec sums[9];
  GPUBATCH_HOST_UNROLL(9)
  for (int t = 0; t < 9; ++t) std::memcpy(&sums[t], acc + t * depthwise_wgrad_lanes, sizeof(vec));
  vec window[3][3];  // window[r][s]: tap (r, s)'s input at the current column
  GPUBATCH_HOST_UNROLL(3)
  for (int r = 0; r < 3; ++r) {
    GPUBATCH_HOST_UNROLL(3)
    for (int s = 0; s < 3; ++s) {
      std::memcpy(&window[r][s], input(r, first + s), sizeof(vec));
      in_register(window[r][s]);
    }
  }
  // Inputs and gradients `ahead` columns on are prefetched: a block's channels are one line of
  // each pixel, lines a whole pixel apart, which the hardware prefetchers follow poorly.
  constexpr index_t ahead = 8;
  for (index_t i = 0; i < count; ++i, dy += dy_step) {
    vec d;
    std::memcpy(&d, dy, sizeof(vec));
    if (i + ahead < count) {
      __builtin_prefetch(dy + ahead * dy_step, 0, 3);
      const index_t column = std::clamp<index_t>(first + (i + ahead) * Stride + 2, 0, width_in - 1);
      GPUBATCH_HOST_UNROLL(3)
      for (int r = 0; r < 3; ++r) __builtin_prefetch(rows[r] + column * c, 0, 3);
    }
    GPUBATCH_HOST_UNROLL(3)
    for (int r = 0; r < 3; ++r) {
      GPUBATCH_HOST_UNROLL(3)
      for (int s = 0; s < 3; ++s) sums[r * 3 + s] += d * window[r][s];
    }
    if (i + 1 == count) break;
    // The next column's taps sit Stride inputs further: shift what overlaps, load the rest.
    const index_t next = first + (i + 1) * Stride;
    GPUBATCH_HOST_UNROLL(3)
    for (int r = 0; r < 3; ++r) {
      GPUBATCH_HOST_UNROLL(3)
      for (int s = 0; s < 3; ++s) {
        if (s + Stride < 3) {
          window[r][s] = window[r][s + Stride];
        } else {
          std::memcpy(&window[r][s], input(r, next + s), sizeof(vec));
          in_register(window[r][s]);
        }
      }
    }
  }
  GPUBATCH_HOST_UNROLL(9)
  for (int t = 0; t < 9; ++t) std::memcpy(acc + t * depthwise_wgrad_lanes, &sums[t], sizeof(vec));
}

/// depthwise_wgrad_row_3x3 for instruction sets with 16 vector registers (AVX2, SSE, and NEON
/// as built here), where a block's 9 sums and 9 inputs would not fit: one native vector `Vec`
/// of the block's channels at a time (a part of the block, its sums at acc's lanes from
/// acc's first), its 9 sums in registers and each tap's input loaded where it is multiplied
/// (from L1: the span's three rows are a few KiB). The window's 19 block-wide vectors had
/// spilled to the stack on every pixel: MobileNetV2's 14 x 14 x 576 filter gradient took 5x
/// oneDNN's time on AVX2. Columns whose taps all lie inside the row run unchecked. Each tap's
/// sum runs over the columns in order, as in the window's loop.
template <int Stride, class Vec, class Compute>
void depthwise_wgrad_row_3x3_loads(const Compute* dy, index_t dy_step, const Compute* const* rows,
                                   const Compute* zeros, index_t c, index_t first,
                                   index_t width_in, index_t count, Compute* acc) {
  Vec sums[9];
  GPUBATCH_HOST_UNROLL(9)
  for (int t = 0; t < 9; ++t) std::memcpy(&sums[t], acc + t * depthwise_wgrad_lanes, sizeof(Vec));
  const auto pixel = [&](index_t i, auto checked) {
    Vec d;
    std::memcpy(&d, dy + i * dy_step, sizeof(Vec));
    const index_t column = first + i * Stride;
    GPUBATCH_HOST_UNROLL(3)
    for (int r = 0; r < 3; ++r) {
      GPUBATCH_HOST_UNROLL(3)
      for (int s = 0; s < 3; ++s) {
        const index_t col = column + s;
        const Compute* from = zeros;
        if (!decltype(checked)::value || (col >= 0 && col < width_in)) from = rows[r] + col * c;
        Vec x;
        std::memcpy(&x, from, sizeof(Vec));
        sums[r * 3 + s] += d * x;
      }
    }
  };
  // Columns [lo, hi) read all three taps inside the row.
  const index_t lo = first >= 0 ? 0 : std::min(count, ceil_div(-first, index_t{Stride}));
  const index_t last = width_in - 3 - first;  // i * Stride at most this: the third tap inside
  const index_t hi = last < 0 ? lo : std::clamp(last / Stride + 1, lo, count);
  for (index_t i = 0; i < lo; ++i) pixel(i, std::true_type{});
  for (index_t i = lo; i < hi; ++i) pixel(i, std::false_type{});
  for (index_t i = hi; i < count; ++i) pixel(i, std::true_type{});
  GPUBATCH_HOST_UNROLL(9)
  for (int t = 0; t < 9; ++t) std::memcpy(acc + t * depthwise_wgrad_lanes, &sums[t], sizeof(Vec));
}

/// `Pixels` output pixels' products for channels [0, count) of a 3 x 3 depthwise filter
/// gradient: sums[t * ld + c] += dy[p][c] * from[p][t][c] for the 9 taps t of each pixel p in
/// turn, from[p][t] tap t's input pixel (a row of zeros where it lies outside the input). A
/// pixel's channels are contiguous in x and dy, so memory is read in whole lines in order, and
/// the sums (9 x 256 channels at most) stay in L1. Each sum is loaded and stored once for all
/// the pixels, adding their products in pixel order (the order one pixel at a time gives).
template <int Pixels, class Compute>
inline void depthwise_wgrad_pixel_3x3(const Compute* const* dy, const Compute* const (*from)[9],
                                      index_t count, Compute* sums, index_t ld) {
  using vec = depthwise_wgrad_vec<Compute>;
  constexpr index_t lanes = depthwise_wgrad_lanes;
  index_t c = 0;
  for (; c + lanes <= count; c += lanes) {
    vec d[Pixels];
    GPUBATCH_HOST_UNROLL(4)
    for (int p = 0; p < Pixels; ++p) std::memcpy(&d[p], dy[p] + c, sizeof(vec));
    GPUBATCH_HOST_UNROLL(9)
    for (int t = 0; t < 9; ++t) {
      vec sum;
      std::memcpy(&sum, sums + t * ld + c, sizeof(vec));
      GPUBATCH_HOST_UNROLL(4)
      for (int p = 0; p < Pixels; ++p) {
        vec x;
        std::memcpy(&x, from[p][t] + c, sizeof(vec));
        sum += d[p] * x;
      }
      std::memcpy(sums + t * ld + c, &sum, sizeof(vec));
    }
  }
  for (; c < count; ++c) {
    for (int t = 0; t < 9; ++t) {
      for (int p = 0; p < Pixels; ++p) sums[t * ld + c] += dy[p][c] * from[p][t][c];
    }
  }
}

/// Output rows per task of depthwise_wgrad_pixels_3x3: fixed, so that the order of every sum
/// depends on the layer alone, never on the thread count.
inline constexpr index_t depthwise_wgrad_chunk_rows = 8;

/// dw of an NHWC 3 x 3 depthwise layer over up to 256 channels (one filter per input channel, x and
/// dy of the compute type): one task per (set, sample of the set, chunk of
/// depthwise_wgrad_chunk_rows output rows) walks its chunk pixel by pixel, each pixel's 9 taps for
/// all of its channels at once (depthwise_wgrad_pixel_3x3), the sums in L1. Memory is read whole
/// lines in order; a task per block of 16 channels over the batch reads one line of every pixel, a
/// pixel apart, and took 1.7x to 1.9x this time on MobileNetV2's 56 x 56 x 144 layer (spans of 6
/// blocks, depthwise_wgrad_rows_3x3: about 1.2x; but less than this on 14 x 14 x 576, hence the
/// bound on the channels). Each task's sums run over its rows and columns in order, zero products
/// added where a tap falls in the padding; the tasks' sums are then added in order of sample and
/// chunk.
template <class Compute, class TDW>
void depthwise_wgrad_pixels_3x3(host_exec exec, const conv::wgrad_batch<Compute, Compute, TDW>& batch,
                                Compute alpha, Compute beta) {
  constexpr index_t lanes = depthwise_wgrad_lanes;
  const conv::conv2d_geometry& geo = batch.geo;
  const index_t sets = batch.per_sample ? batch.samples : 1;
  const index_t per_set = batch.per_sample ? 1 : batch.samples;
  const index_t row_chunks = ceil_div(geo.p, depthwise_wgrad_chunk_rows);
  const index_t chunks = per_set * row_chunks;  // tasks per set
  // One task's sums, tap by tap, taps `pitch` apart: a vector more than the channels, so that
  // tap rows and input pixels (both K channels apart) do not keep the same 4 KiB offsets.
  const index_t pitch = geo.k + lanes;
  const index_t set_size = pitch * 9;
  const auto partial = uninitialised<Compute>(sets * chunks * set_size);
  host_parallel_for(exec, sets * chunks, schedule::dynamic, [&](index_t task) {
    const index_t set = task / chunks, chunk = task % chunks;
    const index_t sample = batch.first_sample + set * per_set + chunk / row_chunks;
    const index_t op_begin = (chunk % row_chunks) * depthwise_wgrad_chunk_rows;
    const index_t op_end = std::min(geo.p, op_begin + depthwise_wgrad_chunk_rows);
    Compute* const out = partial.get() + task * set_size;
    const Compute* const zeros = zero_row<Compute>(geo.w * geo.c);
    std::fill(out, out + set_size, Compute(0));
    for (index_t op = op_begin; op < op_end; ++op) {
      const Compute* rows[3];
      for (int r = 0; r < 3; ++r) {
        const index_t ih = op * geo.stride_h - geo.pad_h + r * geo.dilation_h;
        rows[r] = ih >= 0 && ih < geo.h ? batch.x + geo.x_offset(sample, 0, ih, 0) : nullptr;
      }
      const Compute* const d = batch.dy + geo.y_offset(sample, 0, op * geo.q);
      // Pixels in fours: a sum's load and store serve four pixels' products (one pixel at a
      // time, the loads and stores of the sums had bound the loop on AVX2: MobileNetV2's
      // 56 x 56 x 144 layer took 1.07x to 1.50x oneDNN's time paired, 0.65x to 1.0x in fours).
      const auto pixels = [&](index_t oq, auto count) {
        constexpr int n = decltype(count)::value;
        const Compute* from[n][9];
        const Compute* dys[n];
        for (int p = 0; p < n; ++p) {
          dys[p] = d + (oq + p) * geo.k;
          for (int t = 0; t < 9; ++t) {
            const index_t iw = (oq + p) * geo.stride_w - geo.pad_w + (t % 3) * geo.dilation_w;
            from[p][t] = rows[t / 3] != nullptr && iw >= 0 && iw < geo.w
                             ? rows[t / 3] + iw * geo.c
                             : zeros;
          }
        }
        depthwise_wgrad_pixel_3x3<n>(dys, from, geo.k, out, pitch);
      };
      index_t oq = 0;
      for (; oq + 4 <= geo.q; oq += 4) pixels(oq, std::integral_constant<int, 4>{});
      for (; oq + 2 <= geo.q; oq += 2) pixels(oq, std::integral_constant<int, 2>{});
      if (oq < geo.q) pixels(oq, std::integral_constant<int, 1>{});
    }
  });
  // The tasks' sums, added in order.
  host_parallel_for(exec, sets * geo.k, schedule::uniform, [&](index_t item) {
    const index_t set = item / geo.k, k = item % geo.k;
    const Compute* const first = partial.get() + set * chunks * set_size + k;
    for (index_t rs = 0; rs < 9; ++rs) {
      Compute sum = first[rs * pitch];
      for (index_t chunk = 1; chunk < chunks; ++chunk) sum += first[chunk * set_size + rs * pitch];
      store_output(batch.dw[set * geo.filter_set_size() + k * 9 + rs], sum, alpha, beta,
                   epilogue::identity{}, batch.per_sample ? batch.first_sample + set : 0, k, rs);
    }
  });
}

/// Blocks of 16 channels per task of depthwise_wgrad_rows_3x3 (fixed, like the blocks).
inline constexpr index_t depthwise_wgrad_row_span = 6;

/// dw of the whole 16-channel blocks of an NHWC 3 x 3 depthwise layer at horizontal stride 1
/// or 2 without horizontal dilation (one filter per input channel, x and dy of the compute
/// type): one task per (set, span of depthwise_wgrad_row_span blocks) walks the set's output
/// rows, each row once per block of the span (depthwise_wgrad_row_3x3), the block's 9 sums
/// kept in registers along the row. A pixel's channels of the span are read together, 384
/// contiguous bytes in f32, where a task per block had read one 64-byte line of each pixel, a
/// pixel apart: MobileNetV2's 14 x 14 x 576 layer had taken 1.23x to 1.73x oneDNN's time,
/// paired, 0.96x to 1.30x in spans of 6 (1.07x to 1.39x in spans of 4, 1.07x to 1.33x in 12).
/// Each (channel, tap) sum runs over samples, rows and columns in order.
template <class Compute, class TDW>
void depthwise_wgrad_rows_3x3(host_exec exec, const conv::wgrad_batch<Compute, Compute, TDW>& batch,
                              Compute alpha, Compute beta) {
  constexpr index_t lanes = depthwise_wgrad_lanes;
  constexpr index_t span = depthwise_wgrad_row_span;
  // A block's 9 sums, 9 inputs and gradient (19 vectors) fit 32 registers (AVX-512) when a
  // block is one of them; else a native vector of the block at a time.
  constexpr bool window_in_registers =
      host_gemm::vector_registers == 32 && sizeof(depthwise_wgrad_vec<Compute>) == 64;
  using part_vec = typename host_gemm::vector_of<Compute, host_gemm::vector_bytes>::type;
  constexpr index_t part_lanes = host_gemm::vector_bytes / static_cast<index_t>(sizeof(Compute));
  const conv::conv2d_geometry& geo = batch.geo;
  const index_t sets = batch.per_sample ? batch.samples : 1;
  const index_t per_set = batch.per_sample ? 1 : batch.samples;
  const index_t blocks = geo.k / lanes;
  const index_t spans = ceil_div(blocks, span);
  host_parallel_for(exec, sets * spans, schedule::dynamic, [&](index_t task) {
    const index_t set = task / spans, b0 = (task % spans) * span;
    const index_t count = std::min(span, blocks - b0);
    const Compute* const zeros = zero_row<Compute>(geo.w * geo.c);
    alignas(64) Compute acc[span][9][lanes] = {};  // block, tap, channel
    for (index_t local = set * per_set; local < (set + 1) * per_set; ++local) {
      const index_t sample = batch.first_sample + local;
      const Compute* const xs = batch.x + geo.x_offset(sample, 0, 0, 0);
      for (index_t op = 0; op < geo.p; ++op) {
        // Filter row r's input row (a row of zeros, laid out as x's, above or below the input).
        const Compute* rows[3];
        for (int r = 0; r < 3; ++r) {
          const index_t ih = op * geo.stride_h - geo.pad_h + r * geo.dilation_h;
          rows[r] = ih >= 0 && ih < geo.h ? xs + ih * geo.w * geo.c : zeros;
        }
        const Compute* const d = batch.dy + geo.y_offset(sample, 0, op * geo.q);
        for (index_t b = 0; b < count; ++b) {
          const index_t k0 = (b0 + b) * lanes;
          if constexpr (window_in_registers) {
            const Compute* const block_rows[3] = {rows[0] + k0, rows[1] + k0, rows[2] + k0};
            if (geo.stride_w == 1) {
              depthwise_wgrad_row_3x3<1>(d + k0, geo.k, block_rows, zeros, geo.c, -geo.pad_w,
                                         geo.w, geo.q, &acc[b][0][0]);
            } else {
              depthwise_wgrad_row_3x3<2>(d + k0, geo.k, block_rows, zeros, geo.c, -geo.pad_w,
                                         geo.w, geo.q, &acc[b][0][0]);
            }
          } else {
            for (index_t part = 0; part < lanes; part += part_lanes) {
              const index_t k = k0 + part;
              const Compute* const part_rows[3] = {rows[0] + k, rows[1] + k, rows[2] + k};
              if (geo.stride_w == 1) {
                depthwise_wgrad_row_3x3_loads<1, part_vec>(d + k, geo.k, part_rows, zeros, geo.c,
                                                           -geo.pad_w, geo.w, geo.q,
                                                           &acc[b][0][part]);
              } else {
                depthwise_wgrad_row_3x3_loads<2, part_vec>(d + k, geo.k, part_rows, zeros, geo.c,
                                                           -geo.pad_w, geo.w, geo.q,
                                                           &acc[b][0][part]);
              }
            }
          }
        }
      }
    }
    for (index_t b = 0; b < count; ++b) {
      for (index_t c = 0; c < lanes; ++c) {
        const index_t k = (b0 + b) * lanes + c;
        for (index_t t = 0; t < 9; ++t) {
          store_output(batch.dw[set * geo.filter_set_size() + k * 9 + t], acc[b][t][c], alpha,
                       beta, epilogue::identity{}, batch.per_sample ? batch.first_sample + set : 0,
                       k, t);
        }
      }
    }
  });
}

/// dw of an NHWC depthwise layer with one filter per input channel, x and dy of the compute
/// type: one task per (set, block of 16 channels), which walks the output pixels once per pass
/// of up to 9 taps, reading each dy vector once for all of them with the taps' sums in
/// registers. (The general loop ran one task per tap, re-reading dy and x for every tap, its
/// sums in memory: MobileNetV2's layers took 6 to 10x oneDNN's time.) Columns whose taps all
/// lie inside the input's width run unchecked, a tap's row above or below the input read from
/// a row of zeros (adding zero products where the edge columns skip the tap). Each (channel,
/// tap) sum runs over samples, rows and columns in order. 3 x 3 layers go to
/// depthwise_wgrad_pixels_3x3 up to 256 channels, else their whole blocks to
/// depthwise_wgrad_rows_3x3 where it applies.
template <class Compute, class TDW>
void depthwise_wgrad_nhwc(host_exec exec, const conv::wgrad_batch<Compute, Compute, TDW>& batch,
                          Compute alpha, Compute beta) {
  using vec = depthwise_wgrad_vec<Compute>;
  constexpr index_t lanes = depthwise_wgrad_lanes;
  constexpr index_t taps_per_pass = 9;
  const conv::conv2d_geometry& geo = batch.geo;
  const index_t window = geo.r * geo.s;
  if (window == 9 && geo.k <= 256) {
    depthwise_wgrad_pixels_3x3(exec, batch, alpha, beta);
    return;
  }
  // 3 x 3 filters at horizontal stride 1 or 2 without horizontal dilation: whole blocks in
  // whole rows (depthwise_wgrad_rows_3x3), a partial last block below.
  index_t first_block = 0;
  if (window == 9 && geo.s == 3 && geo.dilation_w == 1 && geo.stride_w <= 2) {
    depthwise_wgrad_rows_3x3(exec, batch, alpha, beta);
    first_block = geo.k / lanes;
  }
  const index_t sets = batch.per_sample ? batch.samples : 1;
  const index_t per_set = batch.per_sample ? 1 : batch.samples;
  const index_t blocks = ceil_div(geo.k, lanes) - first_block;
  host_parallel_for(exec, sets * blocks, schedule::dynamic, [&](index_t task) {
    const index_t set = task / blocks, k0 = (first_block + task % blocks) * lanes;
    const index_t width = std::min(lanes, geo.k - k0);
    const Compute* const zeros = zero_row<Compute>(geo.w * geo.c);
    for (index_t t0 = 0; t0 < window; t0 += taps_per_pass) {
      const index_t taps = std::min(taps_per_pass, window - t0);
      index_t row_off[taps_per_pass], col_off[taps_per_pass];
      // Output columns [q_lo, q_hi) see every tap of the pass inside the input's width.
      index_t q_lo = 0, q_hi = geo.q;
      for (index_t t = 0; t < taps; ++t) {
        const index_t ir = (t0 + t) / geo.s, is = (t0 + t) % geo.s;
        row_off[t] = ir * geo.dilation_h - geo.pad_h;
        col_off[t] = is * geo.dilation_w - geo.pad_w;
        const std::pair<index_t, index_t> inside =
            outputs_inside(col_off[t], geo.stride_w, geo.w, geo.q);
        q_lo = std::max(q_lo, inside.first);
        q_hi = std::min(q_hi, inside.second);
      }
      q_hi = std::max(q_hi, q_lo);
      vec acc[taps_per_pass] = {};
      Compute tail[taps_per_pass][lanes] = {};  // a partial last block's sums
      for (index_t local = set * per_set; local < (set + 1) * per_set; ++local) {
        const index_t sample = batch.first_sample + local;
        const Compute* const xs = batch.x + geo.x_offset(sample, 0, 0, 0) + k0;
        for (index_t op = 0; op < geo.p; ++op) {
          const Compute* d = batch.dy + geo.y_offset(sample, k0, op * geo.q);
          const index_t h0 = op * geo.stride_h;
          for (index_t oq = 0; oq < geo.q; ++oq, d += geo.k) {
            const index_t w0 = oq * geo.stride_w;
            if (width == lanes && oq == q_lo && q_hi > q_lo) {
              // A tap's row above or below the input reads a row of zeros laid out as x's.
              const Compute* from[taps_per_pass];
              for (index_t t = 0; t < taps; ++t) {
                const index_t ih = h0 + row_off[t];
                const Compute* const row =
                    ih >= 0 && ih < geo.h ? xs + ih * geo.w * geo.c : zeros + k0;
                from[t] = row + (w0 + col_off[t]) * geo.c;
              }
              const index_t run = q_hi - q_lo, step = geo.stride_w * geo.c;
              switch (taps) {
                case 1: depthwise_wgrad_run<1>(d, geo.k, from, step, run, acc); break;
                case 2: depthwise_wgrad_run<2>(d, geo.k, from, step, run, acc); break;
                case 3: depthwise_wgrad_run<3>(d, geo.k, from, step, run, acc); break;
                case 4: depthwise_wgrad_run<4>(d, geo.k, from, step, run, acc); break;
                case 5: depthwise_wgrad_run<5>(d, geo.k, from, step, run, acc); break;
                case 6: depthwise_wgrad_run<6>(d, geo.k, from, step, run, acc); break;
                case 7: depthwise_wgrad_run<7>(d, geo.k, from, step, run, acc); break;
                case 8: depthwise_wgrad_run<8>(d, geo.k, from, step, run, acc); break;
                default: depthwise_wgrad_run<9>(d, geo.k, from, step, run, acc); break;
              }
              oq += run - 1;
              d += (run - 1) * geo.k;
              continue;
            }
            for (index_t t = 0; t < taps; ++t) {
              const index_t ih = h0 + row_off[t], iw = w0 + col_off[t];
              if (ih < 0 || ih >= geo.h || iw < 0 || iw >= geo.w) continue;
              const Compute* const xp = xs + (ih * geo.w + iw) * geo.c;
              if (width == lanes) {
                vec dv, xv;
                std::memcpy(&dv, d, sizeof(vec));
                std::memcpy(&xv, xp, sizeof(vec));
                acc[t] += dv * xv;
              } else {
                for (index_t c = 0; c < width; ++c) tail[t][c] += d[c] * xp[c];
              }
            }
          }
        }
      }
      for (index_t t = 0; t < taps; ++t) {
        for (index_t c = 0; c < width; ++c) {
          store_output(batch.dw[set * geo.filter_set_size() + (k0 + c) * window + t0 + t],
                       width == lanes ? acc[t][c] : tail[t][c], alpha, beta,
                       epilogue::identity{}, batch.per_sample ? batch.first_sample + set : 0,
                       k0 + c, t0 + t);
        }
      }
    }
  });
}
#endif

template <class Compute, class TX, class TDY, class TDW>
void depthwise_wgrad(host_exec exec, const conv::wgrad_batch<TX, TDY, TDW>& batch, Compute alpha,
                     Compute beta) {
  const conv::conv2d_geometry& geo = batch.geo;
  const index_t m = geo.kg();
  const index_t window = geo.r * geo.s;
  const index_t sets = batch.per_sample ? batch.samples : 1;
  const index_t per_set = batch.per_sample ? 1 : batch.samples;
  const auto store = [&](index_t set, index_t k, index_t rs, Compute sum) {
    store_output(batch.dw[set * geo.filter_set_size() + k * window + rs], sum, alpha, beta,
                 epilogue::identity{}, batch.per_sample ? batch.first_sample + set : 0, k, rs);
  };
#if defined(__GNUC__)
  if constexpr (std::is_same_v<TX, Compute> && std::is_same_v<TDY, Compute>) {
    if (geo.nhwc() && m == 1) {
      depthwise_wgrad_nhwc(exec, batch, alpha, beta);
      return;
    }
  }
#endif
  if (geo.nhwc()) {
    // One task per (set, filter tap, block of channels): the tap's sums for the block run over
    // every output pixel as one vector loop across the channels, the pixels a tap sees inside
    // the input found per output row, not tested per pixel.
    constexpr index_t block = 64;
    const index_t blocks = ceil_div(geo.k, block);
    host_parallel_for(exec, sets * window * blocks, schedule::uniform, [&](index_t task) {
      const index_t set = task / (window * blocks);
      const index_t rs = (task / blocks) % window, k0 = (task % blocks) * block;
      const index_t ir = rs / geo.s, is = rs % geo.s;
      const index_t width = std::min(block, geo.k - k0);
      Compute acc[block] = {};
      Compute xs[block];
      const index_t shift = is * geo.dilation_w - geo.pad_w;
      const std::pair<index_t, index_t> inside = outputs_inside(shift, geo.stride_w, geo.w, geo.q);
      const index_t q_begin = inside.first, q_end = inside.second;
      for (index_t local = set * per_set; local < (set + 1) * per_set; ++local) {
        const index_t sample = batch.first_sample + local;
        for (index_t op = 0; op < geo.p; ++op) {
          const index_t ih = op * geo.stride_h - geo.pad_h + ir * geo.dilation_h;
          if (ih < 0 || ih >= geo.h) continue;
          const TDY* d = batch.dy + geo.y_offset(sample, k0, op * geo.q + q_begin);
          const TX* xp = batch.x + geo.x_offset(sample, 0, ih, q_begin * geo.stride_w + shift);
          for (index_t oq = q_begin; oq < q_end; ++oq, d += geo.k, xp += geo.stride_w * geo.c) {
            if (m == 1) {
              for (index_t c = 0; c < width; ++c) {
                acc[c] += convert<Compute>(d[c]) * convert<Compute>(xp[k0 + c]);
              }
            } else {
              for (index_t c = 0; c < width; ++c) xs[c] = convert<Compute>(xp[(k0 + c) / m]);
              for (index_t c = 0; c < width; ++c) acc[c] += convert<Compute>(d[c]) * xs[c];
            }
          }
        }
      }
      for (index_t c = 0; c < width; ++c) store(set, k0 + c, rs, acc[c]);
    });
  } else {
    host_parallel_for(exec, sets * geo.k, schedule::uniform, [&](index_t task) {
      const index_t set = task / geo.k, k = task % geo.k;
      Compute* const acc = host_gemm::scratch<Compute>(static_cast<std::size_t>(window), 0);
      std::fill(acc, acc + window, Compute(0));
      for (index_t local = set * per_set; local < (set + 1) * per_set; ++local) {
        const index_t sample = batch.first_sample + local;
        const TDY* const d = batch.dy + geo.y_offset(sample, k, 0);
        const TX* const xp = batch.x + geo.x_offset(sample, k / m, 0, 0);
        for (index_t ir = 0; ir < geo.r; ++ir) {
          for (index_t is = 0; is < geo.s; ++is) {
            Compute sum = Compute(0);
            for (index_t op = 0; op < geo.p; ++op) {
              const index_t ih = op * geo.stride_h - geo.pad_h + ir * geo.dilation_h;
              if (ih < 0 || ih >= geo.h) continue;
              for (index_t oq = 0; oq < geo.q; ++oq) {
                const index_t iw = oq * geo.stride_w - geo.pad_w + is * geo.dilation_w;
                if (iw >= 0 && iw < geo.w) {
                  sum += convert<Compute>(d[op * geo.q + oq]) * convert<Compute>(xp[ih * geo.w + iw]);
                }
              }
            }
            acc[ir * geo.s + is] += sum;
          }
        }
      }
      for (index_t rs = 0; rs < window; ++rs) store(set, k, rs, acc[rs]);
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Few input channels per group: dgrad as dcols = dy * W on the micro-kernel, then col2im.

/// dx for groups with few input channels (a micro-tile over C/g columns would idle): per
/// (sample, group), dcols (P*Q x C/g*R*S, the filter layout's order) = dy_g (P*Q x K/g) * W_g
/// (K/g x C/g*R*S) in row blocks on the micro-kernel, each block scattered into a plane of
/// sums that is stored once complete. Tasks own whole planes, so nothing is added concurrently.
/// With NHWC operands the micro-kernel reads dy where it lies, and a row of dcols is scattered
/// as one vector add per filter row: ResNet-50's stem took 1.8x oneDNN's time paired (AVX2),
/// most of it in the element-by-element scatter with its bounds tests and packing dy, and
/// 0.55x to 0.65x with both.
template <class Compute, class TDY, class TW, class TDX, class Epilogue>
void col2im_dgrad(host_exec exec, const conv::dgrad_batch<TDY, TW, TDX>& batch, Compute alpha,
                  Compute beta, const Epilogue& epilogue) {
  constexpr int mr = host_gemm::tuning<Compute>::mr;
  constexpr int nr = host_gemm::tuning<Compute>::nr;
  const conv::conv2d_geometry& geo = batch.geo;
  const index_t cg = geo.cg(), kg = geo.kg(), gk = geo.gemm_k();
  const index_t pixels = geo.pixels(), plane = geo.h * geo.w;
  const index_t b_strips = ceil_div(gk, nr), ldc = b_strips * nr;
  const index_t rows_per_block = host_gemm::tuning<Compute>::mc;
  const Compute* dy_in_place = nullptr;  // dy, where whole strips are read in place
  if constexpr (std::is_same_v<TDY, Compute>) {
    if (geo.nhwc()) dy_in_place = batch.dy;
  }
  // NHWC filters order a row of dcols (r, s, c): with no horizontal dilation, a filter row's
  // columns are one run of the input row's elements.
  const bool runs_of_taps = geo.nhwc() && geo.dilation_w == 1;
  host_parallel_for(exec, geo.n * geo.groups, schedule::dynamic, [&](index_t task) {
    const index_t sample = task / geo.groups, g = task % geo.groups;
    const TW* const w = batch.w + (batch.per_sample ? sample * geo.filter_set_size() : 0) +
                        g * kg * gk;
    // W_g packed into NR-column strips: kg reduction steps of the filter elements.
    Compute* const b = host_gemm::scratch<Compute>(static_cast<std::size_t>(b_strips * nr * kg), 0);
    for (index_t sj = 0; sj < b_strips; ++sj) {
      for (index_t kl = 0; kl < kg; ++kl) {
        for (int c = 0; c < nr; ++c) {
          const index_t j = sj * nr + c;
          b[(sj * kg + kl) * nr + c] = j < gk ? convert<Compute>(w[kl * gk + j]) : Compute(0);
        }
      }
    }
    Compute* const sums = host_gemm::scratch<Compute>(static_cast<std::size_t>(plane * cg), 1);
    std::fill(sums, sums + plane * cg, Compute(0));
    // Where column j of dcols lands relative to an output pixel's input origin.
    thread_local std::vector<index_t> tap_h, tap_w, tap_c;
    tap_h.resize(static_cast<std::size_t>(gk));
    tap_w.resize(static_cast<std::size_t>(gk));
    tap_c.resize(static_cast<std::size_t>(gk));
    for (index_t j = 0; j < gk; ++j) {
      index_t ic, ir, is;
      geo.decode_filter_index(j, ic, ir, is);
      tap_h[static_cast<std::size_t>(j)] = ir * geo.dilation_h - geo.pad_h;
      tap_w[static_cast<std::size_t>(j)] = is * geo.dilation_w - geo.pad_w;
      tap_c[static_cast<std::size_t>(j)] = ic;
    }
    const index_t a_strips_max = ceil_div(rows_per_block, mr);
    Compute* const scratch2 = host_gemm::scratch<Compute>(
        static_cast<std::size_t>(a_strips_max * mr * (kg + ldc)), 2);
    Compute* const a = scratch2;
    Compute* const cols = scratch2 + a_strips_max * mr * kg;
    for (index_t i0 = 0; i0 < pixels; i0 += rows_per_block) {
      const index_t rows = std::min(rows_per_block, pixels - i0);
      const index_t a_strips = ceil_div(rows, mr);
      // Whole strips of an NHWC dy of the compute type are read where they lie (a pixel's
      // channels of the group contiguous, pixels K apart); the rest are packed.
      const index_t full_a = dy_in_place != nullptr ? rows / mr : 0;
      for (index_t si = full_a; si < a_strips; ++si) {
        for (index_t kl = 0; kl < kg; ++kl) {
          for (int r = 0; r < mr; ++r) {
            const index_t pixel = i0 + si * mr + r;
            a[(si * kg + kl) * mr + r] =
                pixel < pixels
                    ? convert<Compute>(batch.dy[geo.y_offset(sample, g * kg + kl, pixel)])
                    : Compute(0);
          }
        }
      }
      for (index_t sj = 0; sj < b_strips; ++sj) {
        for (index_t si = 0; si < a_strips; ++si) {
          const host_gemm::strips<Compute> operands =
              si < full_a
                  ? host_gemm::strips<Compute>{dy_in_place +
                                                   geo.y_offset(sample, g * kg, i0 + si * mr),
                                               geo.k, 1, b + sj * kg * nr, nr}
                  : host_gemm::strips<Compute>{a + si * kg * mr, 1, mr, b + sj * kg * nr, nr};
          host_gemm::micro_kernel(kg, operands, cols + si * mr * ldc + sj * nr, ldc,
                                  /*accumulate=*/false);
        }
      }
      for (index_t r = 0; r < rows; ++r) {
        const index_t pixel = i0 + r, op = pixel / geo.q, oq = pixel % geo.q;
        const Compute* const row = cols + r * ldc;
        const index_t h0 = op * geo.stride_h, w0 = oq * geo.stride_w;
        if (runs_of_taps) {
          // A filter row's taps and channels (S x C/g consecutive columns) land on consecutive
          // elements of a row of sums: one vector add per filter row, clipped to the input.
          const index_t iw0 = w0 - geo.pad_w;
          const index_t is_lo = std::max<index_t>(0, -iw0);
          const index_t is_hi = std::min<index_t>(geo.s, geo.w - iw0);
          if (is_lo >= is_hi) continue;
          const index_t run = (is_hi - is_lo) * cg;
          for (index_t ir = 0; ir < geo.r; ++ir) {
            const index_t ih = h0 + ir * geo.dilation_h - geo.pad_h;
            if (ih < 0 || ih >= geo.h) continue;
            const Compute* const from = row + (ir * geo.s + is_lo) * cg;
            Compute* const to = sums + (ih * geo.w + iw0 + is_lo) * cg;
            for (index_t u = 0; u < run; ++u) to[u] += from[u];
          }
          continue;
        }
        for (index_t j = 0; j < gk; ++j) {
          const auto t = static_cast<std::size_t>(j);
          const index_t ih = h0 + tap_h[t], iw = w0 + tap_w[t];
          if (ih >= 0 && ih < geo.h && iw >= 0 && iw < geo.w) {
            sums[(ih * geo.w + iw) * cg + tap_c[t]] += row[j];
          }
        }
      }
    }
    for (index_t pixel = 0; pixel < plane; ++pixel) {
      const index_t ih = pixel / geo.w, iw = pixel % geo.w;
      for (index_t ic = 0; ic < cg; ++ic) {
        const index_t channel = g * cg + ic;
        store_output(batch.dx[geo.x_offset(sample, channel, ih, iw)], sums[pixel * cg + ic], alpha,
                     beta, epilogue, sample, pixel, channel);
      }
    }
  });
}

/// Backward data of a strided layer, one stride phase at a time: as a forward convolution where
/// the forward path reads dy in place (phase_via_fprop, passes of at most `scratch_bytes`), else
/// as the phase's own GEMM.
template <class Compute, class TDY, class TW, class TDX, class Epilogue>
void strided_dgrad(host_exec exec, const conv::dgrad_batch<TDY, TW, TDX>& batch, Compute alpha,
                   Compute beta, const Epilogue& epilogue,
                   index_t scratch_bytes = blocking::phase_scratch_bytes) {
  for (const dgrad_phase& phase : dgrad_phases(batch.geo)) {
    const std::optional<phase_forward> forward = phase_as_fprop(batch.geo, phase);
    if (forward && taps_in_place<Compute, TDY>(forward->geo)) {
      phase_via_fprop(exec, batch, phase, *forward, alpha, beta, epilogue, scratch_bytes);
    } else {
      run_mapped(exec, dgrad_phase_batch<TDY, TW, TDX>{&batch, &phase}, alpha, beta, epilogue);
    }
  }
}

/// The filters of a stride-1 layer `geo` turned 180 degrees, packed for its forward
/// convolution `fb` (dgrad_as_fprop): every tap of the layer, in reverse.
template <class Compute, class TDY, class TW, class TY>
gemm_filters<Compute> pack_turned_filters(host_exec exec, const fprop_batch<TDY, TW, TY>& fb,
                                          const conv::conv2d_geometry& geo) {
  std::vector<index_t> rows(static_cast<std::size_t>(geo.r)), cols(static_cast<std::size_t>(geo.s));
  for (index_t t = 0; t < geo.r; ++t) rows[static_cast<std::size_t>(t)] = geo.r - 1 - t;
  for (index_t t = 0; t < geo.s; ++t) cols[static_cast<std::size_t>(t)] = geo.s - 1 - t;
  return pack_rotated_filters<Compute>(exec, fb, geo, tap_map{rows.data(), cols.data()},
                                       [&](index_t i) { return fb.problem(i).w; });
}

/// Whether run_dgrad runs a layer as one forward convolution of dy with the filters turned
/// (pack_turned_filters): stride 1, and more than 4 input channels per group.
inline bool dgrad_takes_turned_filters(const conv::conv2d_geometry& geo) {
  return geo.cg() > 4 && dgrad_as_fprop(geo).has_value();
}

/// A layer's shared filters (K x C/groups x R x S in `order`) packed as run_dgrad packs them
/// for its stride-1 layers of more than 4 input channels per group, whatever their extents,
/// padding or dilation (packing reads K, C, R, S, the groups and the layout alone); nothing
/// for layers with fewer channels, which take other paths. Packs into `out` and returns true, or
/// returns false and leaves `out` alone.
template <class Compute, class TW>
bool pack_dgrad_filters(host_exec exec, index_t k, index_t c, index_t r, index_t s, index_t groups,
                        tensor_layout order, const TW* w, gemm_filters<Compute>& out) {
  // A layer of one pixel per filter tap: stride 1, no padding.
  const conv::conv2d_geometry geo =
      conv::make_geometry(1, c * groups, r, s, k, r, s, conv2d_params{}.with_groups(groups), order);
  if (!dgrad_takes_turned_filters(geo)) {
    return false;
  }
  const fprop_batch<TW, TW, TW> fb{*dgrad_as_fprop(geo), nullptr, w, nullptr, false};
  out = pack_turned_filters<Compute>(exec, fb, geo);
  return true;
}

/// Backward data on the best host path for the layer's shape: stride-1 layers as a forward
/// convolution (dgrad_as_fprop) where they are depthwise or have more than 4 input channels
/// per group (1 x 1 plain layers too: their dgrad GEMM, reading both operands in place but
/// storing through a scratch tile, took 1.1x to 1.25x the time); few input channels per group
/// through col2im; strided layers one stride phase at a time (strided_dgrad). Every choice
/// depends on the shape alone, never on the instruction set.
/// `turned` (shared filters only): what pack_dgrad_filters packed from the batch's filters,
/// used where the layer takes them instead of packing them again.
template <class Compute, class TDY, class TW, class TDX, class Epilogue>
void run_dgrad(host_exec exec, const conv::dgrad_batch<TDY, TW, TDX>& batch, Compute alpha,
               Compute beta, const Epilogue& epilogue,
               const gemm_filters<Compute>* turned = nullptr) {
  const conv::conv2d_geometry& geo = batch.geo;
  const std::optional<conv::conv2d_geometry> forward = dgrad_as_fprop(geo);
  if (forward && geo.cg() == 1 && geo.kg() == 1) {
    const fprop_batch<TDY, TW, TDX> fb{*forward, batch.dy, batch.w, batch.dx, batch.per_sample};
    depthwise(exec, fb, alpha, beta, epilogue, /*rotated=*/true);
  } else if (geo.cg() == 1) {
    depthwise_dgrad(exec, batch, alpha, beta, epilogue);
  } else if (forward && geo.cg() > 4) {  // dgrad_takes_turned_filters
    const fprop_batch<TDY, TW, TDX> fb{*forward, batch.dy, batch.w, batch.dx, batch.per_sample};
    if (turned != nullptr && !batch.per_sample) {
      implicit_gemm(exec, fb, alpha, beta, epilogue, *turned);
    } else {
      implicit_gemm(exec, fb, alpha, beta, epilogue, pack_turned_filters<Compute>(exec, fb, geo));
    }
  } else if (geo.cg() <= 4) {
    col2im_dgrad(exec, batch, alpha, beta, epilogue);
  } else if (geo.stride_h > 1 || geo.stride_w > 1) {
    strided_dgrad(exec, batch, alpha, beta, epilogue);
  } else {
    run_mapped(exec, batch, alpha, beta, epilogue);
  }
}

/// Backward filter on the best host path for the layer's shape.
template <class Compute, class TX, class TDY, class TDW>
void run_wgrad(host_exec exec, const conv::wgrad_batch<TX, TDY, TDW>& batch, Compute alpha,
               Compute beta) {
  if (batch.geo.cg() == 1) {
    depthwise_wgrad(exec, batch, alpha, beta);
  } else {
    run_mapped(exec, batch, alpha, beta, epilogue::identity{}, /*split_reduction=*/true);
  }
}

/// db(set, k) = alpha * sum of dy over the set's samples and every pixel + beta * db, one set
/// (all samples) or one per sample. Summed in storage order, whatever the thread count.
template <class Compute, class TDY, class TB>
void bias_gradient(host_exec exec, const conv::conv2d_geometry& geo, const TDY* dy, TB* db,
                   bool per_sample, Compute alpha, Compute beta) {
  const index_t sets = per_sample ? geo.n : 1;
  const index_t per_set = per_sample ? 1 : geo.n;
  const index_t pixels = geo.pixels();
  const auto store = [&](TB& out, Compute sum) {
    store_output(out, sum, alpha, beta, epilogue::identity{}, 0, 0, 0);
  };
  if (geo.nhwc()) {
    // Channels innermost: a vector of K sums walks the pixels.
    constexpr index_t channel_block = 64;
    const index_t blocks = ceil_div(geo.k, channel_block);
    host_parallel_for(exec, sets * blocks, schedule::uniform, [&](index_t task) {
      const index_t set = task / blocks, k0 = (task % blocks) * channel_block;
      const index_t width = std::min(channel_block, geo.k - k0);
      Compute acc[channel_block] = {};
      for (index_t sample = set * per_set; sample < (set + 1) * per_set; ++sample) {
        for (index_t pixel = 0; pixel < pixels; ++pixel) {
          const TDY* const row = dy + geo.y_offset(sample, k0, pixel);
          for (index_t c = 0; c < width; ++c) acc[c] += convert<Compute>(row[c]);
        }
      }
      for (index_t c = 0; c < width; ++c) store(db[set * geo.k + k0 + c], acc[c]);
    });
  } else {
    host_parallel_for(exec, sets * geo.k, schedule::uniform, [&](index_t task) {
      const index_t set = task / geo.k, channel = task % geo.k;
      Compute sum = Compute(0);
      for (index_t sample = set * per_set; sample < (set + 1) * per_set; ++sample) {
        const TDY* const plane = dy + geo.y_offset(sample, channel, 0);
        for (index_t pixel = 0; pixel < pixels; ++pixel) sum += convert<Compute>(plane[pixel]);
      }
      store(db[task], sum);
    });
  }
}

/// norms[i] = the squared Frobenius norm of sample i's filter gradient, each computed into a
/// per-thread buffer of one filter set and reduced there (nothing else is stored).
template <class Compute, class TX, class TDY>
void per_sample_squared_norms(host_exec exec, const conv::conv2d_geometry& geo, const TX* x,
                              const TDY* dy, Compute* norms) {
  host_exec serial = exec;
  serial.max_threads = 1;
  host_parallel_for(exec, geo.n, schedule::dynamic, [&](index_t sample) {
    thread_local std::vector<Compute> gradient;
    gradient.resize(static_cast<std::size_t>(geo.filter_set_size()));
    const conv::wgrad_batch<TX, TDY, Compute> one(geo, x, dy, gradient.data(), true, sample, 1);
    run_wgrad(serial, one, Compute(1), Compute(0));
    Compute sum = Compute(0);
    for (const Compute v : gradient) sum += v * v;
    norms[sample] = sum;
  });
}

}  // namespace detail::host_conv
GPUBATCH_NAMESPACE_END
