// The block executor of the emulated device: runs every CUDA thread of a block as a fiber,
// round-robin, each until it finishes or waits at a barrier; checks barriers, warp-collective
// operations and cp.async the way the hardware requires them to be used.
#include "fiber.hpp"
#include "state.hpp"

#include <sys/mman.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace gpubatch_emu {

namespace {

constexpr std::size_t fiber_stack_bytes = std::size_t{1} << 20;  // sanitizers need deep frames
constexpr std::size_t shared_capacity = 256 * 1024;
constexpr std::size_t page = 4096;

struct site {
  const char* file = nullptr;
  int line = 0;
  const char* what = nullptr;
  bool same(const site& o) const {
    return line == o.line && what == o.what && (file == o.file || std::strcmp(file, o.file) == 0);
  }
};

enum class run_state { ready, at_barrier, at_warp, done };

// The runtime's own copies into its bookkeeping, as a plain loop (built without turning it into
// a memcpy call): ThreadSanitizer intercepts memcpy, and the bookkeeping that fibers of
// different blocks share is no data race of the code under test.
void copy_bytes(void* dst, const void* src, std::size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  for (std::size_t i = 0; i < n; ++i) d[i] = s[i];
}

// A thread's cp.async copies in flight, oldest first, each with its commit group (the copies
// not yet committed carry the number the next commit gives). Fixed storage: the runtime's
// bookkeeping allocates nothing while kernels run.
struct copy_queue {
  static constexpr std::size_t capacity = 256;
  landing copies[capacity];
  std::uint64_t group[capacity];
  std::uint64_t head = 0, tail = 0;  // copies [head, tail) modulo capacity
  std::uint64_t next_group = 0;
  site first;  // where the oldest copy in flight was issued
  void reset() { head = tail = next_group = 0; }
  bool empty() const { return head == tail; }
};

struct cuda_thread {
  builtins b{};
  int linear = 0;
  int warp = 0;
  int lane = 0;
  run_state state = run_state::ready;
  site waiting;
  std::uint64_t barriers = 0;  // __syncthreads passed
  copy_queue copies;
};

struct warp_state {
  int lanes = 0;  // threads of the block in this warp
  int live = 0;   // of those, not finished
  int arrived = 0;
  unsigned generation = 0;
  site at;
  unsigned char slots[2][32][32];
  const void* pointers[2][32];
  char tokens[2];
};

struct block_state {
  const launch_request* request = nullptr;
  std::vector<cuda_thread> threads;
  std::vector<warp_state> warps;
  int live = 0;
  int arrived = 0;
  unsigned generation = 0;
  site at;
  char barrier_tokens[2];
  unsigned char* shared = nullptr;
  std::size_t shared_bytes = 0;
  bool faulted = false;
};

// The host thread's executor: its fibers, shared memory and the block it runs now.
struct executor {
  // Under ThreadSanitizer consecutive blocks alternate between two sets of fibers (and stacks),
  // so thread i of one block and thread i of the next are different threads to it: a race
  // between blocks is reported, and stack reuse is ordered within a set.
  std::vector<std::unique_ptr<fiber>> pools[2];
  std::vector<std::unique_ptr<fiber>>* fibers = &pools[0];
  unsigned char* shared_map = nullptr;
  block_state block;
  cuda_thread* current = nullptr;
  char block_begin_token = 0;
  char grid_end_token = 0;

  executor() {
    void* p = mmap(nullptr, shared_capacity + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::abort();
    shared_map = static_cast<unsigned char*>(p);
    mprotect(shared_map + shared_capacity, page, PROT_NONE);  // overruns fault
  }
  // The mapping's poisoned shadow would outlive it: a later mmap at the same address (a host
  // thread that launched kernels has exited) must start addressable.
  ~executor() {
    asan_unpoison(shared_map, shared_capacity);
    munmap(shared_map, shared_capacity + page);
  }
};

thread_local executor* this_executor = nullptr;

executor& local_executor() {
  thread_local executor e;
  this_executor = &e;
  return e;
}

cuda_thread* running_thread() { return this_executor != nullptr ? this_executor->current : nullptr; }

[[noreturn]] void outside_kernel(const char* what, const char* file, int line) {
  std::fprintf(stderr, "gpubatch emulated device: %s used outside a kernel at %s:%d\n", what, file,
               line);
  std::abort();
}

std::string describe(const cuda_thread& t) {
  char buffer[160];
  std::snprintf(buffer, sizeof buffer, "block (%u,%u,%u) thread (%u,%u,%u)", t.b.block_idx.x,
                t.b.block_idx.y, t.b.block_idx.z, t.b.thread_idx.x, t.b.thread_idx.y,
                t.b.thread_idx.z);
  return buffer;
}

// A device-side error: the report, then the thread leaves for good (the launch fails). In two
// steps, so that the report's temporaries are destroyed before the thread's stack is abandoned
// (LeakSanitizer would count them).
void record_fault(cudaError_t code, const std::string& message) {
  executor& e = *this_executor;
  cuda_thread* t = e.current;
  const launch_request& r = *e.block.request;
  std::fprintf(stderr,
               "gpubatch emulated device: %s\n  in the kernel launched at %s:%d, %s; the launch "
               "fails with %s\n",
               message.c_str(), r.file, r.line, t != nullptr ? describe(*t).c_str() : "?",
               cudaGetErrorName(code));
  set_sticky_error(code);
  e.block.faulted = true;
}

[[noreturn]] void leave_faulted_thread() {
  executor& e = *this_executor;
  (*e.fibers)[static_cast<std::size_t>(e.current->linear)]->yield(/*finished=*/true);
  std::abort();  // never resumed
}

#define EMU_FAULT(code, message)  \
  do {                            \
    record_fault(code, message);  \
    leave_faulted_thread();       \
  } while (0)

std::string where(const site& s) {
  return std::string(s.what) + " at " + s.file + ":" + std::to_string(s.line);
}

fiber& fiber_of(const cuda_thread& t) {
  return *(*this_executor->fibers)[static_cast<std::size_t>(t.linear)];
}

// A thread that finishes while others of its block or warp wait for it: the barrier could
// never complete on the hardware either (or completes without it, which CUDA leaves undefined).
void check_exit(cuda_thread& t) {
  block_state& b = this_executor->block;
  if (!t.copies.empty()) {
    EMU_FAULT(cudaErrorLaunchFailure,
               std::to_string(t.copies.tail - t.copies.head) + " cp.async copies (the first " +
                   where(t.copies.first) + ") were never waited for when the thread finished");
  }
  if (b.arrived > 0) {
    EMU_FAULT(cudaErrorLaunchFailure, "the thread finished while others of its block wait at " +
                                           where(b.at) + " (a divergent __syncthreads)");
  }
  warp_state& w = b.warps[static_cast<std::size_t>(t.warp)];
  if (w.arrived > 0) {
    EMU_FAULT(cudaErrorLaunchFailure,
               "the thread finished while lanes of its warp wait at " + where(w.at));
  }
}

void thread_main(void* context) {
  auto* t = static_cast<cuda_thread*>(context);
  executor& e = *this_executor;
  tsan_acquire(&e.block_begin_token);
  e.block.request->run(e.block.request->arguments.get());
  check_exit(*t);
  t->state = run_state::done;
  --e.block.live;
  --e.block.warps[static_cast<std::size_t>(t->warp)].live;
  tsan_release(&e.grid_end_token);
}

// Runs one block to completion; false if a thread faulted or the block deadlocked.
bool run_block(executor& e, const launch_request& r, uint3 block_idx) {
  block_state& b = e.block;
  const dim3 bd = r.block;
  const int count = static_cast<int>(bd.x * bd.y * bd.z);
  b.live = count;
  b.arrived = 0;
  b.faulted = false;
  b.at = site{};
  const int warps = (count + 31) / 32;
  b.warps.assign(static_cast<std::size_t>(warps), warp_state{});
  for (int w = 0; w < warps; ++w) {
    const int lanes = count - 32 * w < 32 ? count - 32 * w : 32;
    b.warps[static_cast<std::size_t>(w)].lanes = lanes;
    b.warps[static_cast<std::size_t>(w)].live = lanes;
  }
  // Blocks never share their shared memory: under ThreadSanitizer the arena is mapped afresh,
  // which forgets the previous block's accesses (they are no race with this block's).
  if (tsan_active()) {
    mmap(e.shared_map, shared_capacity, PROT_READ | PROT_WRITE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  }
  // Shared memory holds garbage when a block starts: make it loud garbage.
  std::memset(b.shared, 0xff, b.shared_bytes);
  tsan_release(&e.block_begin_token);
  for (int i = 0; i < count; ++i) {
    cuda_thread& t = b.threads[static_cast<std::size_t>(i)];
    t.state = run_state::ready;
    t.waiting = site{};
    t.barriers = 0;
    t.copies.reset();
    t.linear = i;
    t.warp = i / 32;
    t.lane = i % 32;
    t.b.thread_idx = uint3{static_cast<unsigned>(i) % bd.x,
                           static_cast<unsigned>(i) / bd.x % bd.y,
                           static_cast<unsigned>(i) / (bd.x * bd.y)};
    t.b.block_idx = block_idx;
    t.b.block_dim = bd;
    t.b.grid_dim = r.grid;
    (*e.fibers)[static_cast<std::size_t>(i)]->start(&thread_main, &t);
  }
  int done = 0;
  while (done < count) {
    bool progressed = false;
    done = 0;
    for (int i = 0; i < count; ++i) {
      cuda_thread& t = b.threads[static_cast<std::size_t>(i)];
      if (t.state == run_state::ready) {
        e.current = &t;
        (*e.fibers)[static_cast<std::size_t>(i)]->resume();
        e.current = nullptr;
        progressed = true;
        if (b.faulted) return false;
      }
      if (t.state == run_state::done) ++done;
    }
    if (!progressed && done < count) {
      std::string waits;
      for (const cuda_thread& t : b.threads) {
        if (t.state == run_state::at_barrier || t.state == run_state::at_warp) {
          waits += "\n  " + describe(t) + " waits at " + where(t.waiting);
          if (waits.size() > 2000) break;
        }
      }
      std::fprintf(stderr,
                   "gpubatch emulated device: deadlock in the kernel launched at %s:%d:%s\n",
                   r.file, r.line, waits.c_str());
      set_sticky_error(cudaErrorLaunchFailure);
      return false;
    }
  }
  // Threads that finished before others reached a barrier: CUDA C++ requires every thread of
  // the block to reach each __syncthreads (hardware happens to release a barrier that the
  // exited threads never reach; code that relies on it is undefined).
  for (const cuda_thread& t : b.threads) {
    if (t.barriers != b.threads.front().barriers) {
      std::fprintf(stderr,
                   "gpubatch emulated device: divergent __syncthreads in the kernel launched at "
                   "%s:%d: %s passed %llu barriers, %s passed %llu\n",
                   r.file, r.line, describe(b.threads.front()).c_str(),
                   static_cast<unsigned long long>(b.threads.front().barriers),
                   describe(t).c_str(), static_cast<unsigned long long>(t.barriers));
      set_sticky_error(cudaErrorLaunchFailure);
      return false;
    }
  }
  return true;
}

}  // namespace

void describe_crash(const void* address) {
  executor* e = this_executor;
  if (e == nullptr || e->current == nullptr || e->block.request == nullptr) return;
  const launch_request& r = *e->block.request;
  const auto* a = static_cast<const unsigned char*>(address);
  if (a >= e->block.shared + e->block.shared_bytes && a < e->shared_map + shared_capacity + page) {
    std::fprintf(stderr,
                 "gpubatch emulated device: shared memory access %zu bytes past the end of the "
                 "block's %zu bytes of dynamic shared memory\n",
                 static_cast<std::size_t>(a - (e->block.shared + e->block.shared_bytes)),
                 e->block.shared_bytes);
  }
  std::fprintf(stderr, "gpubatch emulated device: the fault is in the kernel launched at %s:%d, %s\n",
               r.file, r.line, describe(*e->current).c_str());
}

const builtins& current_builtins(const char* file, int line) {
  cuda_thread* t = running_thread();
  if (t == nullptr) outside_kernel("a built-in variable (threadIdx, blockIdx, ...)", file, line);
  return t->b;
}

void* dynamic_shared(std::size_t alignment, const char* file, int line) {
  cuda_thread* t = running_thread();
  if (t == nullptr) outside_kernel("dynamic shared memory", file, line);
  block_state& b = this_executor->block;
  if (reinterpret_cast<std::uintptr_t>(b.shared) % alignment != 0) {
    EMU_FAULT(cudaErrorMisalignedAddress, "dynamic shared memory is not aligned to " +
                                               std::to_string(alignment) + " bytes at " + file +
                                               ":" + std::to_string(line));
  }
  return b.shared;
}

void syncthreads(const char* file, int line) {
  cuda_thread* t = running_thread();
  if (t == nullptr) outside_kernel("__syncthreads", file, line);
  block_state& b = this_executor->block;
  const site here{file, line, "__syncthreads"};
  if (b.arrived == 0) {
    b.at = here;
  } else if (!b.at.same(here)) {
    EMU_FAULT(cudaErrorLaunchFailure, "divergent __syncthreads: this thread is at " + where(here) +
                                           ", others of its block wait at " + where(b.at));
  }
  const unsigned generation = b.generation;
  ++t->barriers;
  tsan_release(&b.barrier_tokens[generation % 2]);
  if (++b.arrived == b.live) {
    b.arrived = 0;
    ++b.generation;
    for (cuda_thread& other : b.threads) {
      if (other.state == run_state::at_barrier) other.state = run_state::ready;
    }
  } else {
    t->state = run_state::at_barrier;
    t->waiting = here;
    fiber_of(*t).yield();
  }
  tsan_acquire(&b.barrier_tokens[generation % 2]);
}

void trap(const char* file, int line) {
  if (running_thread() == nullptr) outside_kernel("__trap", file, line);
  EMU_FAULT(cudaErrorLaunchFailure,
             std::string("__trap() at ") + file + ":" + std::to_string(line));
}

const void* const* warp_exchange(const void* payload, std::size_t bytes, const char* what,
                                 const char* file, int line, bool whole_warp) {
  cuda_thread* t = running_thread();
  if (t == nullptr) outside_kernel(what, file, line);
  warp_state& w = this_executor->block.warps[static_cast<std::size_t>(t->warp)];
  const site here{file, line, what};
  if (whole_warp && w.lanes != 32) {
    EMU_FAULT(cudaErrorIllegalInstruction, where(here) + " needs a whole warp; this warp has " +
                                                std::to_string(w.lanes) + " threads");
  }
  if (w.arrived == 0) {
    w.at = here;
  } else if (!w.at.same(here)) {
    EMU_FAULT(cudaErrorIllegalInstruction, "divergent warp: this lane is at " + where(here) +
                                                ", others of its warp wait at " + where(w.at));
  }
  if (bytes > 32) std::abort();
  const unsigned buffer = w.generation % 2;
  copy_bytes(w.slots[buffer][t->lane], payload, bytes);
  w.pointers[buffer][t->lane] = w.slots[buffer][t->lane];
  tsan_release(&w.tokens[buffer]);
  if (++w.arrived == w.live) {
    if (whole_warp && w.live != 32) {
      EMU_FAULT(cudaErrorIllegalInstruction,
                 where(here) + " needs all 32 lanes; some have finished");
    }
    w.arrived = 0;
    ++w.generation;
    for (int l = 0; l < w.lanes; ++l) {
      cuda_thread& other = this_executor->block.threads[static_cast<std::size_t>(t->warp * 32 + l)];
      if (other.state == run_state::at_warp) other.state = run_state::ready;
    }
  } else {
    t->state = run_state::at_warp;
    t->waiting = here;
    fiber_of(*t).yield();
  }
  tsan_acquire(&w.tokens[buffer]);
  return w.pointers[buffer];
}

int lane_id() {
  cuda_thread* t = running_thread();
  if (t == nullptr) outside_kernel("a warp-level operation", "?", 0);
  return t->lane;
}

void device_fault(cudaError_t code, const char* file, int line, const char* format, ...) {
  char message[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(message, sizeof message, format, args);
  va_end(args);
  if (running_thread() == nullptr) outside_kernel(message, file, line);
  EMU_FAULT(code, std::string(message) + " at " + file + ":" + std::to_string(line));
}

bool is_shared(const void* p, std::size_t bytes) {
  if (this_executor == nullptr) return false;
  const block_state& b = this_executor->block;
  const auto* c = static_cast<const unsigned char*>(p);
  return c >= b.shared && c + bytes <= b.shared + b.shared_bytes;
}

bool is_global(const void* p, std::size_t bytes) { return memory_kind(p, bytes) != 0; }

void vector_access(const void* p, std::size_t bytes, const char* file, int line) {
  // Host code sharing the kernels' helpers (a host test of a tile's plan) has no device to model.
  if (running_thread() == nullptr) return;
  if (reinterpret_cast<std::uintptr_t>(p) % bytes != 0) {
    EMU_FAULT(cudaErrorMisalignedAddress, "vector access of " + std::to_string(bytes) +
                                              " bytes with a misaligned address at " + file +
                                              ":" + std::to_string(line));
  }
}

void async_copy_issue(void* dst, const void* src, std::size_t size, std::size_t zfill,
                      const char* file, int line) {
  cuda_thread* t = running_thread();
  if (t == nullptr) outside_kernel("__pipeline_memcpy_async", file, line);
  const auto at = [&] { return std::string(" at ") + file + ":" + std::to_string(line); };
  if (size != 4 && size != 8 && size != 16) {
    EMU_FAULT(cudaErrorInvalidValue, "cp.async of " + std::to_string(size) +
                                          " bytes (4, 8 or 16 only)" + at());
  }
  if (reinterpret_cast<std::uintptr_t>(dst) % size != 0 ||
      reinterpret_cast<std::uintptr_t>(src) % size != 0) {
    EMU_FAULT(cudaErrorMisalignedAddress, "cp.async of " + std::to_string(size) +
                                               " bytes with a misaligned address" + at());
  }
  if (!is_shared(dst, size)) {
    EMU_FAULT(cudaErrorIllegalAddress,
               "cp.async destination is not in the block's dynamic shared memory" + at());
  }
  if (zfill > size) {
    EMU_FAULT(cudaErrorInvalidValue, "cp.async zero-filling " + std::to_string(zfill) +
                                          " of its " + std::to_string(size) + " bytes" + at());
  }
  // A copy that reads no byte (all zero fill) still names a device address, as real code must:
  // the source is checked for its first byte even then.
  if (!is_global(src, size - zfill > 0 ? size - zfill : 1)) {
    EMU_FAULT(cudaErrorIllegalAddress, "cp.async source is not in device memory" + at());
  }
  copy_queue& q = t->copies;
  if (q.tail - q.head == copy_queue::capacity) {
    EMU_FAULT(cudaErrorLaunchFailure, "more than " + std::to_string(copy_queue::capacity) +
                                           " cp.async copies in flight in one thread" + at());
  }
  if (q.empty()) q.first = site{file, line, "cp.async"};
  landing& l = q.copies[q.tail % copy_queue::capacity];
  l.dst = dst;
  l.size = size;
  copy_bytes(l.bytes, src, size - zfill);
  for (std::size_t i = size - zfill; i < size; ++i) l.bytes[i] = 0;
  q.group[q.tail % copy_queue::capacity] = q.next_group;
  ++q.tail;
}

void async_copy_commit() {
  cuda_thread* t = running_thread();
  if (t == nullptr) outside_kernel("__pipeline_commit", "?", 0);
  ++t->copies.next_group;
}

std::size_t async_copy_complete(std::size_t keep, landing* out, std::size_t capacity) {
  cuda_thread* t = running_thread();
  if (t == nullptr) outside_kernel("__pipeline_wait_prior", "?", 0);
  copy_queue& q = t->copies;
  // Committed groups are 0 .. next_group - 1; all but the newest `keep` complete.
  std::size_t n = 0;
  while (!q.empty() && n < capacity && q.group[q.head % copy_queue::capacity] + keep < q.next_group) {
    out[n++] = q.copies[q.head % copy_queue::capacity];
    ++q.head;
  }
  if (!q.empty()) q.first = site{"(a later copy)", 0, "cp.async"};
  return n;
}

bool run_grid(const launch_request& r, const device_model&) {
  executor& e = local_executor();
  block_state& b = e.block;
  const int count = static_cast<int>(r.block.x * r.block.y * r.block.z);
  const int pools = tsan_active() ? 2 : 1;
  for (int p = 0; p < pools; ++p) {
    while (static_cast<int>(e.pools[p].size()) < count) {
      e.pools[p].push_back(std::make_unique<fiber>(fiber_stack_bytes));
    }
  }
  b.threads.resize(static_cast<std::size_t>(count));
  b.request = &r;
  // The arena ends where the guard page begins, so an overrun faults at once.
  const std::size_t rounded = (r.dynamic_shared + 127) / 128 * 128;
  b.shared = e.shared_map + shared_capacity - rounded;
  b.shared_bytes = r.dynamic_shared;
  asan_unpoison(e.shared_map, shared_capacity);
  asan_poison(b.shared + r.dynamic_shared, rounded - r.dynamic_shared);
  bool ok = true;
  std::uint64_t block = 0;
  for (unsigned z = 0; z < r.grid.z && ok; ++z) {
    for (unsigned y = 0; y < r.grid.y && ok; ++y) {
      for (unsigned x = 0; x < r.grid.x && ok; ++x) {
        e.fibers = &e.pools[block++ % static_cast<std::uint64_t>(pools)];
        ok = run_block(e, r, uint3{x, y, z});
      }
    }
  }
  if (!ok) {
    for (auto& f : *e.fibers) f->abandon();
  }
  tsan_acquire(&e.grid_end_token);
  b.request = nullptr;
  return ok;
}

}  // namespace gpubatch_emu
