/// @file fill.hpp
/// @brief fill: set every element of a buffer to a value, on either backend. Tests use it to
/// poison outputs before a run, so that an element an operation forgot to write is caught.
#pragma once

#include <gpubatch/containers.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/memory_space.hpp>

#include <cstddef>
#include <string>

#if GPUBATCH_CUDA_COMPILER
#include <gpubatch/detail/fill/kernels.cuh>
#endif

GPUBATCH_NAMESPACE_BEGIN

namespace detail {
/// fill's body; `name` is the parameter the caller passed the memory as.
template <class Exec, class T>
void fill_elements(Exec exec, T* first, std::size_t count, const T& value, memory_space space,
                   const char* name) {
  static_assert(is_execution_v<Exec>, "gpubatch::fill: the first argument must be an execution "
                                      "argument (gpubatch::on_host or gpubatch::on(stream))");
  require_cuda_compiler<Exec>();
  if (count == 0) {
    return;
  }
  if (first == nullptr) {
    throw invalid_argument(name, "null pointer for " + std::to_string(count) + " elements");
  }
  if (space == memory_space::unknown) {
    space = memory_space_of(first);
  }
  if (!is_accessible<Exec>(space)) {
    throw invalid_argument(name, std::string("points to ") + to_string(space) +
                                     " memory, which the " +
                                     (is_cuda_exec_v<Exec> ? "cuda" : "host") +
                                     " backend cannot write");
  }
  if constexpr (is_cuda_exec_v<Exec>) {
#if GPUBATCH_CUDA_COMPILER
    launch_fill(first, count, value, exec.stream());
#endif
  } else {
    (void)exec;
    const auto n = static_cast<std::ptrdiff_t>(count);
    GPUBATCH_OMP_PARALLEL_FOR
    for (std::ptrdiff_t i = 0; i < n; ++i) {
      first[i] = value;
    }
  }
}
}  // namespace detail

/// @brief Sets `count` elements starting at `first` to `value`.
///
/// With cuda_exec the fill is asynchronous on exec's stream and `first` must be device-accessible;
/// with host_exec it is done when the call returns.
/// @param space where `first` lives, if known (else classified with memory_space_of);
///        checked against the backend
/// @throws invalid_argument naming "first" if it is null with a nonzero count, or lives in
///         memory the backend cannot write
/// @throws cuda_error if the launch fails
template <class Exec, class T>
void fill(Exec exec, T* first, std::size_t count, const T& value,
          memory_space space = memory_space::unknown) {
  detail::fill_elements(exec, first, count, value, space, "first");
}

/// @brief Sets every element of `buffer` to `value`.
/// @throws invalid_argument naming "buffer" if `exec` selects a backend that cannot write the
///         buffer's memory
template <class Exec, class T>
void fill(Exec exec, device_buffer<T>& buffer, const T& value) {
  detail::fill_elements(exec, buffer.data(), buffer.size(), value, buffer.space(), "buffer");
}

GPUBATCH_NAMESPACE_END
