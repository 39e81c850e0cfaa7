// The depthwise kernel's division-free grid-stride walk against division, for radices below,
// at and above the start and the stride, and walks long enough to carry through every digit.
#include <gpubatch/detail/conv/radix_walk.hpp>

#include "../support/catch.hpp"

#include <cstdint>
#include <random>

using gpubatch::index_t;
using walk5 = gpubatch::detail::cuda_conv::radix_walk<5>;

namespace {

// The digits of `index` for radices r[0..3] of digits 1..4, by division.
void digits_of(index_t index, const index_t (&r)[4], index_t (&out)[5]) {
  for (int d = 4; d > 0; --d) {
    out[d] = index % r[d - 1];
    index /= r[d - 1];
  }
  out[0] = index;
}

void check_walk(std::uint32_t start, std::uint32_t stride, const index_t (&r)[4], int steps) {
  walk5 walk(start, stride, r);
  index_t expected[5];
  for (int i = 0; i < steps; ++i) {
    digits_of(static_cast<index_t>(start) + static_cast<index_t>(i) * stride, r, expected);
    for (int d = 0; d < 5; ++d) {
      INFO("start " << start << " stride " << stride << " step " << i << " digit " << d);
      REQUIRE(walk.digit[d] == expected[d]);
    }
    walk.advance();
  }
}

}  // namespace

TEST_CASE("radix walk: digits of every step equal division's", "[conv][radix_walk]") {
  const index_t shapes[][4] = {{1, 1, 1, 1},   {3, 5, 7, 2},   {1, 9, 1, 4},
                               {112, 112, 32, 1}, {7, 7, 960, 6}, {2, 3, 1, 1}};
  for (const auto& r : shapes) {
    for (const std::uint32_t start : {0U, 1U, 5U, 255U, 4096U}) {
      for (const std::uint32_t stride : {1U, 3U, 256U, 1000U, 65536U}) {
        check_walk(start, stride, r, 200);
      }
    }
  }
}

TEST_CASE("radix walk: radices above 2^32 and random walks", "[conv][radix_walk]") {
  // A radix larger than any 32-bit start leaves the start in that digit.
  const index_t huge[4] = {2, 3, index_t{1} << 33, 5};
  check_walk(0x7fffffffU, 0x40000000U, huge, 50);
  std::mt19937 rng(20261124);
  std::uniform_int_distribution<index_t> radix(1, 300);
  std::uniform_int_distribution<std::uint32_t> value(0, 0x7fffffffU);
  for (int trial = 0; trial < 200; ++trial) {
    const index_t r[4] = {radix(rng), radix(rng), radix(rng), radix(rng)};
    check_walk(value(rng), value(rng) % 100000U + 1U, r, 100);
  }
}
