// Shared-memory bank conflicts of one warp-wide access, counted as the hardware serves it: 32
// banks of 4-byte words; a 4-byte (or narrower) access is served for all 32 lanes at once, an
// 8-byte access per half warp (16 lanes, 128 bytes), a 16-byte access per quarter warp (8 lanes).
// Within one such phase every distinct word a bank must deliver costs one wavefront; lanes that
// read the same word share it (broadcast). The conflict degree of the access is the worst
// phase's most loaded bank: 1 when conflict-free, n for an n-way conflict.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

namespace gpubatch::test {

/// One shared-memory instruction of one warp: each lane's byte address (inactive lanes: -1) and
/// the bytes every lane accesses (1, 2, 4, 8 or 16, naturally aligned).
struct warp_access {
  std::array<std::int64_t, 32> address;
  int bytes;

  explicit warp_access(int access_bytes) : bytes(access_bytes) { address.fill(-1); }
};

/// Lanes the hardware serves together for accesses of `bytes` each.
inline int phase_lanes(int bytes) { return bytes <= 4 ? 32 : 32 * 4 / bytes; }

/// Conflict degree of `access`: the most wavefronts any phase's busiest bank needs (0 when no
/// lane is active).
inline int conflict_degree(const warp_access& access) {
  const int lanes = phase_lanes(access.bytes);
  int worst = 0;
  for (int first = 0; first < 32; first += lanes) {
    std::array<std::int64_t, 32> words{};  // a phase touches at most 128 bytes: 32 words
    std::size_t count = 0;
    for (int lane = first; lane < first + lanes; ++lane) {
      const std::int64_t a = access.address[static_cast<std::size_t>(lane)];
      if (a < 0) continue;
      for (std::int64_t w = a / 4; w <= (a + access.bytes - 1) / 4; ++w) words[count++] = w;
    }
    std::sort(words.begin(), words.begin() + static_cast<std::ptrdiff_t>(count));
    const auto end = std::unique(words.begin(), words.begin() + static_cast<std::ptrdiff_t>(count));
    std::array<int, 32> per_bank{};
    for (auto w = words.begin(); w != end; ++w) {
      worst = std::max(worst, ++per_bank[static_cast<std::size_t>(*w % 32)]);
    }
  }
  return worst;
}

}  // namespace gpubatch::test
