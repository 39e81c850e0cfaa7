/// @file error.hpp
/// @brief gpubatch's one error contract: every failure is a `gpubatch::error` or a subclass.
#pragma once

#include <gpubatch/config.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace gpubatch {

/// @brief Base class of every exception gpubatch throws (except `out_of_memory`, which derives
/// from std::bad_alloc so that generic allocation handlers catch it).
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// @brief A CUDA runtime call failed.
class cuda_error : public error {
 public:
  /// @param code the error the call returned
  /// @param call the source text of the call
  /// @param file, line where the call was made
  cuda_error(cudaError_t code, const char* call, const char* file, int line)
      : error(std::string("gpubatch: CUDA error ") + cudaGetErrorName(code) + " (" +
              std::to_string(static_cast<int>(code)) + ", " + cudaGetErrorString(code) +
              ") in `" + call + "` at " + file + ":" + std::to_string(line) + hint(code)),
        code_(code) {}

  /// @brief The CUDA error code.
  [[nodiscard]] cudaError_t code() const noexcept { return code_; }
  /// @brief The CUDA error's symbolic name, e.g. "cudaErrorInvalidValue".
  [[nodiscard]] const char* name() const noexcept { return cudaGetErrorName(code_); }

 private:
  // What to do when the machine has no usable GPU: the raw driver message does not say.
  static const char* hint(cudaError_t code) noexcept {
    switch (code) {
      case cudaErrorInsufficientDriver:
      case cudaErrorNoDevice:
      case cudaErrorInvalidDevice:
      case cudaErrorDevicesUnavailable:
        return ". No usable CUDA device: run on the host backend (gpubatch::on_host), or let "
               "gpubatch::with_best_available pick the backend";
      case cudaErrorNoKernelImageForDevice:
      case cudaErrorInvalidDeviceFunction:
        return ". The kernels were not compiled for this GPU: add its architecture to "
               "CMAKE_CUDA_ARCHITECTURES (nvcc -arch), or let gpubatch::with_best_available "
               "fall back to the host backend";
      default:
        return "";
    }
  }

  cudaError_t code_;
};

/// @brief An argument was invalid; the message names the parameter and the bad value.
class invalid_argument : public error {
 public:
  /// @param parameter the name of the offending parameter, as the caller wrote it
  /// @param what_is_wrong e.g. "leading dimension 3 is smaller than the row length 4"
  invalid_argument(std::string parameter, const std::string& what_is_wrong)
      : error("gpubatch: invalid argument '" + parameter + "': " + what_is_wrong),
        parameter_(std::move(parameter)) {}

  /// @brief The name of the offending parameter.
  [[nodiscard]] const std::string& parameter() const noexcept { return parameter_; }

 private:
  std::string parameter_;
};

/// @brief An allocation failed. Derives from std::bad_alloc, as allocation failures should.
class out_of_memory : public std::bad_alloc {
 public:
  /// @param where "device", "pinned host" or "host"
  /// @param bytes_requested the size of the failed request
  /// @param bytes_free the memory free at the time, as the system reported it (0 if unknown)
  out_of_memory(const char* where, std::size_t bytes_requested, std::size_t bytes_free)
      : message_(std::string("gpubatch: out of ") + where + " memory: requested " +
                 std::to_string(bytes_requested) + " bytes, " + std::to_string(bytes_free) +
                 " bytes free"),
        bytes_requested_(bytes_requested),
        bytes_free_(bytes_free) {}

  /// @brief A request whose size in bytes does not fit in std::size_t: `count` elements of
  /// `element_size` bytes. bytes_requested() is SIZE_MAX.
  static out_of_memory size_overflow(const char* where, std::size_t count,
                                     std::size_t element_size) {
    out_of_memory e(where, static_cast<std::size_t>(-1), 0);
    e.message_ = std::string("gpubatch: ") + where + " allocation of " + std::to_string(count) +
                 " elements of " + std::to_string(element_size) +
                 " bytes: the size in bytes overflows std::size_t (no allocator can satisfy it)";
    return e;
  }

  [[nodiscard]] const char* what() const noexcept override { return message_.c_str(); }
  /// @brief Size of the failed request in bytes.
  [[nodiscard]] std::size_t bytes_requested() const noexcept { return bytes_requested_; }
  /// @brief Memory free when the request failed, in bytes (0 if it could not be queried).
  [[nodiscard]] std::size_t bytes_free() const noexcept { return bytes_free_; }

 private:
  std::string message_;
  std::size_t bytes_requested_;
  std::size_t bytes_free_;
};

GPUBATCH_ABI_BEGIN
namespace detail {
/// Throws cuda_error for a failed call; clears the sticky "last error" so it does not leak
/// into the next check.
inline void throw_on_cuda_error(cudaError_t code, const char* call, const char* file, int line) {
  if (code != cudaSuccess) {
    (void)cudaGetLastError();
    throw cuda_error(code, call, file, line);
  }
}
}  // namespace detail
GPUBATCH_ABI_END

}  // namespace gpubatch

/// @brief Calls a CUDA runtime function and throws gpubatch::cuda_error if it fails.
#define GPUBATCH_CUDA_TRY(call) \
  ::gpubatch::detail::throw_on_cuda_error((call), #call, __FILE__, __LINE__)

/// @brief Calls a CUDA runtime function where throwing is not allowed (destructors, cleanup on
/// an error path). A failure is discarded after clearing CUDA's last error: the caller is
/// already unwinding or releasing, and a second exception would terminate the program.
#define GPUBATCH_CUDA_TRY_NOTHROW(call)   \
  do {                                    \
    if ((call) != cudaSuccess) {          \
      (void)cudaGetLastError();           \
    }                                     \
  } while (0)
