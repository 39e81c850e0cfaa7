/// @file execution.hpp
/// @brief Execution arguments: every gpubatch operation takes one first, and its type selects
/// the backend at compile time (as Thrust's execution policies do).
#pragma once

#include <gpubatch/config.hpp>

#include <cuda_runtime_api.h>

#include <type_traits>
#include <utility>

namespace gpubatch {

/// @brief The two backends; `best_available_backend()` says which this translation unit picks.
enum class backend { host, cuda };

/// @brief Runs an operation on the CPU: OpenMP across the batch when the translation unit is
/// compiled with OpenMP, serially otherwise. Works in any translation unit.
struct host_exec {
  /// @brief Upper bound on OpenMP threads for one call; 0 keeps OpenMP's default.
  int max_threads = 0;
};

/// @brief Runs an operation on the current CUDA device, ordered on a stream the caller owns.
///
/// Operations that launch kernels need the calling translation unit to be compiled by nvcc;
/// calling one from a host-compiled file is a compile-time error that says so.
class cuda_exec {
 public:
  /// @param stream the stream every launch and copy of the operation is ordered on; the
  ///        legacy default stream (nullptr) is allowed but serialises with other work
  constexpr explicit cuda_exec(cudaStream_t stream) noexcept : stream_(stream) {}

  /// @brief The stream the operation is ordered on.
  [[nodiscard]] constexpr cudaStream_t stream() const noexcept { return stream_; }

 private:
  cudaStream_t stream_;
};

/// @brief The host backend, ready to pass: `gpubatch::fill(gpubatch::on_host, ...)`.
inline constexpr host_exec on_host{};

/// @brief Binds the CUDA backend to `stream`: `gpubatch::fill(gpubatch::on(stream), ...)`.
[[nodiscard]] constexpr cuda_exec on(cudaStream_t stream) noexcept { return cuda_exec{stream}; }

/// @brief True for gpubatch's execution argument types.
template <class Exec>
inline constexpr bool is_execution_v =
    std::is_same_v<std::decay_t<Exec>, host_exec> || std::is_same_v<std::decay_t<Exec>, cuda_exec>;

/// @brief True when `Exec` selects the CUDA backend.
template <class Exec>
inline constexpr bool is_cuda_exec_v = std::is_same_v<std::decay_t<Exec>, cuda_exec>;

/// @brief True when `Exec` selects the host backend.
template <class Exec>
inline constexpr bool is_host_exec_v = std::is_same_v<std::decay_t<Exec>, host_exec>;

/// @brief Whether a usable CUDA device is present.
///
/// Returns false — never throws, aborts or prints — when there is no driver, no device, or the
/// device cannot be initialised. The answer is computed once per process.
[[nodiscard]] inline bool cuda_available() noexcept {
  static const bool available = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count <= 0) {
      (void)cudaGetLastError();
      return false;
    }
    // Creating the primary context proves the device is usable, not only enumerated.
    if (cudaFree(nullptr) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return true;
  }();
  return available;
}

/// @brief The best backend this translation unit can run: CUDA when it is compiled by nvcc and
/// a device is present, the host otherwise.
[[nodiscard]] inline backend best_available_backend() noexcept {
  return (GPUBATCH_CUDA_COMPILER && cuda_available()) ? backend::cuda : backend::host;
}

/// @brief A printable name for a backend: "host" or "cuda".
[[nodiscard]] constexpr const char* to_string(backend b) noexcept {
  return b == backend::cuda ? "cuda" : "host";
}

/// @brief Calls `f` with the best available execution argument: `cuda_exec{stream}` when this
/// translation unit is compiled by nvcc and a CUDA device is present, `host_exec{}` otherwise.
///
/// `f` is a generic callable, instantiated for each backend the translation unit can run, so
/// one code path serves a machine with and without a GPU.
/// @return whatever `f` returns (both instantiations must return the same type)
template <class F>
decltype(auto) with_best_available(cudaStream_t stream, F&& f) {
#if GPUBATCH_CUDA_COMPILER
  if (cuda_available()) {
    return std::forward<F>(f)(cuda_exec{stream});
  }
#else
  (void)stream;
#endif
  return std::forward<F>(f)(host_exec{});
}

namespace detail {
template <class Exec>
inline constexpr bool dependent_false_v = false;

/// Call at the top of a CUDA-backend operation that launches kernels. In a translation unit not
/// compiled by nvcc it fails the build with a message instead of a link error.
template <class Exec>
constexpr void require_cuda_compiler() {
  static_assert(!is_cuda_exec_v<Exec> || GPUBATCH_CUDA_COMPILER,
                "gpubatch: this operation runs CUDA kernels, so with gpubatch::cuda_exec it needs "
                "a translation unit compiled by nvcc (a .cu file, or LANGUAGE CUDA in CMake). "
                "Use gpubatch::host_exec in host-compiled code.");
}
}  // namespace detail

}  // namespace gpubatch
