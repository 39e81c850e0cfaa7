/// @file detail/mpi/mpi.inl
/// @brief Definitions of mpi.hpp.
#pragma once

#include <gpubatch/detail/pipeline/chunking.hpp>
#include <gpubatch/memory_space.hpp>
#include <gpubatch/numeric.hpp>

#include <mpi.h>
// OpenMPI declares MPIX_Query_cuda_support here; other MPIs may not have the header.
#if defined(OPEN_MPI) && OPEN_MPI && __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#if GPUBATCH_CUDA_COMPILER
#include <gpubatch/detail/mpi/kernels.cuh>
#endif

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpubatch {
GPUBATCH_ABI_BEGIN
namespace mpi {
namespace detail {

inline void check(int code, const char* call) {
  if (code != MPI_SUCCESS) throw mpi_error(code, call);
}

/// The MPI type of a float or double.
template <class T>
MPI_Datatype datatype() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "gpubatch::mpi: sums in float or double");
  return std::is_same_v<T, float> ? MPI_FLOAT : MPI_DOUBLE;
}

template <class T>
inline constexpr bool is_reducible_v = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                       std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

/// A committed MPI datatype, freed however the call ends.
class owned_type {
 public:
  explicit owned_type(MPI_Datatype type) : type_(type) {
    const int committed = MPI_Type_commit(&type_);
    if (committed != MPI_SUCCESS) {
      (void)MPI_Type_free(&type_);
      throw mpi_error(committed, "MPI_Type_commit(&type)");
    }
  }
  owned_type(const owned_type&) = delete;
  owned_type& operator=(const owned_type&) = delete;
  ~owned_type() { (void)MPI_Type_free(&type_); }
  [[nodiscard]] MPI_Datatype get() const noexcept { return type_; }

 private:
  MPI_Datatype type_;
};

/// Where a span's elements live, classified if it does not say.
template <class T>
memory_space space_of(span<T> values) {
  return values.space() != memory_space::unknown ? values.space() : memory_space_of(values.data());
}

template <class T>
void require_host(span<T> values, const char* name) {
  if (!values.empty() && !gpubatch::is_accessible<host_exec>(space_of(values))) {
    throw invalid_argument(name, std::string("lies in ") + to_string(space_of(values)) +
                                     " memory; MPI reads host memory here (copy it to the host "
                                     "first, or use the overload taking a cuda_exec)");
  }
}

/// Sums `count` elements at `data` over the ranks, in place, in pieces MPI's int counts hold.
template <class T>
void allreduce_sum(T* data, std::size_t count, MPI_Comm comm) {
  constexpr auto piece = static_cast<std::size_t>(INT_MAX);
  for (std::size_t done = 0; done < count; done += piece) {
    const auto n = static_cast<int>(std::min(piece, count - done));
    GPUBATCH_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, data + done, n, datatype<T>(), MPI_SUM, comm));
  }
}

/// The mean of host values, in place: float and double in their own type, half and bfloat16
/// through float.
template <class T>
void host_mean(T* data, std::size_t count, const communicator& comm) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    const auto ranks = static_cast<T>(comm.size());
    allreduce_sum(data, count, comm.get());
    for (std::size_t i = 0; i < count; ++i) data[i] = data[i] / ranks;
  } else {
    const auto ranks = static_cast<float>(comm.size());
    std::vector<float> wide(count);
    for (std::size_t i = 0; i < count; ++i) wide[i] = convert<float>(data[i]);
    allreduce_sum(wide.data(), count, comm.get());
    for (std::size_t i = 0; i < count; ++i) {
      data[i] = convert<T>(wide[i] / ranks);
    }
  }
}

/// Every rank's item count and offset in the batch, as MPI's int counts.
struct gather_layout {
  std::vector<int> counts, offsets;
};

template <class T>
gather_layout plan_gather(const communicator& comm, std::size_t items,
                          std::size_t elements_per_item, span<const T> local, span<T> output,
                          bool output_here) {
  static_assert(std::is_trivially_copyable_v<T>,
                "gpubatch::mpi::gather_batch: elements travel as bytes; T must be trivially "
                "copyable");
  if (elements_per_item == 0) {
    throw invalid_argument("elements_per_item", "0: an item holds at least one element");
  }
  if (elements_per_item > static_cast<std::size_t>(INT_MAX) / sizeof(T)) {
    throw invalid_argument("elements_per_item",
                           std::to_string(elements_per_item) + " elements of " +
                               std::to_string(sizeof(T)) + " bytes: an item must fit in " +
                               std::to_string(INT_MAX) + " bytes (one MPI datatype)");
  }
  if (items > static_cast<std::size_t>(INT_MAX)) {
    throw invalid_argument("items", std::to_string(items) + " exceeds MPI's int counts (" +
                                        std::to_string(INT_MAX) + ")");
  }
  const item_range mine = shard(items, comm);
  if (local.size() != mine.count * elements_per_item) {
    throw invalid_argument("local", "holds " + std::to_string(local.size()) + " elements; rank " +
                                        std::to_string(comm.rank()) + "'s shard is " +
                                        std::to_string(mine.count) + " items of " +
                                        std::to_string(elements_per_item));
  }
  require_host(local, "local");
  if (output_here) {
    if (output.size() != items * elements_per_item) {
      throw invalid_argument("output", "holds " + std::to_string(output.size()) +
                                           " elements; the batch is " + std::to_string(items) +
                                           " items of " + std::to_string(elements_per_item));
    }
    require_host(output, "output");
  }
  gather_layout layout;
  layout.counts.resize(static_cast<std::size_t>(comm.size()));
  layout.offsets.resize(layout.counts.size());
  for (int r = 0; r < comm.size(); ++r) {
    const item_range part = shard(items, comm.size(), r);
    layout.counts[static_cast<std::size_t>(r)] = static_cast<int>(part.count);
    layout.offsets[static_cast<std::size_t>(r)] = static_cast<int>(part.first);
  }
  return layout;
}

template <class T>
MPI_Datatype item_type(std::size_t elements_per_item) {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  GPUBATCH_MPI_TRY(
      MPI_Type_contiguous(static_cast<int>(elements_per_item * sizeof(T)), MPI_BYTE, &type));
  return type;
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// session, communicator

inline session::session(int& argc, char**& argv, int required) { start(&argc, &argv, required); }

inline session::session(int required) { start(nullptr, nullptr, required); }

inline void session::start(int* argc, char*** argv, int required) {
  int initialised = 0, finalised = 0;
  GPUBATCH_MPI_TRY(MPI_Initialized(&initialised));
  GPUBATCH_MPI_TRY(MPI_Finalized(&finalised));
  if (finalised != 0) {
    throw error("gpubatch: MPI was finalised already and cannot be initialised again");
  }
  if (initialised != 0) {
    GPUBATCH_MPI_TRY(MPI_Query_thread(&provided_));
  } else {
    GPUBATCH_MPI_TRY(MPI_Init_thread(argc, argv, required, &provided_));
    owns_ = true;
  }
  if (provided_ < required) {
    if (owns_) (void)MPI_Finalize();
    owns_ = false;
    throw error("gpubatch: MPI provides thread level " + std::to_string(provided_) +
                ", below the " + std::to_string(required) + " required");
  }
}

inline session::~session() {
  int finalised = 1;
  if (owns_ && MPI_Finalized(&finalised) == MPI_SUCCESS && finalised == 0) (void)MPI_Finalize();
}

inline communicator::communicator(MPI_Comm comm) : comm_(comm) {
  int initialised = 0;
  GPUBATCH_MPI_TRY(MPI_Initialized(&initialised));
  if (initialised == 0) {
    throw error("gpubatch: MPI is not initialised (MPI_Init, or a gpubatch::mpi::session)");
  }
  if (comm == MPI_COMM_NULL) throw invalid_argument("comm", "MPI_COMM_NULL");
  GPUBATCH_MPI_TRY(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  GPUBATCH_MPI_TRY(MPI_Comm_rank(comm_, &rank_));
  GPUBATCH_MPI_TRY(MPI_Comm_size(comm_, &size_));
}

inline void communicator::barrier() const { GPUBATCH_MPI_TRY(MPI_Barrier(comm_)); }

// ---------------------------------------------------------------------------------------------
// shard, gather

inline item_range shard(std::size_t items, int ranks, int rank) {
  if (ranks < 1) throw invalid_argument("ranks", std::to_string(ranks) + " is not positive");
  if (rank < 0 || rank >= ranks) {
    throw invalid_argument("rank",
                           std::to_string(rank) + " is not in [0, " + std::to_string(ranks) + ")");
  }
  const gpubatch::detail::item_bounds b = gpubatch::detail::split_evenly(
      items, static_cast<std::size_t>(ranks), static_cast<std::size_t>(rank));
  return {b.first, b.count};
}

inline item_range shard(std::size_t items, const communicator& comm) {
  return shard(items, comm.size(), comm.rank());
}

template <class T>
void gather_batch(const communicator& comm, std::size_t items, std::size_t elements_per_item,
                  span<const T> local, span<T> output, int root) {
  if (root < 0 || root >= comm.size()) {
    throw invalid_argument("root", std::to_string(root) + " is not a rank of a communicator of " +
                                       std::to_string(comm.size()));
  }
  const detail::gather_layout layout =
      detail::plan_gather(comm, items, elements_per_item, local, output, comm.rank() == root);
  if (items == 0) return;
  const detail::owned_type item(detail::item_type<T>(elements_per_item));
  GPUBATCH_MPI_TRY(MPI_Gatherv(local.data(), layout.counts[static_cast<std::size_t>(comm.rank())],
                               item.get(), output.data(), layout.counts.data(),
                               layout.offsets.data(), item.get(), root, comm.get()));
}

template <class T>
void allgather_batch(const communicator& comm, std::size_t items, std::size_t elements_per_item,
                     span<const T> local, span<T> output) {
  const detail::gather_layout layout =
      detail::plan_gather(comm, items, elements_per_item, local, output, true);
  if (items == 0) return;
  const detail::owned_type item(detail::item_type<T>(elements_per_item));
  GPUBATCH_MPI_TRY(MPI_Allgatherv(
      local.data(), layout.counts[static_cast<std::size_t>(comm.rank())], item.get(), output.data(),
      layout.counts.data(), layout.offsets.data(), item.get(), comm.get()));
}

// ---------------------------------------------------------------------------------------------
// allreduce_mean

template <class T>
void allreduce_mean(span<T> values, const communicator& comm) {
  static_assert(detail::is_reducible_v<T>,
                "gpubatch::mpi::allreduce_mean: T must be float, double, half or bfloat16");
  detail::require_host(values, "values");
  detail::host_mean(values.data(), values.size(), comm);
}

template <class T>
void allreduce_mean(host_exec, span<T> values, const communicator& comm) {
  allreduce_mean(values, comm);
}

inline bool cuda_aware() noexcept {
#if defined(MPIX_CUDA_AWARE_SUPPORT)
  // The header says whether OpenMPI was built with CUDA; the library, whether it runs with it.
  return MPIX_CUDA_AWARE_SUPPORT != 0 && MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

template <class T>
void allreduce_mean(cuda_exec exec, span<T> values, const communicator& comm) {
  static_assert(detail::is_reducible_v<T>,
                "gpubatch::mpi::allreduce_mean: T must be float, double, half or bfloat16");
  if (!values.empty() && !gpubatch::is_accessible<cuda_exec>(detail::space_of(values))) {
    throw invalid_argument("values", std::string("lies in ") + to_string(detail::space_of(values)) +
                                         " memory, which the cuda backend cannot reach");
  }
  // MPI knows no stream: the values must be final before it reads them.
  GPUBATCH_CUDA_TRY(cudaStreamSynchronize(exec.stream()));
  if (values.empty()) return;
#if GPUBATCH_CUDA_COMPILER
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (cuda_aware()) {
      detail::allreduce_sum(values.data(), values.size(), comm.get());
      gpubatch::detail::launch_divide(values.data(), values.size(), static_cast<T>(comm.size()),
                                      exec.stream());
      GPUBATCH_CUDA_TRY(cudaStreamSynchronize(exec.stream()));
      return;
    }
  }
#endif
  std::vector<T> staged(values.size());
  const span<T> host(staged.data(), staged.size(), memory_space::host);
  copy(exec, host, values);
  detail::host_mean(staged.data(), staged.size(), comm);
  copy(exec, values, span<const T>(host));
}

// ---------------------------------------------------------------------------------------------
// run_or_abort

namespace detail {
[[noreturn]] inline void abort_job(const communicator& comm, const char* what) noexcept {
  std::fprintf(stderr, "gpubatch: rank %d failed: %s\n", comm.rank(), what);
  std::fflush(stderr);
  (void)MPI_Abort(comm.get(), 1);
  std::abort();  // MPI_Abort does not return; should it, this process still must not go on
}
}  // namespace detail

template <class F>
decltype(auto) run_or_abort(const communicator& comm, F&& work) {
  try {
    return std::forward<F>(work)();
  } catch (const std::exception& e) {
    detail::abort_job(comm, e.what());
  } catch (...) {
    detail::abort_job(comm, "an exception not derived from std::exception");
  }
}

// ---------------------------------------------------------------------------------------------
// NCCL

#if defined(GPUBATCH_HAS_NCCL)
#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < 21000
#error "gpubatch::mpi: the NCCL overloads need NCCL 2.10 or later (ncclAvg)"
#endif

namespace detail {
inline void check_nccl(ncclResult_t code, const char* call) {
  if (code != ncclSuccess) throw nccl_error(code, call);
}

template <class T>
ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<T, float>) {
    return ncclFloat32;
  } else if constexpr (std::is_same_v<T, double>) {
    return ncclFloat64;
  } else if constexpr (std::is_same_v<T, half>) {
    return ncclFloat16;
  } else {
    static_assert(std::is_same_v<T, bfloat16>,
                  "gpubatch::mpi::allreduce_mean: T must be float, double, half or bfloat16");
    return ncclBfloat16;
  }
}
}  // namespace detail

inline nccl_communicator::nccl_communicator(const communicator& comm) {
  ncclUniqueId id{};
  if (comm.rank() == 0) detail::check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId(&id)");
  GPUBATCH_MPI_TRY(MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, comm.get()));
  detail::check_nccl(ncclCommInitRank(&comm_, comm.size(), id, comm.rank()),
                     "ncclCommInitRank(&comm, size, id, rank)");
}

inline nccl_communicator::nccl_communicator(nccl_communicator&& other) noexcept
    : comm_(std::exchange(other.comm_, nullptr)) {}

inline nccl_communicator& nccl_communicator::operator=(nccl_communicator&& other) noexcept {
  if (this != &other) {
    if (comm_ != nullptr) (void)ncclCommDestroy(comm_);
    comm_ = std::exchange(other.comm_, nullptr);
  }
  return *this;
}

inline nccl_communicator::~nccl_communicator() {
  if (comm_ != nullptr) (void)ncclCommDestroy(comm_);
}

template <class T>
void allreduce_mean(cuda_exec exec, span<T> values, ncclComm_t comm) {
  if (!values.empty() && !gpubatch::is_accessible<cuda_exec>(detail::space_of(values))) {
    throw invalid_argument("values", std::string("lies in ") + to_string(detail::space_of(values)) +
                                         " memory, which the cuda backend cannot reach");
  }
  if (values.empty()) return;
  detail::check_nccl(ncclAllReduce(values.data(), values.data(), values.size(),
                                   detail::nccl_type<T>(), ncclAvg, comm, exec.stream()),
                     "ncclAllReduce(values, values, count, type, ncclAvg, comm, stream)");
}
#endif

}  // namespace mpi
GPUBATCH_ABI_END
}  // namespace gpubatch
