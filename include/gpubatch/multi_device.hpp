/// @file multi_device.hpp
/// @brief One batch across several devices: a device_group of CUDA devices (or of host
/// workers, the same API without a GPU) splits a GEMM, a convolution or a streaming pipeline run
/// into shares that its members pull from a common queue until the batch is done.
///
/// ```cpp
/// const auto group = gpubatch::cuda_devices();      // every visible GPU
/// gpubatch::gemm(group, gpubatch::op::none, gpubatch::op::none, 1.0F, a, b, 0.0F, c);
/// ```
///
/// Each member runs on its own thread with its own stream (or, for run_pipeline, its own
/// pipeline and streams). Shares are sized by the member's weight (its multiprocessors) and by
/// what fits in its free memory, and shrink as the batch runs out, so a faster device takes more
/// of the batch and no device waits long for another at the end. Operands stay where the caller
/// has them, in host memory (pageable or pinned); every result lands in place in the caller's
/// output. When a member fails, the others finish the share they hold and stop; the error says
/// which device failed on which items, and which items are complete.
#pragma once

#include <gpubatch/conv.hpp>
#include <gpubatch/detail/multi_device/scheduler.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/gemm.hpp>
#include <gpubatch/pipeline.hpp>

#include <cstddef>
#include <exception>
#include <string>
#include <vector>

namespace gpubatch {

/// @brief One member of a device_group.
struct group_member {
  std::size_t index = 0;  ///< position in the group, from 0
  int device = -1;        ///< the CUDA device ordinal; -1 for a host worker
  /// Relative speed, used to size shares: the device's multiprocessor count on CUDA, 1 for a
  /// host worker.
  double weight = 1.0;
};

/// @brief The members a batch is split across: CUDA devices (`device_group<cuda_exec>`) or
/// host workers (`device_group<host_exec>`). Build one with cuda_devices() or host_workers().
template <class Exec>
class device_group;

/// @brief A list of distinct CUDA devices.
template <>
class device_group<cuda_exec> {
 public:
  /// @param devices CUDA device ordinals, each at most once, in the order members are numbered
  /// @throws invalid_argument naming "devices" if it is empty, names a device that does not
  ///         exist or names one twice
  /// @throws cuda_error if the runtime cannot count or describe the devices (e.g. no driver)
  explicit device_group(const std::vector<int>& devices);

  /// @brief Number of members.
  [[nodiscard]] std::size_t size() const noexcept { return members_.size(); }
  /// @brief Member `i`.
  [[nodiscard]] const group_member& operator[](std::size_t i) const { return members_.at(i); }
  /// @brief Every member, in order.
  [[nodiscard]] const std::vector<group_member>& members() const noexcept { return members_; }

 private:
  std::vector<group_member> members_;
};

/// @brief A number of host workers: threads that each run the host backend on their share,
/// with `host_exec::max_threads` OpenMP threads each. The host stand-in for several GPUs.
template <>
class device_group<host_exec> {
 public:
  /// @param workers how many members (>= 1)
  /// @param exec what each worker runs with; max_threads = 0 gives each worker an equal part of
  ///        the machine's hardware threads (at least one); cuda_memory_rules is kept
  /// @throws invalid_argument naming "workers" if it is 0
  explicit device_group(std::size_t workers, host_exec exec = on_host);

  /// @brief Number of members.
  [[nodiscard]] std::size_t size() const noexcept { return members_.size(); }
  /// @brief Member `i`.
  [[nodiscard]] const group_member& operator[](std::size_t i) const { return members_.at(i); }
  /// @brief Every member, in order.
  [[nodiscard]] const std::vector<group_member>& members() const noexcept { return members_; }
  /// @brief The execution argument each worker runs with.
  [[nodiscard]] host_exec worker_exec() const noexcept { return exec_; }

 private:
  std::vector<group_member> members_;
  host_exec exec_;
};

/// @brief How a device group hands out shares.
struct split_options {
  /// The smallest share handed out (the last share of a batch may be smaller).
  std::size_t min_share_items = 1;
  /// gemm and conv2d: device memory a share leaves free, at least...
  std::size_t headroom_bytes = std::size_t{256} << 20;
  /// ...and at least this fraction of the device's free memory (0 <= fraction < 1).
  double headroom_fraction = 0.05;
};

/// @brief What one member did in a run.
struct member_report {
  int device = -1;         ///< the member's device (-1: host worker)
  std::size_t items = 0;   ///< items it completed
  std::size_t shares = 0;  ///< shares it completed
  double seconds = 0.0;    ///< time it spent on its shares, copies included
};

/// @brief What a split run did.
struct split_report {
  std::size_t items = 0;               ///< items in the batch
  std::vector<member_report> members;  ///< one per member, in the group's order
  double seconds = 0.0;                ///< wall-clock time of the run
};

/// @brief A member of a device group failed. Thrown after every member has stopped: the others
/// finished the share they held and took no new one, every stream was waited for and every
/// buffer freed. The items of completed() are complete in the output; no other item is.
class multi_device_error : public error {
 public:
  /// @param member the failing member's index
  /// @param device its device (-1: host worker)
  /// @param items the items of the share it failed on (empty when it failed before its first)
  /// @param completed the items that landed, as sorted, disjoint ranges
  /// @param failures how many members failed (the first failure is the one described)
  /// @param cause the original exception
  multi_device_error(std::size_t member, int device, item_range items,
                     std::vector<item_range> completed, std::size_t failures,
                     std::exception_ptr cause);

  /// @brief The failing member's index in the group.
  [[nodiscard]] std::size_t member() const noexcept { return member_; }
  /// @brief The failing member's device ordinal (-1 for a host worker).
  [[nodiscard]] int device() const noexcept { return device_; }
  /// @brief The items of the share that failed.
  [[nodiscard]] item_range items() const noexcept { return items_; }
  /// @brief The items complete in the output, as sorted, disjoint ranges.
  [[nodiscard]] const std::vector<item_range>& completed() const noexcept { return completed_; }
  /// @brief How many items are complete in the output.
  [[nodiscard]] std::size_t items_completed() const noexcept;
  /// @brief How many members failed.
  [[nodiscard]] std::size_t failures() const noexcept { return failures_; }
  /// @brief The original exception.
  [[nodiscard]] std::exception_ptr cause() const noexcept { return cause_; }
  /// @brief Throws the original exception.
  [[noreturn]] void rethrow_cause() const { std::rethrow_exception(cause_); }

 private:
  std::size_t member_;
  int device_;
  item_range items_;
  std::vector<item_range> completed_;
  std::size_t failures_;
  std::exception_ptr cause_;
};

GPUBATCH_ABI_BEGIN
/// @brief Every CUDA device the runtime sees, in ordinal order.
/// @throws invalid_argument naming "devices" when there is none; cuda_error as device_group
[[nodiscard]] device_group<cuda_exec> cuda_devices();

/// @brief The given CUDA devices: `cuda_devices({0, 1})`.
/// @throws as device_group<cuda_exec>
[[nodiscard]] device_group<cuda_exec> cuda_devices(const std::vector<int>& devices);

/// @brief `workers` host workers (see device_group<host_exec>).
/// @throws invalid_argument naming "workers" if it is 0
[[nodiscard]] device_group<host_exec> host_workers(std::size_t workers, host_exec exec = on_host);

/// @brief Runs `work` over items [0, items) in shares across the group.
///
/// `work(exec, member, range)` is called on the member's thread with its device current, once
/// per share, with `exec` bound to the member's stream (CUDA) or its host_exec; it must issue
/// its work on `exec`. A share counts as complete when that work has finished (the stream is
/// waited for after each share).
/// @throws multi_device_error when a member fails (see there)
/// @throws invalid_argument for bad options
template <class Exec, class Work>
split_report for_each_share(const device_group<Exec>& group, std::size_t items, Work&& work,
                            const split_options& options = {});

/// @brief Batched GEMM split across a group (see gemm() for the operation): problem i of the
/// batch runs on whichever member takes it.
///
/// The views must be in host memory (pageable or pinned) for a CUDA group: each member copies
/// its shares' A, B (once, if broadcast) and C (when read: beta != 0, or C has gaps between or
/// within its matrices, which are written back as they were) to its device and copies C back.
/// An epilogue sees each problem's index in the whole batch; its pointers must be readable by
/// every member (pinned or managed memory for a CUDA group).
/// @throws invalid_argument as gemm(), and naming "a", "b", "c" for device memory with a CUDA
///         group, before any member starts
/// @throws multi_device_error when a member fails
template <class Policy = void, class Exec, class TA, class TB, class TC,
          class Epilogue = epilogue::identity>
split_report gemm(const device_group<Exec>& group, op op_a, op op_b, detail::scalar_t<TA> alpha,
                  const matrix_batch_view<TA>& a, const matrix_batch_view<TB>& b,
                  detail::scalar_t<TA> beta, const matrix_batch_view<TC>& c,
                  Epilogue epilogue = {}, gemm_options options = {},
                  const split_options& split = {});

/// @brief Convolution split across a group by sample (see conv2d() for the operation).
///
/// x and y must be in host memory for a CUDA group; each member copies the filters once and its
/// shares' samples in and out (y in too when beta != 0). An epilogue sees each sample's index in
/// the whole batch. options.workspace must be null: each member would need its own.
/// @throws invalid_argument as conv2d(), "x", "w", "y" for device memory with a CUDA group,
///         "options.workspace" if it is set
/// @throws multi_device_error when a member fails
template <class Policy = void, class Exec, class TX, class TW, class TY,
          class Epilogue = epilogue::identity>
split_report conv2d(const device_group<Exec>& group, const conv2d_params& params,
                    detail::conv::scalar_t<TX> alpha, const tensor4d_view<TX>& x,
                    const tensor4d_view<TW>& w, detail::conv::scalar_t<TX> beta,
                    const tensor4d_view<TY>& y, Epilogue epilogue = {},
                    const conv2d_options& options = {}, const split_options& split = {});

/// @brief A streaming pipeline run split across a group: each member builds its own pipeline
/// (streams, staging ring, device buffers) on its device and runs it over each share it takes,
/// so every device overlaps its copies with its compute.
///
/// `stage(exec, chunk)` is called as by pipeline::run, on the member's thread; chunk.first_item
/// is the item's index in the whole batch. `options` applies to every member's pipeline: its
/// memory resources, if set, serve every member, each allocating on its own device (the one
/// current on the member's thread).
/// @throws invalid_argument naming "input" or "output" before any member starts; as the
///         pipeline's constructor
/// @throws multi_device_error when a member fails (a stage's exception is its cause, and
///         items() the chunk that failed)
template <class Policy = default_pipeline_policy, class In, class Out, class Exec, class Stage>
split_report run_pipeline(const device_group<Exec>& group, item_shape shape, span<const In> input,
                          span<Out> output, Stage&& stage, pipeline_options options = {},
                          const split_options& split = {});
GPUBATCH_ABI_END

}  // namespace gpubatch

#include <gpubatch/detail/multi_device/multi_device.inl>
