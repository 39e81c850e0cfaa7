/// @file mpi.hpp
/// @brief Data parallelism across processes: shard a batch over the ranks of an MPI
/// communicator, run each rank's share on its best backend, gather the results; average
/// gradients with an allreduce (MPI on host buffers, NCCL or CUDA-aware MPI on device buffers).
///
/// An optional component: link `gpubatch::mpi` (CMake; built when MPI is found) to use it, and
/// `gpubatch::nccl` for the NCCL overloads. `gpubatch::gpubatch` never depends on MPI.
///
/// ```cpp
/// gpubatch::mpi::session mpi(argc, argv);                // MPI_Init_thread unless done
/// const gpubatch::mpi::communicator world;               // MPI_COMM_WORLD, errors returned
/// return gpubatch::mpi::run_or_abort(world, [&] {        // a failing rank ends the job
///   const gpubatch::item_range mine = gpubatch::mpi::shard(items, world);
///   // ... run items [mine.first, mine.first + mine.count) into `local` ...
///   gpubatch::mpi::gather_batch(world, items, per_item, gpubatch::span<const float>(local),
///                               gpubatch::span<float>(output));  // the batch, on rank 0
///   return 0;
/// });
/// ```
///
/// Failure policy: collectives wait for every rank, so a rank that stops taking part (an
/// exception, a wrong size) would leave its peers waiting for ever. run_or_abort() turns an
/// exception escaping a rank's work into `gpubatch: rank R failed: <what>` on stderr and
/// MPI_Abort, which makes the launcher (mpirun) end every rank with a non-zero exit code.
/// Arguments are validated before a collective starts, so a mistake that every rank makes
/// alike throws on every rank rather than hanging; one that a single rank makes (its own
/// buffer's size) throws on that rank only, and run_or_abort then ends the job.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/pipeline.hpp>
#include <gpubatch/transfer.hpp>

#include <mpi.h>

#if defined(GPUBATCH_HAS_NCCL)
#include <nccl.h>
#endif

#include <cstddef>
#include <string>

namespace gpubatch {

/// @brief An MPI call failed; the message holds MPI's own error string.
class mpi_error : public error {
 public:
  /// @param code what the call returned
  /// @param call the call, as written
  mpi_error(int code, const std::string& call) : error(describe(code, call)), code_(code) {}

  /// @brief The MPI error code the call returned.
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  static std::string describe(int code, const std::string& call) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
    return "gpubatch: MPI error " + std::to_string(code) + " (" +
           (length > 0 ? std::string(text, static_cast<std::size_t>(length)) : "unknown") +
           ") in `" + call + "`";
  }

  int code_;
};

#if defined(GPUBATCH_HAS_NCCL)
/// @brief An NCCL call failed; the message holds ncclGetErrorString's text.
class nccl_error : public error {
 public:
  /// @param code what the call returned
  /// @param call the call, as written
  nccl_error(ncclResult_t code, const std::string& call)
      : error("gpubatch: NCCL error " + std::to_string(static_cast<int>(code)) + " (" +
              ncclGetErrorString(code) + ") in `" + call + "`"),
        code_(code) {}

  /// @brief The NCCL result code.
  [[nodiscard]] ncclResult_t code() const noexcept { return code_; }

 private:
  ncclResult_t code_;
};
#endif

GPUBATCH_ABI_BEGIN
namespace mpi {

/// @brief Initialises MPI for as long as it lives, unless something else already did: then it
/// neither initialises nor finalises. For programs (examples, tests); a library inside a larger
/// MPI program just builds a communicator.
class session {
 public:
  /// @brief MPI_Init_thread with `required` (default: only the main thread calls MPI, while
  /// gpubatch's worker threads run the pipeline's stages) unless MPI is initialised already.
  /// @throws mpi_error if initialisation fails; error if MPI provides less than `required`
  session(int& argc, char**& argv, int required = MPI_THREAD_FUNNELED);
  /// @brief The same without the command line.
  explicit session(int required = MPI_THREAD_FUNNELED);
  session(const session&) = delete;
  session& operator=(const session&) = delete;
  /// @brief MPI_Finalize, if this session initialised MPI and it is not finalised yet.
  ~session();

  /// @brief Whether this session initialised MPI (and will finalise it).
  [[nodiscard]] bool owns() const noexcept { return owns_; }
  /// @brief The thread level MPI provides.
  [[nodiscard]] int thread_level() const noexcept { return provided_; }

 private:
  void start(int* argc, char*** argv, int required);
  bool owns_ = false;
  int provided_ = MPI_THREAD_SINGLE;
};

/// @brief A communicator gpubatch uses, not owned: the caller keeps it alive and frees it.
///
/// Constructing one sets MPI_ERRORS_RETURN on the communicator (an MPI attribute of the
/// communicator itself, so it holds for other users of it too): gpubatch checks every return
/// code and throws mpi_error instead of MPI's default of aborting with no context.
class communicator {
 public:
  /// @param comm the communicator (default MPI_COMM_WORLD); MPI must be initialised
  /// @throws error if MPI is not initialised; invalid_argument for MPI_COMM_NULL; mpi_error
  explicit communicator(MPI_Comm comm = MPI_COMM_WORLD);

  /// @brief This process's rank, 0 to size() - 1.
  [[nodiscard]] int rank() const noexcept { return rank_; }
  /// @brief The number of ranks.
  [[nodiscard]] int size() const noexcept { return size_; }
  /// @brief The MPI communicator, for the caller's own MPI calls.
  [[nodiscard]] MPI_Comm get() const noexcept { return comm_; }
  /// @brief Waits until every rank has called it.
  /// @throws mpi_error
  void barrier() const;

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
};

/// @brief Part `rank` of `ranks` near-equal, contiguous parts of a batch of `items`: every part
/// holds items / ranks items, and the first items % ranks parts one more. Parts are empty when
/// there are more ranks than items.
/// @throws invalid_argument if ranks < 1 or rank is not in [0, ranks)
[[nodiscard]] item_range shard(std::size_t items, int ranks, int rank);

/// @brief This rank's part of a batch of `items`: shard(items, comm.size(), comm.rank()).
[[nodiscard]] item_range shard(std::size_t items, const communicator& comm);

/// @brief Gathers every rank's shard of a batch into the whole batch on `root`.
///
/// Rank r's `local` holds the items of shard(items, comm.size(), r), `elements_per_item`
/// elements each, in host memory; on `root`, `output` receives all `items` in order
/// (elsewhere it is not touched and may be empty). Every rank derives every shard from the
/// arguments, so no sizes are exchanged. Collective: every rank of `comm` must call it.
/// Items travel as one MPI type of elements_per_item * sizeof(T) bytes, so batches whose size
/// in bytes exceeds INT_MAX gather in one call; MPI's int counts then limit items to INT_MAX.
/// @throws invalid_argument, before any communication: "root" out of range,
///         "elements_per_item" 0 or an item beyond INT_MAX bytes, "items" beyond INT_MAX
///         (alike on every rank given the same arguments); "local" or "output" (on root) of
///         the wrong size or in device memory (on that rank only: see run_or_abort)
/// @throws mpi_error if MPI fails
template <class T>
void gather_batch(const communicator& comm, std::size_t items, std::size_t elements_per_item,
                  span<const T> local, span<T> output, int root = 0);

/// @brief gather_batch, with the whole batch arriving on every rank (`output` must hold it
/// everywhere).
/// @throws as gather_batch
template <class T>
void allgather_batch(const communicator& comm, std::size_t items, std::size_t elements_per_item,
                     span<const T> local, span<T> output);

/// @brief Replaces every element of `values` (host memory) by its mean over the ranks: an
/// in-place MPI_Allreduce with MPI_SUM, then a division by comm.size().
///
/// T: float, double (summed in their own type); half, bfloat16 (summed in float, then
/// rounded once). The summation order is MPI's, so results may differ from a sequential sum
/// in the last bits; every rank receives the same values. Buffers of more than INT_MAX
/// elements are reduced in pieces.
/// @throws invalid_argument naming "values" if it lies in device memory; mpi_error
template <class T>
void allreduce_mean(span<T> values, const communicator& comm);

/// @brief allreduce_mean of values in device memory, through MPI: float and double straight
/// from device memory when MPI is CUDA-aware (cuda_aware()) and the file is compiled as CUDA
/// (the division is a kernel); otherwise, and for half and bfloat16, through host memory.
/// Synchronises exec's stream first (MPI does not know it) and returns when the mean is in
/// `values`.
/// @throws invalid_argument naming "values" if it is not device-accessible; mpi_error;
///         cuda_error
template <class T>
void allreduce_mean(cuda_exec exec, span<T> values, const communicator& comm);

/// @brief The same on the host backend: allreduce_mean(values, comm), so generic code can pass
/// its execution argument either way.
template <class T>
void allreduce_mean(host_exec exec, span<T> values, const communicator& comm);

/// @brief Whether MPI passes device pointers straight to its transfers: OpenMPI built with
/// CUDA support, as MPIX_Query_cuda_support() reports at run time. False when MPI cannot say.
[[nodiscard]] bool cuda_aware() noexcept;

/// @brief Runs `work()` and returns its result; an exception escaping it ends the whole job.
///
/// Prints `gpubatch: rank R failed: <what()>` to stderr and calls MPI_Abort(comm, 1), so the
/// ranks waiting for this one in a collective are ended by the launcher rather than waiting
/// for ever. Call it around each rank's whole share of the work.
template <class F>
decltype(auto) run_or_abort(const communicator& comm, F&& work);

#if defined(GPUBATCH_HAS_NCCL)
/// @brief An NCCL communicator over the ranks of an MPI communicator, one GPU per rank (the
/// current device when constructed): rank 0 makes the unique id and broadcasts it with MPI.
/// Owns the NCCL communicator; destroys it. Move-only.
class nccl_communicator {
 public:
  /// @throws nccl_error, mpi_error
  explicit nccl_communicator(const communicator& comm);
  nccl_communicator(const nccl_communicator&) = delete;
  nccl_communicator& operator=(const nccl_communicator&) = delete;
  nccl_communicator(nccl_communicator&& other) noexcept;
  nccl_communicator& operator=(nccl_communicator&& other) noexcept;
  ~nccl_communicator();

  /// @brief The NCCL communicator.
  [[nodiscard]] ncclComm_t get() const noexcept { return comm_; }

 private:
  ncclComm_t comm_ = nullptr;
};

/// @brief Replaces every element of `values` (device memory) by its mean over the ranks of
/// `comm`: ncclAllReduce with ncclAvg, ordered on exec's stream and asynchronous like any
/// cuda_exec call. T: float, double, half, bfloat16.
/// @throws invalid_argument naming "values" if it is not device-accessible; nccl_error
template <class T>
void allreduce_mean(cuda_exec exec, span<T> values, ncclComm_t comm);
#endif

}  // namespace mpi
GPUBATCH_ABI_END
}  // namespace gpubatch

/// @brief Calls an MPI function and throws gpubatch::mpi_error if it fails (on a communicator
/// with MPI_ERRORS_RETURN, which gpubatch::mpi::communicator sets).
#define GPUBATCH_MPI_TRY(call) ::gpubatch::mpi::detail::check((call), #call)

#include <gpubatch/detail/mpi/mpi.inl>
