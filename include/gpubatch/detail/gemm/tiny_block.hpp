/// @file detail/gemm/tiny_block.hpp
/// @brief What the CUDA tiny-matrix kernel shares with the host tests: how one block lays out
/// its several tiny problems (each its own shape in a grouped batch) end to end, stages their
/// operands in shared memory one K chunk at a time, and hands their outputs to its threads.
///
/// A block takes up to MaxProblems consecutive problems of a batch. Their descriptors are read
/// once into a table (in shared memory on the device); from the table, every output of the block
/// has an index e in [0, outputs) and thread t owns e = t, t + threads, ...; each problem's A
/// chunk (m x kc) and B chunk (kc x n) have a fixed place in the staging buffers. The kernel is
/// these functions separated by barriers, so a host test that calls them for every thread of a
/// block, phase by phase, runs exactly the kernel's index math.
///
/// Staging layout, chosen so that the accumulation's shared-memory reads are free of bank
/// conflicts for any shapes up to 32 x 32 (the host tests enumerate them): a warp's 32 outputs
/// are consecutive, so their A rows are a run of consecutive rows of the block's problems laid
/// end to end, and their B columns a run of consecutive columns of the problems side by side.
/// A is staged as those rows, a_pitch(kc) (odd) elements apart, so 32 consecutive rows start on
/// 32 different banks (16 distinct 8-byte slots for f64); B as kc rows of all the block's
/// columns, problem after problem, so at one K index the warp reads one contiguous run (f64:
/// a half warp inside one problem of 17 to 31 columns wraps around its row, 2-way).
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/numeric.hpp>

GPUBATCH_NAMESPACE_BEGIN
namespace detail::tiny {

/// The problems of one block: their instances and where their outputs and staged chunks begin.
/// Problems that are empty (m, n or k <= 0) or exceed the launch's bounds (a broken promise of
/// a grouped batch) get no outputs and no staging, so they are left untouched and can never
/// overrun the block's registers or shared memory.
template <class Instance, int MaxProblems>
struct block_table {
  int problems;                          ///< problems of this block
  index_t k_max;                         ///< the deepest of them (K chunks to walk)
  Instance problem[MaxProblems];          ///< gemm_instance of each problem
  index_t output_begin[MaxProblems + 1];  ///< prefix sums of m * n
  index_t a_begin[MaxProblems + 1];       ///< prefix sums of m * a_pitch: A row 0 of each problem
  index_t b_begin[MaxProblems + 1];       ///< prefix sums of n: B column 0 of each problem
  index_t a_pitch;                        ///< elements between staged A rows (odd)
  index_t b_pitch;                        ///< elements between staged B rows (the block's columns)

  /// Outputs of the whole block.
  GPUBATCH_HOST_DEVICE index_t outputs() const { return output_begin[problems]; }
};

/// Bytes the block table takes at the start of the tiny kernel's dynamic shared memory (the
/// staged operands follow, 16-byte aligned).
template <class Table>
GPUBATCH_HOST_DEVICE constexpr index_t table_bytes() {
  return (static_cast<index_t>(sizeof(Table)) + 15) / 16 * 16;
}

/// Upper bounds of the problems a block may hold.
struct block_bounds {
  index_t max_m, max_n, max_k;
};

/// Elements between staged A rows for K chunks of depth `k_chunk`: the next odd number, so
/// consecutive rows fall on different banks (4-byte elements: 32 rows, 32 banks; 8-byte: 16
/// rows, the 16 slots of a half-warp's wavefront).
GPUBATCH_HOST_DEVICE constexpr index_t a_pitch(index_t k_chunk) { return k_chunk | 1; }

/// Shared-memory offset (elements, from the start of the A staging) of A element (row, q) of
/// block problem `local`.
template <class Table>
GPUBATCH_HOST_DEVICE index_t a_offset(const Table& table, int local, index_t row, index_t q) {
  return table.a_begin[local] + row * table.a_pitch + q;
}

/// Shared-memory offset (elements, from the start of the B staging) of B element (q, col) of
/// block problem `local`.
template <class Table>
GPUBATCH_HOST_DEVICE index_t b_offset(const Table& table, int local, index_t q, index_t col) {
  return q * table.b_pitch + table.b_begin[local] + col;
}

/// Stores instance `local` of a block (phase 1, one thread per problem).
template <class Batch, class Table>
GPUBATCH_HOST_DEVICE void fetch_problem(const Batch& batch, index_t first, int local,
                                        const block_bounds& bounds, Table& table) {
  auto p = batch.problem(first + local);
  const bool usable = p.m > 0 && p.n > 0 && p.k > 0 && p.m <= bounds.max_m &&
                      p.n <= bounds.max_n && p.k <= bounds.max_k;
  if (!usable) p.m = p.n = p.k = 0;
  table.problem[local] = p;
}

/// Prefix sums over the fetched problems (phase 2, one thread).
template <class Table>
GPUBATCH_HOST_DEVICE void finish_table(int problems, index_t k_chunk, Table& table) {
  table.problems = problems;
  table.k_max = 0;
  table.a_pitch = a_pitch(k_chunk);
  table.output_begin[0] = table.a_begin[0] = table.b_begin[0] = 0;
  for (int l = 0; l < problems; ++l) {
    const auto& p = table.problem[l];
    table.output_begin[l + 1] = table.output_begin[l] + p.m * p.n;
    table.a_begin[l + 1] = table.a_begin[l] + p.m * table.a_pitch;
    table.b_begin[l + 1] = table.b_begin[l] + p.n;
    table.k_max = p.k > table.k_max ? p.k : table.k_max;
  }
  table.b_pitch = table.b_begin[problems];
}

/// The problem that block output `e` (< table.outputs()) belongs to: binary search of the prefix.
template <class Table>
GPUBATCH_HOST_DEVICE int problem_of(const Table& table, index_t e) {
  int lo = 0, hi = table.problems - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (table.output_begin[mid] <= e) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

/// One output a thread owns: problem, row and column. local < 0: the thread has no output here.
/// (int: a block's problems are tiny, and a thread keeps several of these in registers.)
struct owned_output {
  int local;
  int row;
  int col;
};

/// Output `e` of the block.
template <class Table>
GPUBATCH_HOST_DEVICE owned_output output_of(const Table& table, index_t e) {
  if (e >= table.outputs()) return {-1, 0, 0};
  const int l = problem_of(table, e);
  const index_t within = e - table.output_begin[l];
  const index_t n = table.problem[l].n;
  return {l, static_cast<int>(within / n), static_cast<int>(within % n)};
}

/// Columns of K chunk [k0, k0 + k_chunk) that problem `p` has.
template <class Instance>
GPUBATCH_HOST_DEVICE index_t chunk_depth(const Instance& p, index_t k0, index_t k_chunk) {
  const index_t left = p.k - k0;
  return left <= 0 ? 0 : (left < k_chunk ? left : k_chunk);
}

/// One slot of a staging walk: a problem of the block and the element's two indices in it (A:
/// row, q; B: q, column).
struct staged_slot {
  int local;
  index_t first;
  index_t second;
};

/// Slot `idx` of the walk over A's staged rows (all problems' rows end to end) and q in
/// [0, k_chunk). `local` is where the search for the problem starts and is left at the found
/// one: along a walk the rows only increase, so a thread carries it from slot to slot (0 always
/// works).
template <class Table>
GPUBATCH_HOST_DEVICE staged_slot a_slot(const Table& table, index_t idx, index_t k_chunk,
                                        int& local) {
  const index_t g = idx / k_chunk;
  while (table.a_begin[local + 1] <= g * table.a_pitch) ++local;
  return {local, g - table.a_begin[local] / table.a_pitch, idx % k_chunk};
}

/// Slot `idx` of the walk over q and B's block columns (all problems' columns side by side),
/// idx < k_chunk * table.b_pitch; the problem found by binary search of the column prefix.
template <class Table>
GPUBATCH_HOST_DEVICE staged_slot b_slot(const Table& table, index_t idx) {
  const index_t q = idx / table.b_pitch, c = idx % table.b_pitch;
  int lo = 0, hi = table.problems - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (table.b_begin[mid] <= c) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return {lo, q, c - table.b_begin[lo]};
}

/// Stages this thread's share of K chunk k0 of every problem (phase 3, between barriers), at
/// a_offset and b_offset. The block's threads walk each staging buffer as one run (a_slot,
/// b_slot), consecutive threads on consecutive slots, so a warp's stores stay on distinct banks
/// (2-way at most for A, whose rows skip one slot each when k_chunk is even); a group of threads
/// per problem put a warp's stores in several problems' rows at once, up to 8-way.
template <class Table, class Compute>
GPUBATCH_HOST_DEVICE void stage_chunk(const Table& table, index_t k0, index_t k_chunk, int thread,
                                      int threads, Compute* a_s, Compute* b_s) {
  if (table.problems == 0) return;
  const index_t a_slots = table.a_begin[table.problems] / table.a_pitch * k_chunk;
  int local = 0;
  for (index_t idx = thread; idx < a_slots; idx += threads) {
    const staged_slot at = a_slot(table, idx, k_chunk, local);
    const auto& p = table.problem[at.local];
    if (at.second < chunk_depth(p, k0, k_chunk)) {
      a_s[a_offset(table, at.local, at.first, at.second)] =
          convert<Compute>(p.a(at.first, k0 + at.second));
    }
  }
  for (index_t idx = thread; idx < k_chunk * table.b_pitch; idx += threads) {
    const staged_slot at = b_slot(table, idx);
    const auto& p = table.problem[at.local];
    if (at.first < chunk_depth(p, k0, k_chunk)) {
      b_s[b_offset(table, at.local, at.first, at.second)] =
          convert<Compute>(p.b(k0 + at.first, at.second));
    }
  }
}

/// Adds K chunk k0's contribution to one owned output (phase 4, between barriers).
template <class Table, class Compute>
GPUBATCH_HOST_DEVICE Compute accumulate_chunk(const Table& table, const owned_output& o,
                                              index_t k0, index_t k_chunk, const Compute* a_s,
                                              const Compute* b_s, Compute sum) {
  const auto& p = table.problem[o.local];
  // The K loop steps through A's row (+1) and B's column (+ b_pitch) with 32-bit offsets: the
  // 64-bit a_offset / b_offset per K index cost about 10 integer instructions per multiply-add.
  // Same reads, same order of additions; the offsets stay within the staged chunk (48 KiB).
  const int kk = static_cast<int>(chunk_depth(p, k0, k_chunk));
  const int b_pitch = static_cast<int>(table.b_pitch);
  const Compute* a = a_s + a_offset(table, o.local, o.row, 0);
  const Compute* b = b_s + b_offset(table, o.local, 0, o.col);
  for (int q = 0, bq = 0; q < kk; ++q, bq += b_pitch) {
    sum += a[q] * b[bq];
  }
  return sum;
}

/// Problems a block of `threads` threads with `outputs_per_thread` accumulators each can take
/// when every problem may be as large as `bounds`, within `max_problems` (the policy) and the
/// shared-memory budget for chunks of depth `k_chunk`.
GPUBATCH_HOST_DEVICE constexpr index_t problems_per_block(const block_bounds& bounds,
                                                          index_t k_chunk, int threads,
                                                          int outputs_per_thread,
                                                          int max_problems,
                                                          index_t shared_budget_elements) {
  const index_t outputs = bounds.max_m * bounds.max_n;
  const index_t staged = bounds.max_m * a_pitch(k_chunk) + bounds.max_n * k_chunk;
  index_t by_registers = static_cast<index_t>(threads) * outputs_per_thread / outputs;
  index_t by_shared = shared_budget_elements / staged;
  index_t ppb = by_registers < by_shared ? by_registers : by_shared;
  ppb = ppb < max_problems ? ppb : max_problems;
  return ppb < 1 ? 1 : ppb;
}

/// Dynamic shared memory one tiny block may ask for so that `blocks_per_sm` blocks (the policy's
/// MinBlocksPerSm) fit a multiprocessor of `shared_per_sm` bytes that reserves
/// `reserved_per_block` bytes for each block, in the 128-byte units shared memory is allocated
/// in, and no more than 48 KiB (beyond it a kernel must opt in). sm_80: 164 KiB / 4 - 1 KiB =
/// 40 KiB, where a 48 KiB block let only 3 fit.
GPUBATCH_HOST_DEVICE constexpr index_t shared_cap(index_t shared_per_sm, index_t reserved_per_block,
                                                  int blocks_per_sm) {
  const index_t fit = (shared_per_sm / blocks_per_sm - reserved_per_block) / 128 * 128;
  return fit < 48 * 1024 ? fit : 48 * 1024;
}

/// A tiny launch's geometry: K chunk, problems per block and the dynamic shared memory a block
/// asks for (its table, then the staged A and B chunks).
struct launch_plan {
  index_t k_chunk;
  index_t problems_per_block;
  index_t shared_bytes;
};

/// Plans a launch of `count` problems within `bounds` for blocks of `threads` threads with
/// `outputs_per_thread` accumulators, chunks of at most `tile_k`, at most `max_problems` per
/// block and `table_bytes` of table, within `cap` bytes of shared memory (shared_cap). One
/// problem (up to 32 x 32, kc <= 32: at most 16.3 KiB of f64 chunks) is always planned, even
/// where it exceeds the cap: fewer blocks per SM, never a failed launch.
GPUBATCH_HOST_DEVICE constexpr launch_plan plan_launch(const block_bounds& bounds, index_t count,
                                                       index_t tile_k, int threads,
                                                       int outputs_per_thread, int max_problems,
                                                       index_t table_bytes, index_t element_bytes,
                                                       index_t cap) {
  const index_t k_chunk = bounds.max_k < tile_k ? bounds.max_k : tile_k;
  const index_t budget = cap > table_bytes ? (cap - table_bytes) / element_bytes : 0;
  index_t ppb = problems_per_block(bounds, k_chunk, threads, outputs_per_thread, max_problems,
                                   budget);
  ppb = ppb < count ? ppb : (count > 0 ? count : 1);
  const index_t staged = bounds.max_m * a_pitch(k_chunk) + bounds.max_n * k_chunk;
  return {k_chunk, ppb, table_bytes + ppb * staged * element_bytes};
}

}  // namespace detail::tiny
GPUBATCH_NAMESPACE_END
