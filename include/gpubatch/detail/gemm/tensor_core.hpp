/// @file detail/gemm/tensor_core.hpp
/// @brief What the tensor-core kernels share with the host tests: the per-type MMA shape, the
/// shared-memory geometry of a tensor-core policy, how one stage's operand tile is split into
/// 16-byte chunks among the threads, and the operand sources that say where each chunk comes
/// from (a plain or transposed matrix for GEMM; the implicit-GEMM gather for convolution).
///
/// An operand tile is staged in one of two shared-memory layouts (`staging`), picked per batch
/// from which of the operand's dimensions is contiguous in memory, so that every aligned layout
/// and transpose copies whole 16-byte chunks with cp.async: K-major for a K-contiguous source
/// (slabs of `mma_k` reduction elements per row, read as row-major A or column-major B
/// fragments), M/N-major for a source whose rows are contiguous (one line of the tile's rows per
/// reduction index, read as column-major A or row-major B fragments). A chunk is copied with one
/// asynchronous 16-byte copy when the source allows it (contiguous, aligned, wholly inside the
/// operand); a convolution gather's chunk wholly in the padding or past the operand is
/// zero-filled by the same copy; any other chunk goes element by element, zero outside.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/detail/gemm/problem.hpp>
#include <gpubatch/numeric.hpp>

#include <cstdint>
#include <type_traits>

GPUBATCH_NAMESPACE_BEGIN
namespace detail::tensor_core {

/// The MMA shape the tensor-core kernels use for input element type T (16 x 16 x mma_k tiles)
/// and the accumulate type. f32 runs as TF32 (k = 8); f16, bf16 and int8 use k = 16.
template <class T>
struct mma_traits {
  static constexpr bool supported = false;
};
template <>
struct mma_traits<half> {
  static constexpr bool supported = true;
  static constexpr int mma_k = 16;
};
template <>
struct mma_traits<bfloat16> : mma_traits<half> {};
template <>
struct mma_traits<std::int8_t> : mma_traits<half> {};
template <>
struct mma_traits<float> {
  static constexpr bool supported = true;
  static constexpr int mma_k = 8;
};

/// Whether element type T has a tensor-core path (f32 only when TF32 is allowed at run time).
template <class T>
inline constexpr bool supported_v = mma_traits<std::remove_const_t<T>>::supported;

/// Integer log2 of a power of two.
constexpr int log2_exact(int v) { return v <= 1 ? 0 : 1 + log2_exact(v / 2); }

/// How one operand tile lies in shared memory.
enum class staging : unsigned char {
  k_major,   ///< `bk / mma_k` slabs, each the tile's rows of `mma_k` reduction elements
  mn_major,  ///< one line of the tile's rows (M for A, N for B) per reduction index
};

/// Position of one 16-byte chunk in an operand tile: row and first reduction index.
struct chunk_position {
  int row;
  int kk;
};

/// Chunk c of a (rows x bk) operand tile cut into `vector`-element chunks along K. With a
/// K-contiguous source, eight consecutive chunks (the eight threads of one phase of a 16-byte
/// shared store) take one chunk column of eight consecutive rows, so their stores land on
/// distinct bank groups for every K-major row pitch, while a warp still reads whole 32-byte
/// sectors of its rows; otherwise chunks walk the rows, so the element-wise path reads adjacent
/// addresses across a warp when the rows are what is contiguous.
GPUBATCH_HOST_DEVICE constexpr chunk_position chunk_of(int c, int rows, int bk, int vector,
                                                       bool k_contiguous) {
  const int per_row = bk / vector;
  if (!k_contiguous) return {c % rows, (c / rows) * vector};
  if (rows % 8 != 0) return {c / per_row, (c % per_row) * vector};
  return {(c / (8 * per_row)) * 8 + c % 8, ((c / 8) % per_row) * vector};
}

/// The shared-memory layout of one (Rows x BK) operand tile of element type T.
///
/// K-major: row pitch `mma_k` plus 16 bytes of pad, so the eight rows one ldmatrix phase reads
/// fall on distinct 16-byte bank groups (48-byte pitch for f16, bf16 and TF32); int8's 16-byte
/// rows do so already and take no pad. M/N-major: each 16 rows (one fragment) start 32-byte
/// aligned as wmma requires, which for int8 means 16 rows in a 32-byte group, and each line has
/// 16 bytes of pad so the eight lines of a transposing ldmatrix phase spread over the banks.
/// Chunks of an M/N-major tile are `vector` consecutive rows at one reduction index, walked
/// along the rows: consecutive threads copy consecutive 16 bytes of global memory.
template <class T, int Rows, int BK, staging Staging>
struct operand_layout {
  static constexpr staging kind = Staging;
  static constexpr bool k_major = Staging == staging::k_major;
  static constexpr int mma_k = mma_traits<T>::mma_k;
  static constexpr int vector = 16 / static_cast<int>(sizeof(T));
  static constexpr int slabs = BK / mma_k;
  /// Elements of one 16-row fragment group along an M/N-major line (32 bytes at least).
  static constexpr int group = 32 / static_cast<int>(sizeof(T)) > 16
                                   ? 32 / static_cast<int>(sizeof(T))
                                   : 16;
  static constexpr int ld =
      k_major ? mma_k + (sizeof(T) == 1 ? 0 : vector) : (Rows / 16) * group + vector;
  static constexpr int elements = k_major ? slabs * Rows * ld : BK * ld;
  static constexpr int chunks = Rows * BK / vector;
  /// Chunks along one M/N-major line (Rows / vector).
  static constexpr int line_chunks = Rows / vector;

  static_assert(Rows % 16 == 0, "gpubatch: an operand tile is a whole number of fragments");

  /// Offset of element (row, kk) within the tile.
  GPUBATCH_HOST_DEVICE static constexpr int offset(int row, int kk) {
    return k_major ? ((kk / mma_k) * Rows + row) * ld + kk % mma_k
                   : kk * ld + (row / 16) * group + row % 16;
  }
  /// Chunk c of the tile; `k_contiguous` (the source's K is its contiguous dimension) orders
  /// the chunks of K-major tiles only.
  GPUBATCH_HOST_DEVICE static constexpr chunk_position chunk(int c, bool k_contiguous) {
    return k_major ? chunk_of(c, Rows, BK, vector, k_contiguous)
                   : chunk_position{(c % line_chunks) * vector, c / line_chunks};
  }
};

/// Blocks per SM a tensor-core kernel of `Policy` is built for (its __launch_bounds__ and
/// register budget) when it stages A and B as `StagingA` and `StagingB`: the policy's, except
/// for int8 warp tiles of 8 or more fragments with an M/N-major operand, which take half. wmma
/// reads an M/N-major int8 fragment byte by byte (ldmatrix cannot transpose 8-bit elements),
/// and the bytes in flight for every fragment of a 64 x 32 warp tile spill at 128 registers.
template <class Policy, class T, staging StagingA, staging StagingB>
constexpr int staged_blocks_per_sm() {
  constexpr int warps_m = 1 << (log2_exact(Policy::warps) / 2);
  constexpr int fragments = (Policy::tile_m / warps_m / 16) *
                            (Policy::tile_n / (Policy::warps / warps_m) / 16);
  constexpr bool byte_gathered = sizeof(T) == 1 && fragments >= 8 &&
                                 (StagingA == staging::mn_major || StagingB == staging::mn_major);
  return byte_gathered && Policy::min_blocks_per_sm > 1 ? Policy::min_blocks_per_sm / 2
                                                        : Policy::min_blocks_per_sm;
}

/// The shared-memory and warp geometry of tensor-core policy `Policy` for element type T, with
/// A and B staged as `StagingA` and `StagingB`.
template <class Policy, class T, staging StagingA = staging::k_major,
          staging StagingB = staging::k_major>
struct geometry {
  static constexpr int bm = Policy::tile_m;
  static constexpr int bn = Policy::tile_n;
  static constexpr int bk = Policy::tile_k;
  static constexpr int threads = Policy::threads;
  static constexpr int mma_k = mma_traits<T>::mma_k;
  /// Elements per 16-byte chunk.
  static constexpr int vector = 16 / static_cast<int>(sizeof(T));
  static constexpr int slabs = bk / mma_k;
  using a_layout = operand_layout<T, bm, bk, StagingA>;
  using b_layout = operand_layout<T, bn, bk, StagingB>;
  /// Warps as a warps_m x warps_n grid, each owning a (warp_m x warp_n) part of the C tile.
  static constexpr int warps_m = 1 << (log2_exact(Policy::warps) / 2);
  static constexpr int warps_n = Policy::warps / warps_m;
  static constexpr int warp_m = bm / warps_m;
  static constexpr int warp_n = bn / warps_n;
  static constexpr int fragments_m = warp_m / 16;
  static constexpr int fragments_n = warp_n / 16;
  static constexpr int a_stage_elements = a_layout::elements;
  static constexpr int b_stage_elements = b_layout::elements;
  static constexpr int stage_elements = a_stage_elements + b_stage_elements;
  static constexpr int a_chunks_per_thread = (a_layout::chunks + threads - 1) / threads;
  static constexpr int b_chunks_per_thread = (b_layout::chunks + threads - 1) / threads;
  /// The C tile is staged through shared memory (4-byte accumulators) for the epilogue; the
  /// 4-element pad keeps fragment stores aligned and off one bank.
  static constexpr int c_ld = bn + 4;
  static constexpr std::int64_t stage_bytes =
      std::int64_t{stage_elements} * static_cast<std::int64_t>(sizeof(T));
  static constexpr std::int64_t c_bytes = std::int64_t{bm} * c_ld * 4;
  /// Blocks per SM the kernel is built for (staged_blocks_per_sm).
  static constexpr int min_blocks_per_sm = staged_blocks_per_sm<Policy, T, StagingA, StagingB>();
  /// Shared memory one block may take and still leave room for that many blocks on the
  /// smallest tensor-core SM (sm_80: 164 KiB, 1 KiB reserved per block).
  static constexpr std::int64_t block_budget =
      std::int64_t{164 * 1024} / (min_blocks_per_sm > 0 ? min_blocks_per_sm : 1) - 1024;
  /// The policy's stages, fewer (never below 2) where a tile would not leave room for the
  /// blocks per SM (int8 M/N-major lines are twice their data, see operand_layout).
  static constexpr int stages = [] {
    int s = Policy::stages;
    while (s > 2 && s * stage_bytes > block_budget) --s;
    return s;
  }();
  static constexpr std::int64_t pipeline_bytes = std::int64_t{stages} * stage_bytes;
  static constexpr std::int64_t shared_bytes = pipeline_bytes > c_bytes ? pipeline_bytes : c_bytes;

  static_assert(mma_traits<T>::supported,
                "gpubatch: tensor-core policies need f16, bf16, int8 or f32 (TF32) elements");
  static_assert(bk % mma_k == 0,
                "gpubatch::tensor_core_policy: TileK must be a multiple of the MMA depth "
                "(16 for f16, bf16 and int8; 8 for TF32)");
  static_assert(bm % (16 * warps_m) == 0 && bn % (16 * warps_n) == 0,
                "gpubatch::tensor_core_policy: each warp's part of the tile must be a whole "
                "number of 16 x 16 fragments");
  static_assert(Policy::stages >= 2,
                "gpubatch::tensor_core_policy: the cp.async pipeline needs 2+ stages");
  static_assert(shared_bytes <= 227 * 1024,
                "gpubatch::tensor_core_policy: the tile needs more shared memory than a block can "
                "have (227 KiB on sm_90); use a smaller tile or fewer stages");
};

/// One element of a block's accumulator tile.
struct tile_element {
  int row;
  int col;
};

/// Which element of the accumulator tile thread-slot `e` (0 .. bm * bn - 1, consecutive slots
/// on consecutive threads) hands on. Row-major C: consecutive slots walk a row, so the shared
/// reads and the global stores are both consecutive. Column-major C: each warp takes an 8 x 4
/// block, eight consecutive rows of four columns, so the global stores are runs of 8 rows and
/// the shared reads, at pitch c_ld = 4 (mod 32) words, fall on 32 distinct banks (a warp
/// walking 32 rows of one column would hit 8 banks, 4 lanes on each).
template <class Geometry>
GPUBATCH_HOST_DEVICE constexpr tile_element output_slot(int e, bool cols_contiguous) {
  if (cols_contiguous) return {e / Geometry::bn, e % Geometry::bn};
  const int lane = e % 32, block = e / 32, row_blocks = Geometry::bm / 8;
  return {(block % row_blocks) * 8 + lane % 8, (block / row_blocks) * 4 + lane / 8};
}

/// Outputs of type TC per epilogue run, the 16 bytes a row-contiguous output takes in one vector
/// store (types of up to 4 bytes, so a run is whole 16-byte reads of 4-byte accumulators).
template <class TC>
inline constexpr int output_run_v = 16 / static_cast<int>(sizeof(TC));

/// Which run of `Run` consecutive accumulators of a row thread-slot `e` (0 .. bm * bn / Run - 1,
/// consecutive slots on consecutive threads) stores, for a row-contiguous output. Runs are read
/// as Run / 4 16-byte quads; the eight lanes of one phase of a 16-byte shared read take
/// `8 / quads` runs of each of `quads` consecutive rows, so at pitch c_ld = 4 (mod 32) words the
/// next row starts one 16-byte bank group later and the phase meets every bank once (lanes
/// walking one row would meet half of them twice). A warp so takes a (4 * quads)-row block of
/// 32 columns, each row's part of it at least one 32-byte sector of the output.
template <class Geometry, int Run>
GPUBATCH_HOST_DEVICE constexpr tile_element output_run_slot(int e) {
  static_assert(Run % 4 == 0 && Geometry::bn % Run == 0,
                "gpubatch: an epilogue run is whole quads of accumulators within a tile row");
  constexpr int quads = Run / 4;
  constexpr int row_runs = Geometry::bn / Run < 8 / quads ? Geometry::bn / Run : 8 / quads;
  const int segment = e / (row_runs * Geometry::bm), within = e % (row_runs * Geometry::bm);
  return {within / row_runs, (segment * row_runs + within % row_runs) * Run};
}

/// Which run of `Run` consecutive accumulators of a column thread-slot `e` (0 .. bm * bn / Run
/// - 1, consecutive slots on consecutive threads) stores, for a column-contiguous output
/// (column-major C): the lanes of a warp take consecutive columns of the same rows, so each of
/// a run's 4-byte shared reads meets 32 distinct banks, and each lane's run is one 16-byte store
/// down its column (element by element, a warp had stored 8 rows of 4 columns).
template <class Geometry, int Run>
GPUBATCH_HOST_DEVICE constexpr tile_element output_column_run_slot(int e) {
  static_assert(Geometry::bm % Run == 0,
                "gpubatch: an epilogue run down a column lies within a tile column");
  return {(e / Geometry::bn) * Run, e % Geometry::bn};
}

/// Whether `p` is 16-byte aligned.
template <class T>
GPUBATCH_HOST_DEVICE bool aligned16(const T* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

/// Where a 16-byte chunk of an operand tile comes from: copied whole from `data`; zero-filled
/// when `zero` (`data` then names an aligned element of the operand, of which the copy reads
/// nothing: a copy with no source bytes fills its destination with zeros, which is how the
/// padding of a convolution costs the same copy as its inside); element by element when `data`
/// is null.
template <class T>
struct chunk_piece {
  const T* data;
  bool zero;
};

/// One GEMM operand as `rows` x `k` (rows = m for A, n for B): element (r, kk) at
/// data[r * row_stride + kk * k_stride].
template <class T>
struct matrix_source {
  using element_type = T;
  static constexpr bool tap_stepped = false;  ///< see gather_source
  const T* data;
  index_t rows;
  index_t k;
  index_t row_stride;
  index_t k_stride;
  bool vectorizable;        ///< K-contiguous, rows 16-byte aligned: K-major chunks copy as one
  bool lines_vectorizable;  ///< rows contiguous, lines 16-byte aligned: M/N-major chunks too

  struct cursor {
    const T* row;  ///< null when the row is outside the operand
    int left;      ///< rows of the operand from this one on, at most 2^30 (32 bits: registers)
  };

  GPUBATCH_HOST_DEVICE static matrix_source make(const T* data, index_t rows, index_t k,
                                                 index_t row_stride, index_t k_stride) {
    constexpr auto size = static_cast<index_t>(sizeof(T));
    const bool vectorizable =
        k_stride == 1 && aligned16(data) && (rows <= 1 || (row_stride * size) % 16 == 0);
    const bool lines_vectorizable =
        row_stride == 1 && aligned16(data) && (k <= 1 || (k_stride * size) % 16 == 0);
    return {data, rows, k, row_stride, k_stride, vectorizable, lines_vectorizable};
  }
  /// M/N-major staging walks `vector` rows from a row's cursor.
  using line_cursor = cursor;

  GPUBATCH_HOST_DEVICE bool k_contiguous() const { return k_stride == 1; }
  GPUBATCH_HOST_DEVICE line_cursor line(index_t r) const { return row(r); }
  GPUBATCH_HOST_DEVICE cursor row(index_t r) const {
    const index_t left = rows - r;
    return {r < rows ? data + r * row_stride : nullptr,
            static_cast<int>(left < (index_t{1} << 30) ? left : index_t{1} << 30)};
  }
  /// Element (row, kk), or null when it lies outside the operand (it reads as zero).
  GPUBATCH_HOST_DEVICE const T* element(const cursor& c, index_t kk) const {
    return c.row != nullptr && kk < k ? c.row + kk * k_stride : nullptr;
  }
  /// The `vector` elements from (row, kk) on along K as one aligned, in-bounds piece, else
  /// element by element. (A matrix's chunks past its edges are zero-filled only by the
  /// element-wise path: doing it with the copy cost the grouped kernels, already at their
  /// register budget, a spill.)
  GPUBATCH_HOST_DEVICE chunk_piece<T> chunk(const cursor& c, index_t kk, int vector) const {
    return {vectorizable && c.row != nullptr && kk + vector <= k ? c.row + kk : nullptr, false};
  }
  /// Element (row + e, kk) (M/N-major staging), or null outside the operand.
  GPUBATCH_HOST_DEVICE const T* line_element(const cursor& c, int e, index_t kk) const {
    return c.row != nullptr && e < c.left && kk < k ? c.row + e * row_stride + kk * k_stride
                                                    : nullptr;
  }
  /// The `vector` rows from (row, kk) on as one aligned, in-bounds piece, else element by
  /// element.
  GPUBATCH_HOST_DEVICE chunk_piece<T> line_chunk(const cursor& c, index_t kk, int vector) const {
    return {lines_vectorizable && c.row != nullptr && c.left >= vector && kk < k
                ? c.row + kk * k_stride
                : nullptr,
            false};
  }
};

/// Which layout stages an operand of `row_stride` and `k_stride` (rows x k): M/N-major when its
/// rows, not its reduction index, are what is contiguous.
GPUBATCH_HOST_DEVICE constexpr staging staging_for(index_t row_stride, index_t k_stride) {
  return row_stride == 1 && k_stride != 1 ? staging::mn_major : staging::k_major;
}

/// op(A) of a GEMM problem (m x k) as a tensor-core operand source.
template <class TA, class TB, class TC>
GPUBATCH_HOST_DEVICE matrix_source<TA> a_source(const gemm_instance<TA, TB, TC>& p) {
  return matrix_source<TA>::make(p.a.data, p.m, p.k, p.a.stride.row, p.a.stride.col);
}

/// op(B) of a GEMM problem, read as its n columns of k elements.
template <class TA, class TB, class TC>
GPUBATCH_HOST_DEVICE matrix_source<TB> b_source(const gemm_instance<TA, TB, TC>& p) {
  return matrix_source<TB>::make(p.b.data, p.n, p.k, p.b.stride.col, p.b.stride.row);
}

/// The A operand of an implicit GEMM (detail/conv/problem.hpp's mapping interface) as a
/// tensor-core operand source: rows resolved once through the mapping's row cursor, elements
/// gathered with a(cursor, kk). K-major staging copies a whole chunk at once where the mapping
/// guarantees that every aligned run of `vector` reduction indices is one contiguous,
/// 16-byte-aligned piece (NHWC with channels per group a multiple of the chunk); M-major
/// staging (NCHW) where `vector` consecutive rows of one output row are (a_line).
template <class Mapping, class T>
struct gather_source {
  using element_type = T;
  /// K-major staging may decode a K step's filter tap once for all its chunks (tap_steps).
  static constexpr bool tap_stepped = true;
  using cursor = typename Mapping::row_cursor;
  using tap = typename Mapping::tap;
  /// A run of rows for M-major staging: the first row's cursor and index, and how many rows
  /// from it on share its output row (at most 2^30).
  struct line_cursor {
    cursor row;
    index_t first;
    int run;
  };
  Mapping mapping;
  index_t k;
  bool vectorizable;
  bool lines_vectorizable;
  /// Whole chunks, and every K step of the staging within one filter tap: a step's chunks
  /// share its tap, decoded once (tap) rather than once per chunk.
  bool tap_steps;

  /// The source of `g`'s gather staged in chunks of `vector` elements and K steps of `step_k`.
  GPUBATCH_HOST_DEVICE static gather_source make(const Mapping& g, int vector, int step_k) {
    const bool whole = g.a_chunks_contiguous(vector);
    return {g, g.k(), whole, g.a_lines_contiguous(vector),
            whole && g.a_steps_within_taps(step_k)};
  }
  /// The tap of the K step starting at k0 (tap_steps).
  GPUBATCH_HOST_DEVICE tap step_tap(index_t k0) const { return mapping.a_tap(k0); }
  /// The chunk of the K step at k0 (tap `t`) starting `j` elements into it: one copy, of the
  /// input or of zeros (the padding, rows past the operand, a step past K).
  GPUBATCH_HOST_DEVICE chunk_piece<T> chunk_in_step(const cursor& c, const tap& t, index_t k0,
                                                    int j) const {
    const T* const p = k0 < k ? mapping.a_in_tap(c, t, j) : nullptr;
    return p != nullptr ? chunk_piece<T>{p, false} : chunk_piece<T>{mapping.x, true};
  }
  GPUBATCH_HOST_DEVICE line_cursor line(index_t r) const {
    const index_t run = mapping.a_run(r);
    return {mapping.row(r), r, static_cast<int>(run < (index_t{1} << 30) ? run : index_t{1} << 30)};
  }
  /// The `vector` rows from the line's first on at kk as one aligned piece, else element by
  /// element (as matrix_source::line_chunk).
  GPUBATCH_HOST_DEVICE chunk_piece<T> line_chunk(const line_cursor& c, index_t kk,
                                                 int vector) const {
    if (!lines_vectorizable || c.run < vector || kk >= k) {
      return {nullptr, false};
    }
    const T* const p = mapping.a_line(c.row, kk, vector);
    return {p != nullptr && aligned16(p) ? p : nullptr, false};
  }
  /// Element (first + e, kk), or null in the padding or outside the operand.
  GPUBATCH_HOST_DEVICE const T* line_element(const line_cursor& c, int e, index_t kk) const {
    if (kk >= k) {
      return nullptr;
    }
    return mapping.a(e < c.run ? mapping.shifted(c.row, e) : mapping.row(c.first + e), kk);
  }
  GPUBATCH_HOST_DEVICE bool k_contiguous() const { return mapping.a_k_contiguous(); }
  GPUBATCH_HOST_DEVICE cursor row(index_t r) const { return mapping.row(r); }
  GPUBATCH_HOST_DEVICE const T* element(const cursor& c, index_t kk) const {
    return kk < k ? mapping.a(c, kk) : nullptr;
  }
  /// With whole chunks (vectorizable: channels per group a multiple of `vector`, so K is one
  /// too and a chunk's channels share one filter tap) a chunk is either inside the input or
  /// wholly in its zero padding (or past the rows or K): one copy either way, so a warp whose
  /// rows reach an image border stages as fast as one inside it.
  GPUBATCH_HOST_DEVICE chunk_piece<T> chunk(const cursor& c, index_t kk, int vector) const {
    if (!vectorizable || (kk < k && kk + vector > k)) {
      return {nullptr, false};
    }
    const T* const p = kk < k ? mapping.a(c, kk) : nullptr;
    return p != nullptr ? chunk_piece<T>{p, false} : chunk_piece<T>{mapping.x, true};
  }
};

/// One thread's share of staging an operand tile laid out as `Layout` by `Threads` threads: the
/// chunk positions it copies and the source rows they belong to, resolved once per tile and
/// reused for every K step.
template <class Layout, int Threads, class Source>
struct operand_stager {
  static constexpr int chunks = Layout::chunks;
  static constexpr int per_thread = (chunks + Threads - 1) / Threads;
  /// M/N-major chunks walk the rows first: when the block's threads are a whole number of
  /// lines, a thread's chunks are at the same rows, `Threads / line_chunks` lines apart, and
  /// one position and cursor serve them all (fewer registers held through the main loop).
  static constexpr bool one_cursor = !Layout::k_major && Threads % Layout::line_chunks == 0;
  static constexpr int kept = one_cursor ? 1 : per_thread;
  static constexpr int lines_apart = one_cursor ? Threads / Layout::line_chunks : 0;
  using cursor_type = std::conditional_t<Layout::k_major, typename Source::cursor,
                                         typename Source::line_cursor>;
  int destination[kept];  ///< the chunk's offset in the tile
  int first_k[kept];      ///< its first reduction index within the K step
  cursor_type cursor[kept];

  GPUBATCH_HOST_DEVICE operand_stager(const Source& source, index_t tile_row, int thread) {
    const bool k_contiguous = source.k_contiguous();
    for (int i = 0; i < kept; ++i) {
      const int c = thread + i * Threads;
      const chunk_position at = Layout::chunk(c < chunks ? c : 0, k_contiguous);
      destination[i] = Layout::offset(at.row, at.kk);
      first_k[i] = at.kk;
      if constexpr (Layout::k_major) {
        cursor[i] = source.row(tile_row + at.row);
      } else {
        cursor[i] = source.line(tile_row + at.row);
      }
    }
  }

  /// Copies this thread's chunks of the K step starting at k0 into the stage at `tile`:
  /// `copy16(dst, src, zero)` for whole chunks and wholly outside ones (zero-filled), element by
  /// element (zero outside) for the rest.
  template <class Copy16>
  GPUBATCH_HOST_DEVICE void stage(const Source& source, index_t k0, int thread,
                                  std::remove_const_t<typename Source::element_type>* tile,
                                  const Copy16& copy16) const {
    using T = std::remove_const_t<typename Source::element_type>;
    if constexpr (Layout::k_major && Source::tap_stepped) {
      if (source.tap_steps) {
        // One decode of the step's tap; per chunk a bounds check and an address.
        const auto tap = source.step_tap(k0);
        for (int i = 0; i < per_thread; ++i) {
          if (per_thread * Threads > chunks && thread + i * Threads >= chunks) {
            break;
          }
          const auto piece = source.chunk_in_step(cursor[i], tap, k0, first_k[i]);
          copy16(tile + destination[i], piece.data, piece.zero);
        }
        return;
      }
    }
    for (int i = 0; i < per_thread; ++i) {
      if (per_thread * Threads > chunks && thread + i * Threads >= chunks) {
        break;
      }
      const int kept_i = one_cursor ? 0 : i;
      T* const dst = tile + destination[kept_i] + i * lines_apart * Layout::ld;
      const index_t kk = k0 + first_k[kept_i] + i * lines_apart;
      const cursor_type& at = cursor[kept_i];
      const auto whole = [&] {
        if constexpr (Layout::k_major) {
          return source.chunk(at, kk, Layout::vector);
        } else {
          return source.line_chunk(at, kk, Layout::vector);
        }
      }();
      if (whole.data != nullptr) {
        copy16(dst, whole.data, whole.zero);
        continue;
      }
      // The edge path (ragged edges, padding, unaligned or strided operands): kept rolled so it
      // does not crowd the registers of the common path.
#if defined(__CUDA_ARCH__)
#pragma unroll 1
#endif
      for (int e = 0; e < Layout::vector; ++e) {
        const T* p = nullptr;
        if constexpr (Layout::k_major) {
          p = source.element(at, kk + e);
        } else {
          p = source.line_element(at, e, kk);
        }
        dst[e] = p != nullptr ? *p : T{};
      }
    }
  }
};

}  // namespace detail::tensor_core
GPUBATCH_NAMESPACE_END
