/// @file execution.hpp
/// @brief Execution arguments: every gpubatch operation takes one first, and its type selects
/// the backend at compile time (as Thrust's execution policies do).
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/error.hpp>

#include <cuda_runtime_api.h>

#include <string>
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
  /// @brief Checked mode (gpubatch::on_host_checked): refuse what the CUDA backend would
  /// refuse. Operands, epilogue pointers and grouped descriptors must be in a device_buffer or
  /// pinned memory (pinned_buffer, pinned_pool, register_host), not in other host memory;
  /// asynchronous copies need a pinned or device side as on the GPU; grouped calls need their
  /// bounds. The results are the same as without it.
  bool cuda_memory_rules = false;
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

/// @brief The host backend in checked mode (host_exec::cuda_memory_rules): a program that runs
/// with it does not fail on the CUDA backend for a reason of memory placement.
inline constexpr host_exec on_host_checked{0, true};

GPUBATCH_ABI_BEGIN
/// @brief Binds the CUDA backend to `stream`: `gpubatch::fill(gpubatch::on(stream), ...)`.
[[nodiscard]] constexpr cuda_exec on(cudaStream_t stream) noexcept { return cuda_exec{stream}; }

GPUBATCH_ABI_END

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

/// @brief Why the best-available backend is what it is (see best_available_choice()).
enum class backend_reason {
  cuda_usable,            ///< cuda: a device is present and runs this file's device code
  compiled_without_cuda,  ///< host: this file was not compiled by a CUDA compiler
  no_driver,              ///< host: no CUDA driver is installed
  driver_too_old,         ///< host: the driver is older than the CUDA runtime linked in
  no_device,              ///< host: the driver reports no CUDA device
  device_unusable,        ///< host: a device is present but could not be initialised
  no_code_for_device,     ///< host: this file's device code runs on none of the current device's
                          ///< architectures (compiled for a newer GPU than the one present)
};

/// @brief The backend best_available picked, and why.
struct backend_choice {
  backend picked = backend::host;
  backend_reason reason = backend_reason::compiled_without_cuda;
  /// @brief The current device's compute capability times 10 (e.g. 90), 0 when none is usable.
  int device_arch = 0;
  /// @brief The CUDA error behind a host choice, cudaSuccess otherwise.
  cudaError_t cuda_status = cudaSuccess;
};

GPUBATCH_ABI_BEGIN
namespace detail {
/// What the CUDA runtime says about this process's devices: the same for every file, so it is
/// asked once.
inline const backend_choice& cuda_runtime_status() noexcept {
  static const backend_choice status = [] {
    backend_choice c;
    c.picked = backend::host;
    int count = 0;
    const cudaError_t counted = cudaGetDeviceCount(&count);
    if (counted != cudaSuccess || count <= 0) {
      (void)cudaGetLastError();
      int driver = 0;
      const bool has_driver = cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0;
      (void)cudaGetLastError();
      c.cuda_status = counted != cudaSuccess ? counted : cudaErrorNoDevice;
      c.reason = !has_driver                                    ? backend_reason::no_driver
                 : counted == cudaErrorInsufficientDriver        ? backend_reason::driver_too_old
                 : counted == cudaErrorNoDevice || count <= 0    ? backend_reason::no_device
                                                                 : backend_reason::device_unusable;
      return c;
    }
    // Creating the primary context proves the device is usable, not only enumerated.
    const cudaError_t initialised = cudaFree(nullptr);
    if (initialised != cudaSuccess) {
      (void)cudaGetLastError();
      c.cuda_status = initialised;
      c.reason = backend_reason::device_unusable;
      return c;
    }
    c.picked = backend::cuda;
    c.reason = backend_reason::cuda_usable;
    return c;
  }();
  return status;
}

#if GPUBATCH_CUDA_COMPILER
GPUBATCH_KERNELS_BEGIN
/// Compiled with the file's other device code: whether it runs tells whether they do.
template <int = 0>
GPUBATCH_KERNEL void device_code_probe_kernel() {}
GPUBATCH_KERNELS_END
#endif
}  // namespace detail

/// @brief Whether a usable CUDA device is present in this process.
///
/// Returns false — never throws, aborts or prints — when there is no driver, no device, or the
/// device cannot be initialised. The answer is computed once per process. Whether this file can
/// use the device is best_available_choice()'s question.
[[nodiscard]] inline bool cuda_available() noexcept {
  return detail::cuda_runtime_status().picked == backend::cuda;
}

/// @brief Which backend this translation unit's best-available calls run, and why.
///
/// CUDA when the file is compiled by a CUDA compiler, a device is usable, and the file's device
/// code runs on the current device; the host otherwise, with the reason. A `.cpp` file always
/// gets the host (reason compiled_without_cuda), even on a machine with a GPU: its code has no
/// kernels to launch. Never throws.
[[nodiscard]] inline backend_choice best_available_choice() noexcept {
  backend_choice choice = detail::cuda_runtime_status();
#if GPUBATCH_CUDA_COMPILER
  if (choice.picked != backend::cuda) {
    return choice;
  }
  int device = 0;
  int major = 0;
  int minor = 0;
  if (cudaGetDevice(&device) == cudaSuccess &&
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess) {
    choice.device_arch = major * 10 + minor;
  }
  cudaFuncAttributes attributes{};
  const cudaError_t probed =
      cudaFuncGetAttributes(&attributes, detail::device_code_probe_kernel<>);
  if (probed != cudaSuccess) {
    (void)cudaGetLastError();
    choice.picked = backend::host;
    choice.reason = backend_reason::no_code_for_device;
    choice.cuda_status = probed;
  }
  return choice;
#else
  // The device is described all the same, so the reason can say what this file is missing.
  if (choice.picked == backend::cuda) {
    choice.picked = backend::host;
  }
  choice.reason = backend_reason::compiled_without_cuda;
  return choice;
#endif
}

/// @brief The best backend this translation unit can run: best_available_choice().picked.
[[nodiscard]] inline backend best_available_backend() noexcept {
  return best_available_choice().picked;
}

/// @brief A printable name for a backend: "host" or "cuda".
[[nodiscard]] constexpr const char* to_string(backend b) noexcept {
  return b == backend::cuda ? "cuda" : "host";
}

/// @brief A sentence saying what a reason means, e.g. "no CUDA driver is installed".
[[nodiscard]] constexpr const char* to_string(backend_reason r) noexcept {
  switch (r) {
    case backend_reason::cuda_usable:
      return "a CUDA device is present and runs this file's device code";
    case backend_reason::compiled_without_cuda:
      return "this file was not compiled by a CUDA compiler, so it has no kernels to launch "
             "(compile it as CUDA, a .cu file or LANGUAGE CUDA, to use a GPU)";
    case backend_reason::no_driver:
      return "no CUDA driver is installed";
    case backend_reason::driver_too_old:
      return "the CUDA driver is older than the CUDA runtime this program was built with";
    case backend_reason::no_device:
      return "the CUDA driver reports no device";
    case backend_reason::device_unusable:
      return "a CUDA device is present but could not be initialised";
    case backend_reason::no_code_for_device:
      return "this file's device code was compiled for none of the current device's "
             "architectures (see CMAKE_CUDA_ARCHITECTURES)";
  }
  return "unknown";
}

/// @brief One line for logs: the backend, the reason, and the device's compute capability.
[[nodiscard]] inline std::string to_string(const backend_choice& choice) {
  std::string line = std::string(to_string(choice.picked)) + " backend: " + to_string(choice.reason);
  if (choice.device_arch > 0) {
    line += " (device compute capability " + std::to_string(choice.device_arch / 10) + "." +
            std::to_string(choice.device_arch % 10) + ")";
  }
  if (choice.cuda_status != cudaSuccess) {
    line += std::string(" [") + cudaGetErrorName(choice.cuda_status) + "]";
  }
  return line;
}

/// @brief Calls `f` with the best available execution argument: `cuda_exec{stream}` when
/// best_available_choice() picks CUDA, `host_exec{}` otherwise.
///
/// `f` is a generic callable, instantiated for each backend the translation unit can run, so
/// one code path serves a machine with and without a GPU. The work `f` issues on `stream` is
/// asynchronous, as for any cuda_exec call; on the host it is done when `f` returns.
/// A file not compiled by a CUDA compiler always takes the host path (see best_available_choice).
/// @return whatever `f` returns (both instantiations must return the same type)
template <class F>
decltype(auto) with_best_available(cudaStream_t stream, F&& f) {
#if GPUBATCH_CUDA_COMPILER
  if (best_available_choice().picked == backend::cuda) {
    return std::forward<F>(f)(cuda_exec{stream});
  }
#else
  (void)stream;
#endif
  return std::forward<F>(f)(host_exec{});
}

namespace detail {
/// A stream created for one call and, however the call ends, waited for and destroyed: the
/// caller's buffers may be freed right after.
class owned_stream {
 public:
  owned_stream() {
    const cudaError_t created = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (created != cudaSuccess) {
      (void)cudaGetLastError();
      throw cuda_error(created, "cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)",
                       __FILE__, __LINE__);
    }
  }
  owned_stream(const owned_stream&) = delete;
  owned_stream& operator=(const owned_stream&) = delete;
  ~owned_stream() {
    if (cudaStreamSynchronize(stream_) != cudaSuccess) (void)cudaGetLastError();
    if (cudaStreamDestroy(stream_) != cudaSuccess) (void)cudaGetLastError();
  }
  [[nodiscard]] cudaStream_t get() const noexcept { return stream_; }
  /// Waits for the work; throws cuda_error if it failed.
  void synchronize() const {
    const cudaError_t status = cudaStreamSynchronize(stream_);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      throw cuda_error(status, "cudaStreamSynchronize(stream)", __FILE__, __LINE__);
    }
  }

 private:
  cudaStream_t stream_ = nullptr;
};
}  // namespace detail

/// @brief Calls `f` with the best available execution argument, as the overload taking a
/// stream does, on a stream of its own when CUDA is picked; returns when the work `f` issued is
/// done, on either backend. Needs no device: on a machine without one it runs the host backend.
///
/// Results must be read into host memory inside `f` (e.g. with gpubatch::copy), or live in
/// memory the caller owns: the stream is gone when the call returns.
/// @return whatever `f` returns (both instantiations must return the same type)
/// @throws cuda_error if the stream cannot be created or the work fails; whatever `f` throws
template <class F>
decltype(auto) with_best_available(F&& f) {
  using result = decltype(std::forward<F>(f)(host_exec{}));
#if GPUBATCH_CUDA_COMPILER
  if (best_available_choice().picked == backend::cuda) {
    static_assert(std::is_same_v<result, decltype(std::forward<F>(f)(cuda_exec{nullptr}))>,
                  "gpubatch::with_best_available: f must return the same type for host_exec "
                  "and cuda_exec");
    const detail::owned_stream stream;
    if constexpr (std::is_void_v<result>) {
      std::forward<F>(f)(cuda_exec{stream.get()});
      stream.synchronize();
      return;
    } else {
      result value = std::forward<F>(f)(cuda_exec{stream.get()});
      stream.synchronize();
      if constexpr (std::is_reference_v<result>) {
        return static_cast<result>(value);
      } else {
        return value;
      }
    }
  }
#endif
  return static_cast<result>(std::forward<F>(f)(host_exec{}));
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
GPUBATCH_ABI_END

}  // namespace gpubatch
