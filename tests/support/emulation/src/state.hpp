// What the emulated runtime (runtime.cpp) and the block executor (device.cpp) share.
#pragma once

#include <gpubatch_emulation/device.hpp>

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <mutex>
#include <thread>

namespace gpubatch_emu {

/// Properties of one emulated device model.
struct device_model {
  const char* name;
  int major, minor;
  int multiprocessors;
  int threads_per_multiprocessor;
  int shared_per_block_optin;  ///< bytes a block may have after opting in
  int shared_per_multiprocessor;
  int l2_bytes;
  int memory_clock_khz;
  int bus_width_bits;
  std::size_t memory_bytes;
  int arch() const { return 10 * major + minor; }
};

/// The emulated device `ordinal` (nullptr past the last one).
const device_model* device_at(int ordinal);
int device_count();

/// The runtime's lock: every API call and all queued work run under it. Recursive, and a
/// thread that must wait for a host function can let go of it entirely.
class runtime_lock {
 public:
  void lock();
  void unlock();
  /// Releases every level this thread holds; reacquire() takes them back.
  int release_all();
  void reacquire(int depth);

 private:
  std::mutex mutex_;
  std::atomic<std::thread::id> owner_{};
  int depth_ = 0;
};
runtime_lock& runtime_mutex();

/// Runs one launch (all blocks, in order); false after a device fault (the runtime's sticky
/// error is set).
bool run_grid(const launch_request& request, const device_model& device);

/// Sets the context's sticky error after a device fault.
void set_sticky_error(cudaError_t code);

/// The live allocation holding [p, p + bytes): 'd' device, 'p' page-locked host, 0 none.
char memory_kind(const void* p, std::size_t bytes);

/// Says which kernel, block and thread a crash at `address` happened in, if in a kernel.
void describe_crash(const void* address);

/// The architecture the emulated kernels were built for.
int compiled_arch();

}  // namespace gpubatch_emu
