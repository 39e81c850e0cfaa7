/// @file pipeline.hpp
/// @brief A streaming batch pipeline: host data for N items of a fixed shape flows through the
/// device in chunks, with the copy in of chunk i+1, your compute stage on chunk i and the copy
/// out of chunk i-1 overlapping, so batches larger than device memory run at the speed of the
/// slowest stage.
///
/// ```cpp
/// gpubatch::pipeline<float, float, gpubatch::cuda_exec> p(gpubatch::on(stream),
///                                                         gpubatch::item_shape{m * k, m * n});
/// p.run(input, output, [&](auto exec, const gpubatch::pipeline_chunk<float, float>& c) {
///   auto a = gpubatch::matrix_batch_view<const float>::packed(c.input, m, k, c.items);
///   auto out = gpubatch::matrix_batch_view<float>::packed(c.output, m, n, c.items);
///   gpubatch::gemm(exec, gpubatch::op::none, gpubatch::op::none, 1.0F, a, b, 0.0F, out);
/// });
/// ```
///
/// The same code runs on the host backend (`on_host`): worker threads stand in for streams and
/// memcpy for DMA, so chunking, ordering, progress and fault handling behave — and are tested —
/// alike on a machine without a GPU.
#pragma once

#include <gpubatch/containers.hpp>
#include <gpubatch/detail/pipeline/chunking.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/memory_resource.hpp>
#include <gpubatch/memory_space.hpp>
#include <gpubatch/pinned_pool.hpp>
#include <gpubatch/transfer.hpp>

#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace gpubatch {

// ---------------------------------------------------------------------------------------------
// Policy, shape, options

/// @brief The compile-time policy of a pipeline.
///
/// Defaults: 3 buffers and 3 streams are the least that keep copy in, compute and copy out all
/// busy at once; chunks of 1 to 2^20 items, the memory-aware chooser picking within. (Untuned
/// starting points: no GPU measurement stands behind them yet.)
/// @tparam BuffersInFlight ring slots: chunks in flight at once (pinned staging and device
///         buffers for each)
/// @tparam Streams streams (host backend: worker threads): 3 = copy in, compute and copy out on
///         their own; 2 = both copies share one; 1 = no overlap
/// @tparam MinChunkItems the chooser's lower bound on items per chunk, where memory allows
/// @tparam MaxChunkItems the chooser's upper bound on items per chunk
template <int BuffersInFlight = 3, int Streams = 3, std::size_t MinChunkItems = 1,
          std::size_t MaxChunkItems = (std::size_t{1} << 20)>
struct pipeline_policy {
  static_assert(BuffersInFlight >= 1 && BuffersInFlight <= 64,
                "gpubatch::pipeline_policy: BuffersInFlight must be 1 to 64");
  static_assert(Streams >= 1 && Streams <= 3,
                "gpubatch::pipeline_policy: Streams must be 1, 2 or 3 (one per stage: copy in, "
                "compute, copy out)");
  static_assert(MinChunkItems >= 1, "gpubatch::pipeline_policy: MinChunkItems must be >= 1");
  static_assert(MinChunkItems <= MaxChunkItems,
                "gpubatch::pipeline_policy: MinChunkItems must not exceed MaxChunkItems");

  static constexpr std::size_t buffers_in_flight = static_cast<std::size_t>(BuffersInFlight);
  static constexpr int streams = Streams;
  static constexpr std::size_t min_chunk_items = MinChunkItems;
  static constexpr std::size_t max_chunk_items = MaxChunkItems;
};

/// @brief The policy pipelines use unless told otherwise.
using default_pipeline_policy = pipeline_policy<>;

/// @brief Scratch per item, as a count of elements of one type: `workspace_of<float>(n)`.
///
/// A size with its unit: a bare number cannot be passed where one is expected, so elements are
/// never taken for bytes or bytes for elements. The stage reads it back as the same type with
/// pipeline_chunk::workspace_as<T>().
struct workspace_size {
  /// @brief No workspace.
  constexpr workspace_size() noexcept {}
  /// @brief `elements` of `element_bytes` bytes aligned to `alignment`; workspace_of<T> says it
  /// with a type. Explicit, and the type is no aggregate: a bare number never converts to it.
  constexpr explicit workspace_size(std::size_t elements_per_item, std::size_t bytes_per_element,
                                    std::size_t alignment_of_element) noexcept
      : elements(elements_per_item),
        element_bytes(bytes_per_element),
        alignment(alignment_of_element) {}

  std::size_t elements = 0;       ///< elements per item
  std::size_t element_bytes = 1;  ///< sizeof of the element type
  std::size_t alignment = 1;      ///< alignof of the element type
  /// @brief Bytes per item.
  [[nodiscard]] constexpr std::size_t bytes() const noexcept { return elements * element_bytes; }
};

/// @brief `count` elements of T of scratch per item, for item_shape::workspace.
template <class T>
[[nodiscard]] constexpr workspace_size workspace_of(std::size_t count) noexcept {
  static_assert(std::is_trivially_copyable_v<T>, "gpubatch::workspace_of: the workspace holds "
                                                 "raw device memory; T must be trivially copyable");
  return workspace_size(count, sizeof(T), alignof(T));
}

/// @brief The fixed shape of one item: its input and output elements, and the device scratch
/// the stage needs for it. Items are contiguous: item i's input starts at i * input_elements.
///
/// Every count is in elements of its own type: input_elements of the pipeline's In,
/// output_elements of its Out, and workspace in elements of the type given to workspace_of:
/// `item_shape{784, 10, workspace_of<float>(256)}`.
struct item_shape {
  std::size_t input_elements = 0;   ///< elements of In per item (>= 1)
  std::size_t output_elements = 0;  ///< elements of Out per item (>= 1)
  workspace_size workspace{};       ///< device scratch per item (none by default)
};

/// @brief Whether input and output go through the pinned staging ring.
enum class staging_mode {
  /// Copy straight from and to the caller's memory when it is pinned (pinned_buffer, pooled
  /// buffer, register_host); stage pageable memory through the ring.
  automatic,
  /// Always stage, whatever the memory.
  always,
};

/// @brief Run-time options of a pipeline.
struct pipeline_options {
  /// Items per chunk; 0 lets the memory-aware chooser pick (choose_chunk_items).
  std::size_t chunk_items = 0;
  /// Device memory the chooser leaves free for others, at least...
  std::size_t headroom_bytes = std::size_t{256} << 20;
  /// ...and at least this fraction of the free memory (0 <= fraction < 1).
  double headroom_fraction = 0.05;
  /// Whether pinned caller memory is copied directly.
  staging_mode staging = staging_mode::automatic;
  /// Where the device ring comes from: a resource of device memory (with host_exec, of host
  /// memory), called stream-ordered on the pipeline's compute stream where it can be. Empty
  /// (the default): cudaMallocAsync. The chooser still sizes chunks by the device's free
  /// memory: with a resource that already holds what it hands out (a pool), set chunk_items.
  memory_resource_ref device_resource{};
  /// Where the pinned staging comes from: a resource of pinned memory (with host_exec, of host
  /// memory) for the pipeline's pinned pool. Empty (the default): cudaHostAlloc.
  memory_resource_ref pinned_resource{};
};

/// @brief Items [first, first + count) of a batch.
struct item_range {
  std::size_t first = 0;
  std::size_t count = 0;
};

/// @brief How a batch is cut into chunks.
struct chunk_plan {
  std::size_t chunk_items = 0;       ///< items per chunk
  std::size_t chunks = 0;            ///< number of chunks
  std::size_t last_chunk_items = 0;  ///< items in the last chunk (partial if < chunk_items)
  bool memory_limited = false;       ///< free device memory, not the policy, set chunk_items
};

GPUBATCH_ABI_BEGIN
namespace detail {
inline chunk_plan make_plan(std::size_t items, std::size_t chunk_items, bool memory_limited) {
  chunk_plan plan;
  plan.chunk_items = chunk_items;
  plan.chunks = chunk_count(items, chunk_items);
  plan.last_chunk_items = plan.chunks == 0 ? 0 : chunk_at(plan.chunks - 1, items, chunk_items).count;
  plan.memory_limited = memory_limited;
  return plan;
}

inline void check_options(const pipeline_options& options) {
  if (!(options.headroom_fraction >= 0.0 && options.headroom_fraction < 1.0)) {
    throw invalid_argument("options.headroom_fraction",
                           std::to_string(options.headroom_fraction) + " is not in [0, 1)");
  }
}
}  // namespace detail

/// @brief The memory-aware chunk chooser: the most items per chunk such that Policy's ring of
/// buffers fits in the free device memory less headroom, within the policy's bounds, split so
/// that a small batch still yields a chunk per buffer (to overlap), never more than the batch.
/// @param items the batch size
/// @param device_bytes_per_item device bytes one item needs: input + output + workspace
/// @param free_device_bytes free device memory (the pipeline passes cudaMemGetInfo's)
/// @param options headroom_bytes and headroom_fraction are used
/// @throws out_of_memory if not even one item per buffer fits
/// @throws invalid_argument for a headroom fraction outside [0, 1)
template <class Policy = default_pipeline_policy>
[[nodiscard]] chunk_plan choose_chunk_items(std::size_t items, std::size_t device_bytes_per_item,
                                            std::size_t free_device_bytes,
                                            const pipeline_options& options = {}) {
  detail::check_options(options);
  const detail::chunk_choice choice = detail::choose_chunk(
      items, device_bytes_per_item, free_device_bytes, Policy::buffers_in_flight,
      Policy::min_chunk_items, Policy::max_chunk_items, options.headroom_bytes,
      options.headroom_fraction);
  return detail::make_plan(items, choice.chunk_items, choice.memory_limited);
}

/// @brief Slice `part` of `parts` near-equal slices of a batch of `items`: run one pipeline per
/// device over its slice, with input and output subspans at the slice's items.
/// @throws invalid_argument if parts is 0 or part >= parts
[[nodiscard]] inline item_range split_items(std::size_t items, std::size_t parts,
                                            std::size_t part) {
  if (parts == 0 || part >= parts) {
    throw invalid_argument("part", std::to_string(part) + " is not below parts = " +
                                       std::to_string(parts));
  }
  const detail::item_bounds b = detail::split_evenly(items, parts, part);
  return {b.first, b.count};
}
GPUBATCH_ABI_END

// ---------------------------------------------------------------------------------------------
// What the stage sees, what a run reports, how it fails

/// @brief What the compute stage receives for one chunk: device views of its input, output and
/// workspace (host memory on the host backend). Trivially copyable.
///
/// The views carry memory_space::device, so matrix and tensor views built from them
/// (`matrix_batch_view<const float>::packed(chunk.input, m, k, chunk.items)`) pass gpubatch's
/// accessibility checks.
template <class In, class Out>
struct pipeline_chunk {
  std::size_t index = 0;       ///< chunk number, from 0
  std::size_t first_item = 0;  ///< the batch index of the chunk's first item
  std::size_t items = 0;       ///< items in this chunk; the last chunk may hold fewer
  span<const In> input;        ///< items * input_elements, already copied in
  span<Out> output;            ///< items * output_elements, for the stage to write
  /// Raw scratch: items * item_shape::workspace.bytes() bytes. Prefer workspace_as<T>().
  span<std::byte> workspace;
  workspace_size workspace_per_item{};  ///< what item_shape::workspace declared

  /// @brief The workspace as `items * workspace_per_item.elements` elements of T, the type it
  /// was declared with (`workspace_of<T>`).
  /// @throws invalid_argument naming "T" if T's size is not the declared element's
  template <class T>
  [[nodiscard]] span<T> workspace_as() const {
    if (sizeof(T) != workspace_per_item.element_bytes || alignof(T) > workspace_per_item.alignment) {
      throw invalid_argument("T", "the workspace was declared with elements of " +
                                      std::to_string(workspace_per_item.element_bytes) +
                                      " bytes (item_shape::workspace = workspace_of<...>), and "
                                      "is read as elements of " + std::to_string(sizeof(T)) +
                                      " bytes");
    }
    return span<T>(reinterpret_cast<T*>(workspace.data()), items * workspace_per_item.elements,
                   workspace.space());
  }
};

/// @brief Called after each chunk has landed in the caller's output, in order, on the thread
/// that called run(): (items done so far, items in the batch).
using progress_callback = std::function<void(std::size_t items_done, std::size_t items_total)>;

/// @brief What one run did.
struct pipeline_report {
  std::size_t items = 0;        ///< items processed
  std::size_t chunks = 0;       ///< chunks processed
  std::size_t chunk_items = 0;  ///< items per chunk
  bool memory_limited = false;  ///< the chooser was bound by free device memory
  bool direct_input = false;    ///< input copied straight from pinned caller memory
  bool direct_output = false;   ///< output copied straight into pinned caller memory
  double seconds = 0.0;         ///< wall-clock time of the run
};

/// @brief A run stopped at chunk `chunk()`: the stage threw, a CUDA error occurred, or the
/// progress callback threw. Work in flight was drained and every buffer freed before this was
/// thrown; the chunks before `chunk()` are complete in the output.
class pipeline_error : public error {
 public:
  /// @param chunk the chunk at which the run stopped
  /// @param items that chunk's items
  /// @param items_completed items that landed in the output (those of chunks before `chunk`,
  ///        and of `chunk` itself if only its progress callback failed)
  /// @param cause the original exception
  pipeline_error(std::size_t chunk, item_range items, std::size_t items_completed,
                 std::exception_ptr cause)
      : error("gpubatch: pipeline stopped at chunk " + std::to_string(chunk) + " (items " +
              std::to_string(items.first) + " to " +
              std::to_string(items.first + items.count - (items.count > 0 ? 1 : 0)) + "), " +
              std::to_string(items_completed) + " items completed: " + describe(cause)),
        chunk_(chunk),
        items_(items),
        items_completed_(items_completed),
        cause_(std::move(cause)) {}

  /// @brief The chunk at which the run stopped.
  [[nodiscard]] std::size_t chunk() const noexcept { return chunk_; }
  /// @brief The items of that chunk.
  [[nodiscard]] item_range items() const noexcept { return items_; }
  /// @brief Items that landed in the output before the run stopped.
  [[nodiscard]] std::size_t items_completed() const noexcept { return items_completed_; }
  /// @brief The original exception (the stage's own, a cuda_error, ...).
  [[nodiscard]] std::exception_ptr cause() const noexcept { return cause_; }
  /// @brief Throws the original exception.
  [[noreturn]] void rethrow_cause() const { std::rethrow_exception(cause_); }

 private:
  static std::string describe(const std::exception_ptr& cause) {
    try {
      std::rethrow_exception(cause);
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "an exception not derived from std::exception";
    }
  }

  std::size_t chunk_;
  item_range items_;
  std::size_t items_completed_;
  std::exception_ptr cause_;
};

// ---------------------------------------------------------------------------------------------
// The pipeline

/// @brief A streaming batch pipeline bound to one device (the current one when constructed).
///
/// It owns its streams (or, on the host backend, worker threads), a ring of
/// Policy::buffers_in_flight slots — pinned staging for input and output, device buffers for
/// input, output and workspace — and a pinned pool. Buffers are allocated by the first run and
/// kept, so later runs of the same chunk size allocate neither pinned nor device memory.
///
/// For several GPUs, build one pipeline per device (cudaSetDevice before each constructor) and
/// give each its slice of the batch (split_items, span::subspan) from its own thread.
///
/// pipeline_options::device_resource and pinned_resource make your memory resources serve
/// every buffer of the ring; they must outlive the pipeline (see memory_resource_ref).
/// Not thread-safe: one run at a time per pipeline. Movable, not copyable.
/// @tparam In, Out the input and output element types (trivially copyable)
/// @tparam Exec host_exec or cuda_exec
/// @tparam Policy a pipeline_policy
template <class In, class Out, class Exec, class Policy = default_pipeline_policy>
class pipeline {
  static_assert(std::is_trivially_copyable_v<In> && std::is_trivially_copyable_v<Out>,
                "gpubatch::pipeline: In and Out must be trivially copyable (items are copied as "
                "bytes)");
  static_assert(is_execution_v<Exec>, "gpubatch::pipeline: Exec must be host_exec or cuda_exec");

 public:
  using policy = Policy;
  using chunk_type = pipeline_chunk<In, Out>;

  /// @brief Creates the streams (workers) and events; allocates no buffer yet.
  /// @param exec the caller's stream: each run starts after the work already issued to it
  ///        (it must outlive the pipeline)
  /// @param shape the per-item input, output and workspace sizes
  /// @param options chunk size (or 0 for the chooser), headroom, staging and memory resources
  /// @throws invalid_argument for a shape with no input or no output elements, or bad options
  ///         (naming "options.device_resource" or "options.pinned_resource" for a resource that
  ///         declares memory of the wrong kind)
  /// @throws cuda_error if streams or events cannot be created (for example, no device)
  pipeline(Exec exec, item_shape shape, pipeline_options options = {});
  pipeline(const pipeline&) = delete;
  pipeline& operator=(const pipeline&) = delete;
  pipeline(pipeline&&) noexcept;
  pipeline& operator=(pipeline&&) noexcept;
  /// @brief Waits for work in flight (there is none between runs) and frees every buffer.
  ~pipeline();

  /// @brief Runs `stage` over every item of `input`, writing `output`, and returns when all of
  /// the output has landed.
  ///
  /// The batch is `input.size() / shape.input_elements` items; `output` must hold
  /// `items * shape.output_elements` elements. Both are host memory, pageable or pinned
  /// (pinned is copied directly, see staging_mode). `stage(exec, chunk)` is called once per
  /// chunk, in order, with `exec` = on(the pipeline's compute stream) on the CUDA backend, or
  /// on_host on a worker thread on the host backend; it must issue all of its work on `exec`
  /// and may return before that work completes.
  ///
  /// @param progress called after each chunk has landed (optional)
  /// @return what the run did
  /// @throws invalid_argument naming "input" or "output" (sizes, device memory) before
  ///         anything is issued
  /// @throws out_of_memory or cuda_error while allocating the buffers, or what a memory
  ///         resource of options throws, unchanged (nothing is kept: what was already taken
  ///         goes back to its resource)
  /// @throws pipeline_error when chunk k fails: no further chunk is issued, work in flight is
  ///         drained, every buffer is freed (pinned_stats() is zero), chunks before k are
  ///         complete in the output, and cause() holds the original exception
  template <class Stage>
  pipeline_report run(span<const In> input, span<Out> output, Stage&& stage,
                      const progress_callback& progress = {});

  /// @brief The chunking a run over `items` items would use now.
  /// @throws out_of_memory, cuda_error as the chooser
  [[nodiscard]] chunk_plan plan(std::size_t items) const;

  /// @brief Frees every buffer (a later run allocates again).
  void release() noexcept;

  /// @brief The pinned pool's counters: staging held by the ring, and allocations so far.
  [[nodiscard]] pinned_pool_stats pinned_stats() const;
  /// @brief Device bytes held by the ring.
  [[nodiscard]] std::size_t device_bytes() const noexcept;
  /// @brief Device allocations made so far (steady state adds none).
  [[nodiscard]] std::size_t device_allocations() const noexcept;
  /// @brief The device the pipeline is bound to (-1 on the host backend).
  [[nodiscard]] int device() const noexcept;
  /// @brief The per-item shape.
  [[nodiscard]] const item_shape& shape() const noexcept;
  /// @brief Device bytes per item: input, output and workspace.
  [[nodiscard]] std::size_t device_bytes_per_item() const noexcept;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

GPUBATCH_ABI_BEGIN
/// @brief Runs a pipeline once: builds it, runs `stage` over `input` into `output`, frees it.
/// `In` and `Out` are deduced from the ranges (std::vector, gpubatch containers, span, ...).
/// @throws as pipeline's constructor and pipeline::run
template <class Policy = default_pipeline_policy, class Exec, class InRange, class OutRange,
          class Stage>
pipeline_report run_pipeline(Exec exec, item_shape shape, const InRange& input, OutRange& output,
                             Stage&& stage, pipeline_options options = {},
                             const progress_callback& progress = {});

GPUBATCH_ABI_END

/// @brief One measurement of autotune_chunk_items.
struct autotune_sample {
  std::size_t chunk_items = 0;    ///< the chunk size tried
  double seconds = 0.0;           ///< the best run's wall-clock time
  double items_per_second = 0.0;  ///< sample items / seconds; 0 if the size did not fit
};

/// @brief The result of autotune_chunk_items.
struct autotune_result {
  std::size_t chunk_items = 0;          ///< the chunk size with the best throughput
  double items_per_second = 0.0;        ///< its throughput
  std::vector<autotune_sample> samples;  ///< every size tried, in the order tried
};

GPUBATCH_ABI_BEGIN
/// @brief Sweeps chunk sizes on a sample batch and returns the one with the best throughput.
///
/// Each candidate gets its own pipeline, one untimed warm-up run (allocation, first touch) and
/// `repeats` timed runs, the fastest of which counts. A candidate that does not fit in memory
/// is recorded with zero throughput. Pass the result's chunk_items as pipeline_options::chunk_items.
/// @param candidates chunk sizes to try; empty: powers of two from Policy::min_chunk_items up
///        to the sample size (at most Policy::max_chunk_items), and the sample size itself
/// @throws invalid_argument for an empty sample or repeats < 1; as run_pipeline otherwise
template <class Policy = default_pipeline_policy, class Exec, class InRange, class OutRange,
          class Stage>
[[nodiscard]] autotune_result autotune_chunk_items(Exec exec, item_shape shape,
                                                   const InRange& sample_input,
                                                   OutRange& sample_output, Stage&& stage,
                                                   std::vector<std::size_t> candidates = {},
                                                   int repeats = 3, pipeline_options options = {});

GPUBATCH_ABI_END
}  // namespace gpubatch

#include <gpubatch/detail/pipeline/pipeline.inl>
