/// @file memory_space.hpp
/// @brief Where memory lives, and which backend can touch it.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/execution.hpp>

#include <cuda_runtime_api.h>

namespace gpubatch {

/// @brief Where a buffer or view's memory lives.
enum class memory_space {
  unknown,  ///< not stated (raw pointers); operations classify it with memory_space_of()
  host,     ///< ordinary (pageable) host memory
  pinned,   ///< page-locked host memory: fast, truly asynchronous copies
  device,   ///< device global memory
  managed,  ///< CUDA managed (unified) memory
};

/// @brief A printable name for a memory space.
[[nodiscard]] constexpr const char* to_string(memory_space s) noexcept {
  switch (s) {
    case memory_space::host: return "host";
    case memory_space::pinned: return "pinned host";
    case memory_space::device: return "device";
    case memory_space::managed: return "managed";
    default: return "unknown";
  }
}

/// @brief Classifies a pointer with the CUDA runtime. Without a driver or device every pointer
/// is host memory. Never throws.
[[nodiscard]] inline memory_space memory_space_of(const void* p) noexcept {
  if (p == nullptr || !cuda_available()) {
    return memory_space::host;
  }
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return memory_space::host;
  }
  switch (attributes.type) {
    case cudaMemoryTypeDevice: return memory_space::device;
    case cudaMemoryTypeHost: return memory_space::pinned;
    case cudaMemoryTypeManaged: return memory_space::managed;
    default: return memory_space::host;
  }
}

/// @brief Whether code running on the backend `Exec` selects may dereference memory in `space`.
/// `unknown` is accepted: the caller has not said, and the operation classifies it first.
template <class Exec>
[[nodiscard]] constexpr bool is_accessible(memory_space space) noexcept {
  if (space == memory_space::unknown || space == memory_space::managed) {
    return true;
  }
  if constexpr (is_cuda_exec_v<Exec>) {
    // Pinned host memory is mapped into the device's address space (UVA), slow but legal.
    return space == memory_space::device || space == memory_space::pinned;
  } else {
    return space == memory_space::host || space == memory_space::pinned;
  }
}

}  // namespace gpubatch
