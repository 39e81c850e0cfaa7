/// @file detail/conv/depthwise_tiles.hpp
/// @brief How the CUDA kernels for NHWC depthwise layers (forward, and the filter gradient)
/// divide a layer among blocks and threads; shared with the host tests, which check that every
/// output, and every (pixel, channel) product of the gradient, is computed exactly once.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/detail/conv/problem.hpp>
#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/views.hpp>

#include <algorithm>
#include <cstdint>

GPUBATCH_NAMESPACE_BEGIN
namespace detail::conv {

/// One thread's work: output pixels [oq, oq + depthwise_tiles::run) of row `op` of `sample`
/// (those below Q), for channels [channel, channel + vector) (those below K).
struct depthwise_tile {
  index_t sample, op, oq, channel;
};

/// The division of an NHWC depthwise layer (one input channel per group, any channel
/// multiplier) among CUDA blocks of `lanes_c` x `lanes_t` threads. A thread computes `run`
/// adjacent output pixels of one row for `vector` adjacent channels: every filter tap it reads
/// serves `run` pixels, and with vector > 1 every input it reads is one 16-byte load of a whole
/// vector of channels (NHWC keeps a pixel's channels adjacent). Block (x, y) takes sample
/// x / blocks_per_sample, its tiles from (x % blocks_per_sample) * lanes_t on (one per thread
/// row), and channel chunk y, whose filters it first copies to shared memory, tap-major, so a
/// thread reads its vector's taps with one load.
struct depthwise_tiles {
  static constexpr int run = 4;  ///< output pixels of a row per thread
  /// Bytes a chunk's filter tap may take in shared memory: the widest filter the kernel takes
  /// then fits the 48 KiB a block has without opting in.
  static constexpr index_t chunk_bytes = 512;
  static constexpr index_t max_shared_bytes = 48 * 1024;
  /// Blocks of 256 threads per SM the kernel is built for (at most 85 registers). Left to
  /// itself ptxas gave the f64 kernel 48 registers and a spill on sm_80.
  static constexpr int blocks_per_sm = 3;

  int vector = 1;   ///< channels per thread
  int lanes_c = 1;  ///< threads of a block across channels (blockDim.x)
  int lanes_t = 1;  ///< threads of a block across tiles (blockDim.y)
  index_t runs_per_row = 0, tiles_per_sample = 0, blocks_per_sample = 0, chunks = 0;
  index_t taps = 0;  ///< R * S
  /// Each filter read turned 180 degrees (tap t as tap R * S - 1 - t): backward data of a
  /// stride-1 layer as the forward convolution of dy (conv::dgrad_as_fprop).
  bool turned = false;

  /// Channels of one chunk.
  GPUBATCH_HOST_DEVICE index_t chunk() const { return index_t{lanes_c} * vector; }
  /// Blocks along x: every sample's tiles.
  GPUBATCH_HOST_DEVICE index_t blocks(index_t samples) const { return samples * blocks_per_sample; }
  /// Dynamic shared memory of a block: the chunk's filters in the compute type.
  GPUBATCH_HOST_DEVICE index_t shared_bytes(index_t compute_bytes) const {
    return taps * chunk() * compute_bytes;
  }

  /// The tile of thread (thread_x, thread_y) of block (block_x, block_y); `active` is false
  /// for a thread past the sample's last tile or the last channel.
  GPUBATCH_HOST_DEVICE depthwise_tile tile(const conv2d_geometry& geo, std::uint32_t block_x,
                                           std::uint32_t block_y, std::uint32_t thread_x,
                                           std::uint32_t thread_y, bool& active) const {
    // 32-bit division: the launch keeps the grid's tiles below 2^31 (see fits).
    const auto per_sample = static_cast<std::uint32_t>(blocks_per_sample);
    const std::uint32_t sample = block_x / per_sample;
    const std::uint32_t tile = (block_x - sample * per_sample) * static_cast<std::uint32_t>(lanes_t) + thread_y;
    const auto per_row = static_cast<std::uint32_t>(runs_per_row);
    const std::uint32_t op = tile / per_row;
    depthwise_tile t{static_cast<index_t>(sample), static_cast<index_t>(op),
                     static_cast<index_t>(tile - op * per_row) * run,
                     static_cast<index_t>(block_y) * chunk() + static_cast<index_t>(thread_x) * vector};
    active = static_cast<index_t>(tile) < tiles_per_sample && t.channel < geo.k;
    return t;
  }

  /// Whether a launch of this division of `geo` stays within CUDA's grid limits and the
  /// kernel's 32-bit index math (tiles, and columns and offsets within an input row), and its
  /// filters within shared memory.
  GPUBATCH_HOST_DEVICE bool fits(const conv2d_geometry& geo, index_t compute_bytes) const {
    const index_t limit = (index_t{1} << 31) - 1;
    const index_t last_column = (geo.q + run) * geo.stride_w + geo.s * geo.dilation_w;
    return chunks <= 65535 && blocks(geo.n) <= limit && blocks(geo.n) * lanes_t <= limit &&
           geo.w * geo.c <= limit && last_column <= limit && geo.pad_w <= limit &&
           shared_bytes(compute_bytes) <= max_shared_bytes;
  }
};

/// Threads of a block across `vectors` channel vectors: the most, from `most` (a power of two)
/// down, whose last chunk pads the vectors by at most an eighth; 144 channels as 36 vectors of
/// 4 take 8 lanes (40 vectors' threads) rather than 32 (64).
GPUBATCH_HOST_DEVICE int depthwise_channel_lanes(index_t vectors, int most) {
  int lanes = most;
  while (lanes > 1 && (ceil_div(vectors, lanes) * lanes - vectors) * 8 > vectors) lanes /= 2;
  return lanes;
}

/// The division of `geo` (NHWC, depthwise) for blocks of `threads` threads (a power of two, at
/// least 32) at `vector` channels per thread, with filters of `compute_bytes` bytes per tap in
/// shared memory: threads across channels up to a warp and chunk_bytes of a tap's filters.
GPUBATCH_HOST_DEVICE depthwise_tiles make_depthwise_tiles(const conv2d_geometry& geo,
                                                                 int threads, int vector,
                                                                 index_t compute_bytes) {
  depthwise_tiles t;
  t.vector = vector;
  const index_t vectors = ceil_div(geo.k, vector);
  int lanes = 32;
  while (lanes > 1 && index_t{lanes} * vector * compute_bytes > depthwise_tiles::chunk_bytes) {
    lanes /= 2;
  }
  lanes = depthwise_channel_lanes(vectors, lanes);
  t.lanes_c = lanes;
  t.lanes_t = threads / lanes;
  t.runs_per_row = ceil_div(geo.q, depthwise_tiles::run);
  t.tiles_per_sample = geo.p * t.runs_per_row;
  t.blocks_per_sample = ceil_div(t.tiles_per_sample, t.lanes_t);
  t.chunks = ceil_div(vectors, lanes);
  t.taps = geo.r * geo.s;
  return t;
}

/// The division of an NHWC depthwise filter gradient, summed over `samples` samples, among
/// CUDA blocks of lanes_c x lanes_p threads. Block (x, y) takes output channels [x * lanes_c,
/// (x + 1) * lanes_c), one per thread across x, so adjacent threads read adjacent channels of x
/// and dy; and slice y of the output pixels of all the samples (flattened as (sample, p, q)),
/// elements [y * per_slice, (y + 1) * per_slice), which its thread rows stride through. With
/// more than one slice each writes its partial sums to a workspace laid out [slice][K][R * S],
/// which a second kernel adds in slice order.
struct depthwise_wgrad_slices {
  int lanes_c = 1, lanes_p = 1;
  index_t chunks = 0, slices = 0, per_slice = 0, total = 0;
  /// Blocks per SM the slices aim for: a device of S multiprocessors gets about 4 S blocks.
  static constexpr index_t blocks_per_sm = 4;
  /// Output pixels a thread sums at least before the slices stop growing.
  static constexpr index_t min_pixels_per_thread = 16;

  /// Workspace elements the partial sums take (none for one slice).
  GPUBATCH_HOST_DEVICE index_t workspace_elements(const conv2d_geometry& geo) const {
    return slices > 1 ? slices * geo.k * geo.r * geo.s : 0;
  }
  /// Whether the launch stays within CUDA's grid limits and the kernel's 32-bit index math:
  /// the walk's start and stride, and offsets within a sample, which a tap's reach into the
  /// padding on either side may take below 0 or past the sample.
  GPUBATCH_HOST_DEVICE bool fits(const conv2d_geometry& geo) const {
    const index_t limit = (index_t{1} << 31) - 1;
    const index_t rows = geo.h + geo.pad_h + geo.p * geo.stride_h + geo.r * geo.dilation_h;
    const index_t cols = geo.w + geo.pad_w + geo.q * geo.stride_w + geo.s * geo.dilation_w;
    return chunks <= limit && slices <= 65535 && total + lanes_p <= limit && rows <= limit &&
           cols <= limit && rows * cols <= limit / (geo.c > 0 ? geo.c : 1);
  }
};

/// The division of `geo`'s filter gradient over `samples` samples for blocks of `threads`
/// threads on a device of `sms` multiprocessors: slices enough for blocks_per_sm blocks per SM,
/// but none so thin that a thread sums fewer than min_pixels_per_thread pixels.
GPUBATCH_HOST_DEVICE depthwise_wgrad_slices make_depthwise_wgrad_slices(const conv2d_geometry& geo,
                                                                        index_t samples,
                                                                        int threads, int sms) {
  depthwise_wgrad_slices d;
  d.lanes_c = depthwise_channel_lanes(geo.k, 32);
  d.lanes_p = threads / d.lanes_c;
  d.chunks = ceil_div(geo.k, d.lanes_c);
  d.total = samples * geo.pixels();
  const index_t wanted = ceil_div(depthwise_wgrad_slices::blocks_per_sm * sms, d.chunks);
  const index_t most = d.total / (d.lanes_p * depthwise_wgrad_slices::min_pixels_per_thread);
  const index_t slices = std::max<index_t>(1, std::min(wanted, most));
  d.per_slice = std::max<index_t>(1, ceil_div(d.total, slices));
  d.slices = ceil_div(d.total, d.per_slice);
  return d;
}

}  // namespace detail::conv
GPUBATCH_NAMESPACE_END
