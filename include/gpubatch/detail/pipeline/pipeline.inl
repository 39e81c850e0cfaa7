/// @file detail/pipeline/pipeline.inl
/// @brief The pipeline's driver: the ring of buffers, the per-chunk issue order, landing chunks
/// in order, and the fault path. Included at the end of pipeline.hpp.
///
/// Per chunk k, in slot s = k % B:
///   1. land chunk k - B (wait for its copy out, unstage its output, report progress): slot s
///      is free again;
///   2. stage chunk k's input into slot s's pinned buffer (unless the caller's input is pinned);
///   3. copy in on the copy-in stream, compute on the compute stream after it;
///   4. copy out of chunk k - 1 on the copy-out stream, after its compute. Issuing it after
///      chunk k's copy in keeps the copies of a shared copy stream (Streams = 2) in an order
///      that still overlaps compute.
/// With B >= 3 slots, copy in of k + 1, compute of k and copy out of k - 1 run at once.
#pragma once

#include <gpubatch/containers.hpp>
#include <gpubatch/detail/containers/allocate.hpp>
#include <gpubatch/detail/pipeline/chunking.hpp>
#include <gpubatch/detail/pipeline/engine.hpp>
#include <gpubatch/detail/pipeline/nvtx.hpp>
#include <gpubatch/detail/transfer/copy.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/pinned_pool.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpubatch {

GPUBATCH_ABI_BEGIN
namespace detail {

/// Alignment of each region in a slot: enough for any element type and for coalesced access.
inline constexpr std::size_t pipeline_region_alignment = 256;

constexpr std::size_t round_up(std::size_t n, std::size_t to) noexcept {
  return (n + to - 1) / to * to;
}

/// Makes the pipeline's device current for the scope of a run, and restores the caller's.
template <class Exec>
class device_scope {
 public:
  explicit device_scope(int device) {
    if constexpr (is_cuda_exec_v<Exec>) {
      GPUBATCH_CUDA_TRY(cudaGetDevice(&previous_));
      if (previous_ != device) {
        GPUBATCH_CUDA_TRY(cudaSetDevice(device));
      }
    } else {
      previous_ = device;
    }
    device_ = device;
  }
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;
  ~device_scope() {
    if constexpr (is_cuda_exec_v<Exec>) {
      if (previous_ != device_) {
        GPUBATCH_CUDA_TRY_NOTHROW(cudaSetDevice(previous_));
      }
    }
  }

 private:
  int previous_ = -1;
  int device_ = -1;
};

template <class Exec>
int current_device() {
  if constexpr (is_cuda_exec_v<Exec>) {
    int device = 0;
    GPUBATCH_CUDA_TRY(cudaGetDevice(&device));
    return device;
  } else {
    return -1;
  }
}

/// Whether a failure is an allocation failure (which rules a chunk size out when tuning):
/// out_of_memory, or the std::bad_alloc of a memory resource.
inline bool is_out_of_memory(const std::exception_ptr& failure) noexcept {
  try {
    std::rethrow_exception(failure);
  } catch (const std::bad_alloc&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace detail
GPUBATCH_ABI_END

template <class In, class Out, class Exec, class Policy>
struct pipeline<In, Out, Exec, Policy>::state {
  static constexpr std::size_t slots = Policy::buffers_in_flight;

  /// One ring slot: device regions for a chunk, and pinned staging when the caller's memory
  /// is pageable.
  struct slot {
    std::byte* input = nullptr;
    std::byte* output = nullptr;
    std::byte* workspace = nullptr;
    pooled_buffer<std::byte, Exec> staged_input;
    pooled_buffer<std::byte, Exec> staged_output;
  };

  state(Exec e, item_shape s, pipeline_options o)
      : exec(e),
        shape(s),
        options(o),
        device(detail::current_device<Exec>()),
        engine(e, Policy::streams, slots),
        pool(e, pool_options(o)) {}

  static pinned_pool_options pool_options(const pipeline_options& o) noexcept {
    pinned_pool_options p;
    p.resource = o.pinned_resource;
    return p;
  }

  [[nodiscard]] std::size_t input_item_bytes() const noexcept {
    return shape.input_elements * sizeof(In);
  }
  [[nodiscard]] std::size_t output_item_bytes() const noexcept {
    return shape.output_elements * sizeof(Out);
  }
  [[nodiscard]] std::size_t workspace_item_bytes() const noexcept {
    return shape.workspace.bytes();
  }
  [[nodiscard]] std::size_t slot_bytes(std::size_t chunk) const {
    const char* where = is_cuda_exec_v<Exec> ? "device" : "host";
    const std::size_t a = detail::pipeline_region_alignment;
    return detail::round_up(detail::checked_bytes(chunk, input_item_bytes(), where), a) +
           detail::round_up(detail::checked_bytes(chunk, output_item_bytes(), where), a) +
           detail::round_up(detail::checked_bytes(chunk, workspace_item_bytes(), where), a);
  }

  /// Makes the ring ready for chunks of `chunk` items; keeps what is big enough.
  void prepare(std::size_t chunk, bool direct_input, bool direct_output) {
    if (capacity_items < chunk) {
      release();
      const std::size_t per_slot = slot_bytes(chunk);
      device_memory.emplace(detail::checked_bytes(per_slot, slots, "device"),
                            engine.allocation_exec(), options.device_resource);
      ++device_allocations;
      engine.after_allocation();
      std::byte* base = device_memory->data();
      const std::size_t a = detail::pipeline_region_alignment;
      for (std::size_t s = 0; s < slots; ++s) {
        std::byte* p = base + s * per_slot;
        ring[s].input = p;
        p += detail::round_up(chunk * input_item_bytes(), a);
        ring[s].output = p;
        p += detail::round_up(chunk * output_item_bytes(), a);
        ring[s].workspace = p;
      }
      capacity_items = chunk;
    }
    bool replaced = false;
    for (slot& s : ring) {
      const std::size_t in_bytes = capacity_items * input_item_bytes();
      const std::size_t out_bytes = capacity_items * output_item_bytes();
      if (!direct_input && s.staged_input.size() < in_bytes) {
        s.staged_input = pool.template allocate<std::byte>(in_bytes);
        replaced = true;
      }
      if (!direct_output && s.staged_output.size() < out_bytes) {
        s.staged_output = pool.template allocate<std::byte>(out_bytes);
        replaced = true;
      }
    }
    if (replaced) {
      (void)pool.release();  // smaller blocks the ring no longer uses
    }
  }

  /// Frees every buffer; the caller has drained (or nothing is in flight). Runs on the
  /// pipeline's device, whichever is current, so device memory goes back where it came from.
  void release() noexcept {
    std::optional<detail::device_scope<Exec>> scope;
    try {
      scope.emplace(device);
    } catch (...) {
      // The device cannot be made current (it is gone): free what can be freed anyway.
    }
    engine.drain();
    for (slot& s : ring) {
      s.staged_input.reset();
      s.staged_output.reset();
      s.input = s.output = s.workspace = nullptr;
    }
    device_memory.reset();
    capacity_items = 0;
    (void)pool.release();
  }

  [[nodiscard]] chunk_plan plan(std::size_t items) const {
    if (options.chunk_items != 0) {
      return detail::make_plan(items, std::min(options.chunk_items, std::max<std::size_t>(items, 1)),
                               false);
    }
    // Memory the ring already holds is available to it again.
    const std::size_t held = device_memory ? device_memory->size_bytes() : 0;
    const std::size_t free = engine.free_bytes();
    const std::size_t available =
        held > static_cast<std::size_t>(-1) - free ? static_cast<std::size_t>(-1) : free + held;
    return choose_chunk_items<Policy>(items, bytes_per_item(), available, options);
  }

  [[nodiscard]] std::size_t bytes_per_item() const noexcept {
    return input_item_bytes() + output_item_bytes() + workspace_item_bytes();
  }

  Exec exec;
  item_shape shape;
  pipeline_options options;
  int device;
  detail::pipeline_engine<Exec> engine;
  pinned_pool<Exec> pool;
  std::optional<device_buffer<std::byte>> device_memory;
  std::array<slot, slots> ring{};
  std::size_t capacity_items = 0;
  std::size_t device_allocations = 0;
};

template <class In, class Out, class Exec, class Policy>
pipeline<In, Out, Exec, Policy>::pipeline(Exec exec, item_shape shape, pipeline_options options) {
  if (shape.input_elements == 0) {
    throw invalid_argument("shape", "input_elements is 0: every item needs input");
  }
  if (shape.output_elements == 0) {
    throw invalid_argument("shape", "output_elements is 0: every item needs output");
  }
  const workspace_size& ws = shape.workspace;
  if (ws.elements > 0) {
    if (ws.element_bytes == 0 || ws.alignment == 0 || (ws.alignment & (ws.alignment - 1)) != 0 ||
        ws.alignment > detail::pipeline_region_alignment) {
      throw invalid_argument("shape", "workspace: element of " + std::to_string(ws.element_bytes) +
                                          " bytes aligned to " + std::to_string(ws.alignment) +
                                          "; build it with gpubatch::workspace_of<T>(count)");
    }
    if (ws.elements > static_cast<std::size_t>(-1) / ws.element_bytes) {
      throw invalid_argument("shape", "workspace: " + std::to_string(ws.elements) +
                                          " elements of " + std::to_string(ws.element_bytes) +
                                          " bytes per item overflow std::size_t");
    }
  }
  detail::check_options(options);
  detail::resource_calls::require(options.device_resource,
                                  is_cuda_exec_v<Exec> ? detail::declares_device_accessible
                                                       : detail::declares_host_accessible,
                                  "options.device_resource");
  detail::resource_calls::require(options.pinned_resource, detail::declares_host_accessible,
                                  "options.pinned_resource");
  state_ = std::make_unique<state>(exec, shape, options);
}

template <class In, class Out, class Exec, class Policy>
pipeline<In, Out, Exec, Policy>::pipeline(pipeline&&) noexcept = default;

template <class In, class Out, class Exec, class Policy>
pipeline<In, Out, Exec, Policy>& pipeline<In, Out, Exec, Policy>::operator=(pipeline&& other) noexcept {
  if (this != &other) {
    if (state_ != nullptr) {
      state_->release();
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

template <class In, class Out, class Exec, class Policy>
pipeline<In, Out, Exec, Policy>::~pipeline() {
  if (state_ != nullptr) {
    state_->release();
  }
}

template <class In, class Out, class Exec, class Policy>
template <class Stage>
pipeline_report pipeline<In, Out, Exec, Policy>::run(span<const In> input, span<Out> output,
                                                     Stage&& stage,
                                                     const progress_callback& progress) {
  static_assert(std::is_invocable_v<std::remove_reference_t<Stage>&, Exec, const chunk_type&>,
                "gpubatch::pipeline::run: the stage must be callable as stage(exec, chunk), with "
                "exec the backend's execution argument (cuda_exec or host_exec; a generic lambda "
                "`[](auto exec, const auto& chunk)` serves both) and chunk a "
                "const pipeline_chunk<In, Out>&");
  state& st = *state_;
  const std::size_t in_elements = st.shape.input_elements;
  const std::size_t out_elements = st.shape.output_elements;

  // Everything is checked before anything is issued or allocated.
  if (input.size() % in_elements != 0) {
    throw invalid_argument("input", "holds " + std::to_string(input.size()) +
                                        " elements, not a whole number of items of " +
                                        std::to_string(in_elements));
  }
  const std::size_t items = input.size() / in_elements;
  if (output.size() / out_elements != items || output.size() % out_elements != 0) {
    throw invalid_argument("output", "holds " + std::to_string(output.size()) +
                                         " elements but " + std::to_string(items) + " items of " +
                                         std::to_string(out_elements) + " need " +
                                         std::to_string(items * out_elements));
  }
  const memory_space input_space = detail::resolve_space<Exec>(input.space(), input.data());
  const memory_space output_space = detail::resolve_space<Exec>(output.space(), output.data());
  if (input_space == memory_space::device) {
    throw invalid_argument("input", "is device memory: the pipeline streams host data through "
                                    "the device (run your stage directly on device data)");
  }
  if (output_space == memory_space::device) {
    throw invalid_argument("output", "is device memory: the pipeline lands results in host "
                                     "memory");
  }
  pipeline_report report;
  if (items == 0) {
    return report;
  }

  const auto started = std::chrono::steady_clock::now();
  GPUBATCH_NVTX_RANGE("gpubatch pipeline run", items, run);
  const detail::device_scope<Exec> scope(st.device);
  if constexpr (is_cuda_exec_v<Exec>) {
    // An error left pending by earlier work would be charged to chunk 0; report it as it is.
    GPUBATCH_CUDA_TRY(cudaGetLastError());
  }
  const chunk_plan plan = st.plan(items);
  const bool direct_input = st.options.staging == staging_mode::automatic &&
                            st.engine.dma_capable(input_space);
  const bool direct_output = st.options.staging == staging_mode::automatic &&
                             st.engine.dma_capable(output_space);
  try {
    st.prepare(plan.chunk_items, direct_input, direct_output);
    st.engine.begin();
  } catch (...) {
    st.release();
    throw;
  }

  const std::size_t in_bytes = st.input_item_bytes();
  const std::size_t out_bytes = st.output_item_bytes();
  const auto* const input_bytes = reinterpret_cast<const std::byte*>(input.data());
  auto* const output_bytes = reinterpret_cast<std::byte*>(output.data());
  auto* const stage_ptr = &stage;
  const memory_space device_space = st.engine.device_space();

  std::size_t items_done = 0;
  // Lands chunk j in the caller's output; `checked` waits (and throws) first.
  const auto land = [&](std::size_t j, bool checked) {
    const std::size_t s = detail::ring_slot(j, state::slots);
    const detail::item_bounds r = detail::chunk_at(j, items, plan.chunk_items);
    if (checked) {
      GPUBATCH_NVTX_RANGE("gpubatch wait for chunk", j, wait);
      st.engine.wait(s);
    }
    if (!direct_output) {
      GPUBATCH_NVTX_RANGE("gpubatch unstage output", j, copy_out);
      std::memcpy(output_bytes + r.first * out_bytes, st.ring[s].staged_output.data(),
                  r.count * out_bytes);
    }
    items_done += r.count;
  };
  // Copy in and compute of chunk k.
  const auto issue = [&](std::size_t k) {
    const std::size_t s = detail::ring_slot(k, state::slots);
    const detail::item_bounds r = detail::chunk_at(k, items, plan.chunk_items);
    typename state::slot& sl = st.ring[s];
    const std::byte* source = input_bytes + r.first * in_bytes;
    if (!direct_input) {
      GPUBATCH_NVTX_RANGE("gpubatch stage input", k, copy_in);
      std::memcpy(sl.staged_input.data(), source, r.count * in_bytes);
      source = sl.staged_input.data();
    }
    st.engine.copy_in(s, k, sl.input, source, r.count * in_bytes);

    chunk_type chunk;
    chunk.index = k;
    chunk.first_item = r.first;
    chunk.items = r.count;
    chunk.input = span<const In>(reinterpret_cast<const In*>(sl.input), r.count * in_elements,
                                 device_space);
    chunk.output =
        span<Out>(reinterpret_cast<Out*>(sl.output), r.count * out_elements, device_space);
    chunk.workspace =
        span<std::byte>(sl.workspace, r.count * st.shape.workspace.bytes(), device_space);
    chunk.workspace_per_item = st.shape.workspace;
    st.engine.compute(s, k, [stage_ptr, chunk](auto exec) {
      GPUBATCH_NVTX_RANGE("gpubatch stage", chunk.index, compute);
      (*stage_ptr)(exec, chunk);
    });
  };
  // Copy out of chunk k, after its compute.
  const auto issue_out = [&](std::size_t k) {
    const std::size_t s = detail::ring_slot(k, state::slots);
    const detail::item_bounds r = detail::chunk_at(k, items, plan.chunk_items);
    typename state::slot& sl = st.ring[s];
    std::byte* target =
        direct_output ? output_bytes + r.first * out_bytes : sl.staged_output.data();
    st.engine.copy_out(s, k, target, sl.output, r.count * out_bytes);
  };

  std::size_t issued = 0;      // chunks whose copy in and compute are issued
  std::size_t issued_out = 0;  // chunks whose copy out is issued
  std::size_t landed = 0;      // chunks complete in the caller's output
  std::size_t at = 0;          // the chunk being worked on, for the fault path
  const auto issue_out_until = [&](std::size_t end) {
    for (; issued_out < end; ++issued_out) {
      at = issued_out;
      issue_out(issued_out);
    }
  };
  const auto land_next = [&] {
    issue_out_until(landed + 1);  // only with a single buffer is it not issued yet
    at = landed;
    land(landed, true);
    ++landed;
    if (progress) progress(items_done, items);
  };
  try {
    for (std::size_t k = 0; k < plan.chunks; ++k) {
      if (k >= state::slots) {
        land_next();  // frees chunk k's slot
      }
      at = k;
      if (st.engine.compute_shares_copy_out()) {
        // One queue for both: chunk k - 1's copy out goes before chunk k's stage, so a stage
        // that fails at chunk k cannot take the copy out of an earlier chunk down with it. On
        // a single queue nothing overlaps anyway, so the order costs nothing.
        issue_out_until(k);
        at = k;
      }
      issue(k);
      ++issued;
      // Copy out of the previous chunk goes after this chunk's copy in: where both copies
      // share a stream, copy in of chunk k then runs while chunk k - 1 computes.
      issue_out_until(issued - 1);
    }
    issue_out_until(issued);
    while (landed < plan.chunks) {
      land_next();
    }
  } catch (...) {
    std::exception_ptr cause = std::current_exception();
    // Stop issuing new chunks; chunks before the failing one whose compute was issued still get
    // their copy out (it fails harmlessly if the device is gone).
    try {
      const std::size_t failed = at;
      for (; issued_out < std::min(issued, failed); ++issued_out) {
        issue_out(issued_out);
      }
    } catch (...) {
      // Already failing: the first failure is the one reported.
    }
    // Let what is in flight finish, so that no buffer is freed under a copy.
    st.engine.drain();
    // Chunks before the failing one that completed are kept.
    for (; landed < std::min(at, issued_out) &&
           st.engine.succeeded(detail::ring_slot(landed, state::slots));
         ++landed) {
      land(landed, false);
      try {
        if (progress) progress(items_done, items);
      } catch (...) {
        // Already failing: the first failure is the one reported.
      }
    }
    st.release();
    const detail::item_bounds r = detail::chunk_at(at, items, plan.chunk_items);
    throw pipeline_error(at, item_range{r.first, r.count}, items_done, std::move(cause));
  }

  report.items = items;
  report.chunks = plan.chunks;
  report.chunk_items = plan.chunk_items;
  report.memory_limited = plan.memory_limited;
  report.direct_input = direct_input;
  report.direct_output = direct_output;
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return report;
}

template <class In, class Out, class Exec, class Policy>
chunk_plan pipeline<In, Out, Exec, Policy>::plan(std::size_t items) const {
  const detail::device_scope<Exec> scope(state_->device);
  return state_->plan(items);
}

template <class In, class Out, class Exec, class Policy>
void pipeline<In, Out, Exec, Policy>::release() noexcept {
  state_->release();
}

template <class In, class Out, class Exec, class Policy>
pinned_pool_stats pipeline<In, Out, Exec, Policy>::pinned_stats() const {
  return state_->pool.stats();
}

template <class In, class Out, class Exec, class Policy>
std::size_t pipeline<In, Out, Exec, Policy>::device_bytes() const noexcept {
  return state_->device_memory ? state_->device_memory->size_bytes() : 0;
}

template <class In, class Out, class Exec, class Policy>
std::size_t pipeline<In, Out, Exec, Policy>::device_allocations() const noexcept {
  return state_->device_allocations;
}

template <class In, class Out, class Exec, class Policy>
int pipeline<In, Out, Exec, Policy>::device() const noexcept {
  return state_->device;
}

template <class In, class Out, class Exec, class Policy>
const item_shape& pipeline<In, Out, Exec, Policy>::shape() const noexcept {
  return state_->shape;
}

template <class In, class Out, class Exec, class Policy>
std::size_t pipeline<In, Out, Exec, Policy>::device_bytes_per_item() const noexcept {
  return state_->bytes_per_item();
}

// ---------------------------------------------------------------------------------------------

GPUBATCH_ABI_BEGIN
namespace detail {
template <class Range>
using span_element_t = std::remove_pointer_t<decltype(to_address(std::declval<Range&>().data()))>;
}  // namespace detail

template <class Policy, class Exec, class InRange, class OutRange, class Stage>
pipeline_report run_pipeline(Exec exec, item_shape shape, const InRange& input, OutRange& output,
                             Stage&& stage, pipeline_options options,
                             const progress_callback& progress) {
  using in_t = std::remove_cv_t<detail::span_element_t<const InRange>>;
  using out_t = detail::span_element_t<OutRange>;
  static_assert(!std::is_const_v<out_t>, "gpubatch::run_pipeline: output must be writable");
  pipeline<in_t, out_t, Exec, Policy> p(exec, shape, options);
  return p.run(span<const in_t>(input), span<out_t>(output), std::forward<Stage>(stage), progress);
}

template <class Policy, class Exec, class InRange, class OutRange, class Stage>
autotune_result autotune_chunk_items(Exec exec, item_shape shape, const InRange& sample_input,
                                     OutRange& sample_output, Stage&& stage,
                                     std::vector<std::size_t> candidates, int repeats,
                                     pipeline_options options) {
  using in_t = std::remove_cv_t<detail::span_element_t<const InRange>>;
  using out_t = detail::span_element_t<OutRange>;
  const span<const in_t> input(sample_input);
  const span<out_t> output(sample_output);
  if (repeats < 1) {
    throw invalid_argument("repeats", std::to_string(repeats) + " is less than 1");
  }
  if (shape.input_elements == 0 || input.size() < shape.input_elements) {
    throw invalid_argument("sample_input", "holds no item to time");
  }
  const std::size_t items = input.size() / shape.input_elements;
  if (candidates.empty()) {
    const std::size_t limit = std::min(items, Policy::max_chunk_items);
    for (std::size_t c = std::min(Policy::min_chunk_items, limit); c < limit; c *= 2) {
      candidates.push_back(c);
    }
    candidates.push_back(limit);
  }
  autotune_result result;
  for (const std::size_t candidate : candidates) {
    if (candidate == 0) {
      throw invalid_argument("candidates", "contains 0 items per chunk");
    }
    autotune_sample sample;
    sample.chunk_items = candidate;
    options.chunk_items = candidate;
    try {
      pipeline<in_t, out_t, Exec, Policy> p(exec, shape, options);
      (void)p.run(input, output, stage);  // warm-up: allocation and first touch
      double best = 0.0;
      for (int r = 0; r < repeats; ++r) {
        const double seconds = p.run(input, output, stage).seconds;
        best = r == 0 ? seconds : std::min(best, seconds);
      }
      sample.seconds = best;
      sample.items_per_second = best > 0.0 ? static_cast<double>(items) / best : 0.0;
    } catch (const std::bad_alloc&) {
      // This size does not fit (out_of_memory, or a memory resource's bad_alloc): not a candidate.
      sample.items_per_second = 0.0;
    } catch (const pipeline_error& e) {
      // Out of memory inside a stage also just rules the size out; anything else is reported.
      if (!detail::is_out_of_memory(e.cause())) {
        throw;
      }
      sample.items_per_second = 0.0;
    }
    if (sample.items_per_second > result.items_per_second) {
      result.items_per_second = sample.items_per_second;
      result.chunk_items = candidate;
    }
    result.samples.push_back(sample);
  }
  return result;
}

GPUBATCH_ABI_END
}  // namespace gpubatch
