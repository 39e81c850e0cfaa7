/// @file detail/conv/dispatch.cuh
/// @brief CUDA convolution dispatch: depthwise layers to their kernel; the rest to the implicit-
/// GEMM kernel with a compiled policy picked by size class and architecture (or forced), the
/// batch split across launches beyond the grid limit, and the reduction split across blocks
/// (split-K) when the caller gave a workspace and the layer has too few tiles to fill the
/// device. Included only by translation units compiled by nvcc.
#pragma once

#include <gpubatch/conv_policy.hpp>
#include <gpubatch/conv_problem.hpp>
#include <gpubatch/detail/conv/kernels.cuh>
#include <gpubatch/detail/conv/problem.hpp>
#include <gpubatch/detail/gemm/dispatch.cuh>
#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/launch.hpp>
#include <gpubatch/numeric.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

GPUBATCH_NAMESPACE_BEGIN
namespace detail::cuda_conv {

/// Streaming multiprocessors of the current device.
inline int sm_count() { return cuda_gemm::current_device_facts().sms; }

template <class P>
struct policy_tag {
  using type = P;
};

/// Calls f(policy_tag<P>{}) with the forced policy, or the default one the run-time heuristic
/// picks for the architecture and size class (for f32, the tensor-core one when `tf32`). The
/// workspace query goes through the same choice. Tensor-core policies need sm_80 or later;
/// `arch` is cuda_gemm::code_arch(), the architecture the kernels run as on this device.
template <class Policy, class Element, class F>
void with_policy(int arch, size_class size, bool tf32, F&& f) {
  using E = std::remove_const_t<Element>;
  if constexpr (!std::is_void_v<Policy>) {
    (void)size;
    if constexpr (Policy::tensor_cores) {
      static_assert(tensor_core::supported_v<E>,
                    "gpubatch::tensor_core_policy: tensor cores take f16, bf16, int8 or f32 (TF32)");
      if (std::is_same_v<E, float> && !tf32) {
        throw invalid_argument("options", "a tensor_core_policy with f32 tensors needs "
                                          "allow_tf32 = true (the MMA rounds inputs to TF32)");
      }
      if (arch < 80) {
        throw error("gpubatch::conv2d: a tensor_core_policy needs a GPU of compute capability "
                    "8.0 or later, and kernels compiled for one (CMAKE_CUDA_ARCHITECTURES 80 or "
                    "later)");
      }
    }
    f(policy_tag<Policy>{});
  } else {
    if (default_conv2d_policy<E, 80, size_class::medium>::tensor_cores && arch < 80) {
      throw error("gpubatch::conv2d: f16, bf16 and int8 run on tensor cores, which need a GPU "
                  "of compute capability 8.0 or later and kernels compiled for one "
                  "(CMAKE_CUDA_ARCHITECTURES 80 or later); pass a gemm_policy to run them on "
                  "SIMT cores");
    }
    const auto pick = [&](auto arch_tag) {
      constexpr int A = decltype(arch_tag)::value;
      if constexpr (std::is_same_v<E, float>) {
        if (tf32 && arch >= 80) {  // allowed, not required: below sm_80 f32 stays on SIMT
          if (size == size_class::large) {
            f(policy_tag<typename default_conv2d_policy<E, A, size_class::large, true>::type>{});
          } else {
            f(policy_tag<typename default_conv2d_policy<E, A, size_class::medium, true>::type>{});
          }
          return;
        }
      }
      if (size == size_class::large) {
        f(policy_tag<typename default_conv2d_policy<E, A, size_class::large>::type>{});
      } else {
        f(policy_tag<typename default_conv2d_policy<E, A, size_class::medium>::type>{});
      }
    };
    if (arch >= 90) {
      pick(std::integral_constant<int, 90>{});
    } else {
      pick(std::integral_constant<int, 80>{});
    }
  }
}

/// No split: one slice covering any reduction.
template <class Compute>
constexpr split_k<Compute> no_split() {
  return {1, index_t{1} << 62, nullptr, 0};
}

/// The split-K plan of `problems` implicit GEMMs of m x n x k: slices only when the output
/// tiles (times the implicit GEMMs) fill less than one wave of the device, each slice keeping at
/// least 4 K tiles, at most `most` slices, aiming at two waves.
template <class Policy, class Compute>
split_k<Compute> plan_split(index_t m, index_t n, index_t k, index_t problems, int sms,
                            index_t most = 16) {
  if constexpr (Policy::tensor_cores) {
    return no_split<Compute>();  // the tensor-core kernel does not split K
  } else {
    const index_t blocks = ceil_div(m, Policy::tile_m) * ceil_div(n, Policy::tile_n) * problems;
    if (blocks <= 0 || blocks >= sms) {
      return no_split<Compute>();
    }
    const index_t by_occupancy = ceil_div(2 * index_t{sms}, blocks);
    const index_t by_depth = k / (4 * Policy::tile_k);
    const index_t wanted = std::min<index_t>({by_occupancy, by_depth, most});
    if (wanted <= 1) {
      return no_split<Compute>();
    }
    const index_t chunk = ceil_div(ceil_div(k, wanted), Policy::tile_k) * Policy::tile_k;
    const index_t count = ceil_div(k, chunk);  // every slice non-empty
    if (count <= 1) {
      return no_split<Compute>();
    }
    return {count, chunk, nullptr, problems};
  }
}

/// The split-K plan of a uniform forward batch.
template <class Policy, class Compute, class TX, class TW, class TY>
split_k<Compute> plan_split(const conv::fprop_batch<TX, TW, TY>& batch, int sms) {
  return plan_split<Policy, Compute>(batch.gemm_m(), batch.geo.kg(), batch.geo.gemm_k(),
                                     batch.count(), sms);
}

/// Workspace bytes a split plan needs.
template <class Compute, class TX, class TW, class TY>
std::size_t split_bytes(const conv::fprop_batch<TX, TW, TY>& batch, const split_k<Compute>& s) {
  if (s.count <= 1) {
    return 0;
  }
  return static_cast<std::size_t>(s.count * s.problems * batch.gemm_m() * batch.geo.kg()) *
         sizeof(Compute);
}

/// conv2d_workspace_size on the CUDA backend.
template <class Policy, class TX, class TW, class TY>
std::size_t workspace_bytes(const conv::fprop_batch<TX, TW, TY>& batch) {
  using compute = compute_type_t<std::remove_const_t<TX>>;
  if constexpr (!std::is_void_v<Policy>) {
    if constexpr (Policy::tensor_cores) {
      return 0;  // the tensor-core kernel does not split K (and f32 needs allow_tf32 to run)
    }
  }
  if (std::is_void_v<Policy> && batch.geo.cg() == 1) {
    return 0;  // the depthwise kernel needs none
  }
  std::size_t bytes = 0;
  const int sms = sm_count();
  with_policy<Policy, TX>(cuda_gemm::code_arch(),
                          classify_conv2d(batch.gemm_m(), batch.geo.kg(), batch.geo.gemm_k()),
                          /*tf32=*/false, [&](auto tag) {
                            using P = typename decltype(tag)::type;
                            bytes = split_bytes(batch, plan_split<P, compute>(batch, sms));
                          });
  return bytes;
}

/// Dynamic shared memory a launch of the implicit-GEMM kernels with `Policy` asks for (the
/// kernels declare no static shared memory), the gather staged as StagingA on tensor cores.
template <class Policy, class Batch, class Compute,
          tensor_core::staging StagingA = tensor_core::staging::k_major>
constexpr std::int64_t implicit_shared_bytes() {
  if constexpr (Policy::tensor_cores) {
    using element = std::remove_const_t<
        std::remove_pointer_t<decltype(std::declval<const Batch&>().problem(0).x)>>;
    return tensor_core::geometry<Policy, element, StagingA, tensor_core::staging::k_major>::shared_bytes;
  } else {
    return std::int64_t{Policy::stages} *
           simt::stage_elements<Compute, Policy::tile_m, Policy::tile_n, Policy::tile_k> *
           static_cast<std::int64_t>(sizeof(Compute));
  }
}

/// Whether a convolution batch's tensors are NCHW.
template <class TX, class TW, class TY>
bool nchw(const conv::fprop_batch<TX, TW, TY>& batch) {
  return !batch.geo.nhwc();
}
template <class TX, class TW, class TY>
bool nchw(const conv::grouped_fprop_batch<TX, TW, TY>& batch) {
  return batch.order == tensor_layout::nchw;
}

/// The outputs of a uniform batch (m x n per implicit GEMM) from split.count slices of partial
/// sums in split.workspace, through alpha, beta and the epilogue (split_k_reduce_kernel). With no
/// slices (count 0) the sums are zero: what a GEMM with no reduction stores.
template <class Batch, class Compute, class Epilogue>
void launch_split_reduce(cudaStream_t stream, const Batch& batch, split_k<Compute> split, index_t m,
                         index_t n, Compute alpha, Compute beta, const Epilogue& epilogue) {
  constexpr int threads = 256;
  const index_t total = split.problems * m * n;
  if (total == 0) {
    return;
  }
  const index_t blocks = std::min<index_t>(ceil_div(total, threads), index_t{1} << 20);
  launch(split_k_reduce_kernel<threads, Batch, Compute, Epilogue>,
         launch_config{static_cast<unsigned>(blocks), threads, 0, stream}, batch, split, m, n,
         alpha, beta, epilogue);
  GPUBATCH_CUDA_TRY(cudaGetLastError());
}

template <class Policy, class Batch, class Compute, class Epilogue>
void launch_implicit(cudaStream_t stream, const Batch& batch, index_t max_m, index_t max_n,
                     split_k<Compute> split, Compute alpha, Compute beta,
                     const Epilogue& epilogue) {
  const index_t tiles_n = ceil_div(max_n, Policy::tile_n);
  const index_t tiles = ceil_div(max_m, Policy::tile_m) * tiles_n;
  if (tiles > 0x7fffffff) {
    throw invalid_argument("y", "too many output tiles for one grid (" + std::to_string(tiles) + ")");
  }
  const index_t count = batch.count();
  const index_t launches = launch_count(count, Policy::max_blocks_per_launch);
  if constexpr (Policy::tensor_cores) {
    const auto run = [&](auto staging_a) {
      constexpr tensor_core::staging a = decltype(staging_a)::value;
      constexpr std::int64_t shared_bytes = implicit_shared_bytes<Policy, Batch, Compute, a>();
      const auto kernel = tensor_core_conv_kernel<Policy, a, Batch, Compute, Epilogue>;
      cuda_gemm::allow_shared_bytes(kernel, shared_bytes);
      for (index_t l = 0; l < launches; ++l) {
        const launch_slice slice = slice_of_launch(count, Policy::max_blocks_per_launch, l);
        const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(slice.count));
        launch(kernel,
               launch_config{grid, Policy::threads, static_cast<std::size_t>(shared_bytes), stream},
               batch, slice.first, tiles_n, alpha, beta, epilogue);
        GPUBATCH_CUDA_TRY(cudaGetLastError());
      }
    };
    // NCHW: consecutive output columns (rows of the implicit GEMM) are consecutive input
    // elements, so the gather is staged M-major.
    if (nchw(batch)) {
      run(std::integral_constant<tensor_core::staging, tensor_core::staging::mn_major>{});
    } else {
      run(std::integral_constant<tensor_core::staging, tensor_core::staging::k_major>{});
    }
  } else {
    constexpr std::int64_t shared_bytes = implicit_shared_bytes<Policy, Batch, Compute>();
    static_assert(shared_bytes <= 227 * 1024,
                  "gpubatch::gemm_policy: the tile needs more shared memory than a block can have "
                  "(227 KiB on sm_90); use a smaller tile or fewer stages");
    const auto kernel = implicit_gemm_kernel<Policy, Batch, Compute, Epilogue>;
    cuda_gemm::allow_shared_bytes(kernel, shared_bytes);
    for (index_t l = 0; l < launches; ++l) {
      const launch_slice slice = slice_of_launch(count, Policy::max_blocks_per_launch, l);
      const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(slice.count),
                      static_cast<unsigned>(split.count));
      launch(kernel,
             launch_config{grid, Policy::threads, static_cast<std::size_t>(shared_bytes), stream},
             batch, slice.first, tiles_n, split, alpha, beta, epilogue);
      GPUBATCH_CUDA_TRY(cudaGetLastError());
    }
    if (split.count > 1) {
      launch_split_reduce(stream, batch, split, max_m, max_n, alpha, beta, epilogue);
    }
  }
}

/// Channels per thread of the tiled depthwise kernel where whole vectors apply: 16 bytes of
/// input, at most 8 channels (their sums, 4 pixels of each, stay in registers).
template <class TX>
inline constexpr int depthwise_vector = std::min(8, simt::elements_in_16_bytes<TX>);

/// Launches the tiled depthwise kernel at `Vector` channels per thread; false where the layer
/// is beyond its limits (conv::depthwise_tiles::fits).
template <int Vector, class TX, class TW, class TY, class Compute, class Epilogue>
bool launch_depthwise_tiled_at(cudaStream_t stream, const conv::fprop_batch<TX, TW, TY>& batch,
                               Compute alpha, Compute beta, const Epilogue& epilogue,
                               bool turned) {
  constexpr int threads = 256;
  const index_t compute_bytes = sizeof(Compute);
  conv::depthwise_tiles tiles = conv::make_depthwise_tiles(batch.geo, threads, Vector, compute_bytes);
  if (!tiles.fits(batch.geo, compute_bytes)) return false;
  tiles.turned = turned;
  const dim3 grid(static_cast<unsigned>(tiles.blocks(batch.geo.n)),
                  static_cast<unsigned>(tiles.chunks));
  const dim3 block(static_cast<unsigned>(tiles.lanes_c), static_cast<unsigned>(tiles.lanes_t));
  launch(depthwise_tiled_kernel<threads, Vector, TX, TW, TY, Compute, Epilogue>,
         launch_config{grid, block, static_cast<std::size_t>(tiles.shared_bytes(compute_bytes)),
                       stream},
         batch, tiles, alpha, beta, epilogue);
  GPUBATCH_CUDA_TRY(cudaGetLastError());
  return true;
}

/// An NHWC depthwise layer on the tiled kernel: a vector of channels per thread where the
/// channels and the tensors' alignment allow, else one. `turned`: each filter read turned 180
/// degrees (backward data as a forward convolution). False where the kernel's limits leave the
/// layer out.
template <class TX, class TW, class TY, class Compute, class Epilogue>
bool launch_depthwise_tiled(cudaStream_t stream, const conv::fprop_batch<TX, TW, TY>& batch,
                            Compute alpha, Compute beta, const Epilogue& epilogue,
                            bool turned = false) {
  const conv::conv2d_geometry& geo = batch.geo;
  constexpr int vector = depthwise_vector<TX>;
  const auto whole = [](const void* p, std::size_t bytes) {
    return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
  };
  if (vector > 1 && geo.kg() == 1 && geo.k % vector == 0 && whole(batch.x, vector * sizeof(TX)) &&
      whole(batch.y, vector * sizeof(TY)) &&
      launch_depthwise_tiled_at<vector>(stream, batch, alpha, beta, epilogue, turned)) {
    return true;
  }
  return launch_depthwise_tiled_at<1>(stream, batch, alpha, beta, epilogue, turned);
}

/// A depthwise layer: NHWC on the tiled kernel; NCHW (and what the tiled kernel's limits leave
/// out) one output per thread.
template <class TX, class TW, class TY, class Compute, class Epilogue>
void launch_depthwise(cudaStream_t stream, const conv::fprop_batch<TX, TW, TY>& batch,
                      Compute alpha, Compute beta, const Epilogue& epilogue) {
  const conv::conv2d_geometry& geo = batch.geo;
  if (geo.n <= 0 || geo.k <= 0 || geo.pixels() <= 0) return;
  if (geo.nhwc() && launch_depthwise_tiled(stream, batch, alpha, beta, epilogue)) return;
  constexpr int threads = 256;
  const index_t total = batch.geo.n * batch.geo.k * batch.geo.pixels();
  const index_t blocks = std::min<index_t>(ceil_div(total, threads), index_t{1} << 20);
  launch(depthwise_kernel<threads, TX, TW, TY, Compute, Epilogue>,
         launch_config{static_cast<unsigned>(blocks), threads, 0, stream}, batch, alpha, beta,
         epilogue);
  GPUBATCH_CUDA_TRY(cudaGetLastError());
}

/// A uniform convolution (shared or per-sample filters).
template <class Policy, class TX, class TW, class TY, class Compute, class Epilogue>
void dispatch(cudaStream_t stream, const conv::fprop_batch<TX, TW, TY>& batch, Compute alpha,
              Compute beta, const Epilogue& epilogue, const conv2d_options& options) {
  if constexpr (std::is_void_v<Policy>) {
    if (batch.geo.cg() == 1) {
      launch_depthwise(stream, batch, alpha, beta, epilogue);
      return;
    }
  }
  const index_t m = batch.gemm_m(), n = batch.geo.kg(), k = batch.geo.gemm_k();
  // The device is queried for split-K only when the caller offers a workspace.
  const int sms = options.workspace != nullptr ? sm_count() : 0;
  with_policy<Policy, TX>(cuda_gemm::code_arch(), classify_conv2d(m, n, k), options.allow_tf32,
                          [&](auto tag) {
    using P = typename decltype(tag)::type;
    split_k<Compute> split = no_split<Compute>();
    if (options.workspace != nullptr) {
      split = plan_split<P, Compute>(batch, sms);
      if (split.count > 1 && split_bytes(batch, split) <= options.workspace_bytes) {
        split.workspace = static_cast<Compute*>(options.workspace);
      } else {
        split = no_split<Compute>();  // too small a workspace: run without splitting
      }
    }
    launch_implicit<P>(stream, batch, m, n, split, alpha, beta, epilogue);
  });
}

/// A grouped batch: the grid is sized from the caller's bounds; no split-K (the reduction
/// lengths are in device memory).
template <class Policy, class TX, class TW, class TY, class Compute, class Epilogue>
void dispatch(cudaStream_t stream, const conv::grouped_fprop_batch<TX, TW, TY>& batch,
              Compute alpha, Compute beta, const Epilogue& epilogue,
              const conv2d_options& options) {
  // No workspace use for grouped batches: their reduction lengths are in device memory.
  const grouped_conv2d_bounds& b = batch.bounds;
  with_policy<Policy, TX>(cuda_gemm::code_arch(),
                          classify_conv2d(b.max_output_pixels, b.max_k_per_group, 0),
                          options.allow_tf32, [&](auto tag) {
                            using P = typename decltype(tag)::type;
                            launch_implicit<P>(stream, batch, b.max_output_pixels,
                                               b.max_k_per_group, no_split<Compute>(), alpha,
                                               beta, epilogue);
                          });
}

}  // namespace detail::cuda_conv
GPUBATCH_NAMESPACE_END
