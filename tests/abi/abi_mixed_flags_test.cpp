// Files built with different flags, linked into one program, must each compute the right
// answer: gpubatch keys every function and internal type on the build configuration (the ABI
// namespace), so no file can end up running another file's copy of a definition. Before that,
// a -march=native file and a baseline file shared the host GEMM's templates; the linker kept
// one copy, whose register blocking did not match the other file's scratch sizes (relative
// error 17 with one link order, heap corruption with the other). The test is linked in both
// orders (abi_mixed_flags_test, abi_mixed_flags_reversed_test).
#define ABI_PROBE_NAME abi_probe_main
#define ABI_PROBE_LAYOUTS
#include "abi_probe.inc"

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <set>

namespace {

template <class T>
std::vector<T> random_values(std::size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<T> v(count);
  for (auto& e : v) e = static_cast<T>(uniform(rng));
  return v;
}

template <class T>
double relative_error(const std::vector<T>& got, const std::vector<double>& want) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    diff += d * d;
    norm += want[i] * want[i];
  }
  const double e = std::sqrt(diff / norm);
  return std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
}

struct fixture {
  static constexpr gpubatch::index_t m32 = 100, n32 = 77, k32 = 300, count32 = 2;
  static constexpr gpubatch::index_t m64 = 65, n64 = 33, k64 = 129, count64 = 3;
  static constexpr gpubatch::index_t cn = 2, cc = 5, ch = 9, cw = 11, ck = 7, cr = 3, cs = 3;

  std::vector<float> a32 = random_values<float>(m32 * k32 * count32, 1);
  std::vector<float> b32 = random_values<float>(k32 * n32 * count32, 2);
  std::vector<double> a64 = random_values<double>(k64 * m64 * count64, 3);  // k x m, column-major
  std::vector<double> b64 = random_values<double>(k64 * n64 * count64, 4);  // k x n, column-major
  std::vector<float> x = random_values<float>(cn * ch * cw * cc, 5);        // NHWC
  std::vector<float> w = random_values<float>(ck * cr * cs * cc, 6);        // KRSC
  std::vector<double> want_c32, want_c64, want_y;

  fixture() {
    want_c32.assign(m32 * n32 * count32, 0.0);
    for (gpubatch::index_t b = 0; b < count32; ++b)
      for (gpubatch::index_t i = 0; i < m32; ++i)
        for (gpubatch::index_t j = 0; j < n32; ++j) {
          double s = 0.0;
          for (gpubatch::index_t l = 0; l < k32; ++l)
            s += double(a32[b * m32 * k32 + i * k32 + l]) * double(b32[b * k32 * n32 + l * n32 + j]);
          want_c32[b * m32 * n32 + i * n32 + j] = s;
        }
    want_c64.assign(m64 * n64 * count64, 0.0);
    for (gpubatch::index_t b = 0; b < count64; ++b)
      for (gpubatch::index_t i = 0; i < m64; ++i)
        for (gpubatch::index_t j = 0; j < n64; ++j) {
          double s = 0.0;
          for (gpubatch::index_t l = 0; l < k64; ++l)
            s += a64[b * k64 * m64 + i * k64 + l] * b64[b * k64 * n64 + j * k64 + l];
          want_c64[b * m64 * n64 + j * m64 + i] = s;
        }
    want_y.assign(cn * ch * cw * ck, 0.0);
    for (gpubatch::index_t n = 0; n < cn; ++n)
      for (gpubatch::index_t p = 0; p < ch; ++p)
        for (gpubatch::index_t q = 0; q < cw; ++q)
          for (gpubatch::index_t k = 0; k < ck; ++k) {
            double s = 0.0;
            for (gpubatch::index_t r = 0; r < cr; ++r)
              for (gpubatch::index_t t = 0; t < cs; ++t) {
                const gpubatch::index_t h = p + r - 1, v = q + t - 1;
                if (h < 0 || h >= ch || v < 0 || v >= cw) continue;
                for (gpubatch::index_t c = 0; c < cc; ++c)
                  s += double(x[((n * ch + h) * cw + v) * cc + c]) *
                       double(w[((k * cr + r) * cs + t) * cc + c]);
              }
            want_y[((n * ch + p) * cw + q) * ck + k] = s;
          }
  }
};

using probe_fn = abi_test::probe_report (*)(const abi_test::problems&);

}  // namespace

int main() {
  const fixture f;
  const std::vector<std::size_t> layouts = abi_test::public_type_layouts();
  struct probe {
    const char* name;
    probe_fn fn;
  };
  const probe probes[] = {
#if defined(ABI_TEST_REVERSED)
#if defined(ABI_TEST_HAS_NVCC)
    {"nvcc", abi_probe_nvcc},
#endif
    {"native", abi_probe_native},
    {"baseline", abi_probe_baseline},
    {"main", abi_probe_main},
#else
    {"main", abi_probe_main},
    {"baseline", abi_probe_baseline},
    {"native", abi_probe_native},
#if defined(ABI_TEST_HAS_NVCC)
    {"nvcc", abi_probe_nvcc},
#endif
#endif
  };

  int failures = 0;
  std::set<std::string> namespaces;
  for (const probe& pr : probes) {
    const float nan32 = std::numeric_limits<float>::quiet_NaN();
    const double nan64 = std::numeric_limits<double>::quiet_NaN();
    std::vector<float> c32(f.want_c32.size(), nan32), y(f.want_y.size(), nan32);
    std::vector<double> c64(f.want_c64.size(), nan64);
    using gpubatch::layout;
    const abi_test::problems p{
        {f.a32.data(), f.m32, f.k32, f.k32, f.m32 * f.k32, f.count32},
        {f.b32.data(), f.k32, f.n32, f.n32, f.k32 * f.n32, f.count32},
        {c32.data(), f.m32, f.n32, f.n32, f.m32 * f.n32, f.count32},
        {f.a64.data(), f.k64, f.m64, f.k64, f.k64 * f.m64, f.count64, layout::col_major},
        {f.b64.data(), f.k64, f.n64, f.k64, f.k64 * f.n64, f.count64, layout::col_major},
        {c64.data(), f.m64, f.n64, f.m64, f.m64 * f.n64, f.count64, layout::col_major},
        gpubatch::conv2d_params{}.with_padding(1, 1),
        {f.x.data(), f.cn, f.cc, f.ch, f.cw, gpubatch::tensor_layout::nhwc},
        {f.w.data(), f.ck, f.cc, f.cr, f.cs, gpubatch::tensor_layout::nhwc},
        {y.data(), f.cn, f.ck, f.ch, f.cw, gpubatch::tensor_layout::nhwc}};
    const abi_test::probe_report report = pr.fn(p);
    namespaces.insert(report.abi_namespace);
    const double e32 = relative_error(c32, f.want_c32);
    const double e64 = relative_error(c64, f.want_c64);
    const double ey = relative_error(y, f.want_y);
    const bool ok = e32 < 1e-5 && e64 < 1e-13 && ey < 1e-5 && report.layouts == layouts;
    std::printf("%-8s %-40s gemm f32 %.2e  gemm f64 %.2e  conv f32 %.2e  layouts %s  %s\n",
                pr.name, report.abi_namespace.c_str(), e32, e64, ey,
                report.layouts == layouts ? "same" : "DIFFERENT", ok ? "ok" : "FAILED");
    failures += ok ? 0 : 1;
  }
  std::printf("%zu ABI namespaces across %zu files\n", namespaces.size(),
              sizeof(probes) / sizeof(probes[0]));
  return failures == 0 ? 0 : 1;
}
