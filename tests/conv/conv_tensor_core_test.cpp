// The tensor-core convolution's gather, run on the host: every thread of a block stages its
// chunks of one implicit-GEMM A tile exactly as the kernel does (memcpy standing in for
// cp.async, memset its zero fill), and each slot must hold the im2col element the mapping
// gathers, zero in the padding and past the edges — NHWC (whole 16-byte chunks where the
// channels allow, the padding zero-filled by the same copy, and a K step's filter tap decoded
// once for all its chunks where the channels are whole K steps) and NCHW (staged M-major: whole
// chunks of output columns where the input rows allow), with stride, dilation, asymmetric
// padding and groups.
#include <gpubatch/detail/conv/problem.hpp>
#include <gpubatch/detail/gemm/tensor_core.hpp>
#include <gpubatch/gemm_policy.hpp>

#include "../support/catch.hpp"

#include <array>
#include <cstring>
#include <vector>

#include "../support/inputs.hpp"

using gpubatch::half;
using gpubatch::index_t;
using gpubatch::tensor_layout;
namespace conv = gpubatch::detail::conv;
namespace tc = gpubatch::detail::tensor_core;

namespace {

struct layer {
  index_t n, c, h, w, k, r, s;
  gpubatch::conv2d_params params;
};

/// How the chunks of a gather were staged.
struct staged_chunks {
  int whole = 0;     ///< copied from the input
  int zeros = 0;     ///< zero-filled (padding, rows or reduction indices past the operand)
  int elements = 0;  ///< element by element
};

/// Stages every A tile of group `group` of `l`, laid out as `Staging`, and checks it; returns
/// how its chunks were staged.
template <class Policy, tc::staging Staging = tc::staging::k_major>
staged_chunks check_gather(const layer& l, tensor_layout order, index_t group, index_t x_offset) {
  using G = tc::geometry<Policy, half, Staging>;
  using mapping = conv::fprop_gemm<half, half, float>;
  using source = tc::gather_source<mapping, const half>;
  const conv::conv2d_geometry geo =
      conv::make_geometry(l.n, l.c, l.h, l.w, l.k, l.r, l.s, l.params, order);
  INFO("n " << l.n << " c " << l.c << " " << l.h << "x" << l.w << " k " << l.k << " " << l.r
            << "x" << l.s << " groups " << l.params.groups << " group " << group << " "
            << (order == tensor_layout::nhwc ? "nhwc" : "nchw") << " x offset " << x_offset
            << (Staging == tc::staging::k_major ? " K-major" : " M-major"));
  std::vector<std::array<unsigned char, 16>> storage(
      static_cast<std::size_t>((x_offset + l.n * l.c * l.h * l.w) * 2 / 16 + 2));
  half* const x = reinterpret_cast<half*>(storage.data()) + x_offset;
  const auto values = gpubatch::test::random_inputs<half>(static_cast<std::size_t>(l.n * l.c * l.h * l.w), 11);
  std::copy(values.begin(), values.end(), x);
  const mapping g{geo, x, nullptr, nullptr, group, 0, l.n, 0, false};
  const source a = source::make(g, G::vector, G::bk);
  // A K step's chunks share its filter tap when the group's channels are whole K steps.
  CHECK(a.tap_steps == (order == tensor_layout::nhwc && a.vectorizable && geo.cg() % G::bk == 0));
  if (order == tensor_layout::nhwc && l.c % l.params.groups == 0 && geo.cg() % G::bk == 0 &&
      x_offset == 0) {
    CHECK(a.tap_steps);
  }

  staged_chunks staged;
  const auto copy16 = [&](half* dst, const half* src, bool zero) {
    REQUIRE(tc::aligned16(src));
    REQUIRE(tc::aligned16(dst));
    if (zero) {
      std::memset(static_cast<void*>(dst), 0, 16);
      ++staged.zeros;
    } else {
      std::memcpy(static_cast<void*>(dst), static_cast<const void*>(src), 16);
      ++staged.whole;
    }
  };
  half poison;
  std::memset(static_cast<void*>(&poison), 0x5a, sizeof poison);
  for (index_t tile_row = 0; tile_row < g.m(); tile_row += G::bm) {
    for (index_t k0 = 0; k0 < g.k(); k0 += G::bk) {
      std::vector<half> tile(static_cast<std::size_t>(G::a_stage_elements), poison);
      for (int thread = 0; thread < G::threads; ++thread) {
        const tc::operand_stager<typename G::a_layout, G::threads, source> stager(a, tile_row, thread);
        stager.stage(a, k0, thread, tile.data(), copy16);
      }
      staged.elements += G::a_layout::chunks;
      for (int r = 0; r < G::bm; ++r) {
        const auto cursor = g.row(tile_row + r);
        for (int kk = 0; kk < G::bk; ++kk) {
          const half* p = k0 + kk < g.k() ? g.a(cursor, k0 + kk) : nullptr;
          const half want = p != nullptr ? *p : half{};
          const half got = tile[static_cast<std::size_t>(G::a_layout::offset(r, kk))];
          INFO("tile (" << tile_row << ", " << k0 << ") row " << r << " kk " << kk);
          REQUIRE(std::memcmp(&got, &want, sizeof(half)) == 0);
        }
      }
    }
  }
  staged.elements -= staged.whole + staged.zeros;
  return staged;
}

}  // namespace

TEST_CASE("tensor-core gather of NHWC and NCHW convolutions", "[conv][tensor_core]") {
  using policy = gpubatch::tensor_core_policy<64, 32, 32, 4, 3>;
  const auto base = gpubatch::conv2d_params{};
  const std::array<layer, 12> layers{{
      {2, 16, 7, 9, 8, 3, 3, base.with_padding(1, 1)},                         // 3x3, same padding
      {1, 32, 11, 6, 4, 3, 3, base.with_padding(0, 2, 1, 0).with_stride(2, 2)}, // asymmetric, stride 2
      {2, 8, 9, 9, 8, 3, 3, base.with_padding(2, 2).with_dilation(2, 2)},        // dilation
      {3, 24, 5, 5, 6, 1, 1, base},                                              // 1x1, C = 3 chunks
      {1, 6, 5, 7, 4, 3, 1, base.with_padding(1, 0)},                           // C not a chunk multiple
      {2, 16, 6, 16, 8, 1, 1, base},                          // 1x1, rows of 16 (NCHW lines whole)
      {1, 8, 5, 16, 8, 3, 3, base.with_padding(1, 1)},        // 3x3: the centre column's taps whole
      {2, 8, 5, 16, 8, 3, 3, base.with_padding(1, 1).with_stride(1, 2)},  // column stride 2: none
      {1, 8, 3, 16, 8, 1, 9, base.with_padding(0, 0, 0, 8)},  // aligned runs that leave the row
      // Channels a whole number of K steps (32): each step's chunks share one decoded tap.
      {2, 64, 6, 7, 8, 3, 3, base.with_padding(1, 1)},
      {1, 96, 9, 16, 8, 3, 3, base.with_padding(2, 0, 1, 2).with_stride(2, 1).with_dilation(2, 2)},
      {3, 32, 4, 5, 8, 1, 1, base},
  }};
  for (const auto& l : layers) {
    for (const tensor_layout order : {tensor_layout::nhwc, tensor_layout::nchw}) {
      for (const index_t offset : {index_t{0}, index_t{1}}) {
        // K-major (as NHWC is staged): whole chunks of channels, and with them every chunk of
        // the padding zero-filled (a chunk's channels share one tap): none element by element.
        const staged_chunks k_major = check_gather<policy>(l, order, 0, offset);
        const bool chunked = order == tensor_layout::nhwc && l.c % 8 == 0 && offset == 0;
        CHECK((k_major.whole > 0) == chunked);
        CHECK((k_major.elements == 0) == chunked);
        CHECK((k_major.zeros > 0) == chunked);  // every layer has padding or a tile's tail
        // M-major (as NCHW is staged): whole chunks of output columns.
        const staged_chunks m_major = check_gather<policy, tc::staging::mn_major>(l, order, 0, offset);
        const bool lined = order == tensor_layout::nchw && l.w % 8 == 0 && offset == 0 &&
                           l.params.stride_w == 1;
        CHECK((m_major.whole > 0) == lined);
      }
    }
  }
  // 1x1, stride 1, NCHW with rows of 16: every chunk of the (2 * 6 * 16) x 16 gather is one copy.
  CHECK(check_gather<policy, tc::staging::mn_major>(layers[5], tensor_layout::nchw, 0, 0).whole ==
        2 * 6 * 16 / 8 * 16);
}

TEST_CASE("tensor-core gather of a grouped convolution", "[conv][tensor_core]") {
  using policy = gpubatch::tensor_core_policy<32, 32, 32, 2, 2>;
  const layer l{2, 32, 6, 6, 8, 3, 3, gpubatch::conv2d_params{}.with_padding(1, 1).with_groups(2)};
  for (const index_t group : {index_t{0}, index_t{1}}) {
    CHECK(check_gather<policy>(l, tensor_layout::nhwc, group, 0).elements == 0);  // 16 per group
    check_gather<policy>(l, tensor_layout::nchw, group, 0);
    check_gather<policy, tc::staging::mn_major>(l, tensor_layout::nchw, group, 0);
  }
  // 2 groups of 32 channels: whole K steps of one tap each.
  CHECK(check_gather<policy>({1, 64, 5, 6, 8, 3, 3, l.params}, tensor_layout::nhwc, 1, 0).elements == 0);
  // 4 groups of 8 channels: whole chunks; 8 groups of 4: element by element.
  CHECK(check_gather<policy>({2, 32, 6, 6, 8, 3, 3, l.params.with_groups(4)}, tensor_layout::nhwc, 3, 0).elements == 0);
  CHECK(check_gather<policy>({2, 32, 6, 6, 8, 3, 3, l.params.with_groups(8)}, tensor_layout::nhwc, 5, 0).whole == 0);
}

TEST_CASE("tensor-core gather: K steps decode one tap only where 32 bits hold a sample",
          "[conv][tensor_core]") {
  using mapping = conv::fprop_gemm<half, half, float>;
  const auto steps = [](index_t c, index_t h, index_t w, tensor_layout order,
                        gpubatch::conv2d_params p = gpubatch::conv2d_params{}.with_padding(1, 1)) {
    const mapping g{conv::make_geometry(1, c, h, w, 8, 3, 3, p, order), nullptr, nullptr, nullptr,
                    0, 0, 1, 0, false};
    return g.a_steps_within_taps(32);
  };
  CHECK(steps(64, 56, 56, tensor_layout::nhwc));
  CHECK_FALSE(steps(64, 56, 56, tensor_layout::nchw));
  CHECK_FALSE(steps(48, 56, 56, tensor_layout::nhwc));  // a K step would cross a tap
  CHECK(steps(32, 1 << 13, (1 << 13) - 1, tensor_layout::nhwc));  // just under 2^31 elements
  CHECK_FALSE(steps(64, 1 << 13, 1 << 13, tensor_layout::nhwc));   // 2^32 elements per sample
  CHECK_FALSE(steps(32, 1, 1 << 30, tensor_layout::nhwc));         // a row past 2^30
  CHECK_FALSE(steps(32, 8, 8, tensor_layout::nhwc,
                    gpubatch::conv2d_params{}.with_padding(1, 1).with_dilation(1 << 29, 1)));
}
