/// @file detail/conv/backward_problem.hpp
/// @brief The backward passes of convolution as implicit GEMMs, in the mapping interface of
/// detail/conv/problem.hpp, so the kernels and host loops that run forward propagation run
/// them too. Shared by both backends.
///
/// Backward data (dgrad) of one group, over a run of samples:
///   dx (M x N) = dy-gather (M x K) * filters (K x N),  M = samples * H * W input pixels,
///                                                      N = C / groups, K = K_out/groups * R * S.
/// Row i is input pixel (h, w); reduction index kk a (output channel, tap) pair, ordered like
/// the filter memory (NHWC: channel innermost, so a row's gather walks dy's channels); the
/// gather reads dy(p, q) where h = p * stride - pad + r * dilation, i.e. where h + pad - r *
/// dilation is a non-negative multiple of the stride below P * stride (else an implicit zero).
/// This is the transposed convolution, never materialised.
///
/// Backward filter (wgrad) of one group, over a run of samples (all of them, or one for
/// per-sample gradients):
///   dw (M x N) = dy (M x K) * x-gather (K x N),  M = K_out / groups, N = C / groups * R * S,
///                                                K = samples * P * Q,
/// row i an output channel, column j a filter element in the filter layout's order (so dw is
/// stored as is), the reduction over every (sample, output pixel); B(kk, j) is the input element
/// filter tap j saw at output pixel kk, or zero in the padding.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/detail/conv/problem.hpp>
#include <gpubatch/detail/fast_divider.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>

GPUBATCH_NAMESPACE_BEGIN
namespace detail::conv {

/// Quotient and remainder by a divisor fixed for a whole call: by invariants when the numerator
/// is known to stay below 2^31 (`fast`), else by the hardware's division.
struct index_divider {
  fast_divider fast_path{};
  index_t divisor = 1;
  bool fast = false;

  index_divider() = default;
  /// `limit`: an upper bound of every numerator.
  GPUBATCH_HOST_DEVICE index_divider(index_t d, index_t limit) : divisor(d) {
    constexpr index_t bound = index_t{1} << 31;
    fast = d >= 1 && d < bound && limit < bound;
    if (fast) {
      fast_path = fast_divider(static_cast<std::uint32_t>(d));
    }
  }
  GPUBATCH_HOST_DEVICE index_t quotient(index_t n) const {
    return fast ? static_cast<index_t>(fast_path.divide(static_cast<std::uint32_t>(n)))
                : n / divisor;
  }
};

/// The reduction order of a deterministic backward pass: chunks of deterministic_chunk(k)
/// reduction steps (2048, or more so that there are at most 64), each summed in order from
/// zero, then the chunks' sums added in order. It depends on the problem alone: not on the
/// device, the policy or how a call is split into launches.
GPUBATCH_HOST_DEVICE constexpr index_t deterministic_chunk(index_t k) {
  constexpr index_t base = 2048, most = 64;
  const index_t even = (k + most - 1) / most;
  return even <= base ? base : (even + base - 1) / base * base;
}

/// Chunks of a deterministic reduction of length k (1: no workspace needed).
GPUBATCH_HOST_DEVICE constexpr index_t deterministic_chunks(index_t k) {
  const index_t chunk = deterministic_chunk(k);
  return k <= chunk ? 1 : (k + chunk - 1) / chunk;
}

/// Workspace bytes a deterministic pass over `problems` implicit GEMMs of m x n x k needs: one
/// partial sum per chunk and output element (0 with a single chunk).
inline std::size_t deterministic_bytes(index_t m, index_t n, index_t k, index_t problems,
                                       std::size_t compute_size) {
  const index_t chunks = deterministic_chunks(k);
  return chunks <= 1 ? 0 : static_cast<std::size_t>(chunks * problems * m * n) * compute_size;
}

// ---------------------------------------------------------------------------------------------
// Backward data.

/// dgrad of one group over samples [first_sample, first_sample + samples).
template <class TDY, class TW, class TDX>
struct dgrad_gemm {
  conv2d_geometry geo;  ///< the forward convolution's geometry (x is dx, y is dy)
  const TDY* dy;        ///< dy of sample 0 of the call
  const TW* w;          ///< this group's filters: filter j of the group at w + j * gemm_k
  TDX* dx;              ///< dx of sample 0 of the call
  index_t group;
  index_t first_sample;
  index_t samples;
  index_t batch_base;       ///< epilogue batch of sample 0
  index_divider tap_outer;  ///< kk / (K/g) (NHWC) or kk / (R * S) (NCHW)
  index_divider tap_s;      ///< by S
  index_divider plane;      ///< by H * W
  index_divider width;      ///< by W

  GPUBATCH_HOST_DEVICE index_t m() const { return samples * geo.h * geo.w; }
  GPUBATCH_HOST_DEVICE index_t n() const { return geo.cg(); }
  GPUBATCH_HOST_DEVICE index_t k() const { return geo.kg() * geo.r * geo.s; }
  /// NHWC gathers walk dy's channels along kk.
  GPUBATCH_HOST_DEVICE bool a_k_contiguous() const { return geo.nhwc(); }
  /// KCRS filters are contiguous along kk (its taps); KRSC ones along j (input channels).
  GPUBATCH_HOST_DEVICE bool b_k_contiguous() const { return !geo.nhwc(); }

  /// Output channel (within the group) and tap of reduction index kk.
  GPUBATCH_HOST_DEVICE void decode(index_t kk, index_t& kl, index_t& ir, index_t& is) const {
    const index_t outer = tap_outer.quotient(kk);
    const index_t inner = kk - outer * tap_outer.divisor;
    const index_t rs = geo.nhwc() ? outer : inner;
    kl = geo.nhwc() ? inner : outer;
    ir = tap_s.quotient(rs);
    is = rs - ir * geo.s;
  }

  /// A row (input pixel) resolved once: its sample's dy for this group, and the padded input
  /// position h + pad_h, w + pad_w.
  struct row_cursor {
    const TDY* base;  ///< dy(sample, group * K/g, pixel 0); null for rows past m()
    index_t ph, pw;
  };

  GPUBATCH_HOST_DEVICE row_cursor row(index_t i) const {
    if (i >= m()) {
      return {nullptr, 0, 0};
    }
    const index_t local = plane.quotient(i);
    const index_t pixel = i - local * plane.divisor;
    const index_t ih = width.quotient(pixel);
    const index_t iw = pixel - ih * geo.w;
    return {dy + geo.y_offset(first_sample + local, group * geo.kg(), 0), ih + geo.pad_h,
            iw + geo.pad_w};
  }

  /// dy element feeding (row, kk), or null where no output pixel used this input through this
  /// tap (out of range, or between strides).
  GPUBATCH_HOST_DEVICE const TDY* a(const row_cursor& cur, index_t kk) const {
    if (cur.base == nullptr) {
      return nullptr;
    }
    index_t kl, ir, is;
    decode(kk, kl, ir, is);
    const index_t pixel = geo.output_pixel_through(cur.ph, cur.pw, ir, is);
    if (pixel < 0) {
      return nullptr;
    }
    return cur.base + geo.y_offset(0, kl, pixel);
  }

  /// Element (kk, j) of B: filter kl's weight for input channel j at the tap of kk.
  GPUBATCH_HOST_DEVICE const TW* b(index_t kk, index_t j) const {
    index_t kl, ir, is;
    decode(kk, kl, ir, is);
    return w + geo.w_offset(kl, j, ir, is);
  }

  /// Distance between C(i, j) and C(i, j + 1): input channels are adjacent in NHWC.
  GPUBATCH_HOST_DEVICE index_t c_col_stride() const { return geo.nhwc() ? 1 : geo.h * geo.w; }

  GPUBATCH_HOST_DEVICE TDX& c(index_t i, index_t j) const {
    const index_t local = plane.quotient(i);
    const index_t pixel = i - local * plane.divisor;
    const index_t ih = width.quotient(pixel);
    return dx[geo.x_offset(first_sample + local, group * geo.cg() + j, ih, pixel - ih * geo.w)];
  }

  /// Epilogue coordinates: (sample, input pixel h * W + w, input channel).
  GPUBATCH_HOST_DEVICE conv_position position(index_t i, index_t j) const {
    const index_t local = plane.quotient(i);
    return {batch_base + first_sample + local, i - local * plane.divisor, group * geo.cg() + j};
  }
};

/// A whole dgrad call: one implicit GEMM per group over all samples (shared filters), or one
/// per (sample, group) when every sample has its own filter set.
template <class TDY, class TW, class TDX>
struct dgrad_batch {
  static constexpr bool uniform = true;
  conv2d_geometry geo;
  const TDY* dy;
  const TW* w;
  TDX* dx;
  bool per_sample;
  index_divider tap_outer, tap_s, plane, width;

  dgrad_batch() = default;
  dgrad_batch(const conv2d_geometry& g, const TDY* dy_, const TW* w_, TDX* dx_, bool per_sample_)
      : geo(g), dy(dy_), w(w_), dx(dx_), per_sample(per_sample_) {
    const index_t rows = g.n * g.h * g.w;
    const index_t reduction = g.kg() * g.r * g.s;
    tap_outer = index_divider(g.nhwc() ? g.kg() : g.r * g.s, reduction);
    tap_s = index_divider(g.s, g.r * g.s);
    plane = index_divider(g.h * g.w, rows);
    width = index_divider(g.w, g.h * g.w);
  }

  GPUBATCH_HOST_DEVICE index_t count() const { return per_sample ? geo.n * geo.groups : geo.groups; }
  GPUBATCH_HOST_DEVICE index_t gemm_m() const { return (per_sample ? 1 : geo.n) * geo.h * geo.w; }
  GPUBATCH_HOST_DEVICE index_t gemm_n() const { return geo.cg(); }
  GPUBATCH_HOST_DEVICE index_t gemm_k() const { return geo.kg() * geo.r * geo.s; }
  GPUBATCH_HOST_DEVICE bool within_bounds(index_t) const { return true; }

  GPUBATCH_HOST_DEVICE dgrad_gemm<TDY, TW, TDX> problem(index_t index) const {
    const index_t group = index % geo.groups;
    const index_t first = per_sample ? index / geo.groups : 0;
    const TW* const set = per_sample ? w + first * geo.filter_set_size() : w;
    return {geo,       dy,        set + group * geo.kg() * geo.gemm_k(),
            dx,        group,     first,
            per_sample ? 1 : geo.n,
            0,         tap_outer, tap_s,
            plane,     width};
  }
};

// ---------------------------------------------------------------------------------------------
// Stride-1 backward data as a forward convolution.

/// The forward convolution whose output is dx of a stride-1 layer: dy (K channels, P x Q)
/// convolved with the filters transposed (input and output channels swapped within each group)
/// and turned 180 degrees, each side padded by the taps' reach (dilation * (R - 1)) less the
/// layer's own padding there. It runs on the forward paths (on the host: in-place taps and the
/// depthwise row kernel included), where the dgrad GEMM gathers every tap of dy. Empty for strided
/// layers, and where a side's padding exceeds the taps' reach.
inline std::optional<conv2d_geometry> dgrad_as_fprop(const conv2d_geometry& geo) {
  if (geo.stride_h != 1 || geo.stride_w != 1 || geo.p == 0 || geo.q == 0) {
    return std::nullopt;
  }
  const index_t reach_h = geo.dilation_h * (geo.r - 1), reach_w = geo.dilation_w * (geo.s - 1);
  // The layer's trailing padding, from P = H + top + bottom - reach (stride 1).
  const index_t bottom = geo.p - geo.h - geo.pad_h + reach_h;
  const index_t right = geo.q - geo.w - geo.pad_w + reach_w;
  const conv2d_params params =
      conv2d_params{}
          .with_padding(reach_h - geo.pad_h, reach_h - bottom, reach_w - geo.pad_w, reach_w - right)
          .with_dilation(geo.dilation_h, geo.dilation_w)
          .with_groups(geo.groups);
  if (params.pad_h_begin < 0 || params.pad_h_end < 0 || params.pad_w_begin < 0 ||
      params.pad_w_end < 0) {
    return std::nullopt;
  }
  const conv2d_geometry forward =
      make_geometry(geo.n, geo.k, geo.p, geo.q, geo.c, geo.r, geo.s, params, geo.order);
  if (forward.p != geo.h || forward.q != geo.w) {
    return std::nullopt;
  }
  return forward;
}

// ---------------------------------------------------------------------------------------------
// Backward data of a strided layer, one stride phase at a time.

/// One stride phase of backward data: the input pixels (h, w) with h = a (mod stride_h) and
/// w = b (mod stride_w). A filter tap reaches either every pixel of a phase (through whole
/// output pixels) or none, and the taps that do form a grid: filter rows r0 + i * r_step for
/// i < r_taps, columns s0 + j * s_step for j < s_taps, the step stride / gcd(stride, dilation).
/// The plain dgrad GEMM runs every tap for every pixel and multiplies zeros for those between
/// strides (3/4 of a 3 x 3 stride-2 layer's products, 3/4 of a 1 x 1 stride-2 layer's).
/// Along h, the phase's pixel row u (h = a + u * stride_h) meets tap row i at output row
/// u + e_h - i * de_h, so the gather divides by nothing; likewise along w.
struct stride_phase {
  index_t a = 0, b = 0;        ///< residues of h and w
  index_t rows = 0, cols = 0;  ///< the phase's input rows and columns
  index_t r0 = 0, r_step = 1, r_taps = 0;
  index_t s0 = 0, s_step = 1, s_taps = 0;
  index_t e_h = 0, de_h = 0, e_w = 0, de_w = 0;

  GPUBATCH_HOST_DEVICE index_t taps() const { return r_taps * s_taps; }
  GPUBATCH_HOST_DEVICE index_t pixels() const { return rows * cols; }
};

/// The taps of one axis reaching the inputs of residue `residue`: first, step, count, and the
/// output offset e and its fall de per tap (see stride_phase).
struct phase_axis {
  index_t first = 0, step = 1, taps = 0, e = 0, de = 0;
};

inline phase_axis make_phase_axis(index_t residue, index_t pad, index_t dilation, index_t stride,
                                  index_t filter) {
  index_t g = stride, d = dilation;  // gcd(stride, dilation)
  while (d != 0) {
    const index_t t = g % d;
    g = d;
    d = t;
  }
  phase_axis axis;
  axis.step = stride / g;
  for (index_t r = 0; r < axis.step && r < filter; ++r) {
    const index_t reach = residue + pad - r * dilation;
    if (reach % stride == 0) {
      axis.first = r;
      axis.taps = (filter - r + axis.step - 1) / axis.step;
      axis.e = reach / stride;
      axis.de = dilation / g;
      break;
    }
  }
  return axis;
}

/// Phase (a, b) of a layer: 0 <= a < stride_h, 0 <= b < stride_w.
inline stride_phase make_stride_phase(const conv2d_geometry& geo, index_t a, index_t b) {
  stride_phase ph;
  ph.a = a;
  ph.b = b;
  ph.rows = a < geo.h ? (geo.h - a + geo.stride_h - 1) / geo.stride_h : 0;
  ph.cols = b < geo.w ? (geo.w - b + geo.stride_w - 1) / geo.stride_w : 0;
  const phase_axis h = make_phase_axis(a, geo.pad_h, geo.dilation_h, geo.stride_h, geo.r);
  const phase_axis w = make_phase_axis(b, geo.pad_w, geo.dilation_w, geo.stride_w, geo.s);
  ph.r0 = h.first, ph.r_step = h.step, ph.r_taps = h.taps, ph.e_h = h.e, ph.de_h = h.de;
  ph.s0 = w.first, ph.s_step = w.step, ph.s_taps = w.taps, ph.e_w = w.e, ph.de_w = w.de;
  return ph;
}

/// dgrad of one stride phase of one group over samples [first_sample, first_sample + samples):
///   dx-phase (M x N) = dy-gather (M x K) * filters (K x N),  M = samples * the phase's pixels,
///                                                           N = C / groups,
///                                                           K = K_out / groups * its taps,
/// row i a pixel of the phase, reduction index kk a (phase tap, output channel) pair ordered
/// like the filter memory (NHWC: tap-major, channel innermost; NCHW: channel-major).
template <class TDY, class TW, class TDX>
struct phase_dgrad_gemm {
  conv2d_geometry geo;
  const TDY* dy;  ///< dy of sample 0 of the call
  const TW* w;    ///< this group's filters: filter j of the group at w + j * gemm_k
  TDX* dx;        ///< dx of sample 0 of the call
  index_t group;
  index_t first_sample;
  index_t samples;
  stride_phase phase;
  index_divider tap_outer;  ///< kk / (K/g) (NHWC) or kk / taps (NCHW)
  index_divider tap_cols;   ///< phase tap / s_taps
  index_divider plane;      ///< by the phase's pixels
  index_divider width;      ///< by its columns

  GPUBATCH_HOST_DEVICE index_t m() const { return samples * phase.pixels(); }
  GPUBATCH_HOST_DEVICE index_t n() const { return geo.cg(); }
  GPUBATCH_HOST_DEVICE index_t k() const { return geo.kg() * phase.taps(); }
  GPUBATCH_HOST_DEVICE bool a_k_contiguous() const { return geo.nhwc(); }
  GPUBATCH_HOST_DEVICE bool b_k_contiguous() const { return !geo.nhwc(); }

  /// Output channel (within the group) and the tap's row and column in the phase's grid.
  GPUBATCH_HOST_DEVICE void decode(index_t kk, index_t& kl, index_t& tr, index_t& tc) const {
    const index_t outer = tap_outer.quotient(kk);
    const index_t inner = kk - outer * tap_outer.divisor;
    const index_t t = geo.nhwc() ? outer : inner;
    kl = geo.nhwc() ? inner : outer;
    tr = tap_cols.quotient(t);
    tc = t - tr * phase.s_taps;
  }

  /// Sample (within the call) of row i, and its pixel's row u and column v in the phase.
  GPUBATCH_HOST_DEVICE void split_row(index_t i, index_t& local, index_t& u, index_t& v) const {
    local = plane.quotient(i);
    const index_t rest = i - local * plane.divisor;
    u = width.quotient(rest);
    v = rest - u * phase.cols;
  }

  /// Sample (within the call) and input position of row i.
  GPUBATCH_HOST_DEVICE void locate(index_t i, index_t& local, index_t& ih, index_t& iw) const {
    index_t u, v;
    split_row(i, local, u, v);
    ih = phase.a + u * geo.stride_h;
    iw = phase.b + v * geo.stride_w;
  }

  /// A row resolved once: its sample's dy for this group, and the output pixel (oh, ow) that
  /// the phase's first tap meets (each further tap row one de_h up, column de_w left).
  struct row_cursor {
    const TDY* base;  ///< dy(sample, group * K/g, pixel 0); null for rows past m()
    index_t oh, ow;
  };

  GPUBATCH_HOST_DEVICE row_cursor row(index_t i) const {
    if (i >= m()) {
      return {nullptr, 0, 0};
    }
    index_t local, u, v;
    split_row(i, local, u, v);
    return {dy + geo.y_offset(first_sample + local, group * geo.kg(), 0), u + phase.e_h,
            v + phase.e_w};
  }

  /// dy element feeding (row, kk), or null where the tap lands beyond the output.
  GPUBATCH_HOST_DEVICE const TDY* a(const row_cursor& cur, index_t kk) const {
    if (cur.base == nullptr) {
      return nullptr;
    }
    index_t kl, tr, tc;
    decode(kk, kl, tr, tc);
    const index_t op = cur.oh - tr * phase.de_h, oq = cur.ow - tc * phase.de_w;
    if (op < 0 || op >= geo.p || oq < 0 || oq >= geo.q) {
      return nullptr;
    }
    return cur.base + geo.y_offset(0, kl, op * geo.q + oq);
  }

  /// Element (kk, j) of B: filter kl's weight for input channel j at the phase tap of kk.
  GPUBATCH_HOST_DEVICE const TW* b(index_t kk, index_t j) const {
    index_t kl, tr, tc;
    decode(kk, kl, tr, tc);
    return w + geo.w_offset(kl, j, phase.r0 + tr * phase.r_step, phase.s0 + tc * phase.s_step);
  }

  GPUBATCH_HOST_DEVICE index_t c_col_stride() const { return geo.nhwc() ? 1 : geo.h * geo.w; }

  GPUBATCH_HOST_DEVICE TDX& c(index_t i, index_t j) const {
    index_t local, ih, iw;
    locate(i, local, ih, iw);
    return dx[geo.x_offset(first_sample + local, group * geo.cg() + j, ih, iw)];
  }

  /// Epilogue coordinates, as dgrad_gemm's: (sample, input pixel h * W + w, input channel).
  GPUBATCH_HOST_DEVICE conv_position position(index_t i, index_t j) const {
    index_t local, ih, iw;
    locate(i, local, ih, iw);
    return {first_sample + local, ih * geo.w + iw, group * geo.cg() + j};
  }
};

/// One stride phase of a dgrad call: one implicit GEMM per group over all samples (shared
/// filters), or per (sample, group) with per-sample filters, as dgrad_batch. Only for phases
/// with pixels; one without taps has no reduction (its dx is beta * dx through the epilogue).
template <class TDY, class TW, class TDX>
struct phase_dgrad_batch {
  static constexpr bool uniform = true;
  conv2d_geometry geo;
  const TDY* dy;
  const TW* w;
  TDX* dx;
  bool per_sample;
  stride_phase phase;
  index_divider tap_outer, tap_cols, plane, width;

  phase_dgrad_batch(const dgrad_batch<TDY, TW, TDX>& call, const stride_phase& ph)
      : geo(call.geo), dy(call.dy), w(call.w), dx(call.dx), per_sample(call.per_sample),
        phase(ph) {
    const index_t reduction = geo.kg() * ph.taps();
    tap_outer = index_divider(geo.nhwc() ? geo.kg() : ph.taps(), reduction);
    tap_cols = index_divider(ph.s_taps, ph.taps());
    plane = index_divider(ph.pixels(), geo.n * ph.pixels());
    width = index_divider(ph.cols, ph.pixels());
  }

  GPUBATCH_HOST_DEVICE index_t count() const { return per_sample ? geo.n * geo.groups : geo.groups; }
  GPUBATCH_HOST_DEVICE index_t gemm_m() const { return (per_sample ? 1 : geo.n) * phase.pixels(); }
  GPUBATCH_HOST_DEVICE index_t gemm_n() const { return geo.cg(); }
  GPUBATCH_HOST_DEVICE index_t gemm_k() const { return geo.kg() * phase.taps(); }
  GPUBATCH_HOST_DEVICE bool within_bounds(index_t) const { return true; }

  GPUBATCH_HOST_DEVICE phase_dgrad_gemm<TDY, TW, TDX> problem(index_t index) const {
    const index_t group = index % geo.groups;
    const index_t first = per_sample ? index / geo.groups : 0;
    const TW* const set = per_sample ? w + first * geo.filter_set_size() : w;
    return {geo,   dy,        set + group * geo.kg() * geo.gemm_k(),
            dx,    group,     first,
            per_sample ? 1 : geo.n,
            phase, tap_outer, tap_cols,
            plane, width};
  }
};

// ---------------------------------------------------------------------------------------------
// Backward filter.

/// wgrad of one group over samples [first_sample, first_sample + samples).
template <class TX, class TDY, class TDW>
struct wgrad_gemm {
  conv2d_geometry geo;
  const TX* x;    ///< x of sample 0 of the call
  const TDY* dy;  ///< dy of sample 0 of the call
  TDW* dw;        ///< this problem's filters: group's filter j at dw + j * gemm_k
  index_t group;
  index_t first_sample;
  index_t samples;
  index_t batch;         ///< the epilogue's batch coordinate (the sample, per-sample; else 0)
  index_divider pixels;  ///< kk / (P * Q)
  index_divider width;   ///< pixel / Q

  GPUBATCH_HOST_DEVICE index_t m() const { return geo.kg(); }
  GPUBATCH_HOST_DEVICE index_t n() const { return geo.gemm_k(); }
  GPUBATCH_HOST_DEVICE index_t k() const { return samples * geo.pixels(); }
  /// NCHW dy is contiguous along the pixels (the reduction); NHWC along the channels (rows).
  GPUBATCH_HOST_DEVICE bool a_k_contiguous() const { return !geo.nhwc(); }
  /// NCHW x is (strided) along the output pixels, kk; NHWC x along the channels, j.
  GPUBATCH_HOST_DEVICE bool b_k_contiguous() const { return !geo.nhwc(); }

  struct row_cursor {
    const TDY* base;  ///< dy(first_sample, channel, pixel 0); null for rows past m()
  };

  GPUBATCH_HOST_DEVICE row_cursor row(index_t i) const {
    if (i >= m()) {
      return {nullptr};
    }
    return {dy + geo.y_offset(first_sample, group * geo.kg() + i, 0)};
  }

  GPUBATCH_HOST_DEVICE const TDY* a(const row_cursor& cur, index_t kk) const {
    if (cur.base == nullptr) {
      return nullptr;
    }
    const index_t local = pixels.quotient(kk);
    const index_t pixel = kk - local * pixels.divisor;
    return cur.base + local * geo.k * geo.pixels() + pixel * (geo.nhwc() ? geo.k : 1);
  }

  /// Element (kk, j) of B: the input that filter element j met at output pixel kk, or null in
  /// the zero padding.
  GPUBATCH_HOST_DEVICE const TX* b(index_t kk, index_t j) const {
    const index_t local = pixels.quotient(kk);
    const index_t pixel = kk - local * pixels.divisor;
    const index_t op = width.quotient(pixel);
    const index_t oq = pixel - op * geo.q;
    index_t ic, ir, is;
    geo.decode_filter_index(j, ic, ir, is);
    const index_t ih = op * geo.stride_h - geo.pad_h + ir * geo.dilation_h;
    const index_t iw = oq * geo.stride_w - geo.pad_w + is * geo.dilation_w;
    if (ih < 0 || ih >= geo.h || iw < 0 || iw >= geo.w) {
      return nullptr;
    }
    return x + geo.x_offset(first_sample + local, group * geo.cg() + ic, ih, iw);
  }

  /// Distance between C(i, j) and C(i, j + 1): a filter's elements are adjacent.
  GPUBATCH_HOST_DEVICE index_t c_col_stride() const { return 1; }

  GPUBATCH_HOST_DEVICE TDW& c(index_t i, index_t j) const { return dw[i * geo.gemm_k() + j]; }

  /// Epilogue coordinates: (sample or 0, output channel, filter element in layout order).
  GPUBATCH_HOST_DEVICE conv_position position(index_t i, index_t j) const {
    return {batch, group * geo.kg() + i, j};
  }
};

/// A whole wgrad call: one implicit GEMM per group reducing over every sample, or per
/// (sample, group) for per-sample gradients (dw then holds N filter sets back to back).
template <class TX, class TDY, class TDW>
struct wgrad_batch {
  static constexpr bool uniform = true;
  conv2d_geometry geo;
  const TX* x;
  const TDY* dy;
  TDW* dw;
  bool per_sample;
  index_t first_sample = 0;  ///< the call covers samples [first_sample, first_sample + samples)
  index_t samples = 0;
  index_divider pixels, width;

  wgrad_batch() = default;
  wgrad_batch(const conv2d_geometry& g, const TX* x_, const TDY* dy_, TDW* dw_, bool per_sample_)
      : wgrad_batch(g, x_, dy_, dw_, per_sample_, 0, g.n) {}
  /// Samples [first, first + count) only (per-sample gradients in chunks; dw holds `count` sets).
  wgrad_batch(const conv2d_geometry& g, const TX* x_, const TDY* dy_, TDW* dw_, bool per_sample_,
              index_t first, index_t count)
      : geo(g), x(x_), dy(dy_), dw(dw_), per_sample(per_sample_), first_sample(first),
        samples(count) {
    pixels = index_divider(g.pixels(), count * g.pixels());
    width = index_divider(g.q, g.pixels());
  }

  GPUBATCH_HOST_DEVICE index_t count() const { return per_sample ? samples * geo.groups : geo.groups; }
  GPUBATCH_HOST_DEVICE index_t gemm_m() const { return geo.kg(); }
  GPUBATCH_HOST_DEVICE index_t gemm_n() const { return geo.gemm_k(); }
  GPUBATCH_HOST_DEVICE index_t gemm_k() const { return (per_sample ? 1 : samples) * geo.pixels(); }
  GPUBATCH_HOST_DEVICE bool within_bounds(index_t) const { return true; }

  GPUBATCH_HOST_DEVICE wgrad_gemm<TX, TDY, TDW> problem(index_t index) const {
    const index_t group = index % geo.groups;
    const index_t local = per_sample ? index / geo.groups : 0;
    TDW* const set = per_sample ? dw + local * geo.filter_set_size() : dw;
    return {geo,
            x,
            dy,
            set + group * geo.kg() * geo.gemm_k(),
            group,
            first_sample + local,
            per_sample ? 1 : samples,
            per_sample ? first_sample + local : 0,
            pixels,
            width};
  }
};

}  // namespace detail::conv
GPUBATCH_NAMESPACE_END
