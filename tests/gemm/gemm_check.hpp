// The GEMM test engine shared by every gemm test TU and both backends: builds a random batch,
// runs gpubatch::gemm in one of the three batch forms, and compares against a float64 host
// reference by relative norm. Outputs are poisoned (NaN, or a sentinel for integers) before each
// run with beta = 0, so an element the kernel never wrote fails the comparison.
#pragma once

#include <gpubatch/gemm.hpp>

#include "../support/catch.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "../support/inputs.hpp"

namespace gpubatch::test {

enum class batch_form { strided, pointer_array, grouped };

inline const char* to_string(batch_form f) {
  return f == batch_form::strided ? "strided" : f == batch_form::pointer_array ? "pointer-array" : "grouped";
}

struct gemm_case {
  index_t m, n, k, count;
  op op_a = op::none;
  op op_b = op::none;
  layout la = layout::row_major;
  layout lb = layout::row_major;
  layout lc = layout::row_major;
  double alpha = 1.0;
  double beta = 0.0;
  batch_form form = batch_form::strided;
  index_t pad = 0;  ///< extra leading-dimension elements (breaks alignment when odd)
  bool allow_tf32 = false;  ///< f32 on tensor cores (CUDA backend)
};

inline std::string describe(const gemm_case& c) {
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + " x" +
         std::to_string(c.count) + " " + gpubatch::to_string(c.op_a) + gpubatch::to_string(c.op_b) +
         " " + gpubatch::to_string(c.la) + "/" + gpubatch::to_string(c.lb) + "/" +
         gpubatch::to_string(c.lc) + " alpha=" + std::to_string(c.alpha) +
         " beta=" + std::to_string(c.beta) + " " + to_string(c.form) + " pad=" + std::to_string(c.pad) +
         (c.allow_tf32 ? " tf32" : "");
}

/// A stored matrix of a batch: shape, layout and leading dimension.
struct stored {
  index_t rows, cols, ld;
  layout order;
  [[nodiscard]] index_t size() const { return order == layout::row_major ? rows * ld : cols * ld; }
  [[nodiscard]] index_t at(index_t i, index_t j) const {
    return order == layout::row_major ? i * ld + j : i + j * ld;
  }
};

inline stored make_stored(index_t rows, index_t cols, layout order, index_t pad) {
  const index_t minor = order == layout::row_major ? cols : rows;
  return {rows, cols, std::max<index_t>(minor + pad, 1), order};
}

/// Integer GEMMs take integer scalars: maps the fractional test scalars to small integers.
template <class TA>
void integer_scalars(double& alpha, double& beta) {
  if constexpr (std::is_integral_v<compute_type_t<TA>>) {
    alpha = std::round(alpha * 4);
    beta = std::round(beta * 2);
  }
}

/// C before a run: poison when beta = 0 (so an element the kernel never writes fails), else
/// random values exactly representable in both the compute and the output type.
template <class TA, class TC>
std::vector<TC> initial_c(std::size_t size, double beta, std::uint64_t seed) {
  using compute = compute_type_t<TA>;
  std::vector<TC> c(size, poison_value<TC>());
  if (beta != 0.0) {
    const auto initial = random_inputs<TA>(size, seed);
    for (std::size_t i = 0; i < size; ++i) c[i] = convert<TC>(convert<compute>(initial[i]));
  }
  return c;
}

/// A buffer of Backend's memory holding a copy of `host`.
template <class Backend, class T>
device_buffer<T> to_backend(const std::vector<T>& host) {
  device_buffer<T> buffer(host.size(), Backend::exec());
  Backend::from_host(buffer.data(), host);
  return buffer;
}

/// Runs one case on Backend (with gemm policy `Policy`; void: the defaults) and checks it against
/// the reference, which applies `reference_epi` (default: `epi` itself).
template <class Backend, class TA, class TC, class Epilogue = epilogue::identity, class Policy = void>
void check_gemm(gemm_case c, Epilogue epi = {}, const Epilogue* reference_epi = nullptr) {
  using compute = compute_type_t<TA>;
  integer_scalars<TA>(c.alpha, c.beta);
  INFO(describe(c));
  const auto exec = Backend::exec();
  const index_t a_rows = c.op_a == op::none ? c.m : c.k;
  const index_t a_cols = c.op_a == op::none ? c.k : c.m;
  const index_t b_rows = c.op_b == op::none ? c.k : c.n;
  const index_t b_cols = c.op_b == op::none ? c.n : c.k;
  const stored sa = make_stored(a_rows, a_cols, c.la, c.pad);
  const stored sb = make_stored(b_rows, b_cols, c.lb, c.pad);
  const stored sc = make_stored(c.m, c.n, c.lc, c.pad);

  const std::uint64_t seed = static_cast<std::uint64_t>(c.m * 1000003 + c.n * 1009 + c.k * 31 + c.count);
  const auto host_a = random_inputs<TA>(static_cast<std::size_t>(sa.size() * c.count), seed);
  const auto host_b = random_inputs<TA>(static_cast<std::size_t>(sb.size() * c.count), seed + 1);
  const std::vector<TC> host_c =
      initial_c<TA, TC>(static_cast<std::size_t>(sc.size() * c.count), c.beta, seed + 2);

  auto dev_a = to_backend<Backend>(host_a);
  auto dev_b = to_backend<Backend>(host_b);
  auto dev_c = to_backend<Backend>(host_c);

  const auto alpha = static_cast<compute>(c.alpha);
  const auto beta = static_cast<compute>(c.beta);
  gemm_options options;
  options.allow_tf32 = c.allow_tf32;
  const matrix_batch_view<const TA> va(dev_a.data(), sa.rows, sa.cols, sa.ld, sa.size(), c.count, sa.order, Backend::space);
  const matrix_batch_view<const TA> vb(dev_b.data(), sb.rows, sb.cols, sb.ld, sb.size(), c.count, sb.order, Backend::space);
  const matrix_batch_view<TC> vc(dev_c.data(), sc.rows, sc.cols, sc.ld, sc.size(), c.count, sc.order, Backend::space);

  switch (c.form) {
    case batch_form::strided:
      gemm<Policy>(exec, c.op_a, c.op_b, alpha, va, vb, beta, vc, epi, options);
      break;
    case batch_form::pointer_array: {
      std::vector<const TA*> pa, pb;
      std::vector<TC*> pc;
      for (index_t i = 0; i < c.count; ++i) {
        pa.push_back(dev_a.data() + i * sa.size());
        pb.push_back(dev_b.data() + i * sb.size());
        pc.push_back(dev_c.data() + i * sc.size());
      }
      device_buffer<const TA*> dpa(pa.size(), exec), dpb(pb.size(), exec);
      device_buffer<TC*> dpc(pc.size(), exec);
      Backend::from_host(dpa.data(), pa);
      Backend::from_host(dpb.data(), pb);
      Backend::from_host(dpc.data(), pc);
      gemm<Policy>(exec, c.op_a, c.op_b, alpha,
           pointer_matrix_batch_view<const TA>(dpa.data(), sa.rows, sa.cols, sa.ld, c.count, sa.order, Backend::space),
           pointer_matrix_batch_view<const TA>(dpb.data(), sb.rows, sb.cols, sb.ld, c.count, sb.order, Backend::space),
           beta, pointer_matrix_batch_view<TC>(dpc.data(), sc.rows, sc.cols, sc.ld, c.count, sc.order, Backend::space),
           epi, options);
      Backend::synchronize();
      break;
    }
    case batch_form::grouped: {
      std::vector<gemm_problem<TA, TA, TC>> problems;
      for (index_t i = 0; i < c.count; ++i) {
        problems.push_back({c.m, c.n, c.k, dev_a.data() + i * sa.size(), sa.ld,
                            dev_b.data() + i * sb.size(), sb.ld, dev_c.data() + i * sc.size(), sc.ld});
      }
      device_buffer<gemm_problem<TA, TA, TC>> dp(problems.size(), exec);
      Backend::from_host(dp.data(), problems);
      gemm_grouped<Policy>(exec, grouped_gemm_layout{c.op_a, c.la, c.op_b, c.lb, c.lc}, alpha,
                           dp.data(), c.count, beta, epi, grouped_gemm_bounds{c.m, c.n, c.k},
                           options);
      Backend::synchronize();
      break;
    }
  }
  const std::vector<TC> result = Backend::to_host(dev_c.data(), host_c.size());

  const Epilogue& ref_epi = reference_epi != nullptr ? *reference_epi : epi;
  double err2 = 0, ref2 = 0;
  index_t worst_b = -1, worst_i = -1, worst_j = -1;
  double worst = -1;
  for (index_t b = 0; b < c.count; ++b) {
    for (index_t i = 0; i < c.m; ++i) {
      for (index_t j = 0; j < c.n; ++j) {
        double sum = 0;
        for (index_t p = 0; p < c.k; ++p) {
          const index_t ai = c.op_a == op::none ? sa.at(i, p) : sa.at(p, i);
          const index_t bi = c.op_b == op::none ? sb.at(p, j) : sb.at(j, p);
          sum += convert<double>(host_a[b * sa.size() + ai]) * convert<double>(host_b[b * sb.size() + bi]);
        }
        const std::size_t ci = static_cast<std::size_t>(b * sc.size() + sc.at(i, j));
        double expected = c.alpha * sum;
        if (c.beta != 0.0) expected += c.beta * convert<double>(host_c[ci]);
        expected = ref_epi(expected, b, i, j);
        const double got = convert<double>(result[ci]);
        const double diff = std::isnan(got) ? std::numeric_limits<double>::infinity() : got - expected;
        if (std::abs(diff) > worst) {
          worst = std::abs(diff);
          worst_b = b, worst_i = i, worst_j = j;
        }
        err2 += diff * diff;
        ref2 += expected * expected;
      }
    }
  }
  // Elements outside the matrices (leading-dimension padding) must be untouched.
  for (index_t b = 0; b < c.count && c.pad > 0; ++b) {
    const index_t minor = sc.order == layout::row_major ? sc.cols : sc.rows;
    const index_t major = sc.order == layout::row_major ? sc.rows : sc.cols;
    for (index_t x = 0; x < major; ++x)
      for (index_t y = minor; y < sc.ld; ++y) {
        const std::size_t idx = static_cast<std::size_t>(b * sc.size() + x * sc.ld + y);
        REQUIRE(std::memcmp(&result[idx], &host_c[idx], sizeof(TC)) == 0);
      }
  }
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  INFO("relative norm error " << rel << ", worst |diff| " << worst << " at batch " << worst_b
                              << " (" << worst_i << ", " << worst_j << ")");
  // TF32 rounds inputs to 11 significant bits (unit roundoff 4.9e-4), like f16.
  const bool tf32 = c.allow_tf32 && std::is_same_v<TA, float> && Backend::space == memory_space::device;
  CHECK(rel <= (tf32 ? 2e-3 : output_tolerance<TC>()));
}

/// Edge sizes that exercise full tiles, partial tiles and degenerate shapes on both backends,
/// and the square tiny sizes the host backend unrolls completely (4, 8, 16, 32).
inline std::vector<std::array<index_t, 3>> edge_shapes() {
  return {{1, 1, 1},    {3, 17, 33},  {17, 3, 1},  {4, 4, 4},     {8, 8, 8},     {16, 16, 16},
          {32, 32, 32}, {33, 33, 33}, {8, 32, 64}, {65, 127, 17}, {127, 33, 129}};
}

}  // namespace gpubatch::test

namespace gpubatch::test {

/// A ragged grouped batch: `count` problems of random shape within the bounds (some empty, some
/// with k = 0 and a C that must stay untouched, some exactly at the bounds), each with its own
/// padded leading dimensions.
struct ragged_case {
  index_t count;
  index_t max_m, max_n, max_k;
  grouped_gemm_layout layouts;
  double alpha = 1.0;
  double beta = 0.0;
  std::uint64_t seed = 1;
};

inline std::string describe(const ragged_case& r) {
  return "ragged x" + std::to_string(r.count) + " bounds " + std::to_string(r.max_m) + "x" +
         std::to_string(r.max_n) + "x" + std::to_string(r.max_k) + " " +
         gpubatch::to_string(r.layouts.op_a) + gpubatch::to_string(r.layouts.op_b) + " " +
         gpubatch::to_string(r.layouts.a) + "/" + gpubatch::to_string(r.layouts.b) + "/" +
         gpubatch::to_string(r.layouts.c) + " alpha=" + std::to_string(r.alpha) +
         " beta=" + std::to_string(r.beta);
}

/// Runs a ragged grouped batch on Backend and checks every problem against a float64 reference;
/// elements outside the matrices and the C of problems with nothing to compute must keep their
/// bits.
template <class Backend, class TA, class TC>
void check_grouped_ragged(ragged_case r) {
  using compute = compute_type_t<TA>;
  integer_scalars<TA>(r.alpha, r.beta);
  INFO(describe(r));
  const auto exec = Backend::exec();
  const grouped_gemm_layout& lay = r.layouts;
  std::uint64_t state = r.seed * 0x9E3779B97F4A7C15ULL + 1;
  const auto next = [&](index_t below) {  // splitmix64, reduced: shapes and pads
    state += 0x9E3779B97F4A7C15ULL;
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return static_cast<index_t>((z ^ (z >> 31)) % static_cast<std::uint64_t>(below));
  };
  struct shape {
    index_t m, n, k;
    stored a, b, c;
    index_t a_at, b_at, c_at;  ///< offsets into the shared buffers
  };
  std::vector<shape> shapes;
  index_t a_total = 0, b_total = 0, c_total = 0;
  for (index_t i = 0; i < r.count; ++i) {
    index_t m = next(r.max_m + 1), n = next(r.max_n + 1), k = next(r.max_k + 1);
    if (i % 4 == 1) m = r.max_m, n = r.max_n, k = r.max_k;
    if (i % 7 == 3) m = std::max<index_t>(m, 1), n = std::max<index_t>(n, 1), k = 0;
    shape s{m, n, k, {}, {}, {}, 0, 0, 0};
    s.a = make_stored(lay.op_a == op::none ? m : k, lay.op_a == op::none ? k : m, lay.a, next(3));
    s.b = make_stored(lay.op_b == op::none ? k : n, lay.op_b == op::none ? n : k, lay.b, next(3));
    s.c = make_stored(m, n, lay.c, next(3));
    s.a_at = a_total, s.b_at = b_total, s.c_at = c_total;
    a_total += s.a.size(), b_total += s.b.size(), c_total += s.c.size();
    shapes.push_back(s);
  }
  const auto host_a = random_inputs<TA>(static_cast<std::size_t>(std::max<index_t>(a_total, 1)), r.seed + 10);
  const auto host_b = random_inputs<TA>(static_cast<std::size_t>(std::max<index_t>(b_total, 1)), r.seed + 11);
  const std::vector<TC> host_c =
      initial_c<TA, TC>(static_cast<std::size_t>(std::max<index_t>(c_total, 1)), r.beta, r.seed + 12);
  auto dev_a = to_backend<Backend>(host_a);
  auto dev_b = to_backend<Backend>(host_b);
  auto dev_c = to_backend<Backend>(host_c);
  std::vector<gemm_problem<TA, TA, TC>> problems;
  for (const shape& s : shapes) {
    problems.push_back({s.m, s.n, s.k, dev_a.data() + s.a_at, s.a.ld, dev_b.data() + s.b_at,
                        s.b.ld, dev_c.data() + s.c_at, s.c.ld});
  }
  device_buffer<gemm_problem<TA, TA, TC>> dp(problems.size(), exec);
  Backend::from_host(dp.data(), problems);
  gemm_grouped(exec, lay, static_cast<compute>(r.alpha), dp.data(), r.count,
               static_cast<compute>(r.beta), epilogue::identity{},
               grouped_gemm_bounds{r.max_m, r.max_n, r.max_k});
  Backend::synchronize();
  const std::vector<TC> result = Backend::to_host(dev_c.data(), host_c.size());

  double err2 = 0, ref2 = 0;
  for (index_t i = 0; i < r.count; ++i) {
    const shape& s = shapes[static_cast<std::size_t>(i)];
    INFO("problem " << i << ": " << s.m << "x" << s.n << "x" << s.k);
    const bool computed = s.m > 0 && s.n > 0 && s.k > 0;
    const index_t minor = s.c.order == layout::row_major ? s.c.cols : s.c.rows;
    for (index_t x = 0; x < s.c.size(); ++x) {
      const index_t major_i = x / s.c.ld, minor_i = x % s.c.ld;
      const std::size_t ci = static_cast<std::size_t>(s.c_at + x);
      if (!computed || minor_i >= minor) {
        REQUIRE(std::memcmp(&result[ci], &host_c[ci], sizeof(TC)) == 0);
        continue;
      }
      const index_t row = s.c.order == layout::row_major ? major_i : minor_i;
      const index_t col = s.c.order == layout::row_major ? minor_i : major_i;
      double sum = 0;
      for (index_t p = 0; p < s.k; ++p) {
        const index_t ai = lay.op_a == op::none ? s.a.at(row, p) : s.a.at(p, row);
        const index_t bi = lay.op_b == op::none ? s.b.at(p, col) : s.b.at(col, p);
        sum += convert<double>(host_a[static_cast<std::size_t>(s.a_at + ai)]) *
               convert<double>(host_b[static_cast<std::size_t>(s.b_at + bi)]);
      }
      double expected = r.alpha * sum;
      if (r.beta != 0.0) expected += r.beta * convert<double>(host_c[ci]);
      const double got = convert<double>(result[ci]);
      const double diff = std::isnan(got) ? std::numeric_limits<double>::infinity() : got - expected;
      err2 += diff * diff;
      ref2 += expected * expected;
    }
  }
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  INFO("relative norm error " << rel);
  CHECK(rel <= output_tolerance<TC>());
}

}  // namespace gpubatch::test
