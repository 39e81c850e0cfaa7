// The CUDA depthwise kernel's division of NHWC layers (conv::depthwise_tiles): every output
// element computed by exactly one thread, whatever the channels, widths, vectors and samples;
// the threads across channels and the shared-memory bound the kernel relies on.
#include <gpubatch/detail/conv/depthwise_tiles.hpp>

#include "../support/catch.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

using gpubatch::conv2d_params;
using gpubatch::index_t;
using gpubatch::tensor_layout;
namespace conv = gpubatch::detail::conv;

namespace {

conv::conv2d_geometry depthwise(index_t n, index_t c, index_t h, index_t w, index_t multiplier,
                                index_t r, index_t s, const conv2d_params& prm) {
  return conv::make_geometry(n, c, h, w, c * multiplier, r, s, prm.with_groups(c),
                             tensor_layout::nhwc);
}

// Walks every thread of every block as the kernel does and counts the outputs it stores.
void check_every_output_once(const conv::conv2d_geometry& geo, int vector, index_t compute_bytes) {
  constexpr int threads = 256;
  const conv::depthwise_tiles t = conv::make_depthwise_tiles(geo, threads, vector, compute_bytes);
  INFO("n " << geo.n << " k " << geo.k << " p " << geo.p << " q " << geo.q << " vector " << vector
            << " lanes " << t.lanes_c << " x " << t.lanes_t);
  REQUIRE(t.fits(geo, compute_bytes));
  REQUIRE(t.lanes_c * t.lanes_t == threads);
  REQUIRE(t.chunk() * compute_bytes <= conv::depthwise_tiles::chunk_bytes);
  // The kernel's filter copy: a chunk is a power of two of at most a block's threads.
  REQUIRE((t.chunk() & (t.chunk() - 1)) == 0);
  REQUIRE(t.chunk() <= threads);
  std::vector<int> stored(static_cast<std::size_t>(geo.n * geo.pixels() * geo.k), 0);
  for (index_t bx = 0; bx < t.blocks(geo.n); ++bx) {
    for (index_t by = 0; by < t.chunks; ++by) {
      for (int ty = 0; ty < t.lanes_t; ++ty) {
        for (int tx = 0; tx < t.lanes_c; ++tx) {
          bool active = false;
          const conv::depthwise_tile tile =
              t.tile(geo, static_cast<std::uint32_t>(bx), static_cast<std::uint32_t>(by),
                     static_cast<std::uint32_t>(tx), static_cast<std::uint32_t>(ty), active);
          // The thread's channels lie in its block's chunk, whose filters the block stages.
          REQUIRE(tile.channel >= by * t.chunk());
          REQUIRE(tile.channel + vector <= (by + 1) * t.chunk());
          REQUIRE(tile.sample < geo.n);
          if (!active) continue;
          REQUIRE(tile.op < geo.p);
          REQUIRE(tile.oq % conv::depthwise_tiles::run == 0);
          REQUIRE(tile.oq < geo.q);
          for (index_t oq = tile.oq; oq < std::min(geo.q, tile.oq + conv::depthwise_tiles::run); ++oq) {
            for (index_t ik = tile.channel; ik < tile.channel + vector; ++ik) {
              REQUIRE(ik < geo.k);  // whole vectors: K is a multiple of the vector
              ++stored[static_cast<std::size_t>(geo.y_offset(tile.sample, ik, tile.op * geo.q + oq))];
            }
          }
        }
      }
    }
  }
  for (std::size_t i = 0; i < stored.size(); ++i) {
    INFO("output " << i);
    REQUIRE(stored[i] == 1);
  }
}

}  // namespace

TEST_CASE("depthwise tiles: every output once, for vectors of 1 to 8 channels", "[conv]") {
  const conv2d_params pad1 = conv2d_params{}.with_padding(1, 1);
  // MobileNetV2's channel counts, a chunk tail (144 = 4.5 chunks of 32), widths that are and
  // are not multiples of the 4-pixel run, one pixel, many blocks per sample, and a multiplier.
  const std::vector<conv::conv2d_geometry> layers = {
      depthwise(2, 144, 10, 10, 1, 3, 3, pad1),
      depthwise(3, 96, 15, 15, 1, 3, 3, pad1.with_stride(2, 2)),
      depthwise(1, 32, 1, 1, 1, 1, 1, {}),
      depthwise(2, 64, 40, 37, 1, 3, 3, pad1),
      depthwise(1, 960, 7, 7, 1, 5, 5, conv2d_params{}.with_padding(2, 2)),
      depthwise(2, 40, 7, 31, 1, 3, 3, conv2d_params{}.with_padding(1, 2, 2, 0).with_dilation(2, 2)),
      depthwise(5, 8, 3, 5, 1, 7, 7, conv2d_params{}.with_padding(3, 3)),
  };
  for (const auto& geo : layers) {
    for (const int vector : {1, 2, 4, 8}) {
      if (geo.k % vector != 0) continue;
      for (const index_t compute_bytes : {4, 8}) check_every_output_once(geo, vector, compute_bytes);
    }
  }
  // Odd channel counts and a channel multiplier take one channel per thread.
  check_every_output_once(depthwise(2, 33, 4, 23, 1, 5, 5, conv2d_params{}.with_padding(2, 2)), 1, 4);
  check_every_output_once(depthwise(2, 8, 11, 10, 2, 3, 3, pad1), 1, 8);
}

TEST_CASE("depthwise tiles: threads across channels pad the channels by at most an eighth", "[conv]") {
  const auto lanes = [](index_t channels, int vector, index_t compute_bytes) {
    const auto geo = depthwise(1, channels, 8, 8, 1, 3, 3, conv2d_params{}.with_padding(1, 1));
    return conv::make_depthwise_tiles(geo, 256, vector, compute_bytes).lanes_c;
  };
  CHECK(lanes(144, 4, 4) == 8);   // 36 vectors: 40 threads' worth, not 64
  CHECK(lanes(960, 4, 4) == 32);  // 240 vectors in 8 chunks of 32: 16 idle, under an eighth
  CHECK(lanes(32, 8, 4) == 4);    // f16 vectors of 8: 4 of them
  CHECK(lanes(512, 8, 4) == 16);  // 16 x 8 x 4 bytes: a tap's chunk_bytes
  CHECK(lanes(512, 2, 8) == 32);  // f64 vectors of 2
  CHECK(lanes(33, 1, 4) == 4);    // 36 threads for 33 channels
}

TEST_CASE("depthwise tiles: filters beyond shared memory and grids beyond CUDA's limits do not fit", "[conv]") {
  const auto fits = [](const conv::conv2d_geometry& geo, int vector) {
    return conv::make_depthwise_tiles(geo, 256, vector, 4).fits(geo, 4);
  };
  const auto square = [](index_t c, index_t r) {
    return depthwise(1, c, 2 * r, 2 * r, 1, r, r, conv2d_params{});
  };
  // 7 x 7 taps of a 512-byte chunk fit 48 KiB; 11 x 11 do not.
  CHECK(fits(square(128, 7), 4));
  CHECK_FALSE(fits(square(128, 11), 4));
  // More than 65535 chunks along y.
  CHECK_FALSE(fits(depthwise(1, index_t{65536} * 32 + 1, 1, 1, 1, 1, 1, conv2d_params{}), 1));
  // More than 2^31 - 1 blocks along x.
  CHECK_FALSE(fits(depthwise(index_t{1} << 31, 32, 1, 1, 1, 1, 1, conv2d_params{}), 4));
  // An input row of 2^31 elements or more: beyond the kernel's 32-bit offsets within a row.
  CHECK(fits(depthwise(1, 64, 1, index_t{1} << 24, 1, 1, 1, conv2d_params{}), 4));
  CHECK_FALSE(fits(depthwise(1, 128, 1, index_t{1} << 24, 1, 1, 1, conv2d_params{}), 4));
}

TEST_CASE("depthwise filter-gradient slices: every (pixel, channel) product once", "[conv]") {
  const conv2d_params pad1 = conv2d_params{}.with_padding(1, 1);
  struct layer {
    conv::conv2d_geometry geo;
    int sms;
  };
  const std::vector<layer> layers = {
      {depthwise(32, 144, 56, 56, 1, 3, 3, pad1), 132},  // MobileNetV2 at batch 32, an H100
      {depthwise(4, 48, 20, 20, 1, 3, 3, pad1), 132},
      {depthwise(3, 12, 33, 31, 2, 5, 5, conv2d_params{}.with_padding(2, 2).with_stride(2, 2)), 2},
      {depthwise(1, 33, 3, 3, 1, 3, 3, pad1), 132},  // too few pixels to slice
  };
  for (const layer& l : layers) {
    const auto& geo = l.geo;
    const conv::depthwise_wgrad_slices d = conv::make_depthwise_wgrad_slices(geo, geo.n, 256, l.sms);
    INFO("k " << geo.k << " total " << d.total << " slices " << d.slices << " lanes " << d.lanes_c
              << " x " << d.lanes_p);
    REQUIRE(d.fits(geo));
    REQUIRE(d.lanes_c * d.lanes_p == 256);
    REQUIRE(d.total == geo.n * geo.pixels());
    REQUIRE(d.slices >= 1);
    // Slices grow only while every thread row keeps its minimum of pixels.
    if (d.slices > 1) {
      REQUIRE(d.per_slice >= d.lanes_p * conv::depthwise_wgrad_slices::min_pixels_per_thread - d.lanes_p);
      REQUIRE(d.workspace_elements(geo) == d.slices * geo.k * geo.r * geo.s);
    } else {
      REQUIRE(d.workspace_elements(geo) == 0);
    }
    REQUIRE(d.chunks * d.lanes_c >= geo.k);
    REQUIRE((d.chunks - 1) * d.lanes_c < geo.k);
    // The pixels each (slice, thread row) walks, as the kernel bounds them.
    std::vector<int> walked(static_cast<std::size_t>(d.total), 0);
    for (index_t y = 0; y < d.slices; ++y) {
      const index_t begin = y * d.per_slice, end = std::min(d.total, begin + d.per_slice);
      REQUIRE(begin < d.total);  // no empty slice
      for (index_t row = 0; row < d.lanes_p; ++row) {
        for (index_t flat = begin + row; flat < end; flat += d.lanes_p) {
          ++walked[static_cast<std::size_t>(flat)];
        }
      }
    }
    for (std::size_t i = 0; i < walked.size(); ++i) {
      INFO("pixel " << i);
      REQUIRE(walked[i] == 1);
    }
  }
  // MobileNetV2's 56 x 56 x 144 layer at batch 32 on 132 SMs: 5 chunks of 32 channels (the
  // last half full: 16 of 144 padded), and slices for 4 blocks per SM.
  const auto big = conv::make_depthwise_wgrad_slices(layers[0].geo, 32, 256, 132);
  CHECK(big.lanes_c == 32);
  CHECK(big.chunks == 5);
  CHECK(big.chunks * big.slices >= 4 * 132);
  CHECK(big.chunks * big.slices < 4 * 132 + big.chunks);
}
