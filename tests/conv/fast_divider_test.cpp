// The convolution gather divides its reduction index by invariant divisors with a multiply and
// a shift (detail/fast_divider.hpp): it must equal integer division everywhere it is used.
#include <gpubatch/detail/conv/problem.hpp>
#include <gpubatch/detail/fast_divider.hpp>

#include "../support/catch.hpp"

#include <cstdint>
#include <random>
#include <vector>

using gpubatch::detail::fast_divider;

TEST_CASE("fast_divider equals integer division for numerators below 2^31", "[conv][divide]") {
  std::vector<std::uint32_t> divisors;
  for (std::uint32_t d = 1; d <= 1100; ++d) divisors.push_back(d);
  for (std::uint32_t p = 11; p <= 30; ++p) {
    const std::uint32_t power = std::uint32_t{1} << p;
    divisors.insert(divisors.end(), {power - 1, power, power + 1});
  }
  divisors.insert(divisors.end(), {0x7fffffffU, 0x80000000U});  // the largest divisors
  std::mt19937 rng(2026);
  std::uniform_int_distribution<std::uint32_t> numerator(0, 0x7fffffffU);
  for (const std::uint32_t d : divisors) {
    const fast_divider divider(d);
    REQUIRE(divider.divisor() == d);
    std::vector<std::uint32_t> numerators{0, 1, d - 1, d, d + 1, 2 * d - 1, 0x7ffffffeU,
                                          0x7fffffffU};
    for (int i = 0; i < 64; ++i) numerators.push_back(numerator(rng));
    for (const std::uint32_t n : numerators) {
      if (n > 0x7fffffffU) continue;  // d + 1 or 2d - 1 past the domain for the largest d
      INFO("n = " << n << ", d = " << d);
      REQUIRE(divider.divide(n) == n / d);
    }
  }
  // Every numerator of a small range for the divisors a convolution meets most (C/g, S, R * S).
  for (std::uint32_t d = 1; d <= 64; ++d) {
    const fast_divider divider(d);
    for (std::uint32_t n = 0; n < 20000; ++n) {
      REQUIRE(divider.divide(n) == n / d);
    }
  }
}

TEST_CASE("the convolution gather decodes every reduction index as integer division does",
          "[conv][divide]") {
  namespace conv = gpubatch::detail::conv;
  for (const auto order : {gpubatch::tensor_layout::nchw, gpubatch::tensor_layout::nhwc}) {
    for (const gpubatch::index_t groups : {1, 3}) {
      const auto params = gpubatch::conv2d_params{}.with_padding(2, 1).with_dilation(2, 1)
                              .with_groups(groups);
      const conv::conv2d_geometry geo = conv::make_geometry(2, 6 * groups, 9, 11, 4 * groups, 3,
                                                            5, params, order);
      REQUIRE(geo.fast_gather);
      conv::conv2d_geometry slow = geo;
      slow.fast_gather = false;
      std::vector<float> x(static_cast<std::size_t>(2 * 6 * groups * 9 * 11), 0.0F);
      const conv::fprop_gemm<float, float, float> fast_map{geo, x.data(), nullptr, nullptr,
                                                           groups - 1, 0, 2, 0, false};
      const conv::fprop_gemm<float, float, float> slow_map{slow, x.data(), nullptr, nullptr,
                                                           groups - 1, 0, 2, 0, false};
      for (gpubatch::index_t i = 0; i < fast_map.m(); i += 7) {
        const auto cursor = fast_map.row(i);
        for (gpubatch::index_t kk = 0; kk < fast_map.k(); ++kk) {
          REQUIRE(fast_map.a(cursor, kk) == slow_map.a(slow_map.row(i), kk));
        }
      }
    }
  }
}
