/// @file detail/transfer/copy.hpp
/// @brief Issuing a planned copy: memcpy on the host backend; cudaMemcpyAsync or
/// cudaMemcpy2DAsync on the CUDA backend, with pageable sides staged through a pinned pool when
/// the caller opted in. Runtime API calls only, so a host-compiled file may use it.
#pragma once

#include <gpubatch/detail/host/checked.hpp>
#include <gpubatch/detail/transfer/plan.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/memory_space.hpp>
#include <gpubatch/pinned_pool.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <memory>

GPUBATCH_NAMESPACE_BEGIN
namespace detail {

/// Resolves a side's memory space. The CUDA backend must know whether host memory is pinned
/// (a registered std::vector is), so it asks the runtime whenever a label says "host" or
/// nothing; the host backend only needs to rule out device memory.
template <class Exec>
memory_space resolve_space(memory_space label, const void* p) noexcept {
  if constexpr (is_cuda_exec_v<Exec>) {
    return (label == memory_space::unknown || label == memory_space::host) ? memory_space_of(p)
                                                                            : label;
  } else {
    return label == memory_space::unknown ? memory_space_of(p) : label;
  }
}

/// memcpy of every line of every plane; the shapes are equal and non-empty.
inline void copy_regions_host(const copy_region& dst, const copy_region& src) noexcept {
  for (std::size_t p = 0; p < dst.count; ++p) {
    std::byte* d = dst.data + p * dst.stride;
    const std::byte* s = src.data + p * src.stride;
    for (std::size_t line = 0; line < dst.height; ++line) {
      std::memcpy(d + line * dst.pitch, s + line * src.pitch, dst.width);
    }
  }
}

/// The same, after merging whatever is contiguous on both sides.
inline void copy_host(copy_region dst, copy_region src) noexcept {
  simplify(dst, src);
  copy_regions_host(dst, src);
}

/// One cudaMemcpyAsync per contiguous plane, one cudaMemcpy2DAsync per strided one; after
/// simplify() a packed or evenly spaced batch is a single call.
inline void copy_regions_cuda(copy_region dst, copy_region src, cudaMemcpyKind kind,
                              cudaStream_t stream) {
  simplify(dst, src);
  for (std::size_t p = 0; p < dst.count; ++p) {
    std::byte* d = dst.data + p * dst.stride;
    const std::byte* s = src.data + p * src.stride;
    if (dst.height == 1) {
      GPUBATCH_CUDA_TRY(cudaMemcpyAsync(d, s, dst.width, kind, stream));
    } else {
      GPUBATCH_CUDA_TRY(cudaMemcpy2DAsync(d, dst.pitch, s, src.pitch, dst.width, dst.height,
                                          kind, stream));
    }
  }
}

/// A host function queued on a stream: unpacks a pinned staging block into pageable memory once
/// the device-to-host copy before it has landed. It must not call CUDA, and does not.
struct unpack_job {
  copy_region dst;
  copy_region src;
};

inline void run_unpack_job(void* job) noexcept {
  const std::unique_ptr<unpack_job> owned(static_cast<unpack_job*>(job));
  copy_host(owned->dst, owned->src);
}

inline void launch_host_unpack(cudaStream_t stream, const copy_region& dst,
                               const copy_region& src) {
  auto job = std::make_unique<unpack_job>(unpack_job{dst, src});
  GPUBATCH_CUDA_TRY(cudaLaunchHostFunc(stream, run_unpack_job, job.get()));
  (void)job.release();  // run_unpack_job owns it now
}

/// Issues the copy of `src` into `dst` (shapes already checked equal).
///
/// Returns a fence of the copy when `want_fence` is set or a staging block had to be tracked;
/// otherwise a complete fence (recording an event costs a little on every call).
/// @throws invalid_argument for memory the backend cannot copy (see plan.hpp)
/// @throws out_of_memory if a staging block cannot be allocated; cuda_error
template <class Exec>
fence_t<Exec> issue_copy(Exec exec, copy_region dst, copy_region src, copy_mode mode,
                         pinned_pool<Exec>* pool, bool want_fence) {
  if (dst.empty()) {
    return {};  // nothing is read or written, so nothing is checked either
  }
  dst.space = resolve_space<Exec>(dst.space, dst.data);
  src.space = resolve_space<Exec>(src.space, src.data);
  if constexpr (is_host_exec_v<Exec>) {
    (void)pool;
    (void)want_fence;
    check_host_copy(dst.space, src.space);
    if (exec.cuda_memory_rules) {
      // The same plan the CUDA backend would make: it throws for what a GPU would refuse.
      (void)plan_cuda_copy(space_under_cuda_rules(dst.data, dst.space),
                           space_under_cuda_rules(src.data, src.space), mode);
    }
    copy_host(dst, src);
    return {};
  } else {
    const cuda_copy_plan plan = plan_cuda_copy(dst.space, src.space, mode);
    const cudaStream_t stream = exec.stream();
    if (plan.host_only) {
      GPUBATCH_CUDA_TRY(cudaStreamSynchronize(stream));  // keep stream order for the caller
      copy_host(dst, src);
      return {};
    }
    pooled_buffer<std::byte, cuda_exec> source_block;
    pooled_buffer<std::byte, cuda_exec> destination_block;
    try {
      copy_region from = src;
      copy_region to = dst;
      if (plan.stage_source) {
        source_block = pool->template allocate<std::byte>(src.bytes());
        from = src.packed_at(source_block.data(), memory_space::pinned);
        copy_host(from, src);
      }
      if (plan.stage_destination) {
        destination_block = pool->template allocate<std::byte>(dst.bytes());
        to = dst.packed_at(destination_block.data(), memory_space::pinned);
      }
      copy_regions_cuda(to, from, plan.kind, stream);
      if (plan.stage_destination) {
        launch_host_unpack(stream, dst, to);
      }
      if (!plan.stage_source && !plan.stage_destination && !want_fence) {
        return {};
      }
      cuda_fence fence = cuda_fence::record(stream);
      source_block.record_use(fence);
      destination_block.record_use(fence);
      return fence;
    } catch (...) {
      // Part of the copy may be queued: let it finish before a staging block goes back.
      GPUBATCH_CUDA_TRY_NOTHROW(cudaStreamSynchronize(stream));
      throw;
    }
  }
}

}  // namespace detail
GPUBATCH_NAMESPACE_END
