/// @file openblas.hpp
/// @brief OpenBLAS as a baseline: make sure it runs the kernels of this CPU, and say which.
///
/// Include it in exactly one translation unit of a benchmark executable that links OpenBLAS.
/// OpenBLAS picks its kernels when the library loads, from the CPU's model number. Releases
/// older than the CPU (0.3.21, Debian 12's, on Emerald Rapids, for one) fall back to a generic
/// SSE3 core ("Prescott") five to ten times slower than the AVX-512 one: a baseline that weak
/// would flatter every ratio. Such a process re-executes itself with OPENBLAS_CORETYPE naming
/// the core the CPU's features support, before any benchmark runs; the JSON context records the
/// core used ("openblas_core").
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#if defined(__linux__)
#include <unistd.h>
#endif

extern "C" char* openblas_get_corename(void);
extern "C" char* openblas_get_config(void);

namespace gpubatch::bench::detail {

/// The OpenBLAS core that uses this CPU's widest vector unit, or nullptr without AVX2.
inline const char* native_openblas_core() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return "SKYLAKEX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return "HASWELL";
  }
#endif
  return nullptr;
}

/// Whether OpenBLAS chose a core that predates AVX2, the fallback for a CPU it does not know.
inline bool generic_openblas_core(const std::string& core) {
  for (const char* old : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Katmai",
                          "Coppermine", "Northwood", "Banias", "Atom", "Generic", "Sandybridge"}) {
    if (core == old) return true;
  }
  return false;
}

/// Re-executes this process with OPENBLAS_CORETYPE set when OpenBLAS fell back to a generic
/// core on a CPU with AVX2 or AVX-512 (and the caller did not choose a core), then records
/// the core in the benchmark context. Returns only when no re-execution happened.
inline bool use_native_openblas_core() {
  const std::string core = openblas_get_corename();
  const char* native = native_openblas_core();
#if defined(__linux__)
  if (native != nullptr && generic_openblas_core(core) && std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
    const std::string all((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    std::vector<std::string> args;
    for (std::size_t start = 0; start < all.size();) {
      const std::size_t end = all.find('\0', start);
      args.push_back(all.substr(start, end - start));
      start = end == std::string::npos ? all.size() : end + 1;
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::fprintf(stderr, "gpubatch bench: OpenBLAS chose the generic core %s; running again with "
                 "OPENBLAS_CORETYPE=%s\n", core.c_str(), native);
    if (!args.empty() && setenv("OPENBLAS_CORETYPE", native, 1) == 0) {
      execv("/proc/self/exe", argv.data());
    }
    std::fprintf(stderr, "gpubatch bench: could not re-execute; OpenBLAS stays on %s\n", core.c_str());
  }
#endif
  benchmark::AddCustomContext("openblas_core", core);
  benchmark::AddCustomContext("openblas_config", openblas_get_config());
  return true;
}

/// Runs before main(): OpenBLAS, a shared library, has initialised by then.
inline const bool openblas_checked = use_native_openblas_core();

}  // namespace gpubatch::bench::detail
