// CUDA batched GEMM against cuBLAS, same data, same stream, device time (CUDA events).
//
//   gemm_<t>.cuda          strided batch, square n x n x n   vs cublasGemmStridedBatchedEx
//                          and, at n = 8, 16, 32, the tiny-matrix kernel the default (a
//                          small tile per problem) replaced
//   gemm_ptr_f32.cuda      pointer-array batch                vs cublasGemmBatchedEx
//   gemm_grouped_f16.cuda  grouped batch of random sizes      vs cublasGemmGroupedBatchedEx
//   gemm_grouped_tiny_f16.cuda  the same, sizes 1 to 32
//
// Column-major operands (cuBLAS's native order), alpha = 1, beta = 0. The batch fills the GPU:
// about 2^34 FLOPs per iteration (at least one problem, at most 2^17 problems). Inputs rotate
// through copies larger than twice the L2, so small problems are not served from cache.
#include "support/device_values.cuh"
#include "support/harness.hpp"

#include <gpubatch/gemm.hpp>

#include <benchmark/benchmark.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

namespace bench = gpubatch::bench;
using gpubatch::index_t;

void cublas_check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw gpubatch::error(std::string("cuBLAS error ") + std::to_string(static_cast<int>(status)) + " in " + call);
  }
}
#define CUBLAS_TRY(call) cublas_check((call), #call)

/// The cuBLAS library the run loaded, in the JSON context.
[[maybe_unused]] const bool cublas_described = [] {
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS) {
    benchmark::AddCustomContext("cublas_version", std::to_string(major) + "." +
                                                      std::to_string(minor) + "." +
                                                      std::to_string(patch));
  }
  return true;
}();

/// A cuBLAS handle bound to the benchmark's stream.
struct cublas_handle {
  cublasHandle_t handle = nullptr;
  explicit cublas_handle(cudaStream_t stream) {
    CUBLAS_TRY(cublasCreate(&handle));
    CUBLAS_TRY(cublasSetStream(handle, stream));
  }
  ~cublas_handle() { cublasDestroy(handle); }
  cublas_handle(const cublas_handle&) = delete;
  cublas_handle& operator=(const cublas_handle&) = delete;
};

template <class T>
constexpr cudaDataType_t cuda_type() {
  if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  else if constexpr (std::is_same_v<T, double>) return CUDA_R_64F;
  else if constexpr (std::is_same_v<T, gpubatch::half>) return CUDA_R_16F;
  else return CUDA_R_16BF;
}

index_t batch_for(index_t n) {
  return std::clamp<index_t>((index_t{1} << 34) / (2 * n * n * n), 1, index_t{1} << 17);
}

/// A strided batch of square problems on the device, A and B rotating through L2-defeating copies.
template <class T>
struct device_batch {
  index_t n, count;
  std::size_t bytes;
  bench::rotating_buffers a, b;
  gpubatch::device_buffer<T> c;
  device_batch(index_t size, gpubatch::cuda_exec exec)
      : n(size),
        count(batch_for(size)),
        bytes(static_cast<std::size_t>(n * n * count) * sizeof(T)),
        a(bytes, exec, bench::rotating_buffers::copies_to_exceed_l2(2 * bytes)),
        b(bytes, exec, a.copies()),
        c(static_cast<std::size_t>(n * n * count), exec) {
    const auto elements = static_cast<std::size_t>(n * n * count);
    bench::device_values<T>(a, elements, 11u, -1.0F, 1.0F);
    bench::device_values<T>(b, elements, 12u, -1.0F, 1.0F);
  }
  void set_rates(benchmark::State& state) const {
    bench::set_rates(state, 2.0 * static_cast<double>(n) * n * n * count, 3.0 * static_cast<double>(bytes));
    state.counters["batch"] = static_cast<double>(count);
  }
};

/// gpubatch's dispatch.
template <class T>
void strided_gpubatch(benchmark::State& state) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    device_batch<T> d(state.range(0), stream.exec());
    const index_t n = d.n;
    bench::time_on_device(state, stream.get(), [&] {
      const auto a = gpubatch::matrix_batch_view<const T>(d.a.template next_as<const T>(), n, n, n, n * n, d.count, gpubatch::layout::col_major, gpubatch::memory_space::device);
      const auto b = gpubatch::matrix_batch_view<const T>(d.b.template next_as<const T>(), n, n, n, n * n, d.count, gpubatch::layout::col_major, gpubatch::memory_space::device);
      const auto c = gpubatch::matrix_batch_view<T>(d.c.data(), n, n, n, n * n, d.count, gpubatch::layout::col_major, gpubatch::memory_space::device);
      gpubatch::gemm(stream.exec(), gpubatch::op::none, gpubatch::op::none, 1.0F, a, b, 0.0F, c);
    });
    d.set_rates(state);
  });
}

template <class T>
void strided_cublas(benchmark::State& state) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    device_batch<T> d(state.range(0), stream.exec());
    cublas_handle blas(stream.get());
    const int n = static_cast<int>(d.n);
    // f64 in f64; f32, f16 and bf16 accumulate in f32.
    using scalar = gpubatch::compute_type_t<T>;
    constexpr cublasComputeType_t compute =
        std::is_same_v<T, double> ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
    const scalar one = 1, zero = 0;
    bench::time_on_device(state, stream.get(), [&] {
      CUBLAS_TRY(cublasGemmStridedBatchedEx(
          blas.handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, d.a.next(), cuda_type<T>(), n,
          d.n * d.n, d.b.next(), cuda_type<T>(), n, d.n * d.n, &zero, d.c.data(), cuda_type<T>(), n,
          d.n * d.n, static_cast<int>(d.count), compute, CUBLAS_GEMM_DEFAULT));
    });
    d.set_rates(state);
  });
}

/// The tiny-matrix kernel on the same batch: the default for these sizes before uniform batches
/// took a small tile per problem (default_small_tile_policy), kept to show that choice holds.
template <class T>
void strided_tiny_kernel(benchmark::State& state) {
  namespace gd = gpubatch::detail;
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    device_batch<T> d(state.range(0), stream.exec());
    const index_t n = d.n;
    const auto col_major = gd::operand_strides(gpubatch::layout::col_major, gpubatch::op::none, n);
    using policy = typename gpubatch::default_gemm_policy<T, 80, gpubatch::size_class::tiny>::type;
    using compute = gpubatch::compute_type_t<T>;
    bench::time_on_device(state, stream.get(), [&] {
      const gd::strided_gemm_batch<T, T, T> batch{
          n, n, n, d.count, {d.a.template next_as<const T>(), col_major}, n * n,
          {d.b.template next_as<const T>(), col_major}, n * n, {d.c.data(), col_major}, n * n};
      gd::cuda_gemm::launch_tiny<policy>(stream.get(), batch, gd::tiny::block_bounds{n, n, n},
                                         compute{1}, compute{0}, gpubatch::epilogue::identity{});
    });
    d.set_rates(state);
  });
}

void square_sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("n");
  for (int n : {4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096}) b->Arg(n);
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

void small_tile_sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("n");
  for (int n : {8, 16, 32}) b->Arg(n);
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(strided_gpubatch<float>)->Name(bench::name("gemm_f32.cuda", bench::subject))->Apply(square_sizes);
BENCHMARK(strided_cublas<float>)->Name(bench::name("gemm_f32.cuda", "cublas"))->Apply(square_sizes);
BENCHMARK(strided_tiny_kernel<float>)->Name(bench::name("gemm_f32.cuda", "tiny-kernel"))->Apply(small_tile_sizes);
BENCHMARK(strided_gpubatch<double>)->Name(bench::name("gemm_f64.cuda", bench::subject))->Apply(square_sizes);
BENCHMARK(strided_cublas<double>)->Name(bench::name("gemm_f64.cuda", "cublas"))->Apply(square_sizes);
BENCHMARK(strided_tiny_kernel<double>)->Name(bench::name("gemm_f64.cuda", "tiny-kernel"))->Apply(small_tile_sizes);
BENCHMARK(strided_gpubatch<gpubatch::half>)->Name(bench::name("gemm_f16.cuda", bench::subject))->Apply(square_sizes);
BENCHMARK(strided_cublas<gpubatch::half>)->Name(bench::name("gemm_f16.cuda", "cublas"))->Apply(square_sizes);
BENCHMARK(strided_tiny_kernel<gpubatch::half>)->Name(bench::name("gemm_f16.cuda", "tiny-kernel"))->Apply(small_tile_sizes);
BENCHMARK(strided_gpubatch<gpubatch::bfloat16>)->Name(bench::name("gemm_bf16.cuda", bench::subject))->Apply(square_sizes);
BENCHMARK(strided_cublas<gpubatch::bfloat16>)->Name(bench::name("gemm_bf16.cuda", "cublas"))->Apply(square_sizes);
BENCHMARK(strided_tiny_kernel<gpubatch::bfloat16>)->Name(bench::name("gemm_bf16.cuda", "tiny-kernel"))->Apply(small_tile_sizes);

// --- pointer-array ------------------------------------------------------------------------------

/// Device pointer arrays into a device_batch's current copies.
struct pointer_arrays {
  gpubatch::device_buffer<const float*> a, b;
  gpubatch::device_buffer<float*> c;
  pointer_arrays(device_batch<float>& d, gpubatch::cuda_exec exec)
      : a(static_cast<std::size_t>(d.count), exec), b(static_cast<std::size_t>(d.count), exec), c(static_cast<std::size_t>(d.count), exec) {
    std::vector<const float*> ha, hb;
    std::vector<float*> hc;
    const float* a0 = d.a.next_as<const float>();
    const float* b0 = d.b.next_as<const float>();
    for (index_t i = 0; i < d.count; ++i) {
      ha.push_back(a0 + i * d.n * d.n);
      hb.push_back(b0 + i * d.n * d.n);
      hc.push_back(d.c.data() + i * d.n * d.n);
    }
    GPUBATCH_CUDA_TRY(cudaMemcpyAsync(a.data(), ha.data(), a.size_bytes(), cudaMemcpyHostToDevice, exec.stream()));
    GPUBATCH_CUDA_TRY(cudaMemcpyAsync(b.data(), hb.data(), b.size_bytes(), cudaMemcpyHostToDevice, exec.stream()));
    GPUBATCH_CUDA_TRY(cudaMemcpyAsync(c.data(), hc.data(), c.size_bytes(), cudaMemcpyHostToDevice, exec.stream()));
    GPUBATCH_CUDA_TRY(cudaStreamSynchronize(exec.stream()));
  }
};

void pointer_gpubatch(benchmark::State& state) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    device_batch<float> d(state.range(0), stream.exec());
    pointer_arrays p(d, stream.exec());
    const index_t n = d.n;
    const auto dev = gpubatch::memory_space::device;
    bench::time_on_device(state, stream.get(), [&] {
      gpubatch::gemm(stream.exec(), gpubatch::op::none, gpubatch::op::none, 1.0F,
                     gpubatch::pointer_matrix_batch_view<const float>(p.a.data(), n, n, n, d.count, gpubatch::layout::col_major, dev),
                     gpubatch::pointer_matrix_batch_view<const float>(p.b.data(), n, n, n, d.count, gpubatch::layout::col_major, dev), 0.0F,
                     gpubatch::pointer_matrix_batch_view<float>(p.c.data(), n, n, n, d.count, gpubatch::layout::col_major, dev));
    });
    d.set_rates(state);
  });
}

void pointer_cublas(benchmark::State& state) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    device_batch<float> d(state.range(0), stream.exec());
    pointer_arrays p(d, stream.exec());
    cublas_handle blas(stream.get());
    const int n = static_cast<int>(d.n);
    const float one = 1.0F, zero = 0.0F;
    bench::time_on_device(state, stream.get(), [&] {
      CUBLAS_TRY(cublasGemmBatchedEx(blas.handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one,
                                     reinterpret_cast<const void* const*>(p.a.data()), CUDA_R_32F, n,
                                     reinterpret_cast<const void* const*>(p.b.data()), CUDA_R_32F, n, &zero,
                                     reinterpret_cast<void* const*>(p.c.data()), CUDA_R_32F, n,
                                     static_cast<int>(d.count), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    });
    d.set_rates(state);
  });
}

BENCHMARK(pointer_gpubatch)->Name(bench::name("gemm_ptr_f32.cuda", bench::subject))->Apply(square_sizes);
BENCHMARK(pointer_cublas)->Name(bench::name("gemm_ptr_f32.cuda", "cublas"))->Apply(square_sizes);

// --- grouped ------------------------------------------------------------------------------------

/// `count` f16 problems of random m, n, k in [lo, hi], column-major, packed back to back with
/// each matrix starting on a 16-byte boundary.
struct grouped_batch {
  using problem = gpubatch::gemm_problem<gpubatch::half, gpubatch::half, gpubatch::half>;
  std::vector<int> m, n, k;
  gpubatch::device_buffer<gpubatch::half> a, b, c;
  std::vector<problem> problems;
  gpubatch::device_buffer<problem> device_problems;
  double flops = 0, bytes = 0;
  index_t max_m = 0, max_n = 0, max_k = 0;

  /// Elements up to the next 16-byte boundary: every matrix starts aligned, as cuBLAS's grouped
  /// GEMM needs (packed back to back at 2-byte offsets, it failed on an H200 with
  /// CUBLAS_STATUS_EXECUTION_FAILED and a misaligned address). gpubatch reads the same layout.
  static std::size_t aligned(std::size_t elements) { return (elements + 7) / 8 * 8; }

  grouped_batch(index_t count, int lo, int hi, gpubatch::cuda_exec exec)
      : a(1, exec), b(1, exec), c(1, exec), device_problems(static_cast<std::size_t>(count), exec) {
    std::mt19937 engine(5);
    std::uniform_int_distribution<int> size(lo, hi);
    std::size_t ea = 0, eb = 0, ec = 0;
    for (index_t i = 0; i < count; ++i) {
      m.push_back(size(engine)), n.push_back(size(engine)), k.push_back(size(engine));
      ea += aligned(static_cast<std::size_t>(m.back()) * k.back());
      eb += aligned(static_cast<std::size_t>(k.back()) * n.back());
      ec += aligned(static_cast<std::size_t>(m.back()) * n.back());
      flops += 2.0 * m.back() * n.back() * k.back();
      bytes += 2.0 * (double(m.back()) * k.back() + double(k.back()) * n.back() + double(m.back()) * n.back());
      max_m = std::max<index_t>(max_m, m.back()), max_n = std::max<index_t>(max_n, n.back()), max_k = std::max<index_t>(max_k, k.back());
    }
    a = gpubatch::device_buffer<gpubatch::half>(ea, exec);
    b = gpubatch::device_buffer<gpubatch::half>(eb, exec);
    c = gpubatch::device_buffer<gpubatch::half>(ec, exec);
    bench::device_values(a.data(), ea, 5u, exec.stream(), -1.0F, 1.0F);
    bench::device_values(b.data(), eb, 6u, exec.stream(), -1.0F, 1.0F);
    std::size_t oa = 0, ob = 0, oc = 0;
    for (index_t i = 0; i < count; ++i) {
      problems.push_back({m[i], n[i], k[i], a.data() + oa, m[i], b.data() + ob, k[i], c.data() + oc, m[i]});
      oa += aligned(static_cast<std::size_t>(m[i]) * k[i]);
      ob += aligned(static_cast<std::size_t>(k[i]) * n[i]);
      oc += aligned(static_cast<std::size_t>(m[i]) * n[i]);
    }
    GPUBATCH_CUDA_TRY(cudaMemcpyAsync(device_problems.data(), problems.data(), device_problems.size_bytes(), cudaMemcpyHostToDevice, exec.stream()));
    GPUBATCH_CUDA_TRY(cudaStreamSynchronize(exec.stream()));
  }
};

void grouped_gpubatch(benchmark::State& state, int lo, int hi) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    grouped_batch g(state.range(0), lo, hi, stream.exec());
    const gpubatch::grouped_gemm_layout layouts{gpubatch::op::none, gpubatch::layout::col_major, gpubatch::op::none, gpubatch::layout::col_major, gpubatch::layout::col_major};
    bench::time_on_device(state, stream.get(), [&] {
      gpubatch::gemm_grouped(stream.exec(), layouts, 1.0F, g.device_problems.data(), state.range(0), 0.0F,
                             gpubatch::epilogue::identity{}, gpubatch::grouped_gemm_bounds{g.max_m, g.max_n, g.max_k});
    });
    bench::set_rates(state, g.flops, g.bytes);
  });
}

void grouped_cublas(benchmark::State& state, int lo, int hi) {
  bench::run_cuda_benchmark(state, [&](const gpubatch::cuda_stream& stream) {
    const index_t count = state.range(0);
    grouped_batch g(count, lo, hi, stream.exec());
    cublas_handle blas(stream.get());
    // One group per problem: every problem has its own sizes.
    std::vector<cublasOperation_t> ops(static_cast<std::size_t>(count), CUBLAS_OP_N);
    std::vector<float> alpha(ops.size(), 1.0F), beta(ops.size(), 0.0F);
    std::vector<int> group_size(ops.size(), 1);
    std::vector<const void*> ha, hb;
    std::vector<void*> hc;
    for (const auto& p : g.problems) ha.push_back(p.a), hb.push_back(p.b), hc.push_back(p.c);
    gpubatch::device_buffer<const void*> da(ha.size(), stream.exec()), db(hb.size(), stream.exec());
    gpubatch::device_buffer<void*> dc(hc.size(), stream.exec());
    GPUBATCH_CUDA_TRY(cudaMemcpyAsync(da.data(), ha.data(), da.size_bytes(), cudaMemcpyHostToDevice, stream.get()));
    GPUBATCH_CUDA_TRY(cudaMemcpyAsync(db.data(), hb.data(), db.size_bytes(), cudaMemcpyHostToDevice, stream.get()));
    GPUBATCH_CUDA_TRY(cudaMemcpyAsync(dc.data(), hc.data(), dc.size_bytes(), cudaMemcpyHostToDevice, stream.get()));
    bench::time_on_device(state, stream.get(), [&] {
      CUBLAS_TRY(cublasGemmGroupedBatchedEx(blas.handle, ops.data(), ops.data(), g.m.data(), g.n.data(), g.k.data(),
                                            alpha.data(), da.data(), CUDA_R_16F, g.m.data(), db.data(), CUDA_R_16F,
                                            g.k.data(), beta.data(), dc.data(), CUDA_R_16F, g.m.data(),
                                            static_cast<int>(count), group_size.data(), CUBLAS_COMPUTE_32F));
    });
    bench::set_rates(state, g.flops, g.bytes);
  });
}

void group_counts(benchmark::internal::Benchmark* b) {
  b->ArgName("problems")->Arg(64)->Arg(256)->Arg(1024)->UseManualTime()->Unit(benchmark::kMicrosecond);
}

/// Ragged batches of tiny problems (the tiny-matrix kernel, several problems per block).
void tiny_group_counts(benchmark::internal::Benchmark* b) {
  b->ArgName("problems")->Arg(1024)->Arg(8192)->Arg(65536)->UseManualTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK_CAPTURE(grouped_gpubatch, medium, 16, 512)->Name(bench::name("gemm_grouped_f16.cuda", bench::subject))->Apply(group_counts);
BENCHMARK_CAPTURE(grouped_cublas, medium, 16, 512)->Name(bench::name("gemm_grouped_f16.cuda", "cublas"))->Apply(group_counts);
BENCHMARK_CAPTURE(grouped_gpubatch, tiny, 1, 32)->Name(bench::name("gemm_grouped_tiny_f16.cuda", bench::subject))->Apply(tiny_group_counts);
BENCHMARK_CAPTURE(grouped_cublas, tiny, 1, 32)->Name(bench::name("gemm_grouped_tiny_f16.cuda", "cublas"))->Apply(tiny_group_counts);

}  // namespace
