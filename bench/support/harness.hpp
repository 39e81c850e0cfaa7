/// @file harness.hpp
/// @brief What every gpubatch benchmark shares: the naming convention the renderer reads, device
/// timing with CUDA events, throughput counters, L2-defeating input rotation, clean skips on a
/// machine without a GPU, and the hardware/commit context of the JSON report.
///
/// Timing, by backend (bench/README.md):
///  - kernels and copies on a stream: time_on_device() inside the benchmark, registered with
///    UseManualTime(), so the reported time is device time between two CUDA events;
///  - host work, and host-side API calls such as allocation: Google Benchmark's own timer,
///    registered with UseRealTime() so wall-clock time (not CPU time summed over OpenMP threads)
///    is what decides the iteration count and what the report shows.
#pragma once

#include <gpubatch/containers.hpp>
#include <gpubatch/detail/host/cache.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/stream.hpp>
#include <gpubatch/version.hpp>

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace gpubatch::bench {

/// @brief The implementation name of the code under test. Every other implementation in a group
/// is a baseline, and the report shows the time ratio gpubatch / baseline.
inline constexpr const char* subject = "gpubatch";

inline constexpr std::int64_t kib = std::int64_t{1} << 10;  ///< bytes in a KiB
inline constexpr std::int64_t mib = std::int64_t{1} << 20;  ///< bytes in a MiB

/// @brief Bytes a host working set needs to come from memory rather than a cache: four times
/// the last-level cache (as the host kernels see it, from CPUID), at least 128 MiB.
///
/// Half again the cache is not enough: on a 32 MiB L3 (an AMD EPYC slice) a 48 MiB triad ran at
/// 1.2x to 1.7x the rate of a 128 MiB one timed right after it, its lines partly still in the
/// cache from the previous pass.
[[nodiscard]] inline std::int64_t host_streaming_bytes() {
  const auto cache = static_cast<std::int64_t>(gpubatch::detail::host_cache::last_level_bytes());
  return std::max<std::int64_t>(128 * mib, 4 * cache);
}

/// @brief The benchmark name scripts/render_benchmarks.py parses: "<group>/<impl>".
///
/// Google Benchmark appends the arguments ("/bytes:1024") and the timer ("/real_time"); the
/// last argument is the x axis of the group's plot. Implementations of one group must measure
/// the same work on the same data, so that their times can be divided.
/// @param group what is measured and on which backend, e.g. "device_buffer_alloc.cuda"
/// @param impl "gpubatch" for the code under test, else the baseline's name, e.g. "cudaMalloc"
/// @throws std::invalid_argument if either part is empty or contains '/'
[[nodiscard]] inline std::string name(const std::string& group, const std::string& impl) {
  for (const std::string* part : {&group, &impl}) {
    if (part->empty() || part->find('/') != std::string::npos) {
      throw std::invalid_argument("gpubatch::bench::name: '" + *part +
                                  "' must be non-empty and contain no '/'");
    }
  }
  return group + "/" + impl;
}

/// @brief The benchmark's first argument as a byte or element count.
[[nodiscard]] inline std::size_t size_arg(const benchmark::State& state, std::size_t index = 0) {
  return static_cast<std::size_t>(state.range(index));
}

/// @brief Skips a CUDA benchmark with "no CUDA device" when none is usable, so a binary that
/// mixes host and CUDA benchmarks still runs its host ones on a machine without a GPU.
/// @return true when the benchmark was skipped and must return without entering its loop
[[nodiscard]] inline bool skip_without_cuda(benchmark::State& state) {
  if (cuda_available()) {
    return false;
  }
  state.SkipWithError("no CUDA device");
  return true;
}

/// @brief Runs `body`, turning an exception into a skip that carries its message.
///
/// Google Benchmark does not catch exceptions: one out_of_memory at the largest size would end
/// the whole binary and lose every result after it. This reports that size as errored instead.
template <class Body>
void report_errors(benchmark::State& state, Body&& body) {
  try {
    std::forward<Body>(body)();
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

/// @brief Runs a host benchmark body; exceptions become skips (see report_errors()).
template <class Body>
void run_host_benchmark(benchmark::State& state, Body&& body) {
  report_errors(state, std::forward<Body>(body));
}

/// @brief Runs a CUDA benchmark body as `body(stream)` on a fresh non-blocking stream.
///
/// Skips with "no CUDA device" without a GPU; exceptions become skips. The stream is
/// synchronised after the body, so no work of one benchmark overlaps the next.
template <class Body>
void run_cuda_benchmark(benchmark::State& state, Body&& body) {
  if (skip_without_cuda(state)) {
    return;
  }
  report_errors(state, [&] {
    const cuda_stream stream;
    std::forward<Body>(body)(stream);
    stream.synchronize();
  });
}

/// @brief Times every iteration of `body` in device time: a CUDA event is recorded on `stream`
/// before and after it and the elapsed time goes to state.SetIterationTime(). Register the
/// benchmark with UseManualTime().
///
/// One untimed call warms up first (module loading, lazy context work, first touch of pool
/// memory). The events bracket the launches, so for kernels of a few microseconds the time
/// includes the launch latency: put several calls in `body` when that matters.
/// @param body issues the measured work on `stream`; it must not synchronise the stream
template <class Body>
void time_on_device(benchmark::State& state, cudaStream_t stream, Body&& body) {
  body();
  GPUBATCH_CUDA_TRY(cudaStreamSynchronize(stream));
  event_timer timer;
  for (auto _ : state) {
    timer.start(stream);
    body();
    timer.stop(stream);
    state.SetIterationTime(static_cast<double>(timer.elapsed_ms()) * 1e-3);
  }
}

/// @brief Reports throughput as rate counters: "flops_per_second" and "bytes_per_second", each
/// per-iteration amount times the iterations, divided by the benchmark's time (device time for
/// UseManualTime() benchmarks). Decimal prefixes, as peak rates are quoted.
///
/// Count what the operation must do, not what an implementation happens to do: bytes are the
/// compulsory traffic (inputs read once, outputs written once), so that the rates of gpubatch and
/// its baselines compare against the same floor.
/// @param flops_per_iteration floating-point operations of one iteration; 0 reports none
/// @param bytes_per_iteration bytes one iteration must move; 0 reports none
inline void set_rates(benchmark::State& state, double flops_per_iteration,
                      double bytes_per_iteration) {
  if (flops_per_iteration > 0) {
    state.counters["flops_per_second"] = benchmark::Counter(
        flops_per_iteration, benchmark::Counter::kIsIterationInvariantRate,
        benchmark::Counter::kIs1000);
  }
  if (bytes_per_iteration > 0) {
    state.counters["bytes_per_second"] = benchmark::Counter(
        bytes_per_iteration, benchmark::Counter::kIsIterationInvariantRate,
        benchmark::Counter::kIs1000);
  }
}

/// @brief Reports "paired_ratio": the median, over pairs of back-to-back host calls, of the
/// subject's time divided by the baseline's, on the data both benchmarks use.
///
/// Two benchmarks timed minutes apart on a shared machine see different machines: their
/// median times can differ by 30% or more from one run to the next while a call of each,
/// run one right after the other, sees the same one. The pairs alternate which call goes
/// first, so neither always finds the caches as the other left them. Call it after the timed
/// loop, from the baseline's benchmark: it runs for about `budget` (at least `min_pairs`).
/// @param subject_call one call of the code under test
/// @param baseline_call one call of the baseline, on the same inputs
template <class Subject, class Baseline>
void set_paired_ratio(benchmark::State& state, Subject&& subject_call, Baseline&& baseline_call,
                      std::chrono::duration<double> budget = std::chrono::milliseconds(200),
                      int min_pairs = 5) {
  using clock = std::chrono::steady_clock;
  const auto timed = [](auto& call) {
    const auto t0 = clock::now();
    call();
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  std::vector<double> ratios;
  const auto start = clock::now();
  for (int pair = 0; pair < min_pairs || clock::now() - start < budget; ++pair) {
    double subject_s = 0;
    double baseline_s = 0;
    if (pair % 2 == 0) {
      subject_s = timed(subject_call);
      baseline_s = timed(baseline_call);
    } else {
      baseline_s = timed(baseline_call);
      subject_s = timed(subject_call);
    }
    if (baseline_s > 0) ratios.push_back(subject_s / baseline_s);
  }
  if (ratios.empty()) return;
  std::sort(ratios.begin(), ratios.end());
  const std::size_t half = ratios.size() / 2;
  state.counters["paired_ratio"] =
      ratios.size() % 2 == 1 ? ratios[half] : 0.5 * (ratios[half - 1] + ratios[half]);
}

/// @brief The L2 cache size of the current device in bytes.
/// @throws cuda_error without a device
[[nodiscard]] inline std::size_t device_l2_bytes() {
  int device = 0;
  int l2 = 0;
  GPUBATCH_CUDA_TRY(cudaGetDevice(&device));
  GPUBATCH_CUDA_TRY(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  return static_cast<std::size_t>(l2);
}

/// @brief Copies of one device input, handed out in turn so that an iteration never reads data
/// the previous iterations left in L2.
///
/// Together the copies exceed twice the L2 size (CUTLASS's measurement guideline): by the time a
/// copy comes round again, it has been evicted. The copies live in one allocation, each at a
/// 256-byte-aligned offset, so small inputs do not need thousands of allocations.
///
/// For an operation with several inputs, give every input's rotating_buffers the same number
/// of copies, copies_to_exceed_l2(sum of the inputs' bytes), and call next() on each per
/// iteration: the inputs then rotate in step and the whole working set exceeds 2x L2.
class rotating_buffers {
 public:
  /// @param bytes_per_copy the size of one input
  /// @param exec the stream the copies are allocated and freed on
  /// @param copies the number of copies; 0 picks copies_to_exceed_l2(bytes_per_copy)
  /// @throws out_of_memory, cuda_error
  rotating_buffers(std::size_t bytes_per_copy, cuda_exec exec, std::size_t copies = 0)
      : bytes_(bytes_per_copy),
        stride_(round_up(bytes_per_copy == 0 ? 1 : bytes_per_copy, alignment)),
        copies_(copies != 0 ? copies : copies_to_exceed_l2(bytes_per_copy)),
        slab_(stride_ * copies_, exec) {}

  /// @brief How many copies of an input of `bytes_per_set` bytes exceed 2x the device's L2;
  /// at least 2, so an iteration never rereads the copy the previous one read.
  [[nodiscard]] static std::size_t copies_to_exceed_l2(std::size_t bytes_per_set) {
    const std::size_t set = bytes_per_set == 0 ? 1 : bytes_per_set;
    const std::size_t copies = 2 * device_l2_bytes() / set + 1;
    return copies < 2 ? 2 : copies;
  }

  /// @brief Uploads the same `bytes_per_copy()` bytes from `host` into every copy, so that every
  /// iteration, and every implementation, reads the same data. Returns when the upload is done.
  /// @throws cuda_error
  void upload(const void* host) {
    GPUBATCH_CUDA_TRY(cudaMemcpyAsync(slab_.data(), host, bytes_, cudaMemcpyHostToDevice, slab_.stream()));
    replicate_first();
  }

  /// @brief Copies the first copy into every other one (after it was written on the device, e.g.
  /// by device_values.cuh). Returns when the copies are done.
  /// @throws cuda_error
  void replicate_first() {
    cudaStream_t stream = slab_.stream();
    std::byte* base = slab_.data();
    // Doubling: copies [0, n) are duplicated into [n, 2n), so this is O(log copies) calls.
    for (std::size_t done = 1; done < copies_; done *= 2) {
      const std::size_t count = done < copies_ - done ? done : copies_ - done;
      GPUBATCH_CUDA_TRY(cudaMemcpyAsync(base + done * stride_, base, count * stride_,
                                        cudaMemcpyDeviceToDevice, stream));
    }
    GPUBATCH_CUDA_TRY(cudaStreamSynchronize(stream));
  }

  /// @brief The first copy, which upload() and replicate_first() copy from.
  [[nodiscard]] void* first() noexcept { return slab_.data(); }
  /// @brief The stream the copies are made on.
  [[nodiscard]] cudaStream_t stream() const noexcept { return slab_.stream(); }

  /// @brief The next copy in turn.
  [[nodiscard]] void* next() noexcept {
    void* p = slab_.data() + next_ * stride_;
    next_ = next_ + 1 == copies_ ? 0 : next_ + 1;
    return p;
  }

  /// @brief The next copy in turn, as `T*`.
  template <class T>
  [[nodiscard]] T* next_as() noexcept {
    return static_cast<T*>(next());
  }

  /// @brief The number of copies.
  [[nodiscard]] std::size_t copies() const noexcept { return copies_; }
  /// @brief The size of one copy in bytes.
  [[nodiscard]] std::size_t bytes_per_copy() const noexcept { return bytes_; }

 private:
  static constexpr std::size_t alignment = 256;  // cudaMalloc's alignment: full-width loads
  static constexpr std::size_t round_up(std::size_t n, std::size_t to) noexcept {
    return (n + to - 1) / to * to;
  }

  std::size_t bytes_;
  std::size_t stride_;
  std::size_t copies_;
  device_buffer<std::byte> slab_;
  std::size_t next_ = 0;
};

namespace detail {
/// The value of the first /proc/cpuinfo line whose key is `key` ("model name", "cpu family"),
/// empty where there is none.
inline std::string cpuinfo_value(const std::string& key) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(name.find_last_not_of(" \t") + 1);  // "model\t\t: 17" names "model"
    if (name != key) continue;
    const std::size_t start = line.find_first_not_of(' ', colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  }
  return {};
}

/// The CPU's model name, as Google Benchmark's context lacks it.
inline std::string cpu_model() {
  const std::string name = cpuinfo_value("model name");
  return name.empty() ? "unknown" : name;
}

/// "family 25 model 17": tells apart cores a model name does not (two generations of
/// "AMD EPYC"); empty where it is not found.
inline std::string cpu_family_model() {
  const std::string family = cpuinfo_value("cpu family"), model = cpuinfo_value("model");
  return family.empty() || model.empty() ? std::string() : "family " + family + " model " + model;
}

/// The widest vector instructions the calling source was compiled for. Static, not inline: an
/// executable mixes sources built with and without -march=native, and each must see its own.
static inline const char* host_vector_isa() {
#if defined(__AVX512F__)
  return "AVX-512";
#elif defined(__AVX2__)
  return "AVX2";
#elif defined(__AVX__)
  return "AVX";
#elif defined(__SSE2__)
  return "SSE2";
#else
  return "scalar";
#endif
}

/// Records host_vector_isa() in the JSON context: called once by a -march=native source of each
/// executable whose host kernels it measures (static for the same reason).
static inline bool describe_host_vector_isa() {
  benchmark::AddCustomContext("host_vector_isa", host_vector_isa());
  return true;
}

/// "13.0" from 13000, the encoding of cudaRuntimeGetVersion and cudaDriverGetVersion.
inline std::string cuda_version_string(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}
}  // namespace detail

/// @brief Adds the hardware and the commit to the "context" of the JSON report, for
/// docs/benchmarks.md: gpubatch_version, gpubatch_commit, cpu_model, cpu_family_model,
/// cuda_runtime_version, and
/// with a usable GPU cuda_device, cuda_driver_version, cuda_compute_capability, cuda_sm_count,
/// cuda_l2_bytes, cuda_memory_bytes and cuda_peak_bandwidth_bytes_per_second (from the memory
/// clock and bus width). Without one, cuda_device says "none" and why.
///
/// Call it after benchmark::Initialize() and before benchmark::RunSpecifiedBenchmarks().
/// @param configured_commit the commit when GPUBATCH_COMMIT is not set in the environment
inline void add_context(const char* configured_commit) {
  const char* commit = std::getenv("GPUBATCH_COMMIT");
  benchmark::AddCustomContext("gpubatch_version", GPUBATCH_VERSION_STRING);
  benchmark::AddCustomContext("gpubatch_commit",
                              commit != nullptr && *commit != '\0' ? commit : configured_commit);
  benchmark::AddCustomContext("cpu_model", detail::cpu_model());
  if (const std::string family_model = detail::cpu_family_model(); !family_model.empty()) {
    benchmark::AddCustomContext("cpu_family_model", family_model);
  }

  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) {
    benchmark::AddCustomContext("cuda_runtime_version", detail::cuda_version_string(runtime));
  }
  if (!cuda_available()) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    (void)cudaGetLastError();
    benchmark::AddCustomContext(
        "cuda_device", status == cudaSuccess ? std::string("none")
                                             : std::string("none (") + cudaGetErrorName(status) +
                                                   ": " + cudaGetErrorString(status) + ")");
    return;
  }
  int device = 0;
  cudaDeviceProp prop{};
  int driver = 0;
  int memory_khz = 0;
  int bus_bits = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, device) != cudaSuccess ||
      cudaDriverGetVersion(&driver) != cudaSuccess ||
      cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess) {
    (void)cudaGetLastError();
    benchmark::AddCustomContext("cuda_device", "unknown (device query failed)");
    return;
  }
  benchmark::AddCustomContext("cuda_device", prop.name);
  benchmark::AddCustomContext("cuda_driver_version", detail::cuda_version_string(driver));
  benchmark::AddCustomContext("cuda_compute_capability",
                              std::to_string(prop.major) + "." + std::to_string(prop.minor));
  benchmark::AddCustomContext("cuda_sm_count", std::to_string(prop.multiProcessorCount));
  benchmark::AddCustomContext("cuda_l2_bytes", std::to_string(prop.l2CacheSize));
  benchmark::AddCustomContext("cuda_memory_bytes", std::to_string(prop.totalGlobalMem));
  // Double data rate: two transfers per memory clock on every bit of the bus.
  const double peak = 2.0 * memory_khz * 1e3 * (bus_bits / 8.0);
  if (peak > 0) {
    benchmark::AddCustomContext("cuda_peak_bandwidth_bytes_per_second",
                                std::to_string(static_cast<long long>(peak)));
  }
}

}  // namespace gpubatch::bench
