// Host-backend batched GEMM against the CPU's small-GEMM baselines on the same batch, OpenMP
// across the batch for every implementation (the same thread count: OpenMP's default):
//
//   gemm_f32.host      gpubatch::gemm(on_host, ...)   vs  cblas_sgemm per problem (OpenBLAS,
//                                                         single-threaded inside each call), and
//                                                         LIBXSMM's JIT kernel for the shape
//   gemm_f64.host      gpubatch::gemm(on_host, ...)   vs  cblas_dgemm per problem, and LIBXSMM
//   gemm_f32_l2.host   the same, on batches that stay in the L2 caches
//   gemm_f64_l2.host
//
// Square row-major problems. Inputs are random; C is overwritten (beta = 0). Two regimes:
//  - streaming (gemm_f32.host, n = 4 ... 512): at least four times the last-level cache of
//    operands (bench::host_streaming_bytes) and ~2^26 FLOPs, so every problem's operands come
//    from memory and small sizes are bound by its bandwidth. The memory_floor implementation
//    (n = 4 ... 64) moves the same bytes with next to no arithmetic, paired with gpubatch on the
//    same batch;
//  - cache-resident (gemm_*_l2.host, n = 4 ... 128): about 512 KiB of operands per thread, as
//    when a batch was just produced by the previous layer; computation and per-call overhead,
//    not memory, decide.
//
// LIBXSMM (when built with it, GPUBATCH_BENCH_LIBXSMM) is column-major: the row-major
// C = A B is its C^T = B^T A^T, so its kernel gets B as its first operand and A as its second.
// One kernel per shape is dispatched (JIT-compiled) before the timing, with beta = 0,
// LIBXSMM's automatic prefetch of the next problem's operands and, on streaming batches, its
// non-temporal stores of C. Before timing, every GEMM baseline's result is compared with
// gpubatch's on the same data (memory_floor computes none); a difference beyond rounding turns
// the run into an error instead of a time.
// After its timing, LIBXSMM's benchmark (and memory_floor's) also times pairs of back-to-back
// calls, gpubatch's and its own, and reports the median ratio of their times as the counter
// paired_ratio (gpubatch::bench::set_paired_ratio), which a slow spell of a shared machine moves
// far less than the ratio of the two benchmarks' medians.
#include "support/harness.hpp"
#include "support/openblas.hpp"

#include <gpubatch/detail/gemm/host.hpp>
#include <gpubatch/detail/host/cache.hpp>
#include <gpubatch/gemm.hpp>

#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <omp.h>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>

#if GPUBATCH_BENCH_LIBXSMM
#include <libxsmm.h>
#endif

namespace {

namespace bench = gpubatch::bench;
using gpubatch::index_t;

/// Problems of one iteration: when streaming, at least ~2^26 FLOPs and more operands than
/// bench::host_streaming_bytes; else ~512 KiB of A, B and C per thread (a whole number of
/// problems per thread).
template <class T>
index_t batch_for(index_t n, bool cache_resident) {
  if (cache_resident) {
    const index_t threads = omp_get_max_threads();
    const index_t bytes = 3 * n * n * static_cast<index_t>(sizeof(T));
    return threads * std::max<index_t>(1, 512 * 1024 / bytes);
  }
  const index_t flops_per_problem = 2 * n * n * n;
  const index_t bytes_per_problem = 3 * n * n * static_cast<index_t>(sizeof(T));
  const index_t beyond_cache = bench::host_streaming_bytes() / bytes_per_problem + 1;
  return std::max<index_t>((index_t{1} << 26) / flops_per_problem, beyond_cache);
}

template <class T>
struct square_batch {
  index_t n, count;
  // The library's host buffers (64-byte aligned), as a host-backend user allocates them.
  gpubatch::device_buffer<T> a, b, c;
  square_batch(index_t size, bool cache_resident)
      : n(size),
        count(batch_for<T>(size, cache_resident)),
        a(elements(), gpubatch::on_host),
        b(elements(), gpubatch::on_host),
        c(elements(), gpubatch::on_host) {
    std::mt19937_64 engine(7);
    std::uniform_real_distribution<T> dist(-1, 1);
    std::generate_n(a.data(), a.size(), [&] { return dist(engine); });
    std::generate_n(b.data(), b.size(), [&] { return dist(engine); });
    std::fill_n(c.data(), c.size(), T(0));
  }
  std::size_t elements() const { return static_cast<std::size_t>(n * n * count); }
  /// Throws unless C, as a baseline left it, equals gpubatch's result on the same A and B up to
  /// rounding: |c - c_gpubatch| <= 16 n eps (the products are in [-1, 1], so the rounding of a
  /// sum of n of them stays far below that; a wrong product is off by O(1)).
  void check_against_gpubatch(const std::string& baseline) const {
    gpubatch::device_buffer<T> want(elements(), gpubatch::on_host);
    const auto av = gpubatch::matrix_batch_view<const T>::packed(a, n, n, count);
    const auto bv = gpubatch::matrix_batch_view<const T>::packed(b, n, n, count);
    const auto cv = gpubatch::matrix_batch_view<T>::packed(want, n, n, count);
    gpubatch::gemm(gpubatch::on_host, gpubatch::op::none, gpubatch::op::none, T(1), av, bv, T(0), cv);
    const double tolerance = 16.0 * static_cast<double>(n) * std::numeric_limits<T>::epsilon();
    for (std::size_t i = 0; i < elements(); ++i) {
      const double diff = std::abs(static_cast<double>(c.data()[i]) - static_cast<double>(want.data()[i]));
      if (!(diff <= tolerance)) {  // also catches NaN
        throw std::runtime_error(baseline + " differs from gpubatch at element " + std::to_string(i) +
                                 ": " + std::to_string(c.data()[i]) + " vs " +
                                 std::to_string(want.data()[i]));
      }
    }
  }
  /// One call of gpubatch::gemm on the batch (C = A B).
  void run_gpubatch() {
    const auto av = gpubatch::matrix_batch_view<const T>::packed(a, n, n, count);
    const auto bv = gpubatch::matrix_batch_view<const T>::packed(b, n, n, count);
    const auto cv = gpubatch::matrix_batch_view<T>::packed(c, n, n, count);
    gpubatch::gemm(gpubatch::on_host, gpubatch::op::none, gpubatch::op::none, T(1), av, bv, T(0), cv);
  }
  void set_rates(benchmark::State& state) const {
    bench::set_rates(state, 2.0 * static_cast<double>(n * n * n * count),
                     3.0 * static_cast<double>(n * n * count * static_cast<index_t>(sizeof(T))));
    state.counters["batch"] = static_cast<double>(count);
  }
};

template <class T, bool CacheResident>
void gemm_gpubatch(benchmark::State& state) {
  bench::run_host_benchmark(state, [&] {
    square_batch<T> data(state.range(0), CacheResident);
    for (auto _ : state) {
      data.run_gpubatch();
      benchmark::DoNotOptimize(data.c.data());
    }
    data.set_rates(state);
  });
}

template <class T, bool CacheResident>
void gemm_openblas(benchmark::State& state) {
  bench::run_host_benchmark(state, [&] {
    square_batch<T> data(state.range(0), CacheResident);
    const int n = static_cast<int>(data.n);
    const index_t stride = data.n * data.n;
    openblas_set_num_threads(1);  // parallelism comes from the loop over the batch, as for gpubatch
    const auto run = [&] {
#pragma omp parallel for schedule(static)
      for (index_t i = 0; i < data.count; ++i) {
        if constexpr (std::is_same_v<T, float>) {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0F, data.a.data() + i * stride, n,
                      data.b.data() + i * stride, n, 0.0F, data.c.data() + i * stride, n);
        } else {
          cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, data.a.data() + i * stride, n,
                      data.b.data() + i * stride, n, 0.0, data.c.data() + i * stride, n);
        }
      }
    };
    run();
    data.check_against_gpubatch("OpenBLAS");
    for (auto _ : state) {
      run();
      benchmark::DoNotOptimize(data.c.data());
    }
    data.set_rates(state);
  });
}

/// The memory floor of a streaming batch: c = a b + 1 element by element over the batch's own A,
/// B and C, which moves the bytes any GEMM of the batch must (A and B read, C written) with next
/// to no arithmetic, C with non-temporal stores as gpubatch's and LIBXSMM's are there (no read
/// of its lines first). Its paired ratio, gpubatch's time over the floor's, says how close
/// gpubatch comes to the memory bandwidth: 1.11 is 90% of it.
template <class T>
void gemm_memory_floor(benchmark::State& state) {
  namespace host_cache = gpubatch::detail::host_cache;
  constexpr int vector_bytes = gpubatch::detail::host_gemm::vector_bytes;
  typedef T vec __attribute__((vector_size(vector_bytes)));
  constexpr index_t lanes = vector_bytes / static_cast<index_t>(sizeof(T));
  bench::run_host_benchmark(state, [&] {
    square_batch<T> data(state.range(0), false);
    const auto elements = static_cast<index_t>(data.elements());
    if (elements % lanes != 0) throw std::runtime_error("the batch is not whole vectors");
    const T* const a = data.a.data();
    const T* const b = data.b.data();
    T* const c = data.c.data();
    const auto run = [&] {
#pragma omp parallel for schedule(static)
      for (index_t i = 0; i < elements; i += lanes) {
        vec x, y;
        std::memcpy(&x, a + i, sizeof(vec));
        std::memcpy(&y, b + i, sizeof(vec));
        const vec z = x * y + T(1);
        if constexpr (host_cache::can_stream_store<vector_bytes>) {
          host_cache::stream_store(c + i, z);
        } else {
          std::memcpy(c + i, &z, sizeof(vec));
        }
      }
      host_cache::store_fence();
    };
    for (auto _ : state) {
      run();
      benchmark::DoNotOptimize(c);
      benchmark::ClobberMemory();
    }
    bench::set_rates(state, 0, 3.0 * static_cast<double>(elements) * sizeof(T));
    state.counters["batch"] = static_cast<double>(data.count);
    bench::set_paired_ratio(state, [&] { data.run_gpubatch(); }, run);
  });
}

#if GPUBATCH_BENCH_LIBXSMM
/// The LIBXSMM build and the code path its JIT generates for, in the JSON context.
inline const bool libxsmm_described = [] {
  benchmark::AddCustomContext("libxsmm_version", LIBXSMM_VERSION);
  benchmark::AddCustomContext("libxsmm_target_arch", libxsmm_get_target_arch());
  return true;
}();

template <class T, bool CacheResident>
void gemm_libxsmm(benchmark::State& state) {
  bench::run_host_benchmark(state, [&] {
    square_batch<T> data(state.range(0), CacheResident);
    const auto n = static_cast<libxsmm_blasint>(data.n);
    const index_t stride = data.n * data.n;
    // Column-major C^T (n x n) = B^T (n x n) * A^T (n x n): m = n = k = n, leading dimensions n.
    // Streaming batches: C written with non-temporal stores, as gpubatch's are there (without
    // them LIBXSMM took 1.1x to 1.35x the time at n = 16 and 32 on a 2-core EPYC).
    const int flags = CacheResident ? LIBXSMM_GEMM_FLAG_NONE : LIBXSMM_GEMM_FLAG_ALIGN_C_NTS_HINT;
    const libxsmm_mmfunction<T> kernel(flags, n, n, n, T(1), T(0), LIBXSMM_PREFETCH_AUTO);
    if (!kernel) {
      throw std::runtime_error("LIBXSMM dispatched no kernel for n = " + std::to_string(n));
    }
    const T* const a = data.a.data();
    const T* const b = data.b.data();
    T* const c = data.c.data();
    const auto run = [&] {
#pragma omp parallel for schedule(static)
      for (index_t i = 0; i < data.count; ++i) {
        const index_t next = i + 1 < data.count ? i + 1 : i;  // the operands to prefetch
        kernel(b + i * stride, a + i * stride, c + i * stride,
               b + next * stride, a + next * stride, c + next * stride);
      }
    };
    run();
    data.check_against_gpubatch("LIBXSMM");
    for (auto _ : state) {
      run();
      benchmark::DoNotOptimize(data.c.data());
    }
    data.set_rates(state);
    bench::set_paired_ratio(state, [&] { data.run_gpubatch(); }, run);
  });
}
#endif

void sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("n")->RangeMultiplier(2)->Range(4, 512)->UseRealTime()->Unit(benchmark::kMicrosecond);
}
// Up to where a streaming batch can be bound by memory: at n = 64 a problem does 5.3 FLOPs (f64)
// or 10.7 (f32) per byte it moves, more than an FMA peak keeps pace with at memory speed.
void memory_bound_sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("n")->RangeMultiplier(2)->Range(4, 64)->UseRealTime()->Unit(benchmark::kMicrosecond);
}
void resident_sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("n")->RangeMultiplier(2)->Range(4, 128)->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(gemm_gpubatch<float, false>)->Name(bench::name("gemm_f32.host", bench::subject))->Apply(sizes);
BENCHMARK(gemm_openblas<float, false>)->Name(bench::name("gemm_f32.host", "openblas"))->Apply(sizes);
BENCHMARK(gemm_gpubatch<double, false>)->Name(bench::name("gemm_f64.host", bench::subject))->Apply(sizes);
BENCHMARK(gemm_openblas<double, false>)->Name(bench::name("gemm_f64.host", "openblas"))->Apply(sizes);
BENCHMARK(gemm_gpubatch<float, true>)
    ->Name(bench::name("gemm_f32_l2.host", bench::subject))->Apply(resident_sizes);
BENCHMARK(gemm_openblas<float, true>)
    ->Name(bench::name("gemm_f32_l2.host", "openblas"))->Apply(resident_sizes);
BENCHMARK(gemm_gpubatch<double, true>)
    ->Name(bench::name("gemm_f64_l2.host", bench::subject))->Apply(resident_sizes);
BENCHMARK(gemm_openblas<double, true>)
    ->Name(bench::name("gemm_f64_l2.host", "openblas"))->Apply(resident_sizes);
BENCHMARK(gemm_memory_floor<float>)
    ->Name(bench::name("gemm_f32.host", "memory_floor"))->Apply(memory_bound_sizes);
BENCHMARK(gemm_memory_floor<double>)
    ->Name(bench::name("gemm_f64.host", "memory_floor"))->Apply(memory_bound_sizes);
#if GPUBATCH_BENCH_LIBXSMM
BENCHMARK(gemm_libxsmm<float, false>)->Name(bench::name("gemm_f32.host", "libxsmm"))->Apply(sizes);
BENCHMARK(gemm_libxsmm<double, false>)->Name(bench::name("gemm_f64.host", "libxsmm"))->Apply(sizes);
BENCHMARK(gemm_libxsmm<float, true>)
    ->Name(bench::name("gemm_f32_l2.host", "libxsmm"))->Apply(resident_sizes);
BENCHMARK(gemm_libxsmm<double, true>)
    ->Name(bench::name("gemm_f64_l2.host", "libxsmm"))->Apply(resident_sizes);
#endif

}  // namespace
