/// @file detail/host/checked.hpp
/// @brief gpubatch::on_host_checked: the host backend applying the CUDA backend's memory rules,
/// so that a program that passes on the host does not fail on a GPU for a reason the host could
/// have seen.
#pragma once

#include <gpubatch/detail/containers/allocate.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/memory_space.hpp>

#include <string>

GPUBATCH_NAMESPACE_BEGIN
namespace detail {

/// The memory space the CUDA backend would see at `address`, whose own space is `space`: the
/// host backend's device_buffer counts as device memory and its pinned memory as pinned; any
/// other host memory is pageable.
inline memory_space space_under_cuda_rules(const void* address, memory_space space) {
  const memory_space role = detail_shared::host_roles().find(address);
  return role != memory_space::unknown ? role : space;
}

/// Whether `exec` is the host backend in checked mode.
template <class Exec>
[[nodiscard]] constexpr bool applies_cuda_rules(const Exec& exec) noexcept {
  if constexpr (is_host_exec_v<Exec>) {
    return exec.cuda_memory_rules;
  } else {
    (void)exec;
    return false;
  }
}

/// With gpubatch::on_host_checked, `address` must be memory the CUDA backend could read or write.
/// @throws invalid_argument naming `parameter`
template <class Exec>
void require_cuda_rules(const Exec& exec, const char* parameter, memory_space space,
                        const void* address) {
  if (!applies_cuda_rules(exec) || address == nullptr) {
    return;
  }
  const memory_space as_cuda = space_under_cuda_rules(address, space);
  if (!is_accessible<cuda_exec>(as_cuda)) {
    throw invalid_argument(parameter,
                           std::string("is in ") + to_string(as_cuda) +
                               " memory, which the cuda backend cannot access (on_host_checked "
                               "applies its rules): allocate it as a device_buffer, pinned_buffer "
                               "or pinned_pool block, or register it with register_host");
  }
}

}  // namespace detail
GPUBATCH_NAMESPACE_END
