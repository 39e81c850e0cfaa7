// The backend a shared test body (*.inc) runs on, for host test executables.
#pragma once

#include <gpubatch/gpubatch.hpp>

#include <cstring>
#include <vector>

namespace gpubatch::test {

struct test_backend {
  using exec_type = host_exec;
  static constexpr const char* name = "host";
  /// Checked mode: the host backend refuses what the CUDA backend would, so every shared body
  /// that passes here places its data as a GPU needs it.
  static exec_type exec() { return on_host_checked; }
  static constexpr memory_space space = memory_space::host;

  template <class T>
  static std::vector<T> to_host(const T* data, std::size_t count) {
    return std::vector<T>(data, data + count);
  }
  template <class T>
  static void from_host(T* data, const std::vector<T>& values) {
    // An empty tensor's storage may be null, which memcpy must not see even for 0 bytes.
    if (!values.empty()) std::memcpy(data, values.data(), values.size() * sizeof(T));
  }
  static void synchronize() {}
};

}  // namespace gpubatch::test
