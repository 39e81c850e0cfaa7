// Fibers for the emulated device's CUDA threads: a register-only context switch (callee-saved
// registers, stack pointer, SSE and x87 control words) on stacks of their own, with the hooks
// AddressSanitizer and ThreadSanitizer need to follow a stack switch.
#pragma once

#include <cstddef>

namespace gpubatch_emu {

class fiber {
 public:
  using entry_point = void (*)(void* context);

  /// A fiber that is not started; start() gives it work.
  explicit fiber(std::size_t stack_bytes);
  ~fiber();
  fiber(const fiber&) = delete;
  fiber& operator=(const fiber&) = delete;

  /// Makes the next resume() run entry(context) from the top of the stack.
  void start(entry_point entry, void* context);
  /// Runs the fiber until it yields or finishes; called from the scheduler.
  void resume();
  /// Called by the running fiber: back to the scheduler. `finished` when it will never resume.
  void yield(bool finished = false);
  /// Forgets whatever the fiber was doing (after a device fault); start() may follow.
  void abandon();

 private:
  static void trampoline_entry(fiber* self);

  void* stack_ = nullptr;
  std::size_t stack_bytes_ = 0;
  void* sp_ = nullptr;            // the fiber's saved stack pointer while it does not run
  void* scheduler_sp_ = nullptr;  // the scheduler's while the fiber runs
  entry_point entry_ = nullptr;
  void* context_ = nullptr;
  void* tsan_fiber_ = nullptr;
  void* tsan_scheduler_ = nullptr;
  void* asan_fake_stack_ = nullptr;
  const void* scheduler_stack_bottom_ = nullptr;
  std::size_t scheduler_stack_size_ = 0;
};

/// Whether the program runs under ThreadSanitizer.
bool tsan_active();
/// ThreadSanitizer happens-before annotations (no-ops without it).
void tsan_release(void* address);
void tsan_acquire(void* address);
/// AddressSanitizer poisoning (no-ops without it).
void asan_poison(const void* address, std::size_t bytes);
void asan_unpoison(const void* address, std::size_t bytes);

}  // namespace gpubatch_emu
