/// @file detail/gemm/dispatch.cuh
/// @brief CUDA GEMM dispatch: picks the kernel (tiny, tensor-core or SIMT tiled) and a compiled
/// policy by element type, size class and architecture, sizes the grid, splits batches beyond
/// the grid limit across launches, and launches on the caller's stream. Included only by
/// translation units compiled by nvcc.
#pragma once

#include <gpubatch/detail/gemm/kernels.cuh>
#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/detail/gemm/tensor_core.cuh>
#include <gpubatch/error.hpp>
#include <gpubatch/gemm_policy.hpp>
#include <gpubatch/gemm_problem.hpp>
#include <gpubatch/launch.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

GPUBATCH_NAMESPACE_BEGIN
namespace detail::cuda_gemm {

/// What the dispatch needs to know of a device, and of this file's code on it. None of it
/// changes while the process runs, so it is read once per device: small batched calls are where
/// launch overhead dominates, and each runtime query costs about as much as a launch.
struct device_facts {
  int arch = 0;                  ///< compute capability as 10 * major + minor (e.g. 90)
  int code_arch = 0;             ///< what this file's kernels run as there (see code_arch())
  std::int64_t shared_optin = 0; ///< shared memory a block may have once its kernel opts in
  std::int64_t shared_per_sm = 0;       ///< shared memory of one multiprocessor
  std::int64_t reserved_per_block = 0;  ///< shared memory the system keeps for each block
  int sms = 0;                   ///< streaming multiprocessors
};

/// The current device's facts, queried on first use per device.
inline const device_facts& current_device_facts() {
  int device = 0;
  GPUBATCH_CUDA_TRY(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::map<int, device_facts> known;  // node-based: references stay valid
  const std::lock_guard<std::mutex> lock(mutex);
  const auto found = known.find(device);
  if (found != known.end()) {
    return found->second;
  }
  device_facts facts;
  int major = 0, minor = 0, shared = 0, per_sm = 0, reserved = 0;
  GPUBATCH_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  GPUBATCH_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  GPUBATCH_CUDA_TRY(cudaDeviceGetAttribute(&shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  GPUBATCH_CUDA_TRY(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor,
                                           device));
  GPUBATCH_CUDA_TRY(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock,
                                           device));
  GPUBATCH_CUDA_TRY(cudaDeviceGetAttribute(&facts.sms, cudaDevAttrMultiProcessorCount, device));
  facts.arch = 10 * major + minor;
  facts.shared_optin = shared;
  facts.shared_per_sm = per_sm;
  facts.reserved_per_block = reserved;
  // Read as CUB does, from the PTX version of a kernel compiled with the others.
  cudaFuncAttributes attributes{};
  GPUBATCH_CUDA_TRY(cudaFuncGetAttributes(&attributes, arch_probe_kernel<>));
  facts.code_arch = std::min(facts.arch, attributes.ptxVersion);
  return known.emplace(device, facts).first->second;
}

/// Compute capability of the current device as 10 * major + minor (e.g. 90).
inline int current_arch() { return current_device_facts().arch; }

/// Shared memory a block may have on the current device once its kernel opts in.
inline std::int64_t shared_limit() { return current_device_facts().shared_optin; }

/// The architecture the code of this translation unit runs as on the current device, as
/// 10 * major + minor: the device's compute capability, or less when the kernels were compiled
/// only for older architectures (a program built for sm_75 runs its sm_75 code on an sm_90
/// device, where the tensor-core kernels compile to a trap).
inline int code_arch() { return current_device_facts().code_arch; }

/// Blocks of `kernel` one multiprocessor of the current device holds at once, queried once per
/// kernel, block size, shared memory size and device.
template <class Kernel>
int resident_blocks_per_sm(Kernel kernel, int threads, std::size_t shared_bytes) {
  int device = 0;
  GPUBATCH_CUDA_TRY(cudaGetDevice(&device));
  using key = std::tuple<const void*, int, std::size_t, int>;
  static std::mutex mutex;
  static std::map<key, int> known;
  const key k{reinterpret_cast<const void*>(kernel), threads, shared_bytes, device};
  const std::lock_guard<std::mutex> lock(mutex);
  const auto found = known.find(k);
  if (found != known.end()) {
    return found->second;
  }
  int per_sm = 0;
  GPUBATCH_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads,
                                                                   shared_bytes));
  known.emplace(k, per_sm);
  return per_sm;
}

/// A kernel's launch asks for all its shared memory as dynamic shared memory (gpubatch's kernels
/// declare no static shared memory), checked here against the device; above 48 KiB the kernel
/// must opt in.
/// @throws error if the device cannot give a block that much
template <class Kernel>
void allow_shared_bytes(Kernel kernel, std::int64_t bytes) {
  if (bytes <= 48 * 1024) {
    return;
  }
  const std::int64_t limit = shared_limit();
  if (bytes > limit) {
    throw error("gpubatch: the kernel's policy needs " + std::to_string(bytes) +
                " bytes of shared memory per block, and this device allows " +
                std::to_string(limit) + "; use a policy with a smaller tile or fewer stages");
  }
  GPUBATCH_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes)));
}

/// The grid of the tiled kernels: one block per C tile of the largest problem (grid.x).
template <class Policy>
index_t tile_grid(index_t max_m, index_t max_n, index_t& tiles_n) {
  tiles_n = ceil_div(max_n, Policy::tile_n);
  const index_t tiles = ceil_div(max_m, Policy::tile_m) * tiles_n;
  if (tiles > 0x7fffffff) {
    throw invalid_argument("c", "too many tiles for one grid (" + std::to_string(tiles) + ")");
  }
  return tiles;
}

/// Launches `kernel` once per slice of at most Policy::max_blocks_per_launch problems (grid.y).
template <class Policy, class Kernel, class Batch, class Compute, class Epilogue>
void launch_slices(Kernel kernel, std::int64_t shared_bytes, cudaStream_t stream,
                   const Batch& batch, index_t max_m, index_t max_n, Compute alpha, Compute beta,
                   const Epilogue& epilogue) {
  allow_shared_bytes(kernel, shared_bytes);
  index_t tiles_n = 0;
  const index_t tiles = tile_grid<Policy>(max_m, max_n, tiles_n);
  const index_t launches = launch_count(batch.count, Policy::max_blocks_per_launch);
  for (index_t l = 0; l < launches; ++l) {
    const launch_slice slice = slice_of_launch(batch.count, Policy::max_blocks_per_launch, l);
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(slice.count));
    launch(kernel,
           launch_config{grid, Policy::threads, static_cast<std::size_t>(shared_bytes), stream},
           batch, slice.first, tiles_n, alpha, beta, epilogue);
    GPUBATCH_CUDA_TRY(cudaGetLastError());
  }
}

/// Launches a grouped batch's walking `kernel` (detail/gemm/tile_schedule.hpp): as many blocks
/// as the GPU holds at once, fewer when the bounds allow fewer tiles. Sized from the device and
/// the kernel's occupancy, never from the descriptors, so the call does not synchronise.
template <class Policy, class Kernel, class Batch, class Compute, class Epilogue>
void launch_walk(Kernel kernel, std::int64_t shared_bytes, cudaStream_t stream,
                 const Batch& batch, Compute alpha, Compute beta, const Epilogue& epilogue) {
  allow_shared_bytes(kernel, shared_bytes);
  const int sms = current_device_facts().sms;
  const int per_sm =
      resident_blocks_per_sm(kernel, Policy::threads, static_cast<std::size_t>(shared_bytes));
  const index_t resident = index_t{sms} * std::max(per_sm, 1);
  const index_t blocks = tile_schedule::walking_grid(batch.count, batch.bounds, Policy::tile_m,
                                                     Policy::tile_n, resident);
  launch(kernel,
         launch_config{static_cast<unsigned>(blocks), Policy::threads,
                       static_cast<std::size_t>(shared_bytes), stream},
         batch, alpha, beta, epilogue);
  GPUBATCH_CUDA_TRY(cudaGetLastError());
}

/// Dynamic shared memory a launch of the tiled kernels with `Policy` asks for: the tile's
/// stages (tensor cores: with A and B staged as StagingA and StagingB), and for grouped batches
/// the walk's storage after them.
template <class Policy, class Batch, class Compute,
          tensor_core::staging StagingA = tensor_core::staging::k_major,
          tensor_core::staging StagingB = tensor_core::staging::k_major>
constexpr std::int64_t tiled_shared_bytes() {
  std::int64_t tile = 0;
  if constexpr (Policy::tensor_cores) {
    using element = std::remove_const_t<
        std::remove_pointer_t<decltype(std::declval<const Batch&>().problem(0).a.data)>>;
    tile = tensor_core::geometry<Policy, element, StagingA, StagingB>::shared_bytes;
  } else {
    tile = Policy::template shared_bytes<Compute>();
  }
  return Batch::uniform ? tile : tile_schedule::walk_shared_bytes<Policy::threads>(tile);
}

template <class Policy, class Batch, class Compute, class Epilogue>
void launch_tiled(cudaStream_t stream, const Batch& batch, index_t max_m, index_t max_n,
                  Compute alpha, Compute beta, const Epilogue& epilogue) {
  constexpr std::int64_t shared_bytes = tiled_shared_bytes<Policy, Batch, Compute>();
  static_assert(shared_bytes <= 227 * 1024,
                "gpubatch::gemm_policy: the tile needs more shared memory than a block can have "
                "(227 KiB on sm_90); use a smaller tile, fewer stages or fewer problems per block");
  if constexpr (Batch::uniform) {
    launch_slices<Policy>(tiled_gemm_kernel<Policy, Batch, Compute, Epilogue>, shared_bytes,
                          stream, batch, max_m, max_n, alpha, beta, epilogue);
  } else {
    launch_walk<Policy>(grouped_tiled_gemm_kernel<Policy, Batch, Compute, Epilogue>,
                        shared_bytes, stream, batch, alpha, beta, epilogue);
  }
}

/// The strides of op(A) and op(B) of every problem of a batch (a batch form's operands share
/// their layout and transpose), read on the host without touching device memory.
template <class TA, class TB, class TC>
std::pair<strides2, strides2> operand_strides_of(const strided_gemm_batch<TA, TB, TC>& batch) {
  return {batch.a.stride, batch.b.stride};
}
template <class TA, class TB, class TC>
std::pair<strides2, strides2> operand_strides_of(const array_gemm_batch<TA, TB, TC>& batch) {
  return {batch.a_stride, batch.b_stride};
}
template <class TA, class TB, class TC>
std::pair<strides2, strides2> operand_strides_of(const grouped_gemm_batch<TA, TB, TC>& batch) {
  // Any leading dimension above 1 tells which stride is the unit one.
  return {operand_strides(batch.layouts.a, batch.layouts.op_a, 2),
          operand_strides(batch.layouts.b, batch.layouts.op_b, 2)};
}

/// How the tensor-core kernels stage A (m x k) and B (read as n x k) of a batch: each operand
/// M/N-major when its rows are what is contiguous, so every aligned layout and transpose copies
/// whole chunks with cp.async.
template <class Batch>
std::pair<tensor_core::staging, tensor_core::staging> stagings_of(const Batch& batch) {
  const auto [a, b] = operand_strides_of(batch);
  return {tensor_core::staging_for(a.row, a.col), tensor_core::staging_for(b.col, b.row)};
}

/// Calls `f` with the staging pair of `batch` as compile-time constants (one kernel each).
template <class Batch, class F>
void with_stagings(const Batch& batch, F&& f) {
  using tensor_core::staging;
  using k = std::integral_constant<staging, staging::k_major>;
  using mn = std::integral_constant<staging, staging::mn_major>;
  const auto [a, b] = stagings_of(batch);
  if (a == staging::k_major) {
    b == staging::k_major ? f(k{}, k{}) : f(k{}, mn{});
  } else {
    b == staging::k_major ? f(mn{}, k{}) : f(mn{}, mn{});
  }
}

/// Shared memory the tensor-core kernels of `Policy` ask for with the batch's stagings.
template <class Policy, class Batch, class Compute>
std::int64_t tensor_core_shared_bytes(const Batch& batch) {
  std::int64_t bytes = 0;
  with_stagings(batch, [&](auto a, auto b) {
    bytes = tiled_shared_bytes<Policy, Batch, Compute, decltype(a)::value, decltype(b)::value>();
  });
  return bytes;
}

template <class Policy, class Batch, class Compute, class Epilogue>
void launch_tensor_core(cudaStream_t stream, const Batch& batch, index_t max_m, index_t max_n,
                        Compute alpha, Compute beta, const Epilogue& epilogue) {
  with_stagings(batch, [&](auto a, auto b) {
    constexpr tensor_core::staging staging_a = decltype(a)::value;
    constexpr tensor_core::staging staging_b = decltype(b)::value;
    constexpr std::int64_t shared_bytes =
        tiled_shared_bytes<Policy, Batch, Compute, staging_a, staging_b>();
    if constexpr (Batch::uniform) {
      launch_slices<Policy>(
          tensor_core::tensor_core_gemm_kernel<Policy, staging_a, staging_b, Batch, Compute,
                                               Epilogue>,
          shared_bytes, stream, batch, max_m, max_n, alpha, beta, epilogue);
    } else {
      launch_walk<Policy>(
          tensor_core::grouped_tensor_core_gemm_kernel<Policy, staging_a, staging_b, Batch,
                                                       Compute, Epilogue>,
          shared_bytes, stream, batch, alpha, beta, epilogue);
    }
  });
}

/// Tiny problems: as many per block as the block's threads have output registers for and its
/// shared memory has room, within the policy's problems-per-block bound; sized from the bounds
/// (a uniform batch's own shape, a grouped batch's promised bounds). The shared memory is capped
/// so that the policy's MinBlocksPerSm blocks fit one multiprocessor of this device
/// (tiny::shared_cap); where the cap bites, blocks take fewer problems.
template <class Policy, class Batch, class Compute, class Epilogue>
void launch_tiny(cudaStream_t stream, const Batch& batch, const tiny::block_bounds& bounds,
                 Compute alpha, Compute beta, const Epilogue& epilogue) {
  constexpr int threads = Policy::threads;
  constexpr int outputs_per_thread = Policy::accumulators_per_thread;
  static_assert(threads * outputs_per_thread >= 32 * 32,
                "gpubatch: the tiny policy must hold a whole 32 x 32 problem in its registers");
  // The block's table of problems comes first in its shared memory; the staged operands share
  // the rest of the cap (at most 48 KiB: no opt-in needed).
  using instance = std::remove_cv_t<decltype(batch.problem(0))>;
  constexpr index_t table_bytes =
      tiny::table_bytes<tiny::block_table<instance, Policy::problems_per_block>>();
  const device_facts& facts = current_device_facts();
  const tiny::launch_plan plan = tiny::plan_launch(
      bounds, batch.count, Policy::tile_k, threads, outputs_per_thread,
      Policy::problems_per_block, table_bytes, static_cast<index_t>(sizeof(Compute)),
      tiny::shared_cap(facts.shared_per_sm, facts.reserved_per_block, Policy::min_blocks_per_sm));
  const index_t blocks = ceil_div(batch.count, plan.problems_per_block);
  launch(tiny_gemm_kernel<threads, Policy::min_blocks_per_sm, outputs_per_thread,
                          Policy::problems_per_block, Batch, Compute, Epilogue>,
         launch_config{static_cast<unsigned>(blocks), threads,
                       static_cast<std::size_t>(plan.shared_bytes), stream},
         batch,
         tiny_shape{static_cast<int>(plan.problems_per_block), static_cast<int>(plan.k_chunk),
                    bounds},
         alpha, beta, epilogue);
  GPUBATCH_CUDA_TRY(cudaGetLastError());
}

/// Whether problems of element type `Element` run on tensor cores: f16, bf16 and int8 always
/// (sm_80+), f32 when the caller allowed TF32.
template <class Element>
constexpr bool tensor_core_element(bool allow_tf32) {
  if constexpr (!tensor_core::supported_v<Element>) {
    return false;
  } else {
    return !std::is_same_v<Element, float> || allow_tf32;
  }
}

/// A uniform batch of tiny problems on a `Tile` x `Tile` tile per problem: tensor cores where the
/// caller's types and options allow them, else SIMT (f16, bf16 and int8 reach here only with
/// tensor cores: the dispatch refuses them on SIMT by default).
template <int Arch, class Element, int Tile, class Batch, class Compute, class Epilogue>
void launch_small_tile(cudaStream_t stream, const Batch& batch, index_t max_m, index_t max_n,
                       Compute alpha, Compute beta, const Epilogue& epilogue, bool tensor_cores) {
  if constexpr (tensor_core::supported_v<Element>) {
    if (tensor_cores) {
      launch_tensor_core<typename default_small_tensor_core_policy<Element, Arch, Tile>::type>(
          stream, batch, max_m, max_n, alpha, beta, epilogue);
      return;
    }
  }
  if constexpr (!tensor_core::supported_v<Element> || std::is_same_v<Element, float>) {
    launch_tiled<typename default_small_tile_policy<Element, Arch, Tile>::type>(
        stream, batch, max_m, max_n, alpha, beta, epilogue);
  }
}

/// The compiled default policies of one architecture, picked by size class.
template <int Arch, class Element, class Batch, class Compute, class Epilogue>
void launch_default(cudaStream_t stream, const Batch& batch, index_t max_m, index_t max_n,
                    index_t max_k, Compute alpha, Compute beta, const Epilogue& epilogue,
                    bool tensor_cores) {
  const size_class size = classify_gemm(max_m, max_n, max_k);
  // Uniform batches of tiny problems at least 8 x 8: a small tile per problem beats the tiny
  // kernel where measured (default_small_tile_policy).
  if constexpr (Batch::uniform && small_tile_default_v<Element>) {
    if (size == size_class::tiny && max_m >= 8 && max_n >= 8) {
      if (max_m <= 16 && max_n <= 16) {
        launch_small_tile<Arch, Element, 16>(stream, batch, max_m, max_n, alpha, beta, epilogue,
                                             tensor_cores);
      } else {
        launch_small_tile<Arch, Element, 32>(stream, batch, max_m, max_n, alpha, beta, epilogue,
                                             tensor_cores);
      }
      return;
    }
  }
  if (size == size_class::tiny) {
    using tiny_policy = typename default_gemm_policy<Element, Arch, size_class::tiny>::type;
    launch_tiny<tiny_policy>(stream, batch, tiny::block_bounds{max_m, max_n, max_k}, alpha, beta,
                             epilogue);
    return;
  }
  // Grouped batches: the tiled kernels walk the batch's tiles with a GPU-sized grid.
  bool large = size == size_class::large;
  if constexpr (tensor_core::supported_v<Element>) {
    if (tensor_cores) {
      using large_policy = typename default_tensor_core_policy<Element, Arch, size_class::large>::type;
      // A device with less shared memory per block than the large tile needs (int8 grouped on
      // sm_86/89, 99 KiB) takes the medium one.
      if (large && tensor_core_shared_bytes<large_policy, Batch, Compute>(batch) > shared_limit()) {
        large = false;
      }
      if (large) {
        launch_tensor_core<typename default_tensor_core_policy<Element, Arch, size_class::large>::type>(
            stream, batch, max_m, max_n, alpha, beta, epilogue);
      } else {
        launch_tensor_core<typename default_tensor_core_policy<Element, Arch, size_class::medium>::type>(
            stream, batch, max_m, max_n, alpha, beta, epilogue);
      }
      return;
    }
  }
  if constexpr (!tensor_core::supported_v<Element> || std::is_same_v<Element, float>) {
    if (large) {
      launch_tiled<typename default_gemm_policy<Element, Arch, size_class::large>::type>(
          stream, batch, max_m, max_n, alpha, beta, epilogue);
    } else {
      launch_tiled<typename default_gemm_policy<Element, Arch, size_class::medium>::type>(
          stream, batch, max_m, max_n, alpha, beta, epilogue);
    }
  }
}

/// Runs a batch with `Policy` (void: the defaults). f16, bf16 and int8 need sm_80 or later by
/// default (tensor cores); a user's SIMT gemm_policy runs them on any architecture.
template <class Policy, class Batch, class Compute, class Epilogue>
void dispatch(cudaStream_t stream, const Batch& batch, Compute alpha, Compute beta,
              const Epilogue& epilogue, const gemm_options& options) {
  index_t max_m, max_n, max_k;
  if constexpr (Batch::uniform) {
    max_m = batch.m, max_n = batch.n, max_k = batch.k;
  } else {
    max_m = batch.bounds.max_m, max_n = batch.bounds.max_n, max_k = batch.bounds.max_k;
  }
  using element = std::remove_const_t<std::remove_pointer_t<decltype(batch.problem(0).a.data)>>;
  constexpr bool needs_tensor_cores =
      tensor_core::supported_v<element> && !std::is_same_v<element, float>;
  if constexpr (!std::is_void_v<Policy>) {
    if constexpr (Policy::tensor_cores) {
      static_assert(tensor_core::supported_v<element>,
                    "gpubatch::tensor_core_policy: tensor cores take f16, bf16, int8 or f32 (TF32)");
      if (!tensor_core_element<element>(options.allow_tf32)) {
        throw invalid_argument("options", "a tensor_core_policy with f32 operands needs "
                                          "allow_tf32 = true (the MMA rounds inputs to TF32)");
      }
      if (code_arch() < 80) {
        throw error("gpubatch::gemm: a tensor_core_policy needs a GPU of compute capability 8.0 "
                    "or later, and kernels compiled for one (CMAKE_CUDA_ARCHITECTURES 80 or "
                    "later)");
      }
      launch_tensor_core<Policy>(stream, batch, max_m, max_n, alpha, beta, epilogue);
    } else {
      launch_tiled<Policy>(stream, batch, max_m, max_n, alpha, beta, epilogue);
    }
    return;
  } else {
    const int arch = code_arch();
    if (needs_tensor_cores && arch < 80) {
      throw error("gpubatch::gemm: f16, bf16 and int8 run on tensor cores, which need a GPU of "
                  "compute capability 8.0 or later and kernels compiled for one "
                  "(CMAKE_CUDA_ARCHITECTURES 80 or later); pass a gemm_policy to run them on "
                  "SIMT cores");
    }
    // allow_tf32 allows tensor cores, it does not require them: without them f32 stays on SIMT.
    const bool tensor_cores = arch >= 80 && tensor_core_element<element>(options.allow_tf32);
    if (arch >= 90) {
      launch_default<90, element>(stream, batch, max_m, max_n, max_k, alpha, beta, epilogue,
                                  tensor_cores);
    } else {
      launch_default<80, element>(stream, batch, max_m, max_n, max_k, alpha, beta, epilogue,
                                  tensor_cores);
    }
  }
}

}  // namespace detail::cuda_gemm
GPUBATCH_NAMESPACE_END
