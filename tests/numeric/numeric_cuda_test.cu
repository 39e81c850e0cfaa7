// half and bfloat16 -> float conversions agree everywhere: gpubatch::convert in a kernel (the
// conversion instruction on a GPU), in host code, and CUDA's own host routines, for every value.
#include <gpubatch/gpubatch.hpp>

#include "../support/catch.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "../support/cuda_backend.hpp"

namespace {
using gpubatch::test::test_backend;

constexpr unsigned all_values = 1U << 16;  // of a 16-bit type

/// The value of T with the given bits.
template <class T>
GPUBATCH_HOST_DEVICE T from_bits(std::uint16_t bits) {
  if constexpr (std::is_same_v<T, gpubatch::half>) {
    __half_raw raw;
    raw.x = bits;
    return gpubatch::half(raw);
  } else {
    __nv_bfloat16_raw raw;
    raw.x = bits;
    return gpubatch::bfloat16(raw);
  }
}

/// out[i] = float(value with bit pattern i), one thread per value.
template <class T>
__global__ void widen_every_value(float* out) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < all_values) {
    out[i] = gpubatch::convert<float>(from_bits<T>(static_cast<std::uint16_t>(i)));
  }
}

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

/// Equal bit for bit, or both NaN (payloads are not part of the contract).
bool same_value(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || bits_of(a) == bits_of(b);
}

/// CUDA's own host conversion.
float cuda_routine(gpubatch::half v) { return __half2float(v); }
float cuda_routine(gpubatch::bfloat16 v) { return __bfloat162float(v); }

template <class T>
void check_every_value() {
  gpubatch::device_buffer<float> widened(all_values, test_backend::exec());
  gpubatch::launch(widen_every_value<T>,
                   gpubatch::launch_config{all_values / 256, 256, 0, test_backend::stream().get()},
                   widened.data());
  GPUBATCH_CUDA_TRY(cudaGetLastError());
  const std::vector<float> device = test_backend::to_host(widened.data(), all_values);
  unsigned mismatches = 0;
  for (unsigned i = 0; i < all_values; ++i) {
    const T value = from_bits<T>(static_cast<std::uint16_t>(i));
    const float host = gpubatch::convert<float>(value);
    const float cuda = cuda_routine(value);
    if ((!same_value(host, cuda) || !same_value(device[i], host)) && ++mismatches <= 5) {
      INFO("bits " << i << ": host " << host << ", CUDA's host routine " << cuda << ", device "
                   << device[i]);
      CHECK(false);
    }
  }
  CHECK(mismatches == 0);
}
}  // namespace

TEST_CASE("half to float: device, host and CUDA's host routine agree on every value",
          "[numeric][gpu]") {
  check_every_value<gpubatch::half>();
}

TEST_CASE("bfloat16 to float: device, host and CUDA's host routine agree on every value",
          "[numeric][gpu]") {
  check_every_value<gpubatch::bfloat16>();
}
