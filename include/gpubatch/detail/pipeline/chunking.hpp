/// @file detail/pipeline/chunking.hpp
/// @brief The pipeline's arithmetic, as plain functions tested on the host: chunk counts and
/// bounds, ring slots, the memory-aware chunk chooser, and even splits of a batch into slices.
#pragma once

#include <gpubatch/error.hpp>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>

GPUBATCH_NAMESPACE_BEGIN
namespace detail {

constexpr std::size_t ceil_div(std::size_t a, std::size_t b) noexcept {
  return a == 0 ? 0 : 1 + (a - 1) / b;
}

/// Chunks of `chunk_items` that cover `items` (the last may be partial); 0 for no items.
constexpr std::size_t chunk_count(std::size_t items, std::size_t chunk_items) noexcept {
  return chunk_items == 0 ? 0 : ceil_div(items, chunk_items);
}

/// Items [first, first + count) of a batch.
struct item_bounds {
  std::size_t first = 0;
  std::size_t count = 0;
};

/// The items of chunk `k` of a batch of `items` split into chunks of `chunk_items`.
constexpr item_bounds chunk_at(std::size_t k, std::size_t items, std::size_t chunk_items) noexcept {
  const std::size_t first = std::min(k * chunk_items, items);
  return {first, std::min(chunk_items, items - first)};
}

/// The ring slot (staging and device buffers, events) chunk `k` uses: chunk k + slots reuses the
/// slot of chunk k, once chunk k has landed.
constexpr std::size_t ring_slot(std::size_t k, std::size_t slots) noexcept { return k % slots; }

/// Part `part` of `parts` near-equal slices of `items` (the first items % parts slices get one
/// more): one pipeline per device, each over its slice of the same batch.
constexpr item_bounds split_evenly(std::size_t items, std::size_t parts, std::size_t part) noexcept {
  if (parts == 0 || part >= parts) {
    return {items, 0};
  }
  const std::size_t base = items / parts;
  const std::size_t extra = items % parts;
  return {part * base + std::min(part, extra), base + (part < extra ? 1 : 0)};
}

/// The chooser's answer.
struct chunk_choice {
  std::size_t chunk_items = 0;
  bool memory_limited = false;  ///< free memory, not the policy, set the size
};

/// Picks the items per chunk:
///  1. memory: `buffers` slots of chunk * bytes_per_item must fit in the free memory less the
///     headroom (max(headroom_bytes, headroom_fraction * free)) left for others;
///  2. policy: at most max_chunk items, and at least min_chunk where memory allows;
///  3. overlap: a batch is split into at least `buffers` chunks when that keeps chunks at least
///     min_chunk items, so that copies and compute have something to overlap;
///  4. never more items than the batch has.
/// @throws out_of_memory if not even one item per buffer fits
inline chunk_choice choose_chunk(std::size_t items, std::size_t bytes_per_item,
                                 std::size_t free_bytes, std::size_t buffers,
                                 std::size_t min_chunk, std::size_t max_chunk,
                                 std::size_t headroom_bytes, double headroom_fraction) {
  const auto proportional =
      static_cast<std::size_t>(static_cast<double>(free_bytes) * headroom_fraction);
  const std::size_t headroom = std::max(headroom_bytes, proportional);
  const std::size_t usable = free_bytes > headroom ? free_bytes - headroom : 0;
  std::size_t by_memory = std::numeric_limits<std::size_t>::max();
  if (bytes_per_item != 0) {
    const std::size_t per_chunk_item =
        bytes_per_item > std::numeric_limits<std::size_t>::max() / buffers
            ? std::numeric_limits<std::size_t>::max()
            : bytes_per_item * buffers;
    by_memory = usable / per_chunk_item;
    if (by_memory == 0) {
      throw out_of_memory("device", per_chunk_item > std::numeric_limits<std::size_t>::max() - headroom
                                        ? std::numeric_limits<std::size_t>::max()
                                        : per_chunk_item + headroom,
                          free_bytes);
    }
  }
  chunk_choice choice;
  std::size_t chunk = std::min(max_chunk, by_memory);
  if (items > 0) {
    chunk = std::min(chunk, std::max(min_chunk, ceil_div(items, buffers)));
    chunk = std::min(chunk, items);
  }
  chunk = std::max<std::size_t>(chunk, 1);
  choice.chunk_items = chunk;
  choice.memory_limited = by_memory < max_chunk && chunk == by_memory;
  return choice;
}

}  // namespace detail
GPUBATCH_NAMESPACE_END
