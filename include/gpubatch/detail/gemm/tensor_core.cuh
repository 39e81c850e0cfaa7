/// @file detail/gemm/tensor_core.cuh
/// @brief The tensor-core GEMM kernel (f16, bf16, int8, and f32 as TF32; sm_80 and later):
/// warp-level MMA on 16 x 16 fragments (nvcuda::wmma, which lowers to mma.sync) fed by a
/// multistage cp.async pipeline. Included only by translation units compiled by nvcc.
///
/// The main loop is written against operand *sources* (detail/gemm/tensor_core.hpp) rather than
/// matrices, so the implicit-GEMM convolution can feed it its im2col gather unchanged. A Hopper
/// wgmma + TMA main loop would be a second function with the same contract: stage the block's
/// operands, leave the block's C tile in shared memory for the shared epilogue store.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/detail/gemm/tensor_core.hpp>
#include <gpubatch/detail/gemm/tile_schedule.cuh>
#include <gpubatch/detail/gemm/warp_tiling.hpp>

#include <cuda_pipeline_primitives.h>
#include <mma.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

GPUBATCH_KERNELS_BEGIN

GPUBATCH_NAMESPACE_BEGIN
namespace detail::tensor_core {

// The warp-MMA types (TF32 and bf16 above all) exist only from sm_80 on: device passes for
// older architectures see none of this, and the kernels compile to a trap there.
#if !GPUBATCH_DEVICE_CODE || GPUBATCH_DEVICE_ARCH >= 800

/// The wmma fragment types for element type T: A and B in the layout their tile is staged in
/// (K-major: A row-major, B column-major; M/N-major: A column-major, B row-major), accumulator
/// in f32 (int32 for int8).
template <class T>
struct fragments;

template <class Element, class Accumulator, int K>
struct fragment_types {
  template <staging S>
  using a = nvcuda::wmma::fragment<
      nvcuda::wmma::matrix_a, 16, 16, K, Element,
      std::conditional_t<S == staging::k_major, nvcuda::wmma::row_major, nvcuda::wmma::col_major>>;
  template <staging S>
  using b = nvcuda::wmma::fragment<
      nvcuda::wmma::matrix_b, 16, 16, K, Element,
      std::conditional_t<S == staging::k_major, nvcuda::wmma::col_major, nvcuda::wmma::row_major>>;
  using accumulator = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, K, Accumulator>;
  using accumulator_type = Accumulator;
  template <class Fragment>
  GPUBATCH_DEVICE static void round(Fragment&) {}
};

template <>
struct fragments<half> : fragment_types<half, float, 16> {};
template <>
struct fragments<bfloat16> : fragment_types<bfloat16, float, 16> {};
template <>
struct fragments<std::int8_t> : fragment_types<signed char, int, 16> {};
template <>
struct fragments<float> : fragment_types<nvcuda::wmma::precision::tf32, float, 8> {
  /// f32 operands enter the MMA as TF32: round once after the fragment load.
  template <class Fragment>
  GPUBATCH_DEVICE static void round(Fragment& f) {
#pragma unroll
    for (int i = 0; i < f.num_elements; ++i) f.x[i] = nvcuda::wmma::__float_to_tf32(f.x[i]);
  }
};

/// One 16-byte asynchronous global-to-shared copy (cp.async, cached in L1 as
/// __pipeline_memcpy_async's), completing at the next wait; with `zero` it reads no byte of
/// `global_src` and fills the 16 bytes with zeros. The source size is a register operand, so
/// both cases are one instruction and a warp staging a convolution's padding beside its inside
/// does not diverge.
struct async_copy16 {
  template <class T>
  GPUBATCH_DEVICE void operator()(T* shared_dst, const T* global_src, bool zero) const {
#if defined(__CUDA_ARCH__)
    const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global_src),
                 "r"(zero ? 0u : 16u)
                 : "memory");
#else
    __pipeline_memcpy_async(shared_dst, global_src, 16, zero ? 16 : 0);
#endif
  }
};

/// The multistage main loop of one thread block: stages K tiles of both operands `stages - 1`
/// ahead with cp.async, multiplies each on tensor cores, and leaves the block's (bm x bn)
/// product in shared memory as accumulators, row-major with pitch Geometry::c_ld.
/// @param shared the block's dynamic shared memory, at least Geometry::shared_bytes
/// @return the accumulator tile in shared memory
template <class Geometry, class SourceA, class SourceB>
GPUBATCH_DEVICE typename fragments<std::remove_const_t<typename SourceA::element_type>>::accumulator_type*
mainloop(const SourceA& a, const SourceB& b, index_t k, index_t tile_row, index_t tile_col,
         unsigned char* shared) {
  using T = std::remove_const_t<typename SourceA::element_type>;
  using frag = fragments<T>;
  using accumulator_type = typename frag::accumulator_type;
  using a_layout = typename Geometry::a_layout;
  using b_layout = typename Geometry::b_layout;
  static_assert(std::is_same_v<T, std::remove_const_t<typename SourceB::element_type>>,
                "gpubatch: the tensor-core kernel needs A and B of one element type");
  constexpr int S = Geometry::stages;
  constexpr int FM = Geometry::fragments_m, FN = Geometry::fragments_n;

  T* const stages = reinterpret_cast<T*>(shared);
  const int thread = static_cast<int>(threadIdx.x);
  const int warp = thread / 32;
  const int warp_row = (warp / Geometry::warps_n) * Geometry::warp_m;
  const int warp_col = (warp % Geometry::warps_n) * Geometry::warp_n;

  const operand_stager<a_layout, Geometry::threads, SourceA> a_stager(a, tile_row, thread);
  const operand_stager<b_layout, Geometry::threads, SourceB> b_stager(b, tile_col, thread);
  const auto load = [&](index_t kt, int stage) {
    T* const a_s = stages + stage * Geometry::stage_elements;
    a_stager.stage(a, kt * Geometry::bk, thread, a_s, async_copy16{});
    b_stager.stage(b, kt * Geometry::bk, thread, a_s + Geometry::a_stage_elements,
                   async_copy16{});
  };

  typename frag::accumulator acc[FM][FN];
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j) nvcuda::wmma::fill_fragment(acc[i][j], accumulator_type(0));

  const index_t k_tiles = ceil_div(k, Geometry::bk);
  // Prologue: S - 1 tiles in flight. Every step commits a group, empty or not, so "all but the
  // newest S - 2 groups have landed" always means "tile kt has landed".
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < k_tiles) load(s, s);
    __pipeline_commit();
  }
  // Stage indices kt % S and (kt + S - 1) % S, kept as wrapping counters (a 64-bit remainder
  // per K step otherwise).
  int read_stage = 0, write_stage = S - 1;
  for (index_t kt = 0; kt < k_tiles; ++kt) {
    __pipeline_wait_prior(S - 2);
    __syncthreads();  // tile kt is visible to all; stage (kt - 1) % S is free again
    const index_t next = kt + S - 1;
    if (next < k_tiles) load(next, write_stage);
    __pipeline_commit();
    write_stage = write_stage == S - 1 ? 0 : write_stage + 1;

    const T* const a_s = stages + read_stage * Geometry::stage_elements;
    read_stage = read_stage == S - 1 ? 0 : read_stage + 1;
    const T* const b_s = a_s + Geometry::a_stage_elements;
#pragma unroll
    for (int slab = 0; slab < Geometry::slabs; ++slab) {
      typename frag::template a<a_layout::kind> a_frag[FM];
      typename frag::template b<b_layout::kind> b_frag[FN];
#pragma unroll
      for (int i = 0; i < FM; ++i) {
        nvcuda::wmma::load_matrix_sync(
            a_frag[i], a_s + a_layout::offset(warp_row + 16 * i, slab * Geometry::mma_k),
            a_layout::ld);
        frag::round(a_frag[i]);
      }
#pragma unroll
      for (int j = 0; j < FN; ++j) {
        nvcuda::wmma::load_matrix_sync(
            b_frag[j], b_s + b_layout::offset(warp_col + 16 * j, slab * Geometry::mma_k),
            b_layout::ld);
        frag::round(b_frag[j]);
      }
#pragma unroll
      for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) nvcuda::wmma::mma_sync(acc[i][j], a_frag[i], b_frag[j], acc[i][j]);
    }
  }
  __pipeline_wait_prior(0);
  __syncthreads();  // every warp is done with the stages: reuse them for the C tile

  accumulator_type* const c_tile = reinterpret_cast<accumulator_type*>(shared);
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j)
      nvcuda::wmma::store_matrix_sync(c_tile + (warp_row + 16 * i) * Geometry::c_ld + warp_col + 16 * j,
                                      acc[i][j], Geometry::c_ld, nvcuda::wmma::mem_row_major);
  __syncthreads();
  return c_tile;
}

/// The calling thread's index in its block, read where it is called: the compiler may not hoist
/// it, nor what is computed from it, out of a loop that encloses the call. The epilogue's loops
/// start from it: their per-thread slots, hoisted out of a grouped kernel's walk of tiles beside
/// the stagers' ones, took registers its main loop needs (20 bytes of spill at 128 registers).
GPUBATCH_DEVICE int thread_index_here() {
#if defined(__CUDA_ARCH__)
  unsigned thread;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(thread));
  return static_cast<int>(thread);
#else
  return static_cast<int>(threadIdx.x);
#endif
}

/// Hands every element of the block's accumulator tile that lies inside the (m x n) output to
/// `store(row, col, value)` in output_slot's order (columns first when `cols_contiguous`).
template <class Geometry, class Accumulator, class Store>
GPUBATCH_DEVICE void for_each_output(const Accumulator* c_tile, index_t tile_row,
                                     index_t tile_col, index_t m, index_t n, bool cols_contiguous,
                                     Store&& store) {
  for (int e = thread_index_here(); e < Geometry::bm * Geometry::bn; e += Geometry::threads) {
    const tile_element at = output_slot<Geometry>(e, cols_contiguous);
    const index_t row = tile_row + at.row, col = tile_col + at.col;
    if (row < m && col < n) {
      store(row, col, c_tile[at.row * Geometry::c_ld + at.col]);
    }
  }
}

/// Hands the block's accumulator tile to a contiguous output of type TC in runs of
/// output_run_v<TC> outputs: along rows (output_run_slot's order) for a row-contiguous output,
/// down columns (output_column_run_slot's) for a column-contiguous one (`Columns`). A run wholly
/// inside the output whose first element is 16-byte aligned is stored (and, when finishing reads
/// C, loaded) as one 16-byte access, a row's accumulators read as 16-byte quads, where element
/// by element each output took its own address, shared read and store; any other run goes
/// element by element. `run_at(row, col)` is the output_run starting at output (row, col).
template <class Geometry, class TC, bool Columns = false, class Accumulator, class RunAt>
GPUBATCH_DEVICE void store_runs(const Accumulator* c_tile, index_t tile_row, index_t tile_col,
                                index_t m, index_t n, RunAt&& run_at) {
  constexpr int R = output_run_v<TC>;
  // Between a run's consecutive accumulators in the tile.
  constexpr int step = Columns ? Geometry::c_ld : 1;
#pragma unroll 1
  for (int e = thread_index_here(); e < Geometry::bm * Geometry::bn / R;
       e += Geometry::threads) {
    const tile_element at = Columns ? output_column_run_slot<Geometry, R>(e)
                                    : output_run_slot<Geometry, R>(e);
    const index_t row = tile_row + at.row, col = tile_col + at.col;
    if (row >= m || col >= n) continue;
    const auto run = run_at(row, col);
    const Accumulator* const values = c_tile + at.row * Geometry::c_ld + at.col;
    const index_t left = Columns ? m - row : n - col;  // outputs from the run's first to the edge
    if (R <= left && aligned16(run.out)) {
      Accumulator v[R];
      if constexpr (Columns) {
#pragma unroll
        for (int j = 0; j < R; ++j) v[j] = values[j * step];
      } else {
#pragma unroll
        for (int q = 0; q < R; q += 4) simt::read_piece<4>(values + q, v + q);
      }
      // Read only when finishing reads C; zeroed so g++ need not prove that (-Wmaybe-uninitialized).
      TC result[R]{};
      if (run.reads_output()) simt::read_piece<R>(run.out, result);
#pragma unroll
      for (int j = 0; j < R; ++j) run.finish(result[j], v[j], j);
      simt::write_global_piece<R>(result, run.out);
    } else {
#pragma unroll 1
      for (int j = 0; j < R && j < left; ++j) run.finish(run.out[j], values[j * step], j);
    }
  }
}

/// The block computes the C tile of `problem` (problem `b` of the batch) at (tile_row,
/// tile_col), which lies inside C. Operands are staged through the tensor-core main loop; the
/// epilogue is the same store_output every GEMM kernel uses, in 16-byte runs where C's rows or
/// columns are contiguous.
template <class Policy, staging StagingA, staging StagingB, class Instance, class Compute,
          class Epilogue>
GPUBATCH_DEVICE void tensor_core_tile(const Instance& problem, index_t b, index_t tile_row,
                                      index_t tile_col, Compute alpha, Compute beta,
                                      const Epilogue& epilogue) {
  using element = std::remove_const_t<std::remove_pointer_t<decltype(problem.a.data)>>;
  using G = geometry<Policy, element, StagingA, StagingB>;
  GPUBATCH_DYNAMIC_SHARED(unsigned char, tensor_core_shared, 128);
  const bool cols_contiguous = problem.c.stride.col == 1;
  const auto* const c_tile = mainloop<G>(a_source(problem), b_source(problem), problem.k,
                                         tile_row, tile_col, tensor_core_shared);

  using TC = std::remove_reference_t<decltype(problem.c(0, 0))>;
  if (cols_contiguous) {
    store_runs<G, TC>(c_tile, tile_row, tile_col, problem.m, problem.n,
                      [&](index_t row, index_t col) {
                        return output_run<TC, Compute, Epilogue>{&problem.c(row, col), alpha, beta,
                                                                 &epilogue, b, row, col};
                      });
    return;
  }
  if (problem.c.stride.row == 1) {  // column-major C: runs down the columns
    store_runs<G, TC, true>(c_tile, tile_row, tile_col, problem.m, problem.n,
                            [&](index_t row, index_t col) {
                              return output_run<TC, Compute, Epilogue, true>{
                                  &problem.c(row, col), alpha, beta, &epilogue, b, row, col};
                            });
    return;
  }
  for_each_output<G>(c_tile, tile_row, tile_col, problem.m, problem.n, cols_contiguous,
                     [&](index_t row, index_t col, auto value) {
                       store_output(problem.c(row, col), static_cast<Compute>(value), alpha, beta,
                                    epilogue, b, row, col);
                     });
}

#endif  // !GPUBATCH_DEVICE_CODE || GPUBATCH_DEVICE_ARCH >= 800

/// The operand element type of a GEMM batch.
template <class Batch>
using batch_element_t = std::remove_const_t<
    std::remove_pointer_t<decltype(std::declval<const Batch&>().problem(0).a.data)>>;

/// Uniform batches: one C tile per block; grid.x walks the tiles of a problem, grid.y the
/// problems of this launch (from `first_problem`). A and B are staged as StagingA and StagingB.
template <class Policy, staging StagingA, staging StagingB, class Batch, class Compute,
          class Epilogue>
GPUBATCH_KERNEL void __launch_bounds__(
    Policy::threads, (staged_blocks_per_sm<Policy, batch_element_t<Batch>, StagingA, StagingB>()))
    tensor_core_gemm_kernel(Batch batch, index_t first_problem, index_t tiles_n, Compute alpha,
                            Compute beta, Epilogue epilogue) {
#if GPUBATCH_DEVICE_CODE && GPUBATCH_DEVICE_ARCH < 800
  (void)batch, (void)first_problem, (void)tiles_n, (void)alpha, (void)beta, (void)epilogue;
  __trap();  // dispatch never launches it below sm_80
#else
  tile_schedule::block_tile<Policy::tile_m, Policy::tile_n>(
      batch, first_problem, tiles_n,
      [&](const auto& problem, index_t b, index_t tile_row, index_t tile_col) {
        tensor_core_tile<Policy, StagingA, StagingB>(problem, b, tile_row, tile_col, alpha, beta,
                                                     epilogue);
      });
#endif
}

/// Grouped batches: a grid of resident blocks, each walking the batch's C tiles
/// (detail/gemm/tile_schedule.hpp), so problems smaller than the bounds cost no blocks. The
/// policy's register budget matters most here: left free, the walk's tile placement and
/// descriptor (per-thread values where the one-tile kernel's come from blockIdx and uniform
/// registers) took the f16 128 x 128 tile from 126 to 164 registers and from two blocks per SM
/// to one.
template <class Policy, staging StagingA, staging StagingB, class Batch, class Compute,
          class Epilogue>
GPUBATCH_KERNEL void __launch_bounds__(
    Policy::threads, (staged_blocks_per_sm<Policy, batch_element_t<Batch>, StagingA, StagingB>()))
    grouped_tensor_core_gemm_kernel(Batch batch, Compute alpha, Compute beta, Epilogue epilogue) {
#if GPUBATCH_DEVICE_CODE && GPUBATCH_DEVICE_ARCH < 800
  (void)batch, (void)alpha, (void)beta, (void)epilogue;
  __trap();  // dispatch never launches it below sm_80
#else
  using element = std::remove_const_t<std::remove_pointer_t<decltype(batch.problem(0).a.data)>>;
  GPUBATCH_DYNAMIC_SHARED(unsigned char, walk_shared, 128);
  tile_schedule::walk_grouped_tiles<Policy::threads, Policy::tile_m, Policy::tile_n>(
      batch,
      tile_schedule::walk_storage_in<Policy::threads>(walk_shared,
                                                      geometry<Policy, element, StagingA,
                                                               StagingB>::shared_bytes),
      [&](const auto& problem, index_t b, index_t tile_row, index_t tile_col) {
        tensor_core_tile<Policy, StagingA, StagingB>(problem, b, tile_row, tile_col, alpha, beta,
                                                     epilogue);
      });
#endif
}

}  // namespace detail::tensor_core
GPUBATCH_NAMESPACE_END

GPUBATCH_KERNELS_END
