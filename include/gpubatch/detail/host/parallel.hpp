/// @file detail/host/parallel.hpp
/// @brief The host backend's parallel loop: OpenMP when the translation unit has it, serial
/// otherwise; an exception thrown by an iteration is rethrown to the caller after the loop
/// (letting it escape an OpenMP region would terminate the program).
#pragma once

#include <gpubatch/execution.hpp>
#include <gpubatch/views.hpp>

#include <atomic>
#include <exception>
#include <mutex>

#if defined(_OPENMP)
#include <omp.h>
#endif

GPUBATCH_NAMESPACE_BEGIN
namespace detail {

/// How iterations are handed to threads: equal blocks for uniform work, one at a time for
/// iterations of different cost (grouped problems).
enum class schedule { uniform, dynamic };

/// The number of threads host_parallel_for uses for `exec` (1 without OpenMP).
inline int host_thread_count(host_exec exec) {
#if defined(_OPENMP)
  if (omp_in_parallel()) return 1;
  return exec.max_threads > 0 ? exec.max_threads : omp_get_max_threads();
#else
  (void)exec;
  return 1;
#endif
}

/// Calls body(i) for i in [0, count), in parallel across the threads host_exec allows.
template <class Body>
void host_parallel_for(host_exec exec, index_t count, schedule kind, Body&& body) {
  if (count <= 0) {
    return;
  }
#if defined(_OPENMP)
  const int threads = host_thread_count(exec);
  if (count == 1 || threads == 1) {  // also inside an enclosing parallel region
    for (index_t i = 0; i < count; ++i) body(i);
    return;
  }
  std::exception_ptr failure;
  std::once_flag first_failure;
  std::atomic<bool> failed{false};
  const auto guarded = [&](index_t i) {
    if (failed.load(std::memory_order_relaxed)) return;  // stop issuing work after a failure
    try {
      body(i);
    } catch (...) {
      std::call_once(first_failure, [&] { failure = std::current_exception(); });
      failed.store(true, std::memory_order_relaxed);
    }
  };
  if (kind == schedule::dynamic) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (index_t i = 0; i < count; ++i) guarded(i);
  } else {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (index_t i = 0; i < count; ++i) guarded(i);
  }
  if (failure) std::rethrow_exception(failure);
#else
  (void)exec;
  (void)kind;
  for (index_t i = 0; i < count; ++i) body(i);
#endif
}

}  // namespace detail
GPUBATCH_NAMESPACE_END
