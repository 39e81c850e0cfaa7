// The backend a shared test body (*.inc) runs on, for gpu test executables (compiled by nvcc).
#pragma once

#include <gpubatch/gpubatch.hpp>

#include <vector>

namespace gpubatch::test {

struct test_backend {
  using exec_type = cuda_exec;
  static constexpr const char* name = "cuda";
  static constexpr memory_space space = memory_space::device;

  /// One non-blocking stream for the whole executable, created after main() found a device.
  static const cuda_stream& stream() {
    static const cuda_stream s;
    return s;
  }
  static exec_type exec() { return stream().exec(); }

  template <class T>
  static std::vector<T> to_host(const T* data, std::size_t count) {
    std::vector<T> values(count);
    GPUBATCH_CUDA_TRY(cudaMemcpyAsync(values.data(), data, count * sizeof(T),
                                      cudaMemcpyDeviceToHost, stream().get()));
    stream().synchronize();
    return values;
  }
  template <class T>
  static void from_host(T* data, const std::vector<T>& values) {
    GPUBATCH_CUDA_TRY(cudaMemcpyAsync(data, values.data(), values.size() * sizeof(T),
                                      cudaMemcpyHostToDevice, stream().get()));
    stream().synchronize();
  }
  static void synchronize() { stream().synchronize(); }
};

}  // namespace gpubatch::test
