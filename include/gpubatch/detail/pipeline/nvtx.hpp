/// @file detail/pipeline/nvtx.hpp
/// @brief NVTX ranges (nvtx3, header-only, shipped with the CUDA toolkit) around the pipeline's
/// stages, in the "gpubatch" domain, with the chunk index as payload, so that Nsight Systems
/// shows copies and compute of consecutive chunks overlapping.
///
/// Define GPUBATCH_DISABLE_NVTX before including gpubatch to compile them out. Without a
/// profiler attached, a range costs a branch on an uninitialised function pointer.
#pragma once

#include <gpubatch/config.hpp>

#include <cstdint>

#define GPUBATCH_NVTX_CONCAT_IMPL(a, b) a##b
#define GPUBATCH_NVTX_CONCAT(a, b) GPUBATCH_NVTX_CONCAT_IMPL(a, b)

#if !defined(GPUBATCH_DISABLE_NVTX)
#include <nvtx3/nvtx3.hpp>

GPUBATCH_NAMESPACE_BEGIN
namespace detail {

struct nvtx_domain {
  static constexpr const char* name{"gpubatch"};
};

/// Colours by stage, so that the timeline reads at a glance (ARGB).
enum class nvtx_color : std::uint32_t {
  copy_in = 0xFF4C9BE8U,
  compute = 0xFF76B900U,
  copy_out = 0xFFE8A14CU,
  wait = 0xFF9E9E9EU,
  run = 0xFF6A5ACDU,
};

inline nvtx3::event_attributes nvtx_event(const char* message, std::uint64_t chunk,
                                          nvtx_color color) noexcept {
  return nvtx3::event_attributes{nvtx3::message{message}, nvtx3::payload{chunk},
                                 nvtx3::color{static_cast<std::uint32_t>(color)}};
}

}  // namespace detail
GPUBATCH_NAMESPACE_END

/// A range from here to the end of the enclosing scope. `message` must be a string literal.
#define GPUBATCH_NVTX_RANGE(message, chunk, color)                                      \
  const ::nvtx3::scoped_range_in<::gpubatch::detail::nvtx_domain> GPUBATCH_NVTX_CONCAT( \
      gpubatch_nvtx_range_, __LINE__) {                                                 \
    ::gpubatch::detail::nvtx_event(message, static_cast<std::uint64_t>(chunk),          \
                                   ::gpubatch::detail::nvtx_color::color)               \
  }
#else
#define GPUBATCH_NVTX_RANGE(message, chunk, color) static_cast<void>(chunk)
#endif
