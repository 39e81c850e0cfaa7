// The emulated CUDA runtime: the cuda* functions gpubatch and its tests call, over emulated
// devices whose memory is host memory that host code may not touch.
//
// Streams run their work only when something forces it (a synchronisation, an event query, an
// event another stream waits for), on the thread that forces it, in the order CUDA guarantees
// and no other: two streams' work is never ordered by accident of submission.
#include "fiber.hpp"
#include "state.hpp"

#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace gpubatch_emu {

namespace {

constexpr std::size_t page = 4096;
constexpr std::size_t default_shared_per_block = 48 * 1024;

// Emulated memory is host memory: each model's size is scaled down to what a test machine has.
constexpr std::size_t emulated_memory = std::size_t{2} << 30;

const device_model models[] = {
    {"h100", 9, 0, 132, 2048, 232448, 233472, 50 << 20, 2619000, 5120, emulated_memory},
    {"a100", 8, 0, 108, 2048, 166912, 167936, 40 << 20, 1593000, 5120, emulated_memory},
    {"sm86", 8, 6, 82, 1536, 101376, 102400, 6 << 20, 9751000, 384, emulated_memory},
    {"sm75", 7, 5, 40, 1024, 65536, 65536, 4 << 20, 5001000, 256, emulated_memory},
};

std::vector<const device_model*> load_devices() {
  std::vector<const device_model*> devices;
  const char* env = std::getenv("GPUBATCH_EMULATED_DEVICES");
  std::string list = env != nullptr && *env != '\0' ? env : "h100";
  // "none": a driver with no device; "no-driver": no CUDA driver at all (both: zero devices).
  if (list == "none" || list == "no-driver") return devices;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const std::string name = list.substr(start, comma - start);
    const device_model* found = nullptr;
    for (const auto& m : models) {
      if (name == m.name) found = &m;
    }
    if (found == nullptr) {
      std::fprintf(stderr, "gpubatch emulated device: unknown device '%s' in GPUBATCH_EMULATED_DEVICES"
                   " (h100, a100, sm86, sm75)\n", name.c_str());
      std::exit(2);
    }
    devices.push_back(found);
    start = comma + 1;
  }
  return devices;
}

const std::vector<const device_model*>& devices() {
  static const std::vector<const device_model*> d = load_devices();
  return d;
}

// ---------------------------------------------------------------------------------------------
// Memory

enum class space { device, pinned, registered };

struct allocation {
  char* user = nullptr;
  std::size_t bytes = 0;
  char* map = nullptr;  // the pages mapped for it (device and pinned memory)
  std::size_t map_bytes = 0;
  space kind = space::device;
  int device = 0;
  bool freed = false;
  bool free_queued = false;  // cudaFreeAsync called, not yet reached by its stream
};

struct stream_state;

struct op {
  std::function<void()> run;
  std::vector<std::pair<stream_state*, std::uint64_t>> after;  // (stream, work) to finish first
  // Host functions run on a thread of their own, as CUDA runs them: one may block until the
  // host does something, and the host may poll meanwhile.
  bool host_function = false;
  std::shared_ptr<std::thread> worker;
  std::shared_ptr<std::atomic<bool>> finished;
  std::uint64_t sequence = 0;  // the stream's work count once it completes
};

struct stream_state {
  int device = 0;
  bool blocking = true;
  bool legacy = false;
  std::deque<op> pending;
  std::uint64_t submitted = 0;
  std::uint64_t executed = 0;
};

struct event_state {
  stream_state* stream = nullptr;  // where it was last recorded
  std::uint64_t work = 0;          // the stream's work count when recorded
  bool timing = true;
  double time_ms = 0;
};

struct kernel_attributes {
  int max_dynamic_shared = static_cast<int>(default_shared_per_block);
};

struct runtime {
  std::map<std::uintptr_t, allocation> allocations;  // by user address, freed ones included
  std::deque<std::uintptr_t> quarantine;             // freed device blocks kept unmapped a while
  std::size_t quarantine_bytes = 0;
  std::vector<std::size_t> used_bytes = std::vector<std::size_t>(devices().size(), 0);
  std::vector<std::unique_ptr<stream_state>> streams;  // kept for events that name them
  std::vector<stream_state*> legacy_streams;
  std::vector<std::unique_ptr<event_state>> events;
  std::unordered_map<const void*, kernel_attributes> kernels;
  cudaError_t sticky = cudaSuccess;
  int device_access = 0;  // > 0 while device work runs: device memory is accessible
  int arch = 0;

  runtime() {
    for (std::size_t d = 0; d < devices().size(); ++d) {
      auto s = std::make_unique<stream_state>();
      s->device = static_cast<int>(d);
      s->legacy = true;
      legacy_streams.push_back(s.get());
      streams.push_back(std::move(s));
    }
  }
};

runtime& rt() {
  static runtime* r = new runtime();  // outlives every static destructor that frees memory
  return *r;
}

thread_local cudaError_t last_error = cudaSuccess;
thread_local int current_device = 0;

cudaError_t fail(cudaError_t code) {
  last_error = code;
  return code;
}

allocation* find(const void* p, bool include_freed = false) {
  auto& a = rt().allocations;
  const auto key = reinterpret_cast<std::uintptr_t>(p);
  auto it = a.upper_bound(key);
  if (it == a.begin()) return nullptr;
  --it;
  allocation& found = it->second;
  if (key >= reinterpret_cast<std::uintptr_t>(found.user) + std::max<std::size_t>(found.bytes, 1)) {
    return nullptr;
  }
  if (found.freed && !include_freed) return nullptr;
  return &found;
}

std::size_t round_up(std::size_t v, std::size_t to) { return (v + to - 1) / to * to; }

// Device memory may be touched only by device work: outside it the pages are inaccessible, so
// host code that dereferences a device pointer faults at once.
void protect(allocation& a, bool accessible) {
  mprotect(a.map + page, a.map_bytes - 2 * page, accessible ? PROT_READ | PROT_WRITE : PROT_NONE);
}

struct device_access {
  device_access() {
    if (rt().device_access++ == 0) {
      for (auto& [key, a] : rt().allocations) {
        if (a.kind == space::device && !a.freed) protect(a, true);
      }
    }
  }
  ~device_access() {
    if (--rt().device_access == 0) {
      for (auto& [key, a] : rt().allocations) {
        if (a.kind == space::device && !a.freed) protect(a, false);
      }
    }
  }
  device_access(const device_access&) = delete;
  device_access& operator=(const device_access&) = delete;
};

// Pages: a guard page, the data (ending 256-byte aligned at the last data page's end, so an
// overrun of the rounded size faults), a guard page. Fresh memory holds 0xff bytes (NaN).
char* map_block(std::size_t bytes, space kind, int device) {
  const std::size_t data = round_up(std::max<std::size_t>(bytes, 1), page);
  void* p = mmap(nullptr, data + 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) return nullptr;
  allocation a;
  a.map = static_cast<char*>(p);
  a.map_bytes = data + 2 * page;
  a.bytes = bytes;
  a.kind = kind;
  a.device = device;
  a.user = a.map + page + data - round_up(std::max<std::size_t>(bytes, 1), 256);
  protect(a, true);
  std::memset(a.map + page, 0xff, data);
  asan_poison(a.map + page, static_cast<std::size_t>(a.user - (a.map + page)));
  asan_poison(a.user + bytes, static_cast<std::size_t>(a.map + page + data - (a.user + bytes)));
  if (kind == space::device && rt().device_access == 0) protect(a, false);
  rt().allocations[reinterpret_cast<std::uintptr_t>(a.user)] = a;
  return a.user;
}

// A freed block stays mapped but inaccessible (and poisoned) for a while, so a late access
// faults instead of reading a new owner's data.
void release_block(allocation& a) {
  a.freed = true;
  if (a.kind == space::device) rt().used_bytes[static_cast<std::size_t>(a.device)] -= a.bytes;
  protect(a, true);
  std::memset(a.user, 0xfe, a.bytes);
  asan_poison(a.user, a.bytes);
  protect(a, false);
  auto& r = rt();
  r.quarantine.push_back(reinterpret_cast<std::uintptr_t>(a.user));
  r.quarantine_bytes += a.map_bytes;
  while (r.quarantine_bytes > (std::size_t{256} << 20) && !r.quarantine.empty()) {
    auto it = r.allocations.find(r.quarantine.front());
    r.quarantine.pop_front();
    if (it == r.allocations.end()) continue;
    r.quarantine_bytes -= it->second.map_bytes;
    asan_unpoison(it->second.map, it->second.map_bytes);
    munmap(it->second.map, it->second.map_bytes);
    r.allocations.erase(it);
  }
}

struct sigaction& previous_segv_action() {
  static struct sigaction previous {};
  return previous;
}

// What a fault address was, for the report of a crash in emulated memory.
void describe_fault(int, siginfo_t* info, void*) {
  const void* p = info->si_addr;
  allocation* a = find(p, true);
  const char* what = "host code touched device memory (only kernels and cuda* copies may)";
  if (a != nullptr && a->freed) what = "access to device memory after it was freed";
  if (a == nullptr) {
    for (auto& [key, b] : rt().allocations) {
      if (p >= b.map && p < b.map + b.map_bytes) {
        a = &b;
        what = "access outside a device allocation (out of bounds)";
      }
    }
  }
  if (a != nullptr) {
    std::fprintf(stderr, "gpubatch emulated device: %s: address %p, allocation %p of %zu bytes\n",
                 what, p, static_cast<void*>(a->user), a->bytes);
  }
  describe_crash(p);
  // The previous handler (the sanitizers', or the default) reports the fault again when the
  // faulting instruction runs again.
  sigaction(SIGSEGV, &previous_segv_action(), nullptr);
}

void install_fault_report() {
  static const bool installed = [] {
    struct sigaction sa {};
    sa.sa_sigaction = &describe_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, &previous_segv_action());
    return true;
  }();
  (void)installed;
}

// ---------------------------------------------------------------------------------------------
// Streams and events

thread_local stream_state* per_thread_stream = nullptr;

stream_state* resolve(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy) {
    return rt().legacy_streams[static_cast<std::size_t>(current_device)];
  }
  if (s == cudaStreamPerThread) {
    if (per_thread_stream == nullptr) {
      auto p = std::make_unique<stream_state>();
      p->device = current_device;
      per_thread_stream = p.get();
      rt().streams.push_back(std::move(p));
    }
    return per_thread_stream;
  }
  return reinterpret_cast<stream_state*>(s);
}

bool step(stream_state* s, bool wait);

// Runs `s` until its work count reaches `work`; without `wait`, stops instead of blocking on a
// host function still running. Whether it got there.
bool advance(stream_state* s, std::uint64_t work, bool wait) {
  while (s->executed < work && !s->pending.empty()) {
    if (!step(s, wait)) return false;
  }
  return true;
}

// Completes the stream's oldest work (after what it waits for); false if, not waiting, that
// work could not finish yet.
bool step(stream_state* s, bool wait) {
  const std::uint64_t sequence = s->pending.front().sequence;
  const auto after = s->pending.front().after;
  for (const auto& [other, work] : after) {
    if (!advance(other, work, wait)) return false;
  }
  // Waiting for a host function lets go of the lock: another thread may have run this op.
  if (s->pending.empty() || s->pending.front().sequence != sequence) return true;
  op& o = s->pending.front();
  if (o.host_function && rt().sticky == cudaSuccess && o.worker == nullptr) {
    o.finished = std::make_shared<std::atomic<bool>>(false);
    o.worker = std::make_shared<std::thread>([run = o.run, finished = o.finished] {
      run();
      finished->store(true);
    });
  }
  if (o.worker != nullptr) {
    if (!o.finished->load()) {
      if (!wait) return false;
      // Wait without the runtime's lock, as the driver does: the host function may wait for
      // another host thread, which may call the runtime meanwhile.
      const auto finished = o.finished;
      const int depth = runtime_mutex().release_all();
      while (!finished->load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
      runtime_mutex().reacquire(depth);
      if (s->pending.empty() || s->pending.front().sequence != sequence) {
        return true;  // another thread completed it meanwhile
      }
    }
    op& done = s->pending.front();
    if (done.worker->joinable()) done.worker->join();
  } else if (rt().sticky == cudaSuccess) {
    device_access access;
    o.run();
  }
  s->pending.pop_front();
  ++s->executed;
  return true;
}

void run_one(stream_state* s) { (void)step(s, false); }

void run_until(stream_state* s, std::uint64_t work) { (void)advance(s, work, true); }

void run_all() {
  for (std::size_t i = 0; i < rt().streams.size(); ++i) {
    stream_state* s = rt().streams[i].get();
    run_until(s, s->submitted);
  }
}

// Queues work in stream order. The legacy default stream waits for every blocking stream's
// earlier work, and blocking streams for the legacy stream's.
void submit(stream_state* s, std::function<void()> run) {
  op o;
  o.run = std::move(run);
  if (s->legacy) {
    for (auto& other : rt().streams) {
      if (other.get() != s && other->blocking && other->device == s->device && !other->legacy) {
        o.after.emplace_back(other.get(), other->submitted);
      }
    }
  } else if (s->blocking) {
    stream_state* legacy = rt().legacy_streams[static_cast<std::size_t>(s->device)];
    o.after.emplace_back(legacy, legacy->submitted);
  }
  o.sequence = ++s->submitted;
  s->pending.push_back(std::move(o));
}

bool complete(const event_state& e) { return e.stream == nullptr || e.stream->executed >= e.work; }

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---------------------------------------------------------------------------------------------
// Copies

// Where a pointer lives for a copy: 'd' device, 'p' page-locked host, 'h' pageable host.
char where_is(const void* p, std::size_t bytes, cudaError_t& error) {
  allocation* a = find(p);
  if (a == nullptr) {
    allocation* freed = find(p, true);
    if (freed != nullptr) {
      error = cudaErrorInvalidValue;  // freed memory
      return 0;
    }
    // Pointers into device pages outside any allocation (past an allocation's end).
    return 'h';
  }
  if (static_cast<const char*>(p) + bytes > a->user + a->bytes) {
    error = cudaErrorInvalidValue;
    return 0;
  }
  return a->kind == space::device ? 'd' : 'p';
}

bool kind_matches(cudaMemcpyKind kind, char dst, char src) {
  const bool dst_device = dst == 'd', src_device = src == 'd';
  switch (kind) {
    case cudaMemcpyHostToHost: return !dst_device && !src_device;
    case cudaMemcpyHostToDevice: return dst_device && !src_device;
    case cudaMemcpyDeviceToHost: return !dst_device && src_device;
    case cudaMemcpyDeviceToDevice: return dst_device && src_device;
    case cudaMemcpyDefault: return true;
  }
  return false;
}

struct region {
  char* dst;
  std::size_t dpitch;
  const char* src;
  std::size_t spitch;
  std::size_t width;
  std::size_t height;
};

void copy_rows(const region& r) {
  for (std::size_t row = 0; row < r.height; ++row) {
    std::memmove(r.dst + row * r.dpitch, r.src + row * r.spitch, r.width);
  }
}

// A copy in stream order. Pageable host memory cannot be copied asynchronously: the stream's
// earlier work finishes and the copy happens before the call returns, as CUDA does.
cudaError_t copy(const region& r, cudaMemcpyKind kind, cudaStream_t stream, bool synchronous) {
  if (rt().sticky != cudaSuccess) return fail(rt().sticky);
  if (r.width == 0 || r.height == 0) return cudaSuccess;
  if (r.dst == nullptr || r.src == nullptr || r.dpitch < r.width || r.spitch < r.width) {
    return fail(cudaErrorInvalidValue);
  }
  cudaError_t error = cudaSuccess;
  const std::size_t dst_span = r.dpitch * (r.height - 1) + r.width;
  const std::size_t src_span = r.spitch * (r.height - 1) + r.width;
  const char dst = where_is(r.dst, dst_span, error);
  const char src = where_is(r.src, src_span, error);
  if (error != cudaSuccess) return fail(error);
  if (!kind_matches(kind, dst, src)) {
    std::fprintf(stderr, "gpubatch emulated device: cudaMemcpy kind %d does not match the "
                         "pointers (destination %s, source %s)\n", static_cast<int>(kind),
                 dst == 'd' ? "device" : "host", src == 'd' ? "device" : "host");
    return fail(cudaErrorInvalidValue);
  }
  stream_state* s = resolve(stream);
  submit(s, [r] { copy_rows(r); });
  if (synchronous || dst == 'h' || src == 'h') {
    run_until(s, s->submitted);  // with what the stream (the legacy one: blocking ones) waits for
    if (rt().sticky != cudaSuccess) return fail(rt().sticky);
  }
  return cudaSuccess;
}

int& compiled_arch_value() {
  static int arch = 0;
  return arch;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Shared with the executor

const device_model* device_at(int ordinal) {
  return ordinal >= 0 && ordinal < device_count() ? devices()[static_cast<std::size_t>(ordinal)]
                                                  : nullptr;
}
int device_count() { return static_cast<int>(devices().size()); }

void runtime_lock::lock() {
  const std::thread::id me = std::this_thread::get_id();
  if (owner_.load() == me) {
    ++depth_;
    return;
  }
  mutex_.lock();
  owner_.store(me);
  depth_ = 1;
}

void runtime_lock::unlock() {
  if (--depth_ == 0) {
    owner_.store(std::thread::id{});
    mutex_.unlock();
  }
}

int runtime_lock::release_all() {
  const int depth = depth_;
  depth_ = 0;
  owner_.store(std::thread::id{});
  mutex_.unlock();
  return depth;
}

void runtime_lock::reacquire(int depth) {
  mutex_.lock();
  owner_.store(std::this_thread::get_id());
  depth_ = depth;
}

runtime_lock& runtime_mutex() {
  static runtime_lock* m = new runtime_lock();
  return *m;
}

void set_sticky_error(cudaError_t code) {
  if (rt().sticky == cudaSuccess) rt().sticky = code;
}

char memory_kind(const void* p, std::size_t bytes) {
  allocation* a = find(p);
  if (a == nullptr || static_cast<const char*>(p) + bytes > a->user + a->bytes) return 0;
  return a->kind == space::device ? 'd' : 'p';
}

namespace {
std::atomic<long long> queries{0};
}  // namespace

long long query_count() { return queries.load(); }

int register_compiled_arch(int arch) {
  int& value = compiled_arch_value();
  if (value != 0 && value != arch) {
    std::fprintf(stderr, "gpubatch emulated device: translation units built for sm_%d and sm_%d "
                         "in one program\n", value, arch);
    std::abort();
  }
  value = arch;
  return arch;
}

int compiled_arch() { return compiled_arch_value() != 0 ? compiled_arch_value() : 90; }

cudaError_t submit_launch(launch_request request) {
  std::lock_guard<runtime_lock> lock(runtime_mutex());
  install_fault_report();
  if (rt().sticky != cudaSuccess) return fail(rt().sticky);
  const device_model& device = *device_at(current_device);
  stream_state* s = resolve(request.stream);
  if (s->device != current_device) return fail(cudaErrorInvalidResourceHandle);
  const dim3 b = request.block, g = request.grid;
  const unsigned long long threads = 1ULL * b.x * b.y * b.z;
  if (threads == 0 || threads > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64 || g.x == 0 ||
      g.y == 0 || g.z == 0 || g.x > 0x7fffffffU || g.y > 65535 || g.z > 65535) {
    return fail(cudaErrorInvalidConfiguration);
  }
  // A kernel built for a newer architecture than the device has no code it can run.
  if (compiled_arch() > device.arch()) return fail(cudaErrorNoKernelImageForDevice);
  const kernel_attributes& attributes = rt().kernels[request.kernel];
  if (request.dynamic_shared > default_shared_per_block &&
      request.dynamic_shared > static_cast<std::size_t>(attributes.max_dynamic_shared)) {
    std::fprintf(stderr, "gpubatch emulated device: the launch at %s:%d asks %zu bytes of dynamic "
                 "shared memory; above 48 KiB a kernel must opt in with cudaFuncSetAttribute "
                 "(it allows %d)\n", request.file, request.line, request.dynamic_shared,
                 attributes.max_dynamic_shared);
    return fail(cudaErrorInvalidValue);
  }
  const device_model* model = &device;
  submit(s, [request = std::move(request), model] { run_grid(request, *model); });
  return cudaSuccess;
}

}  // namespace gpubatch_emu

// ---------------------------------------------------------------------------------------------
// The CUDA runtime API

using namespace gpubatch_emu;

#define EMU_LOCK std::lock_guard<runtime_lock> emu_lock(runtime_mutex())
#define EMU_STICKY                                       \
  do {                                                   \
    if (rt().sticky != cudaSuccess) return fail(rt().sticky); \
  } while (0)

extern "C" {

cudaError_t cudaGetLastError() {
  EMU_LOCK;
  const cudaError_t e = rt().sticky != cudaSuccess ? rt().sticky : last_error;
  last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() {
  EMU_LOCK;
  return rt().sticky != cudaSuccess ? rt().sticky : last_error;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define EMU_NAME(e) \
  case e: return #e;
    EMU_NAME(cudaSuccess)
    EMU_NAME(cudaErrorInvalidValue)
    EMU_NAME(cudaErrorMemoryAllocation)
    EMU_NAME(cudaErrorInitializationError)
    EMU_NAME(cudaErrorInvalidConfiguration)
    EMU_NAME(cudaErrorInvalidDevice)
    EMU_NAME(cudaErrorInvalidDeviceFunction)
    EMU_NAME(cudaErrorInvalidResourceHandle)
    EMU_NAME(cudaErrorNotReady)
    EMU_NAME(cudaErrorIllegalAddress)
    EMU_NAME(cudaErrorMisalignedAddress)
    EMU_NAME(cudaErrorIllegalInstruction)
    EMU_NAME(cudaErrorLaunchFailure)
    EMU_NAME(cudaErrorLaunchOutOfResources)
    EMU_NAME(cudaErrorNoKernelImageForDevice)
    EMU_NAME(cudaErrorHostMemoryAlreadyRegistered)
    EMU_NAME(cudaErrorHostMemoryNotRegistered)
    EMU_NAME(cudaErrorInsufficientDriver)
    EMU_NAME(cudaErrorNoDevice)
    EMU_NAME(cudaErrorNotSupported)
    EMU_NAME(cudaErrorInvalidDevicePointer)
#undef EMU_NAME
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNoKernelImageForDevice: return "no kernel image is available for execution on the device";
    default: return cudaGetErrorName(error);
  }
}

bool driver_missing() {
  const char* env = std::getenv("GPUBATCH_EMULATED_DEVICES");
  return env != nullptr && std::string(env) == "no-driver";
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail(cudaErrorInvalidValue);
  *count = 0;
  // As the CUDA runtime: no driver, or a driver without devices, is an error, not a count of 0.
  if (driver_missing()) return fail(cudaErrorInsufficientDriver);
  if (device_count() == 0) return fail(cudaErrorNoDevice);
  *count = device_count();
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device_at(device) == nullptr) return fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return fail(cudaErrorInvalidValue);
  *version = driver_missing() ? 0 : CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return fail(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  gpubatch_emu::queries.fetch_add(1);
  const device_model* d = device_at(device);
  if (d == nullptr) return fail(cudaErrorInvalidDevice);
  if (value == nullptr) return fail(cudaErrorInvalidValue);
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = d->multiprocessors; break;
    case cudaDevAttrComputeCapabilityMajor: *value = d->major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = d->minor; break;
    case cudaDevAttrL2CacheSize: *value = d->l2_bytes; break;
    case cudaDevAttrMemoryClockRate: *value = d->memory_clock_khz; break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = d->bus_width_bits; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = d->shared_per_block_optin; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(default_shared_per_block); break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = d->shared_per_multiprocessor; break;
    case cudaDevAttrReservedSharedMemoryPerBlock: *value = 1024; break;  // as the occupancy model
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = d->threads_per_multiprocessor; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMaxGridDimX: *value = 0x7fffffff; break;
    case cudaDevAttrMaxGridDimY:
    case cudaDevAttrMaxGridDimZ: *value = 65535; break;
    case cudaDevAttrMaxBlockDimX:
    case cudaDevAttrMaxBlockDimY: *value = 1024; break;
    case cudaDevAttrMaxBlockDimZ: *value = 64; break;
    case cudaDevAttrConcurrentKernels:
    case cudaDevAttrUnifiedAddressing:
    case cudaDevAttrMemoryPoolsSupported: *value = 1; break;
    default:
      std::fprintf(stderr, "gpubatch emulated device: cudaDeviceGetAttribute(%d) is not emulated\n",
                   static_cast<int>(attr));
      return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  gpubatch_emu::queries.fetch_add(1);
  const device_model* d = device_at(device);
  if (d == nullptr) return fail(cudaErrorInvalidDevice);
  if (prop == nullptr) return fail(cudaErrorInvalidValue);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "gpubatch emulated %s", d->name);
  prop->totalGlobalMem = d->memory_bytes;
  prop->sharedMemPerBlock = default_shared_per_block;
  prop->sharedMemPerBlockOptin = static_cast<std::size_t>(d->shared_per_block_optin);
  prop->sharedMemPerMultiprocessor = static_cast<std::size_t>(d->shared_per_multiprocessor);
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->major = d->major;
  prop->minor = d->minor;
  prop->multiProcessorCount = d->multiprocessors;
  prop->maxThreadsPerMultiProcessor = d->threads_per_multiprocessor;
  prop->l2CacheSize = d->l2_bytes;
  prop->memoryBusWidth = d->bus_width_bits;
  prop->unifiedAddressing = 1;
  prop->concurrentKernels = 1;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  EMU_LOCK;
  EMU_STICKY;
  if (func == nullptr) return fail(cudaErrorInvalidDeviceFunction);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || value > device_at(current_device)->shared_per_block_optin) {
      return fail(cudaErrorInvalidValue);
    }
    rt().kernels[func].max_dynamic_shared = value;
    return cudaSuccess;
  }
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
  return fail(cudaErrorInvalidValue);
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  gpubatch_emu::queries.fetch_add(1);
  EMU_LOCK;
  EMU_STICKY;
  if (attr == nullptr || func == nullptr) return fail(cudaErrorInvalidValue);
  // No image of the kernel runs on this device: the same answer its launch would get.
  if (compiled_arch() > device_at(current_device)->arch()) {
    return fail(cudaErrorNoKernelImageForDevice);
  }
  *attr = cudaFuncAttributes{};
  attr->maxThreadsPerBlock = 1024;
  attr->maxDynamicSharedSizeBytes = rt().kernels[func].max_dynamic_shared;
  attr->ptxVersion = compiled_arch();
  attr->binaryVersion = compiled_arch();
  return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* func,
                                                          int block_size,
                                                          std::size_t dynamic_shared) {
  gpubatch_emu::queries.fetch_add(1);
  EMU_LOCK;
  EMU_STICKY;
  if (blocks == nullptr || func == nullptr || block_size <= 0) return fail(cudaErrorInvalidValue);
  const device_model& d = *device_at(current_device);
  // Registers are not known to the emulator: threads, shared memory and the block limit only.
  const int by_threads = d.threads_per_multiprocessor / block_size;
  const int by_shared = static_cast<int>(static_cast<std::size_t>(d.shared_per_multiprocessor) /
                                         (dynamic_shared + 1024));
  *blocks = std::max(0, std::min({by_threads, by_shared, 32}));
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  EMU_LOCK;
  EMU_STICKY;
  if (free_bytes == nullptr || total_bytes == nullptr) return fail(cudaErrorInvalidValue);
  const device_model& d = *device_at(current_device);
  *total_bytes = d.memory_bytes;
  *free_bytes = d.memory_bytes - rt().used_bytes[static_cast<std::size_t>(current_device)];
  return cudaSuccess;
}

static cudaError_t allocate_device(void** p, std::size_t bytes) {
  if (p == nullptr) return fail(cudaErrorInvalidValue);
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  auto& used = rt().used_bytes[static_cast<std::size_t>(current_device)];
  if (bytes > device_at(current_device)->memory_bytes - used) return fail(cudaErrorMemoryAllocation);
  *p = map_block(bytes, space::device, current_device);
  if (*p == nullptr) return fail(cudaErrorMemoryAllocation);
  used += bytes;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, std::size_t bytes) {
  EMU_LOCK;
  EMU_STICKY;
  install_fault_report();
  return allocate_device(p, bytes);
}

cudaError_t cudaMallocAsync(void** p, std::size_t bytes, cudaStream_t) {
  EMU_LOCK;
  EMU_STICKY;
  install_fault_report();
  return allocate_device(p, bytes);
}

static cudaError_t free_device(void* p, cudaStream_t stream, bool synchronous) {
  if (p == nullptr) return cudaSuccess;
  allocation* a = find(p);
  if (a == nullptr || a->kind != space::device || a->user != p || a->free_queued) {
    return fail(cudaErrorInvalidValue);
  }
  a->free_queued = true;
  if (synchronous) {
    run_all();  // cudaFree synchronises the device
    EMU_STICKY;
    release_block(rt().allocations.at(reinterpret_cast<std::uintptr_t>(p)));
    return cudaSuccess;
  }
  // The free happens when the stream reaches it: memory freed on one stream while another
  // stream's queued work still reads it is caught when that work runs.
  const auto key = reinterpret_cast<std::uintptr_t>(p);
  submit(resolve(stream), [key] {
    auto it = rt().allocations.find(key);
    if (it != rt().allocations.end() && !it->second.freed) release_block(it->second);
  });
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  EMU_LOCK;
  EMU_STICKY;
  return free_device(p, nullptr, true);
}

cudaError_t cudaFreeAsync(void* p, cudaStream_t stream) {
  EMU_LOCK;
  EMU_STICKY;
  return free_device(p, stream, false);
}

cudaError_t cudaMallocHost(void** p, std::size_t bytes) {
  EMU_LOCK;
  EMU_STICKY;
  if (p == nullptr) return fail(cudaErrorInvalidValue);
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  if (bytes > (std::size_t{1} << 40)) return fail(cudaErrorMemoryAllocation);
  *p = map_block(bytes, space::pinned, current_device);
  return *p != nullptr ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaHostAlloc(void** p, std::size_t bytes, unsigned int) { return cudaMallocHost(p, bytes); }

cudaError_t cudaFreeHost(void* p) {
  EMU_LOCK;
  EMU_STICKY;
  if (p == nullptr) return cudaSuccess;
  allocation* a = find(p);
  if (a == nullptr || a->kind != space::pinned || a->user != p) return fail(cudaErrorInvalidValue);
  run_all();  // cudaFreeHost synchronises the device
  auto it = rt().allocations.find(reinterpret_cast<std::uintptr_t>(p));
  asan_unpoison(it->second.map, it->second.map_bytes);
  munmap(it->second.map, it->second.map_bytes);
  rt().allocations.erase(it);
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void* p, std::size_t bytes, unsigned int) {
  EMU_LOCK;
  EMU_STICKY;
  if (p == nullptr || bytes == 0) return fail(cudaErrorInvalidValue);
  for (std::size_t off = 0; off < bytes; off += page) {
    if (find(static_cast<char*>(p) + off) != nullptr) return fail(cudaErrorHostMemoryAlreadyRegistered);
  }
  if (find(static_cast<char*>(p) + bytes - 1) != nullptr) return fail(cudaErrorHostMemoryAlreadyRegistered);
  allocation a;
  a.user = static_cast<char*>(p);
  a.bytes = bytes;
  a.kind = space::registered;
  a.device = current_device;
  rt().allocations[reinterpret_cast<std::uintptr_t>(p)] = a;
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* p) {
  EMU_LOCK;
  EMU_STICKY;
  auto it = rt().allocations.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == rt().allocations.end() || it->second.kind != space::registered) {
    return fail(cudaErrorHostMemoryNotRegistered);
  }
  run_all();
  rt().allocations.erase(it);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* p) {
  EMU_LOCK;
  EMU_STICKY;
  if (attributes == nullptr) return fail(cudaErrorInvalidValue);
  *attributes = cudaPointerAttributes{};
  attributes->type = cudaMemoryTypeUnregistered;
  attributes->device = -2;
  allocation* a = find(p);
  if (a == nullptr) return cudaSuccess;
  attributes->device = a->device;
  if (a->kind == space::device) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->devicePointer = const_cast<void*>(p);
  } else {
    attributes->type = cudaMemoryTypeHost;
    attributes->hostPointer = const_cast<void*>(p);
    attributes->devicePointer = const_cast<void*>(p);
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  EMU_LOCK;
  return copy(region{static_cast<char*>(dst), bytes, static_cast<const char*>(src), bytes, bytes, 1},
              kind, nullptr, true);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  EMU_LOCK;
  return copy(region{static_cast<char*>(dst), bytes, static_cast<const char*>(src), bytes, bytes, 1},
              kind, stream, false);
}

cudaError_t cudaMemcpy2DAsync(void* dst, std::size_t dpitch, const void* src, std::size_t spitch,
                              std::size_t width, std::size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream) {
  EMU_LOCK;
  return copy(region{static_cast<char*>(dst), dpitch, static_cast<const char*>(src), spitch, width,
                     height},
              kind, stream, false);
}

cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t bytes, cudaStream_t stream) {
  EMU_LOCK;
  EMU_STICKY;
  if (bytes == 0) return cudaSuccess;
  allocation* a = find(dst);
  if (a == nullptr || static_cast<char*>(dst) + bytes > a->user + a->bytes) {
    return fail(cudaErrorInvalidValue);
  }
  submit(resolve(stream), [dst, value, bytes] { std::memset(dst, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemset(void* dst, int value, std::size_t bytes) {
  EMU_LOCK;
  const cudaError_t e = cudaMemsetAsync(dst, value, bytes, nullptr);
  if (e != cudaSuccess) return e;
  stream_state* legacy = resolve(nullptr);
  run_until(legacy, legacy->submitted);
  return rt().sticky != cudaSuccess ? fail(rt().sticky) : cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  EMU_LOCK;
  EMU_STICKY;
  if (stream == nullptr) return fail(cudaErrorInvalidValue);
  auto s = std::make_unique<stream_state>();
  s->device = current_device;
  s->blocking = (flags & cudaStreamNonBlocking) == 0;
  *stream = reinterpret_cast<cudaStream_t>(s.get());
  rt().streams.push_back(std::move(s));
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  EMU_LOCK;
  if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle);
  // As in CUDA the call returns at once; work queued on the stream still completes when a
  // synchronisation forces it (the stream's state is kept for that).
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  EMU_LOCK;
  EMU_STICKY;
  stream_state* s = resolve(stream);
  run_until(s, s->submitted);
  return rt().sticky != cudaSuccess ? fail(rt().sticky) : cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  EMU_LOCK;
  EMU_STICKY;
  // One piece of work per query: a polling loop makes progress, and sees "not ready" first.
  stream_state* s = resolve(stream);
  if (s->executed == s->submitted) return cudaSuccess;
  run_one(s);
  EMU_STICKY;
  return cudaErrorNotReady;
}

cudaError_t cudaDeviceSynchronize() {
  EMU_LOCK;
  EMU_STICKY;
  run_all();
  return rt().sticky != cudaSuccess ? fail(rt().sticky) : cudaSuccess;
}

cudaError_t cudaDeviceReset() {
  EMU_LOCK;
  // The context's sticky error and its queued work are gone; memory stays mapped (freed blocks
  // stay inaccessible), so a stale pointer still faults instead of aliasing new memory.
  for (auto& s : rt().streams) {
    while (!s->pending.empty()) {
      if (s->pending.front().worker != nullptr) s->pending.front().worker->join();
      s->pending.pop_front();
      ++s->executed;
    }
  }
  rt().sticky = cudaSuccess;
  last_error = cudaSuccess;
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  EMU_LOCK;
  EMU_STICKY;
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  const auto* e = reinterpret_cast<event_state*>(event);
  stream_state* s = resolve(stream);
  op o;
  o.run = [] {};
  if (e->stream != nullptr) o.after.emplace_back(e->stream, e->work);
  o.sequence = ++s->submitted;
  s->pending.push_back(std::move(o));
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  EMU_LOCK;
  EMU_STICKY;
  if (fn == nullptr) return fail(cudaErrorInvalidValue);
  submit(resolve(stream), [fn, data] { fn(data); });
  resolve(stream)->pending.back().host_function = true;
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  EMU_LOCK;
  EMU_STICKY;
  if (event == nullptr) return fail(cudaErrorInvalidValue);
  auto e = std::make_unique<event_state>();
  e->timing = (flags & cudaEventDisableTiming) == 0;
  *event = reinterpret_cast<cudaEvent_t>(e.get());
  rt().events.push_back(std::move(e));
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  EMU_LOCK;
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  // Kept until exit: a record still queued may name it.
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  EMU_LOCK;
  EMU_STICKY;
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  auto* e = reinterpret_cast<event_state*>(event);
  stream_state* s = resolve(stream);
  submit(s, [e] { e->time_ms = now_ms(); });
  e->stream = s;
  e->work = s->submitted;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  EMU_LOCK;
  EMU_STICKY;
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  auto* e = reinterpret_cast<event_state*>(event);
  if (e->stream != nullptr) run_until(e->stream, e->work);
  return rt().sticky != cudaSuccess ? fail(rt().sticky) : cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  EMU_LOCK;
  EMU_STICKY;
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  auto* e = reinterpret_cast<event_state*>(event);
  if (complete(*e)) return cudaSuccess;
  run_one(e->stream);  // progress, one piece of work per query
  EMU_STICKY;
  return cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  EMU_LOCK;
  EMU_STICKY;
  if (ms == nullptr || start == nullptr || end == nullptr) return fail(cudaErrorInvalidValue);
  const auto* a = reinterpret_cast<event_state*>(start);
  const auto* b = reinterpret_cast<event_state*>(end);
  if (!a->timing || !b->timing) return fail(cudaErrorInvalidResourceHandle);
  if (!complete(*a) || !complete(*b)) return fail(cudaErrorNotReady);
  *ms = static_cast<float>(b->time_ms - a->time_ms);
  return cudaSuccess;
}

}  // extern "C"
