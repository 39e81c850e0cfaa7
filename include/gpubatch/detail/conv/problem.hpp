/// @file detail/conv/problem.hpp
/// @brief The convolution index math both backends share: a validated geometry, and forward
/// propagation as an implicit GEMM whose operands are gathered on the fly.
///
/// Forward propagation of one group over a run of samples is the GEMM
///   C (M x N) = A (M x K) * B (K x N),  M = samples * P * Q,  N = K_out / groups,
///                                       K = C / groups * R * S,
/// where A is the im2col matrix of x (never materialised: a(row, kk) gathers the element, or
/// reports padding), B the group's filters (row kk, column j = filter j's element kk) and C the
/// output y. The reduction index kk follows the filter layout, so B is the filter memory read
/// as is: kk = (c * R + r) * S + s for KCRS (NCHW), kk = (r * S + s) * C/g + c for KRSC (NHWC).
///
/// Kernels and host loops talk to such a "mapping" through one small interface — m(), n(),
/// k(); row(i) -> a row cursor resolved once per row; a(cursor, kk) and b(kk, j) -> pointer,
/// or null for an implicit zero; c(i, j); position(i, j) for the epilogue; a_k_contiguous() and
/// b_k_contiguous() as the coalescing hints — so backward data and backward filter
/// (detail/conv/backward_problem.hpp) run on the same kernels as two more mappings.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/conv_problem.hpp>
#include <gpubatch/detail/fast_divider.hpp>
#include <gpubatch/views.hpp>

#include <cstdint>

GPUBATCH_NAMESPACE_BEGIN
namespace detail::conv {

/// Extents, parameters and layout of one convolution, with the output extents worked out.
struct conv2d_geometry {
  index_t n, c, h, w;  ///< input
  index_t k, r, s;     ///< filters
  index_t p, q;        ///< output
  index_t pad_h, pad_w;  ///< leading padding (trailing padding only shapes P and Q)
  index_t stride_h, stride_w, dilation_h, dilation_w;
  index_t groups;
  tensor_layout order;
  /// Divisions of the gather's reduction index (see fprop_gemm::a), set by make_geometry:
  /// by C/groups and S (NHWC) or R * S and S (NCHW). Valid when fast_gather is.
  fast_divider k_outer_divider{}, s_divider{};
  bool fast_gather = false;  ///< the reduction index fits 31 bits

  GPUBATCH_HOST_DEVICE index_t cg() const { return c / groups; }
  GPUBATCH_HOST_DEVICE index_t kg() const { return k / groups; }
  GPUBATCH_HOST_DEVICE index_t gemm_k() const { return cg() * r * s; }
  GPUBATCH_HOST_DEVICE index_t pixels() const { return p * q; }
  /// Elements of one set of filters (all K of them).
  GPUBATCH_HOST_DEVICE index_t filter_set_size() const { return k * gemm_k(); }
  GPUBATCH_HOST_DEVICE bool nhwc() const { return order == tensor_layout::nhwc; }
  /// Offset of x(n, c, h, w) in the packed input.
  GPUBATCH_HOST_DEVICE index_t x_offset(index_t in, index_t ic, index_t ih, index_t iw) const {
    return nhwc() ? ((in * h + ih) * w + iw) * c + ic : ((in * c + ic) * h + ih) * w + iw;
  }
  /// Offset of y(n, k, pixel) in the packed output, pixel = p * Q + q.
  GPUBATCH_HOST_DEVICE index_t y_offset(index_t in, index_t ik, index_t pixel) const {
    return nhwc() ? (in * pixels() + pixel) * k + ik : (in * k + ik) * pixels() + pixel;
  }
  /// Distance between the outputs of consecutive channels of one pixel.
  GPUBATCH_HOST_DEVICE index_t y_channel_stride() const { return nhwc() ? 1 : pixels(); }
  /// The output pixel p * Q + q that the input at padded position (ph, pw) = (h + pad_h,
  /// w + pad_w) feeds through filter tap (r, s), or -1 where it feeds none (the tap lands
  /// between strides, or beyond the output): the index math of every backward-data path.
  GPUBATCH_HOST_DEVICE index_t output_pixel_through(index_t ph, index_t pw, index_t ir,
                                                    index_t is) const {
    const index_t th = ph - ir * dilation_h, tw = pw - is * dilation_w;
    if (th < 0 || tw < 0) {
      return -1;
    }
    const index_t op = th / stride_h, oq = tw / stride_w;
    if (op * stride_h != th || oq * stride_w != tw || op >= p || oq >= q) {
      return -1;
    }
    return op * q + oq;
  }
  /// Splits an index kk of one filter's elements, in the filter layout's order, into its
  /// channel (within the group) and tap: kk = (r * S + s) * C/g + c for KRSC, (c * R + r) * S +
  /// s for KCRS. Divides by invariants when fast_gather holds.
  GPUBATCH_HOST_DEVICE void decode_filter_index(index_t kk, index_t& ic, index_t& ir,
                                                index_t& is) const {
    if (fast_gather) {
      // kk = outer * divisor + inner: NHWC (r * S + s, c), NCHW (c, r * S + s).
      const auto index = static_cast<std::uint32_t>(kk);
      const std::uint32_t outer = k_outer_divider.divide(index);
      const std::uint32_t inner = index - outer * k_outer_divider.divisor();
      const std::uint32_t rs = nhwc() ? outer : inner;
      const std::uint32_t tap_r = s_divider.divide(rs);
      ic = nhwc() ? inner : outer;
      ir = tap_r;
      is = rs - tap_r * s_divider.divisor();
    } else if (nhwc()) {
      const index_t rs = kk / cg();
      ic = kk - rs * cg();
      ir = rs / s;
      is = rs - ir * s;
    } else {
      const index_t window = r * s;
      ic = kk / window;
      const index_t rs = kk - ic * window;
      ir = rs / s;
      is = rs - ir * s;
    }
  }
  /// Offset of filter element (k, c, r, s) within one filter set.
  GPUBATCH_HOST_DEVICE index_t w_offset(index_t ik, index_t ic, index_t ir, index_t is) const {
    return ik * gemm_k() + (nhwc() ? (ir * s + is) * cg() + ic : (ic * r + ir) * s + is);
  }
};

/// The geometry of a convolution with valid parameters (see conv2d_output_shape).
GPUBATCH_HOST_DEVICE conv2d_geometry make_geometry(index_t n, index_t c, index_t h, index_t w,
                                                   index_t k, index_t r, index_t s,
                                                   const conv2d_params& prm,
                                                   tensor_layout order) {
  conv2d_geometry g{n,
                    c,
                    h,
                    w,
                    k,
                    r,
                    s,
                    conv2d_output_extent(h, prm.pad_h_begin, prm.pad_h_end, r, prm.stride_h,
                                         prm.dilation_h),
                    conv2d_output_extent(w, prm.pad_w_begin, prm.pad_w_end, s, prm.stride_w,
                                         prm.dilation_w),
                    prm.pad_h_begin,
                    prm.pad_w_begin,
                    prm.stride_h,
                    prm.stride_w,
                    prm.dilation_h,
                    prm.dilation_w,
                    prm.groups,
                    order};
  constexpr index_t limit = index_t{1} << 31;
  g.fast_gather = g.gemm_k() < limit && g.cg() >= 1 && g.s >= 1 && g.r * g.s < limit;
  if (g.fast_gather) {
    g.k_outer_divider =
        fast_divider(static_cast<std::uint32_t>(g.nhwc() ? g.cg() : g.r * g.s));
    g.s_divider = fast_divider(static_cast<std::uint32_t>(g.s));
  }
  return g;
}

/// Where an output element sits for the epilogue: (batch, row, col) of epilogue.hpp.
struct conv_position {
  index_t batch, row, col;
};

/// Forward propagation of one group over samples [first_sample, first_sample + samples), as the
/// implicit GEMM described at the top of this file.
template <class TX, class TW, class TY>
struct fprop_gemm {
  conv2d_geometry geo;
  const TX* x;   ///< the input of sample 0 of the call
  const TW* w;   ///< this group's filters (of this sample's set): filter j at w + j * gemm_k
  TY* y;         ///< the output of sample 0 of the call
  index_t group;
  index_t first_sample;
  index_t samples;
  index_t batch_base;    ///< epilogue batch of sample 0
  bool samples_in_rows;  ///< grouped batches: batch = batch_base, row = n * P * Q + pixel

  GPUBATCH_HOST_DEVICE index_t m() const { return samples * geo.pixels(); }
  GPUBATCH_HOST_DEVICE index_t n() const { return geo.kg(); }
  GPUBATCH_HOST_DEVICE index_t k() const { return geo.gemm_k(); }
  /// Whether consecutive kk of a row are mostly adjacent in memory (NHWC: channels), so loads
  /// should walk kk; else (NCHW) they should walk the rows (adjacent output columns).
  GPUBATCH_HOST_DEVICE bool a_k_contiguous() const { return geo.nhwc(); }
  /// Whether B's consecutive kk are adjacent in memory (the filters: always), so loads walk kk;
  /// else they walk its columns.
  GPUBATCH_HOST_DEVICE bool b_k_contiguous() const { return true; }
  /// Whether every run of `vector` reduction indices starting at a multiple of `vector` is one
  /// contiguous, 16-byte-aligned piece of x (or wholly padding): NHWC, channels per group and
  /// channels multiples of `vector`, x 16-byte aligned. Lets tensor-core kernels copy whole
  /// 16-byte chunks of the gather.
  GPUBATCH_HOST_DEVICE bool a_chunks_contiguous(int vector) const {
    return geo.nhwc() && geo.cg() % vector == 0 && geo.c % vector == 0 &&
           reinterpret_cast<std::uintptr_t>(x) % 16 == 0;
  }

  /// Whether a run of `vector` consecutive rows at one kk can be one contiguous, 16-byte-aligned
  /// piece of x: NCHW with unit column stride, input rows a whole number of chunks, x aligned
  /// (the run must still lie inside one output row and the input: a_line). Lets tensor-core
  /// kernels stage an NCHW gather M-major with whole 16-byte copies.
  GPUBATCH_HOST_DEVICE bool a_lines_contiguous(int vector) const {
    return !geo.nhwc() && geo.stride_w == 1 && geo.w % vector == 0 &&
           reinterpret_cast<std::uintptr_t>(x) % 16 == 0;
  }

  /// A row of A resolved once: where its sample's group starts and the top-left input position
  /// of its receptive field. Reused for every kk of the row.
  struct row_cursor {
    const TX* base;  ///< x(sample, group * C/g, 0, 0); null for rows past m()
    index_t ih0, iw0;
  };

  GPUBATCH_HOST_DEVICE row_cursor row(index_t i) const {
    if (i >= m()) {
      return {nullptr, 0, 0};
    }
    const index_t pixels = geo.pixels();
    const index_t sample = first_sample + i / pixels;
    const index_t pixel = i % pixels;
    const index_t op = pixel / geo.q, oq = pixel % geo.q;
    return {x + geo.x_offset(sample, group * geo.cg(), 0, 0), op * geo.stride_h - geo.pad_h,
            oq * geo.stride_w - geo.pad_w};
  }

  /// Rows from row i on (i < m()) in the same output row of the same sample: row i + e is row
  /// i's cursor shifted by e output columns (shifted) for e below it.
  GPUBATCH_HOST_DEVICE index_t a_run(index_t i) const {
    if (i >= m()) {
      return 0;
    }
    const index_t oq = (i % geo.pixels()) % geo.q;
    return geo.q - oq;
  }

  /// The cursor of the row `columns` output columns to the right of `cur`'s (same output row).
  GPUBATCH_HOST_DEVICE row_cursor shifted(const row_cursor& cur, index_t columns) const {
    return {cur.base, cur.ih0, cur.iw0 + columns * geo.stride_w};
  }

  /// Element (row, kk) of A when it and the elements (row + e, kk) of the next `count - 1` rows
  /// (same output row, unit column stride) all lie inside the input, so they are `count`
  /// consecutive elements of x (NCHW: a_lines_contiguous); null otherwise.
  GPUBATCH_HOST_DEVICE const TX* a_line(const row_cursor& cur, index_t kk, index_t count) const {
    if (cur.base == nullptr) {
      return nullptr;
    }
    index_t ic, ir, is;
    geo.decode_filter_index(kk, ic, ir, is);
    const index_t ih = cur.ih0 + ir * geo.dilation_h;
    const index_t iw = cur.iw0 + is * geo.dilation_w;
    if (ih < 0 || ih >= geo.h || iw < 0 || iw + count > geo.w) {
      return nullptr;
    }
    return cur.base + (geo.nhwc() ? (ih * geo.w + iw) * geo.c + ic : (ic * geo.h + ih) * geo.w + iw);
  }

  /// Element (row, kk) of A, or null where the receptive field lies in the zero padding.
  GPUBATCH_HOST_DEVICE const TX* a(const row_cursor& cur, index_t kk) const {
    return a_line(cur, kk, 1);
  }

  /// Whether every run of `step` reduction indices starting at a multiple of it lies in one
  /// filter tap (NHWC, channels per group a multiple of `step`), so that a K step of the
  /// gather decodes its tap once for all its rows (a_tap, a_in_tap), and whether a sample's
  /// input positions and offsets fit the 32 bits a_in_tap computes them in.
  GPUBATCH_HOST_DEVICE bool a_steps_within_taps(index_t step) const {
    constexpr index_t limit = index_t{1} << 30;
    const bool small = geo.h < limit && geo.w < limit && geo.pad_h < limit &&
                       geo.pad_w < limit && (geo.r - 1) * geo.dilation_h < limit &&
                       (geo.s - 1) * geo.dilation_w < limit &&
                       (geo.p - 1) * geo.stride_h < limit && (geo.q - 1) * geo.stride_w < limit &&
                       geo.c > 0 && geo.h * geo.w < 2 * limit / geo.c;
    return geo.nhwc() && small && step > 0 && geo.cg() % step == 0;
  }

  /// The filter tap of a K step, as offsets from a row's input origin, and its first channel.
  struct tap {
    int dh, dw;
    int channel;
  };
  /// The tap of the K step starting at k0 (a_steps_within_taps).
  GPUBATCH_HOST_DEVICE tap a_tap(index_t k0) const {
    index_t ic, ir, is;
    geo.decode_filter_index(k0, ic, ir, is);
    return {static_cast<int>(ir * geo.dilation_h), static_cast<int>(is * geo.dilation_w),
            static_cast<int>(ic)};
  }
  /// Element (row, k0 + j) of A for the K step of tap `t` (j within the step), or null in the
  /// zero padding or past the rows: a's element without decoding k0 + j, its position and its
  /// offset within the sample in 32 bits (a_steps_within_taps).
  GPUBATCH_HOST_DEVICE const TX* a_in_tap(const row_cursor& cur, const tap& t, int j) const {
    const int ih = static_cast<int>(cur.ih0) + t.dh, iw = static_cast<int>(cur.iw0) + t.dw;
    if (cur.base == nullptr || static_cast<unsigned>(ih) >= static_cast<unsigned>(geo.h) ||
        static_cast<unsigned>(iw) >= static_cast<unsigned>(geo.w)) {
      return nullptr;
    }
    return cur.base + ((ih * static_cast<int>(geo.w) + iw) * static_cast<int>(geo.c) +
                       t.channel + j);
  }

  /// Element (kk, j) of B: filter j's element kk (never null for forward propagation).
  GPUBATCH_HOST_DEVICE const TW* b(index_t kk, index_t j) const { return w + j * k() + kk; }

  /// Output element (i, j). NHWC rows are the pixels of consecutive samples, each K channels
  /// long, so an epilogue finds its outputs without the 64-bit division per element that
  /// splitting the row into sample and pixel costs.
  GPUBATCH_HOST_DEVICE TY& c(index_t i, index_t j) const {
    const index_t pixels = geo.pixels();
    if (geo.nhwc()) {
      return y[(first_sample * pixels + i) * geo.k + group * geo.kg() + j];
    }
    return y[geo.y_offset(first_sample + i / pixels, group * geo.kg() + j, i % pixels)];
  }

  /// The epilogue's coordinates of output element (i, j): (sample, pixel, channel), or for a
  /// grouped batch (problem, sample * P * Q + pixel, channel).
  GPUBATCH_HOST_DEVICE conv_position position(index_t i, index_t j) const {
    const index_t pixels = geo.pixels();
    const index_t col = group * geo.kg() + j;
    if (samples_in_rows) {
      return {batch_base, first_sample * pixels + i, col};
    }
    return {batch_base + first_sample + i / pixels, i % pixels, col};
  }
};

/// A uniform convolution as a batch of implicit GEMMs: one per group over all samples (shared
/// filters), or one per (sample, group) when every sample has its own filter set.
template <class TX, class TW, class TY>
struct fprop_batch {
  static constexpr bool uniform = true;
  conv2d_geometry geo;
  const TX* x;
  const TW* w;  ///< one filter set, or N sets back to back (per_sample)
  TY* y;
  bool per_sample;
  index_t batch_base = 0;
  bool samples_in_rows = false;

  /// Number of implicit GEMMs.
  GPUBATCH_HOST_DEVICE index_t count() const { return per_sample ? geo.n * geo.groups : geo.groups; }
  /// Rows of every implicit GEMM.
  GPUBATCH_HOST_DEVICE index_t gemm_m() const {
    return per_sample ? geo.pixels() : geo.n * geo.pixels();
  }
  /// Filter set of sample `sample`.
  GPUBATCH_HOST_DEVICE const TW* filters_of(index_t sample) const {
    return per_sample ? w + sample * geo.filter_set_size() : w;
  }
  /// Epilogue coordinates of output (sample, pixel, channel).
  GPUBATCH_HOST_DEVICE conv_position position(index_t sample, index_t pixel, index_t channel) const {
    if (samples_in_rows) {
      return {batch_base, sample * geo.pixels() + pixel, channel};
    }
    return {batch_base + sample, pixel, channel};
  }

  /// Every implicit GEMM of a uniform batch lies within its grid.
  GPUBATCH_HOST_DEVICE bool within_bounds(index_t) const { return true; }

  GPUBATCH_HOST_DEVICE fprop_gemm<TX, TW, TY> problem(index_t index) const {
    const index_t group = index % geo.groups;
    const index_t first = per_sample ? index / geo.groups : 0;
    const index_t samples = per_sample ? 1 : geo.n;
    return {geo,
            x,
            filters_of(first) + group * geo.kg() * geo.gemm_k(),
            y,
            group,
            first,
            samples,
            batch_base,
            samples_in_rows};
  }
};

/// A grouped batch of differently shaped convolutions, read from descriptors where a problem is
/// computed (device memory for the CUDA backend). Implicit GEMM `index` is group
/// index % max_groups of descriptor index / max_groups; groups past a problem's own are empty.
template <class TX, class TW, class TY>
struct grouped_fprop_batch {
  static constexpr bool uniform = false;
  const conv2d_problem<TX, TW, TY>* problems;
  index_t problem_count;
  tensor_layout order;
  grouped_conv2d_bounds bounds;

  GPUBATCH_HOST_DEVICE index_t count() const { return problem_count * bounds.max_groups; }

  /// The descriptor of problem `index` as a uniform batch of one filter set.
  GPUBATCH_HOST_DEVICE fprop_batch<TX, TW, TY> descriptor(index_t index) const {
    const conv2d_problem<TX, TW, TY> d = problems[index];
    return {make_geometry(d.n, d.c, d.h, d.w, d.k, d.r, d.s, d.params, order),
            d.x,
            d.weights,
            d.y,
            false,
            index,
            true};
  }

  /// Whether the problem of implicit GEMM `index` lies within the bounds the grid was sized
  /// from. One that does not is skipped whole (no output written), as grouped GEMM skips its
  /// own: computing the part the grid covers would leave a half-written output.
  GPUBATCH_HOST_DEVICE bool within_bounds(index_t index) const {
    const conv2d_problem<TX, TW, TY> d = problems[index / bounds.max_groups];
    if (d.params.groups < 1 || d.params.stride_h < 1 || d.params.stride_w < 1) {
      return false;
    }
    const conv2d_geometry g = make_geometry(d.n, d.c, d.h, d.w, d.k, d.r, d.s, d.params, order);
    return g.groups <= bounds.max_groups && g.n * g.pixels() <= bounds.max_output_pixels &&
           g.kg() <= bounds.max_k_per_group;
  }

  GPUBATCH_HOST_DEVICE fprop_gemm<TX, TW, TY> problem(index_t index) const {
    const index_t which = index / bounds.max_groups;
    const index_t group = index % bounds.max_groups;
    const conv2d_params prm = problems[which].params;
    // Descriptors are the caller's promise (no host check on device memory); an implausible one
    // is skipped rather than dividing by zero.
    if (prm.groups < 1 || group >= prm.groups || prm.stride_h < 1 || prm.stride_w < 1) {
      fprop_gemm<TX, TW, TY> none{};
      none.geo.groups = 1;  // m() = 0, and n() and k() stay defined
      none.geo.order = order;
      return none;
    }
    return descriptor(which).problem(group);
  }
};

}  // namespace detail::conv
GPUBATCH_NAMESPACE_END
