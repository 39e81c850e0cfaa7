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

/// wgrad's B is the im2col matrix of x (reduction = output pixels, columns = filter taps):
/// each column's tap is decoded once per strip and the output pixel advanced incrementally,
/// leaving one bounds test and one load per element.
template <class Compute, class TX, class TDY, class TDW>
void pack_mapped_b(const conv::wgrad_gemm<TX, TDY, TDW>& g, index_t j0, index_t cols, index_t k0,
                   index_t kc, Compute* out) {
  constexpr int nr = host_gemm::tuning<Compute>::nr;
  const conv::conv2d_geometry& geo = g.geo;
  const index_t channel_stride = geo.nhwc() ? 1 : geo.h * geo.w;
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
    index_t local = k0 / geo.pixels();
    index_t pixel = k0 - local * geo.pixels();
    index_t op = pixel / geo.q, oq = pixel - op * geo.q;
    for (index_t kk = 0; kk < kc; ++kk) {
      Compute* const dst = out + kk * nr;
      const TX* const sample = g.x + geo.x_offset(g.first_sample + local, 0, 0, 0);
      const index_t h0 = op * geo.stride_h, w0 = oq * geo.stride_w;
      for (int c = 0; c < nr; ++c) {
        const index_t ih = h0 + row_off[c], iw = w0 + col_off[c];
        const bool inside = valid[c] && ih >= 0 && ih < geo.h && iw >= 0 && iw < geo.w;
        dst[c] = inside ? convert<Compute>(sample[chan_off[c] + (ih * geo.w + iw) *
                                                                   (geo.nhwc() ? geo.c : 1)])
                        : Compute(0);
      }
      if (++oq == geo.q) {
        oq = 0;
        if (++op == geo.p) {
          op = 0;
          ++local;
        }
      }
    }
  }
}

/// Output block [i0, i0 + rows) x [j0, j0 + cols) of one mapped implicit GEMM, reduced in
/// chunks of blocking::kc in order.
template <class Compute, class Mapping, class Epilogue>
void mapped_block(const Mapping& g, index_t i0, index_t rows, index_t j0, index_t cols,
                  Compute alpha, Compute beta, const Epilogue& epilogue) {
  constexpr int mr = host_gemm::tuning<Compute>::mr;
  constexpr int nr = host_gemm::tuning<Compute>::nr;
  const index_t gk = g.k();
  const index_t kc = std::max<index_t>(1, std::min(blocking::kc, gk));
  const index_t a_strips = ceil_div(rows, mr);
  const index_t b_strips = ceil_div(cols, nr);
  const index_t ldc = b_strips * nr;
  Compute* const a = host_gemm::scratch<Compute>(static_cast<std::size_t>(a_strips * mr * kc), 0);
  Compute* const b = host_gemm::scratch<Compute>(static_cast<std::size_t>(b_strips * nr * kc), 1);
  Compute* const sums =
      host_gemm::scratch<Compute>(static_cast<std::size_t>(a_strips * mr * ldc), 2);
  if (gk == 0) {
    std::fill(sums, sums + a_strips * mr * ldc, Compute(0));
  }
  for (index_t k0 = 0; k0 < gk; k0 += kc) {
    const index_t kcur = std::min(kc, gk - k0);
    pack_mapped_a(g, i0, rows, k0, kcur, a);
    pack_mapped_b(g, j0, cols, k0, kcur, b);
    for (index_t sj = 0; sj < b_strips; ++sj) {
      for (index_t si = 0; si < a_strips; ++si) {
        host_gemm::micro_kernel(
            kcur, host_gemm::strips<Compute>{a + si * mr * kcur, 1, mr, b + sj * nr * kcur, nr},
            sums + si * mr * ldc + sj * nr, ldc, /*accumulate=*/k0 > 0);
      }
    }
  }
  for (index_t r = 0; r < rows; ++r) {
    for (index_t c = 0; c < cols; ++c) {
      const conv::conv_position pos = g.position(i0 + r, j0 + c);
      store_output(g.c(i0 + r, j0 + c), sums[r * ldc + c], alpha, beta, epilogue, pos.batch,
                   pos.row, pos.col);
    }
  }
}

/// Every implicit GEMM of a backward batch (dgrad_batch, wgrad_batch), in output blocks spread
/// over the threads; blocks shrink until there are a few per thread.
template <class Compute, class Batch, class Epilogue>
void run_mapped(host_exec exec, const Batch& batch, Compute alpha, Compute beta,
                const Epilogue& epilogue) {
  constexpr int mr = host_gemm::tuning<Compute>::mr;
  constexpr int nr = host_gemm::tuning<Compute>::nr;
  const index_t count = batch.count(), gm = batch.gemm_m(), gn = batch.gemm_n();
  if (count == 0 || gm == 0 || gn == 0) {
    return;
  }
  index_t mc = std::min<index_t>(host_gemm::tuning<Compute>::mc, ceil_div(gm, mr) * mr);
  index_t nc = std::min<index_t>(blocking::nc, ceil_div(gn, nr) * nr);
  const index_t wanted = 4 * static_cast<index_t>(host_thread_count(exec));
  const auto tasks = [&] { return count * ceil_div(gm, mc) * ceil_div(gn, nc); };
  while (tasks() < wanted && (nc > nr || mc > mr)) {
    if (nc > nr) {
      nc = ceil_div(nc / 2, nr) * nr;
    } else {
      mc = ceil_div(mc / 2, mr) * mr;
    }
  }
  const index_t m_blocks = ceil_div(gm, mc), n_blocks = ceil_div(gn, nc);
  const index_t per_problem = m_blocks * n_blocks;
  host_parallel_for(exec, count * per_problem, schedule::dynamic, [&](index_t task) {
    const index_t i = task / per_problem, block = task % per_problem;
    const index_t i0 = (block % m_blocks) * mc, j0 = (block / m_blocks) * nc;
    mapped_block(batch.problem(i), i0, std::min(mc, gm - i0), j0, std::min(nc, gn - j0), alpha,
                 beta, epilogue);
  });
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
    run_mapped(serial, one, Compute(1), Compute(0), epilogue::identity{});
    Compute sum = Compute(0);
    for (const Compute v : gradient) sum += v * v;
    norms[sample] = sum;
  });
}

}  // namespace detail::host_conv
GPUBATCH_NAMESPACE_END
