// Definitions for multi_device.hpp: the groups, the split runner and the three operations.
#pragma once

#include <gpubatch/containers.hpp>
#include <gpubatch/detail/conv/validate.hpp>
#include <gpubatch/detail/epilogue/validate.hpp>
#include <gpubatch/detail/gemm/validate.hpp>

#include <algorithm>
#include <chrono>
#include <limits>
#include <set>
#include <thread>
#include <type_traits>
#include <utility>

namespace gpubatch {

// ---------------------------------------------------------------------------------------------
// Groups and the error

inline device_group<cuda_exec>::device_group(const std::vector<int>& devices) {
  if (devices.empty()) {
    throw invalid_argument("devices", "is empty: a device group needs at least one device");
  }
  int count = 0;
  const cudaError_t counted = cudaGetDeviceCount(&count);
  if (counted != cudaSuccess) {
    (void)cudaGetLastError();
    throw cuda_error(counted, "cudaGetDeviceCount(&count)", __FILE__, __LINE__);
  }
  std::set<int> seen;
  for (const int device : devices) {
    if (device < 0 || device >= count) {
      throw invalid_argument("devices", "names device " + std::to_string(device) + ", but " +
                                            std::to_string(count) + " device" +
                                            (count == 1 ? " is" : "s are") + " visible");
    }
    if (!seen.insert(device).second) {
      throw invalid_argument("devices", "names device " + std::to_string(device) +
                                            " twice: each device is one member");
    }
    int multiprocessors = 0;
    GPUBATCH_CUDA_TRY(
        cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
    members_.push_back({members_.size(), device, static_cast<double>(std::max(multiprocessors, 1))});
  }
}

inline device_group<host_exec>::device_group(std::size_t workers, host_exec exec) : exec_(exec) {
  if (workers == 0) {
    throw invalid_argument("workers", "is 0: a device group needs at least one member");
  }
  if (exec_.max_threads <= 0) {
    // Each worker's OpenMP team gets its part of the machine, not all of it.
    const std::size_t hardware = std::max(1U, std::thread::hardware_concurrency());
    exec_.max_threads = static_cast<int>(std::max<std::size_t>(1, hardware / workers));
  }
  for (std::size_t i = 0; i < workers; ++i) {
    members_.push_back({i, -1, 1.0});
  }
}

inline multi_device_error::multi_device_error(std::size_t member, int device, item_range items,
                                              std::vector<item_range> completed,
                                              std::size_t failures, std::exception_ptr cause)
    : error([&] {
        std::size_t done = 0;
        for (const item_range& r : completed) done += r.count;
        std::string what = "gpubatch: ";
        what += device >= 0 ? "device " + std::to_string(device) : std::string("host worker");
        what += " (member " + std::to_string(member) + ") failed";
        if (items.count > 0) {
          what += " on items " + std::to_string(items.first) + " to " +
                  std::to_string(items.first + items.count - 1);
        } else {
          what += " before its first share";
        }
        what += "; " + std::to_string(done) + " items completed";
        if (failures > 1) what += "; " + std::to_string(failures - 1) + " other member(s) failed too";
        what += ": ";
        try {
          std::rethrow_exception(cause);
        } catch (const std::exception& e) {
          what += e.what();
        } catch (...) {
          what += "an exception not derived from std::exception";
        }
        return what;
      }()),
      member_(member),
      device_(device),
      items_(items),
      completed_(std::move(completed)),
      failures_(failures),
      cause_(std::move(cause)) {}

inline std::size_t multi_device_error::items_completed() const noexcept {
  std::size_t done = 0;
  for (const item_range& r : completed_) done += r.count;
  return done;
}

GPUBATCH_ABI_BEGIN
inline device_group<cuda_exec> cuda_devices() {
  int count = 0;
  const cudaError_t counted = cudaGetDeviceCount(&count);
  if (counted != cudaSuccess || count <= 0) {
    (void)cudaGetLastError();
    throw invalid_argument("devices", std::string("no CUDA device is visible (") +
                                          cudaGetErrorName(counted) + ")");
  }
  std::vector<int> all(static_cast<std::size_t>(count));
  for (int d = 0; d < count; ++d) all[static_cast<std::size_t>(d)] = d;
  return device_group<cuda_exec>(all);
}

inline device_group<cuda_exec> cuda_devices(const std::vector<int>& devices) {
  return device_group<cuda_exec>(devices);
}

inline device_group<host_exec> host_workers(std::size_t workers, host_exec exec) {
  return device_group<host_exec>(workers, exec);
}

// ---------------------------------------------------------------------------------------------
// The split runner

namespace detail::multi_device {

inline void check_split_options(const split_options& options) {
  if (!(options.headroom_fraction >= 0.0 && options.headroom_fraction < 1.0)) {
    throw invalid_argument("split.headroom_fraction",
                           std::to_string(options.headroom_fraction) + " is not in [0, 1)");
  }
}

/// Waits for the work of a share: a share is complete when its output has landed.
inline void finish(const cuda_exec& exec) {
  const cudaError_t status = cudaStreamSynchronize(exec.stream());
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw cuda_error(status, "cudaStreamSynchronize(stream)", __FILE__, __LINE__);
  }
}
inline void finish(const host_exec&) {}

/// Items of `bytes_per_item` (after `fixed_bytes`) that fit in the current device's free memory
/// less headroom; at least 1, so a share that cannot fit fails with out_of_memory, clearly.
inline std::size_t items_that_fit(std::size_t bytes_per_item, std::size_t fixed_bytes,
                                  const split_options& options) {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  GPUBATCH_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
  const auto fraction = static_cast<std::size_t>(static_cast<double>(free_bytes) *
                                                 options.headroom_fraction);
  const std::size_t headroom = std::max(options.headroom_bytes, fraction);
  const std::size_t usable = free_bytes > headroom ? free_bytes - headroom : 0;
  if (bytes_per_item == 0) return std::numeric_limits<std::size_t>::max();
  return usable > fixed_bytes + bytes_per_item ? (usable - fixed_bytes) / bytes_per_item : 1;
}

/// Runs the batch across the group. `make_worker(exec, member)` builds a member's state on its
/// thread, with its device current; it returns a callable `worker(range)` that issues a share's
/// work on exec, and has a member `share_cap` (the most items one share may hold).
template <class Exec>
split_report empty_report(const device_group<Exec>& group, std::size_t items) {
  split_report report;
  report.items = items;
  for (const group_member& m : group.members()) {
    member_report r;
    r.device = m.device;
    report.members.push_back(r);
  }
  return report;
}

template <class Exec, class MakeWorker>
split_report run_split(const device_group<Exec>& group, std::size_t items,
                       const split_options& options, MakeWorker&& make_worker) {
  check_split_options(options);
  split_report report = empty_report(group, items);
  if (items == 0) return report;

  const auto started = std::chrono::steady_clock::now();
  std::vector<double> weights;
  for (const group_member& m : group.members()) weights.push_back(m.weight);
  share_queue queue(items, std::move(weights), options.min_share_items);
  outcome result(group.size());

  on_member_threads(group.size(), result, queue, [&](std::size_t index) {
    const group_member& member = group[index];
    std::size_t first = 0;
    std::size_t count = 0;
    const auto serve = [&](auto exec) {
      auto worker = make_worker(exec, member);
      queue.limit(index, worker.share_cap);
      while (queue.claim(index, first, count)) {
        const auto share_started = std::chrono::steady_clock::now();
        worker(item_range{first, count});
        finish(exec);
        const double seconds = seconds_since(share_started);
        queue.record(index, count, seconds);
        result.complete(index, first, count, seconds);
        count = 0;  // a failure from here on belongs to no share
      }
    };
    try {
      if constexpr (is_cuda_exec_v<Exec>) {
        use_device(member.device);
        const detail::owned_stream stream;  // outlives the worker and its buffers
        serve(cuda_exec{stream.get()});
        stream.synchronize();
      } else {
        serve(group.worker_exec());
      }
    } catch (const share_failure& failure) {
      result.complete(index, first, failure.completed, 0.0);
      result.fail(index, first + failure.failed_first, failure.failed_count, failure.cause);
      queue.stop();
    } catch (...) {
      result.fail(index, first, count, std::current_exception());
      queue.stop();
    }
  });

  std::vector<item_range> completed;
  for (const auto& r : result.merged()) completed.push_back({r.first, r.second});
  if (!result.failures.empty()) {
    const outcome::failure& f = result.failures.front();
    throw multi_device_error(f.member, group[f.member].device, item_range{f.first, f.count},
                             std::move(completed), result.failures.size(), f.cause);
  }
  for (std::size_t m = 0; m < group.size(); ++m) {
    report.members[m].items = result.member_items[m];
    report.members[m].shares = result.member_shares[m];
    report.members[m].seconds = result.member_seconds[m];
  }
  report.seconds = seconds_since(started);
  return report;
}

/// An epilogue that sees the problem's index in the whole batch, for a share starting at
/// `first`. Epilogues that ignore the index go through unwrapped.
template <class Epilogue>
struct batch_offset {
  Epilogue inner;
  index_t first;
  template <class T>
  GPUBATCH_HOST_DEVICE T operator()(T value, index_t batch, index_t row, index_t col) const {
    return inner(value, batch + first, row, col);
  }
};

template <class Epilogue>
inline constexpr bool ignores_batch_index_v =
    std::is_same_v<Epilogue, epilogue::identity> || std::is_same_v<Epilogue, epilogue::relu> ||
    std::is_same_v<Epilogue, epilogue::gelu_tanh>;

template <class Epilogue, class F>
decltype(auto) with_share_epilogue(const Epilogue& e, index_t first, F&& f) {
  if constexpr (ignores_batch_index_v<Epilogue>) {
    return std::forward<F>(f)(e);
  } else {
    return std::forward<F>(f)(batch_offset<Epilogue>{e, first});
  }
}

/// A group's operands are host memory: a CUDA group copies them to its members' devices, so
/// device memory is refused up front; a host group in checked mode (host_exec::
/// cuda_memory_rules) refuses what stands in for device memory (a host device_buffer) alike.
template <class Exec>
void require_host_side(const device_group<Exec>& group, const char* parameter,
                       memory_space stated, const void* data) {
  memory_space space = stated;
  if constexpr (is_cuda_exec_v<Exec>) {
    (void)group;
    if (space == memory_space::unknown) space = memory_space_of(data);
  } else {
    if (!group.worker_exec().cuda_memory_rules) return;
    if (space == memory_space::unknown) space = detail_shared::host_roles().find(data);
  }
  if (space == memory_space::device) {
    throw invalid_argument(parameter, "is in device memory: a device group copies each share "
                                      "from host memory to its member's device (pass host or "
                                      "pinned memory)");
  }
}

/// What a member runs its shares with. A host worker in checked mode applies the CUDA rules to
/// the epilogue (checked once per member), not to the operands: on a CUDA group those are host
/// memory by contract.
template <class Exec>
Exec operand_exec(Exec exec) {
  if constexpr (is_host_exec_v<Exec>) exec.cuda_memory_rules = false;
  return exec;
}

/// A matrix batch operand as one member sees it: the caller's view for a host member; for a CUDA
/// member, a device copy of the share's matrices (a broadcast matrix is copied once).
template <class T>
class share_operand {
 public:
  using value_type = std::remove_const_t<T>;

  explicit share_operand(const matrix_batch_view<T>& whole) : whole_(whole) {}

  [[nodiscard]] bool broadcast() const noexcept { return whole_.batch_stride() == 0; }

  /// Elements `count` problems span, from the first one's first element.
  [[nodiscard]] index_t span_of(index_t count) const noexcept {
    if (count == 0 || whole_.matrix_span() == 0) return 0;
    return broadcast() ? whole_.matrix_span()
                       : (count - 1) * whole_.batch_stride() + whole_.matrix_span();
  }
  /// Device bytes per problem, and fixed, for sizing shares.
  [[nodiscard]] std::size_t bytes_per_item() const noexcept {
    return broadcast() ? 0 : static_cast<std::size_t>(whole_.batch_stride()) * sizeof(value_type);
  }
  [[nodiscard]] std::size_t fixed_bytes() const noexcept {
    return static_cast<std::size_t>(whole_.matrix_span()) * sizeof(value_type);
  }
  /// Whether the matrices cover every element they span (no padding rows, no gaps between).
  [[nodiscard]] bool gapless() const noexcept {
    const index_t elements = whole_.rows() * whole_.cols();
    return whole_.matrix_span() == elements &&
           (whole_.count() <= 1 || whole_.batch_stride() == elements);
  }

  /// The caller's problems [first, first + count), in place (host members).
  [[nodiscard]] matrix_batch_view<T> in_place(index_t first, index_t count) const {
    T* data = whole_.data() == nullptr ? nullptr
                                       : whole_.data() + (broadcast() ? 0 : first * whole_.batch_stride());
    return matrix_batch_view<T>(data, whole_.rows(), whole_.cols(), whole_.ld(),
                                whole_.batch_stride(), count, whole_.order(), whole_.space());
  }

  /// Problems [first, first + count) on the current device, copied in on exec's stream when
  /// `copy_in` (a broadcast matrix only the first time).
  [[nodiscard]] matrix_batch_view<T> on_device(cuda_exec exec, index_t first, index_t count,
                                               bool copy_in) {
    const auto elements = static_cast<std::size_t>(span_of(count));
    if (elements > capacity_) {
      buffer_ = device_buffer<value_type>(elements, exec);  // the old one is freed on exec
      capacity_ = elements;
      loaded_ = false;
    }
    if (copy_in && elements > 0 && !(broadcast() && loaded_)) {
      const T* source = whole_.data() + (broadcast() ? 0 : first * whole_.batch_stride());
      GPUBATCH_CUDA_TRY(cudaMemcpyAsync(buffer_.data(), source, elements * sizeof(value_type),
                                        cudaMemcpyHostToDevice, exec.stream()));
      loaded_ = broadcast();
    }
    return matrix_batch_view<T>(buffer_.data(), whole_.rows(), whole_.cols(), whole_.ld(),
                                broadcast() ? 0 : whole_.batch_stride(), count, whole_.order(),
                                memory_space::device);
  }

  /// Copies problems [first, first + count) back to the caller's memory on exec's stream.
  void copy_back(cuda_exec exec, index_t first, index_t count) const {
    const auto elements = static_cast<std::size_t>(span_of(count));
    if (elements == 0) return;
    GPUBATCH_CUDA_TRY(cudaMemcpyAsync(const_cast<value_type*>(whole_.data()) + first * whole_.batch_stride(),
                                      buffer_.data(), elements * sizeof(value_type),
                                      cudaMemcpyDeviceToHost, exec.stream()));
  }

 private:
  matrix_batch_view<T> whole_;
  device_buffer<value_type> buffer_{0, host_exec{}};
  std::size_t capacity_ = 0;
  bool loaded_ = false;
};

/// A packed 4-D tensor as one member sees it, split by sample (the outermost dimension of both
/// layouts): in place for a host member, a device copy of the share's samples for a CUDA one.
template <class T>
class share_tensor {
 public:
  using value_type = std::remove_const_t<T>;

  share_tensor(const tensor4d_view<T>& whole, bool whole_batch)
      : whole_(whole), whole_batch_(whole_batch) {}

  [[nodiscard]] std::size_t sample_elements() const noexcept {
    return static_cast<std::size_t>(whole_.c() * whole_.h() * whole_.w());
  }
  [[nodiscard]] std::size_t bytes_per_item() const noexcept {
    return whole_batch_ ? 0 : sample_elements() * sizeof(value_type);
  }
  [[nodiscard]] std::size_t fixed_bytes() const noexcept {
    return whole_batch_ ? static_cast<std::size_t>(whole_.size()) * sizeof(value_type) : 0;
  }

  [[nodiscard]] tensor4d_view<T> in_place(index_t first, index_t count) const {
    if (whole_batch_) return whole_;
    T* data = whole_.data() == nullptr
                  ? nullptr
                  : whole_.data() + static_cast<std::size_t>(first) * sample_elements();
    return tensor4d_view<T>(data, count, whole_.c(), whole_.h(), whole_.w(), whole_.order(),
                            whole_.space());
  }

  [[nodiscard]] tensor4d_view<T> on_device(cuda_exec exec, index_t first, index_t count,
                                           bool copy_in) {
    const index_t n = whole_batch_ ? whole_.n() : count;
    const std::size_t elements = static_cast<std::size_t>(n) * sample_elements();
    if (elements > capacity_) {
      buffer_ = device_buffer<value_type>(elements, exec);
      capacity_ = elements;
      loaded_ = false;
    }
    if (copy_in && elements > 0 && !(whole_batch_ && loaded_)) {
      const T* source = whole_.data() + (whole_batch_ ? 0 : static_cast<std::size_t>(first) *
                                                                sample_elements());
      GPUBATCH_CUDA_TRY(cudaMemcpyAsync(buffer_.data(), source, elements * sizeof(value_type),
                                        cudaMemcpyHostToDevice, exec.stream()));
      loaded_ = whole_batch_;
    }
    return tensor4d_view<T>(buffer_.data(), n, whole_.c(), whole_.h(), whole_.w(), whole_.order(),
                            memory_space::device);
  }

  void copy_back(cuda_exec exec, index_t first, index_t count) const {
    const std::size_t elements = static_cast<std::size_t>(count) * sample_elements();
    if (elements == 0) return;
    GPUBATCH_CUDA_TRY(cudaMemcpyAsync(const_cast<value_type*>(whole_.data()) +
                                          static_cast<std::size_t>(first) * sample_elements(),
                                      buffer_.data(), elements * sizeof(value_type),
                                      cudaMemcpyDeviceToHost, exec.stream()));
  }

 private:
  tensor4d_view<T> whole_;
  bool whole_batch_;
  device_buffer<value_type> buffer_{0, host_exec{}};
  std::size_t capacity_ = 0;
  bool loaded_ = false;
};

}  // namespace detail::multi_device

// ---------------------------------------------------------------------------------------------
// The operations

template <class Exec, class Work>
split_report for_each_share(const device_group<Exec>& group, std::size_t items, Work&& work,
                            const split_options& options) {
  static_assert(std::is_invocable_v<Work&, Exec, const group_member&, item_range>,
                "gpubatch::for_each_share: work must be callable as work(exec, member, range)");
  return detail::multi_device::run_split(
      group, items, options, [&work](Exec exec, const group_member& member) {
        struct worker {
          std::remove_reference_t<Work>* work;
          Exec exec;
          const group_member* member;
          std::size_t share_cap = std::numeric_limits<std::size_t>::max();
          void operator()(item_range range) { (*work)(exec, *member, range); }
        };
        return worker{&work, exec, &member};
      });
}

template <class Policy, class Exec, class TA, class TB, class TC, class Epilogue>
split_report gemm(const device_group<Exec>& group, op op_a, op op_b, detail::scalar_t<TA> alpha,
                  const matrix_batch_view<TA>& a, const matrix_batch_view<TB>& b,
                  detail::scalar_t<TA> beta, const matrix_batch_view<TC>& c, Epilogue epilogue,
                  gemm_options options, const split_options& split) {
  detail::require_cuda_compiler<Exec>();
  detail::check_gemm_types<TA, TB, TC, Epilogue>();
  namespace md = detail::multi_device;
  const detail::gemm_shape shape = detail::check_gemm_shapes(op_a, op_b, a, b, c);
  if (c.count() > 1 && c.batch_stride() == 0) {
    throw invalid_argument("c", "has batch_stride 0 with " + std::to_string(c.count()) +
                                    " problems: members would write the same matrix at once");
  }
  md::require_host_side(group, "a", a.space(), a.data());
  md::require_host_side(group, "b", b.space(), b.data());
  md::require_host_side(group, "c", c.space(), c.data());
  md::check_split_options(split);
  if (shape.empty()) {
    return md::empty_report(group, 0);
  }
  // C is read when beta says so, and always when it has gaps: the copy back writes the
  // whole span, so the gaps must hold what the caller had there.
  const bool read_c = beta != detail::scalar_t<TA>(0) || !md::share_operand<TC>(c).gapless();

  return md::run_split(
      group, static_cast<std::size_t>(c.count()), split,
      [&](Exec exec, const group_member&) {
        detail::check_epilogue(exec, epilogue, "epilogue");
        struct worker {
          Exec exec;
          md::share_operand<TA> a;
          md::share_operand<TB> b;
          md::share_operand<TC> c;
          const Epilogue* epilogue;
          op op_a, op_b;
          detail::scalar_t<TA> alpha, beta;
          gemm_options options;
          bool read_c;
          std::size_t share_cap = std::numeric_limits<std::size_t>::max();

          void operator()(item_range range) {
            const auto first = static_cast<index_t>(range.first);
            const auto count = static_cast<index_t>(range.count);
            md::with_share_epilogue(*epilogue, first, [&](const auto& e) {
              if constexpr (is_cuda_exec_v<Exec>) {
                const auto da = a.on_device(exec, first, count, true);
                const auto db = b.on_device(exec, first, count, true);
                const auto dc = c.on_device(exec, first, count, read_c);
                gpubatch::gemm<Policy>(exec, op_a, op_b, alpha, da, db, beta, dc, e, options);
                c.copy_back(exec, first, count);
              } else {
                gpubatch::gemm<Policy>(exec, op_a, op_b, alpha, a.in_place(first, count),
                                       b.in_place(first, count), beta, c.in_place(first, count),
                                       e, options);
              }
            });
          }
        };
        worker w{md::operand_exec(exec), md::share_operand<TA>(a), md::share_operand<TB>(b),
                 md::share_operand<TC>(c), &epilogue, op_a, op_b, alpha, beta, options, read_c};
        if constexpr (is_cuda_exec_v<Exec>) {
          w.share_cap = md::items_that_fit(
              w.a.bytes_per_item() + w.b.bytes_per_item() + w.c.bytes_per_item(),
              w.a.fixed_bytes() + w.b.fixed_bytes() + w.c.fixed_bytes(), split);
        }
        return w;
      });
}

template <class Policy, class Exec, class TX, class TW, class TY, class Epilogue>
split_report conv2d(const device_group<Exec>& group, const conv2d_params& params,
                    detail::conv::scalar_t<TX> alpha, const tensor4d_view<TX>& x,
                    const tensor4d_view<TW>& w, detail::conv::scalar_t<TX> beta,
                    const tensor4d_view<TY>& y, Epilogue epilogue, const conv2d_options& options,
                    const split_options& split) {
  detail::require_cuda_compiler<Exec>();
  namespace md = detail::multi_device;
  md::require_host_side(group, "x", x.space(), x.data());
  md::require_host_side(group, "w", w.space(), w.data());
  md::require_host_side(group, "y", y.space(), y.data());
  // Shapes as conv2d checks them, before any member starts (host memory, as checked above).
  (void)detail::conv::check_conv2d(host_exec{}, params, x, w, y, false);
  if (options.workspace != nullptr || options.workspace_bytes != 0) {
    throw invalid_argument("options.workspace", "must be null for a device group: one workspace "
                                                "cannot serve several devices at once");
  }
  md::check_split_options(split);
  if (x.n() == 0 || y.size() == 0) {
    return md::empty_report(group, 0);
  }
  const bool read_y = beta != detail::conv::scalar_t<TX>(0);

  return md::run_split(
      group, static_cast<std::size_t>(x.n()), split, [&](Exec exec, const group_member&) {
        detail::check_epilogue(exec, epilogue, "epilogue");
        struct worker {
          Exec exec;
          md::share_tensor<TX> x;
          md::share_tensor<TW> w;
          md::share_tensor<TY> y;
          const Epilogue* epilogue;
          const conv2d_params* params;
          detail::conv::scalar_t<TX> alpha, beta;
          conv2d_options options;
          bool read_y;
          std::size_t share_cap = std::numeric_limits<std::size_t>::max();

          void operator()(item_range range) {
            const auto first = static_cast<index_t>(range.first);
            const auto count = static_cast<index_t>(range.count);
            md::with_share_epilogue(*epilogue, first, [&](const auto& e) {
              if constexpr (is_cuda_exec_v<Exec>) {
                const auto dx = x.on_device(exec, first, count, true);
                const auto dw = w.on_device(exec, first, count, true);
                const auto dy = y.on_device(exec, first, count, read_y);
                gpubatch::conv2d<Policy>(exec, *params, alpha, dx, dw, beta, dy, e, options);
                y.copy_back(exec, first, count);
              } else {
                gpubatch::conv2d<Policy>(exec, *params, alpha, x.in_place(first, count),
                                         w.in_place(first, count), beta, y.in_place(first, count),
                                         e, options);
              }
            });
          }
        };
        worker wk{md::operand_exec(exec), md::share_tensor<TX>(x, false), md::share_tensor<TW>(w, true),
                  md::share_tensor<TY>(y, false), &epilogue, &params, alpha, beta, options,
                  read_y};
        if constexpr (is_cuda_exec_v<Exec>) {
          wk.share_cap = md::items_that_fit(
              wk.x.bytes_per_item() + wk.y.bytes_per_item(),
              wk.x.fixed_bytes() + wk.w.fixed_bytes() + wk.y.fixed_bytes(), split);
        }
        return wk;
      });
}

template <class Policy, class In, class Out, class Exec, class Stage>
split_report run_pipeline(const device_group<Exec>& group, item_shape shape, span<const In> input,
                          span<Out> output, Stage&& stage, pipeline_options options,
                          const split_options& split) {
  namespace md = detail::multi_device;
  if (shape.input_elements == 0 || shape.output_elements == 0) {
    throw invalid_argument("shape", "an item needs at least one input and one output element");
  }
  if (input.size() % shape.input_elements != 0) {
    throw invalid_argument("input", "holds " + std::to_string(input.size()) +
                                        " elements, not a whole number of items of " +
                                        std::to_string(shape.input_elements));
  }
  const std::size_t items = input.size() / shape.input_elements;
  if (output.size() != items * shape.output_elements) {
    throw invalid_argument("output", "holds " + std::to_string(output.size()) +
                                         " elements but " + std::to_string(items) + " items of " +
                                         std::to_string(shape.output_elements) + " need " +
                                         std::to_string(items * shape.output_elements));
  }
  md::require_host_side(group, "input", input.space(), input.data());
  md::require_host_side(group, "output", output.space(), output.data());

  using chunk_type = pipeline_chunk<In, Out>;
  return md::run_split(group, items, split, [&](Exec exec, const group_member&) {
    struct worker {
      pipeline<In, Out, Exec, Policy> line;
      span<const In> input;
      span<Out> output;
      std::remove_reference_t<Stage>* stage;
      item_shape shape;
      std::size_t share_cap = std::numeric_limits<std::size_t>::max();

      void operator()(item_range range) {
        // The stage sees each chunk's place in the whole batch, not in the share.
        auto shifted = [this, range](auto chunk_exec, const chunk_type& chunk) {
          chunk_type whole = chunk;
          whole.first_item += range.first;
          (*stage)(chunk_exec, static_cast<const chunk_type&>(whole));
        };
        try {
          line.run(input.subspan(range.first * shape.input_elements,
                                 range.count * shape.input_elements),
                   output.subspan(range.first * shape.output_elements,
                                  range.count * shape.output_elements),
                   shifted);
        } catch (const pipeline_error& e) {
          throw md::share_failure{e.items_completed(), e.items().first, e.items().count,
                                  e.cause()};
        }
      }
    };
    return worker{pipeline<In, Out, Exec, Policy>(exec, shape, options), input, output, &stage,
                  shape};
  });
}
GPUBATCH_ABI_END

}  // namespace gpubatch
