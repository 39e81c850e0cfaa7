// CUDA runs a strided layer's backward data one stride phase at a time (phase_dgrad_gemm in
// detail/conv/backward_problem.hpp, __host__ __device__ code). Checked here against the dgrad
// mapping it stands in for: every input pixel in exactly one phase, and each pixel's products
// (dy element, filter element) the same, the zeros between strides left out.
#include <gpubatch/detail/conv/backward_problem.hpp>

#include "../support/catch.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace conv = gpubatch::detail::conv;
using gpubatch::conv2d_params;
using gpubatch::index_t;
using gpubatch::tensor_layout;

namespace {

struct layer {
  std::string name;
  index_t n, c, h, w, k, r, s;
  conv2d_params params;
};

using product = std::pair<std::ptrdiff_t, std::ptrdiff_t>;  // dy offset, filter offset

/// Each dx element's products through a mapping (rows' dx offsets to their sorted products).
template <class Mapping>
void add_products(const Mapping& g, const float* dy, const float* w, const float* dx,
                  std::map<std::ptrdiff_t, std::vector<product>>& out) {
  for (index_t i = 0; i < g.m(); ++i) {
    const auto cur = g.row(i);
    for (index_t j = 0; j < g.n(); ++j) {
      std::vector<product>& sums = out[&g.c(i, j) - dx];
      for (index_t kk = 0; kk < g.k(); ++kk) {
        const float* const a = g.a(cur, kk);
        if (a != nullptr) sums.emplace_back(a - dy, g.b(kk, j) - w);
      }
      std::sort(sums.begin(), sums.end());
    }
  }
}

}  // namespace

TEST_CASE("stride phases: each input pixel's backward-data products, without the zeros",
          "[conv][backward]") {
  const layer layers[] = {
      {"3x3 stride 2, padding 1", 2, 6, 9, 8, 5, 3, 3, conv2d_params{}.with_padding(1, 1).with_stride(2, 2)},
      {"1x1 stride 2", 2, 4, 7, 6, 3, 1, 1, conv2d_params{}.with_stride(2, 2)},
      {"3x3 stride 2, dilation 2", 1, 3, 11, 9, 4, 3, 3,
       conv2d_params{}.with_padding(2, 2).with_stride(2, 2).with_dilation(2, 2)},
      {"5x4 stride 3x2, groups 2", 2, 4, 13, 11, 6, 5, 4,
       conv2d_params{}.with_padding(3, 1, 2, 2).with_stride(3, 2).with_groups(2)},
      {"2x4 dilation 3x2, stride 1x2", 1, 3, 14, 15, 4, 2, 4,
       conv2d_params{}.with_padding(1, 2, 0, 1).with_stride(1, 2).with_dilation(3, 2)},
      {"3x2 stride 2, bottom padding 2", 1, 3, 8, 9, 4, 3, 2,
       conv2d_params{}.with_padding(1, 2, 0, 1).with_stride(2, 2)},
      {"5x5 stride 3, dilation 2", 1, 2, 16, 13, 3, 5, 5,
       conv2d_params{}.with_padding(4, 3).with_stride(3, 3).with_dilation(2, 2)},
      {"3x3 stride 4, dilation 2", 1, 2, 17, 15, 3, 3, 3,
       conv2d_params{}.with_padding(2, 1).with_stride(4, 4).with_dilation(2, 2)},
      {"input of one row, stride 2", 2, 3, 1, 5, 2, 3, 3, conv2d_params{}.with_padding(1, 1).with_stride(2, 2)},
  };
  for (const layer& l : layers) {
    for (const tensor_layout order : {tensor_layout::nchw, tensor_layout::nhwc}) {
      for (const bool per_sample : {false, true}) {
        INFO(l.name << (order == tensor_layout::nhwc ? ", NHWC" : ", NCHW")
                    << (per_sample ? ", per-sample filters" : ""));
        const conv::conv2d_geometry geo =
            conv::make_geometry(l.n, l.c, l.h, l.w, l.k, l.r, l.s, l.params, order);
        const index_t sets = per_sample ? l.n : 1;
        std::vector<float> dy(static_cast<std::size_t>(geo.n * geo.k * geo.p * geo.q));
        std::vector<float> w(static_cast<std::size_t>(sets * geo.filter_set_size()));
        std::vector<float> dx(static_cast<std::size_t>(geo.n * geo.c * geo.h * geo.w));
        const conv::dgrad_batch<float, float, float> plain(geo, dy.data(), w.data(), dx.data(),
                                                           per_sample);
        std::map<std::ptrdiff_t, std::vector<product>> expected, got;
        for (index_t p = 0; p < plain.count(); ++p) {
          add_products(plain.problem(p), dy.data(), w.data(), dx.data(), expected);
        }
        index_t phase_rows = 0;
        for (index_t a = 0; a < geo.stride_h; ++a) {
          for (index_t b = 0; b < geo.stride_w; ++b) {
            const conv::stride_phase phase = conv::make_stride_phase(geo, a, b);
            if (phase.pixels() == 0) continue;
            const conv::phase_dgrad_batch<float, float, float> part(plain, phase);
            for (index_t p = 0; p < part.count(); ++p) {
              const auto g = part.problem(p);
              phase_rows += g.m();
              // Every product a phase's GEMM forms is one the dgrad mapping forms too, and
              // each of its reduction steps meets dy somewhere (no tap is all zeros).
              for (index_t kk = 0; kk < g.k(); ++kk) {
                bool meets = false;
                for (index_t i = 0; i < g.m() && !meets; ++i) meets = g.a(g.row(i), kk) != nullptr;
                CHECK(meets);
              }
              add_products(g, dy.data(), w.data(), dx.data(), got);
            }
          }
        }
        CHECK(phase_rows == plain.count() * plain.gemm_m());  // no pixel in two phases
        REQUIRE(got.size() == expected.size());
        CHECK(got == expected);
        // Epilogue coordinates as the dgrad mapping gives them.
        for (index_t a = 0; a < geo.stride_h; ++a) {
          for (index_t b = 0; b < geo.stride_w; ++b) {
            const conv::stride_phase phase = conv::make_stride_phase(geo, a, b);
            if (phase.pixels() == 0) continue;
            const auto g = conv::phase_dgrad_batch<float, float, float>(plain, phase).problem(0);
            for (index_t i = 0; i < g.m(); ++i) {
              const index_t offset = &g.c(i, 0) - dx.data();
              const auto at = g.position(i, 0);
              index_t found = -1;
              const auto whole = plain.problem(0);
              for (index_t r = 0; r < whole.m() && found < 0; ++r) {
                if (&whole.c(r, 0) - dx.data() == offset) found = r;
              }
              REQUIRE(found >= 0);
              const auto want = whole.position(found, 0);
              CHECK(at.batch == want.batch);
              CHECK(at.row == want.row);
              CHECK(at.col == want.col);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("stride phases: a quarter of the multiply-adds of ResNet-50's stride-2 layers",
          "[conv][backward]") {
  // res3's first 3 x 3 layer (padding 1) and a 1 x 1 projection, both at stride 2 on 56 x 56.
  const layer layers[] = {
      {"3x3 stride 2, padding 1", 8, 128, 56, 56, 128, 3, 3,
       conv2d_params{}.with_padding(1, 1).with_stride(2, 2)},
      {"1x1 stride 2", 8, 256, 56, 56, 512, 1, 1, conv2d_params{}.with_stride(2, 2)},
  };
  for (const layer& l : layers) {
    INFO(l.name);
    const conv::conv2d_geometry geo =
        conv::make_geometry(l.n, l.c, l.h, l.w, l.k, l.r, l.s, l.params, tensor_layout::nhwc);
    const conv::dgrad_batch<float, float, float> plain(geo, nullptr, nullptr, nullptr, false);
    index_t phased = 0;
    for (index_t a = 0; a < geo.stride_h; ++a) {
      for (index_t b = 0; b < geo.stride_w; ++b) {
        const conv::stride_phase phase = conv::make_stride_phase(geo, a, b);
        const conv::phase_dgrad_batch<float, float, float> part(plain, phase);
        phased += part.gemm_m() * part.gemm_n() * part.gemm_k();
      }
    }
    CHECK(4 * phased == plain.gemm_m() * plain.gemm_n() * plain.gemm_k());
  }
}
