/// @file detail/transfer/plan.hpp
/// @brief What a copy must do, decided on the host before anything is issued: the byte regions
/// of both sides, their simplification into as few memcpy calls as possible, and — for the CUDA
/// backend — the direction, or the refusal of a pageable side.
#pragma once

#include <gpubatch/error.hpp>
#include <gpubatch/memory_space.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

GPUBATCH_NAMESPACE_BEGIN
namespace detail {

/// `count` planes of `height` lines of `width` bytes: a 1-D range is one plane of one line, a
/// matrix batch one plane per matrix and one line per row (row-major) or column (column-major).
struct copy_region {
  std::byte* data = nullptr;
  std::size_t width = 0;   ///< bytes per line
  std::size_t height = 0;  ///< lines per plane
  std::size_t pitch = 0;   ///< bytes from one line to the next
  std::size_t count = 0;   ///< planes
  std::size_t stride = 0;  ///< bytes from one plane to the next (0: the same plane repeated)
  memory_space space = memory_space::unknown;

  [[nodiscard]] std::size_t bytes() const noexcept { return width * height * count; }
  [[nodiscard]] bool empty() const noexcept { return width == 0 || height == 0 || count == 0; }

  /// A contiguous region of `n` bytes.
  [[nodiscard]] static copy_region linear(std::byte* p, std::size_t n, memory_space s) noexcept {
    return {p, n, 1, n, 1, n, s};
  }
  /// The same shape packed back to back at `p` (a staging block).
  [[nodiscard]] copy_region packed_at(std::byte* p, memory_space s) const noexcept {
    return {p, width, height, width, count, width * height, s};
  }
};

/// Merges planes and lines wherever both sides are contiguous across them, so that a packed
/// batch becomes one 1-D copy and evenly spaced matrices one 2-D copy. Shapes must be equal.
inline void simplify(copy_region& dst, copy_region& src) noexcept {
  const auto merge_planes = [&] {
    if (dst.count > 1 && dst.stride == dst.height * dst.pitch &&
        src.stride == src.height * src.pitch) {
      dst.height *= dst.count;
      src.height *= src.count;
      dst.count = src.count = 1;
    }
  };
  merge_planes();
  if (dst.height > 1 && dst.pitch == dst.width && src.pitch == src.width) {
    dst.width *= dst.height;
    src.width *= src.height;
    dst.height = src.height = 1;
    dst.pitch = dst.width;
    src.pitch = src.width;
  }
  if (dst.count == 1) {
    dst.stride = dst.height * dst.pitch;
    src.stride = src.height * src.pitch;
  }
}

/// How the caller wants a CUDA-backend copy done.
enum class copy_mode {
  async,        ///< copy_async: pageable memory is refused
  staged,       ///< copy_async with stage_through(pool): pageable sides go through the pool
  synchronous,  ///< copy: waits anyway, so pageable memory is fine
};

/// The decision for one CUDA-backend copy.
struct cuda_copy_plan {
  cudaMemcpyKind kind = cudaMemcpyDefault;
  bool stage_source = false;       ///< pack the pageable source into a pinned block first
  bool stage_destination = false;  ///< land in a pinned block, unpack on the host afterwards
  bool host_only = false;          ///< synchronous copy between two pageable ranges: a memcpy
};

/// Why copy_async refuses pageable memory, for the message of invalid_argument.
inline std::string pageable_refusal(const char* side) {
  return std::string("is pageable host memory. An \"async\" cudaMemcpyAsync ") +
         (std::string(side) == "src" ? "from" : "to") +
         " pageable memory is not asynchronous: the driver stages it through its own pinned "
         "buffer and blocks the calling thread until the copy is done, so nothing overlaps. "
         "Use pinned memory (pinned_buffer, pinned_pool, register_host), opt in to staging "
         "with gpubatch::stage_through(pool), or call the synchronous gpubatch::copy";
}

/// Decides how the CUDA backend copies between memory in `dst` and `src` (both resolved: not
/// unknown). Pageable sides are refused by copy_async, staged when asked for, and accepted by
/// the synchronous copy.
/// @throws invalid_argument naming "dst" or "src"
inline cuda_copy_plan plan_cuda_copy(memory_space dst, memory_space src, copy_mode mode) {
  cuda_copy_plan plan;
  const bool pageable_src = src == memory_space::host || src == memory_space::unknown;
  const bool pageable_dst = dst == memory_space::host || dst == memory_space::unknown;
  if (pageable_src && pageable_dst) {
    if (mode != copy_mode::synchronous) {
      throw invalid_argument("src", "is pageable host memory, and so is dst: there is nothing "
                                    "for the GPU to copy asynchronously; use gpubatch::copy or "
                                    "host_exec");
    }
    plan.host_only = true;
    plan.kind = cudaMemcpyHostToHost;
    return plan;
  }
  if (mode == copy_mode::async) {
    if (pageable_src) {
      throw invalid_argument("src", pageable_refusal("src"));
    }
    if (pageable_dst) {
      throw invalid_argument("dst", pageable_refusal("dst"));
    }
  }
  if (mode == copy_mode::staged) {
    plan.stage_source = pageable_src;
    plan.stage_destination = pageable_dst;
  }
  // After staging, a pageable side is a pinned block.
  const bool src_on_device = src == memory_space::device;
  const bool dst_on_device = dst == memory_space::device;
  if (src == memory_space::managed || dst == memory_space::managed) {
    plan.kind = cudaMemcpyDefault;  // the driver knows where managed pages live right now
  } else if (src_on_device) {
    plan.kind = dst_on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost;
  } else {
    plan.kind = dst_on_device ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost;
  }
  return plan;
}

/// The host backend copies with memcpy: both sides must be host-accessible.
/// @throws invalid_argument naming "dst" or "src"
inline void check_host_copy(memory_space dst, memory_space src) {
  const char* const why = " is device memory, which the host backend cannot access; copy with a "
                          "cuda execution argument";
  if (src == memory_space::device) {
    throw invalid_argument("src", std::string("points to") + why);
  }
  if (dst == memory_space::device) {
    throw invalid_argument("dst", std::string("points to") + why);
  }
}

}  // namespace detail
GPUBATCH_NAMESPACE_END
