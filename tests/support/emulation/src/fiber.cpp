#include "fiber.hpp"

#include <sys/mman.h>

#include <cstdio>
#include <cstdint>
#include <cstdlib>

// The sanitizer runtimes are linked only into sanitized builds; weak references keep this file
// the same for every build.
extern "C" {
void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, std::size_t size)
    __attribute__((weak));
void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old,
                                     std::size_t* size_old) __attribute__((weak));
void __asan_poison_memory_region(const volatile void* addr, std::size_t size) __attribute__((weak));
void __asan_unpoison_memory_region(const volatile void* addr, std::size_t size)
    __attribute__((weak));
void* __tsan_get_current_fiber() __attribute__((weak));
void* __tsan_create_fiber(unsigned flags) __attribute__((weak));
void __tsan_destroy_fiber(void* fiber) __attribute__((weak));
void __tsan_switch_to_fiber(void* fiber, unsigned flags) __attribute__((weak));
void __tsan_acquire(void* addr) __attribute__((weak));
void __tsan_release(void* addr) __attribute__((weak));

// switch_stack(save, next): saves the callee-saved state on the current stack, stores the stack
// pointer in *save, and continues on the stack `next` (System V x86-64).
void gpubatch_emu_switch_stack(void** save, void* next);
void gpubatch_emu_fiber_trampoline();
}

asm(R"(
  .pushsection .text
  .globl gpubatch_emu_switch_stack
  .type gpubatch_emu_switch_stack,@function
gpubatch_emu_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size gpubatch_emu_switch_stack, .-gpubatch_emu_switch_stack

  .globl gpubatch_emu_fiber_trampoline
  .type gpubatch_emu_fiber_trampoline,@function
gpubatch_emu_fiber_trampoline:
  .cfi_startproc
  .cfi_undefined rip
  movq %r12, %rdi
  callq *%r13
  ud2
  .cfi_endproc
  .size gpubatch_emu_fiber_trampoline, .-gpubatch_emu_fiber_trampoline
  .popsection
)");

namespace gpubatch_emu {

namespace {
constexpr std::size_t guard_bytes = 4096;
}

fiber::fiber(std::size_t stack_bytes) : stack_bytes_(stack_bytes) {
  void* p = mmap(nullptr, stack_bytes + guard_bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "gpubatch emulated device: cannot map a fiber stack\n");
    std::abort();
  }
  mprotect(p, guard_bytes, PROT_NONE);  // a stack overflow faults instead of corrupting
  stack_ = static_cast<char*>(p) + guard_bytes;
  if (__tsan_create_fiber != nullptr) tsan_fiber_ = __tsan_create_fiber(0);
}

fiber::~fiber() {
  if (tsan_fiber_ != nullptr) __tsan_destroy_fiber(tsan_fiber_);
  asan_unpoison(stack_, stack_bytes_);  // the next mapping at this address starts clean
  munmap(static_cast<char*>(stack_) - guard_bytes, stack_bytes_ + guard_bytes);
}

void fiber::start(entry_point entry, void* context) {
  entry_ = entry;
  context_ = context;
  // Initial frame as gpubatch_emu_switch_stack leaves it: control words, r15..r12, rbx, rbp,
  // then the return address (the trampoline), which calls trampoline_entry(this) with a
  // 16-byte aligned stack.
  auto top = reinterpret_cast<std::uintptr_t>(static_cast<char*>(stack_) + stack_bytes_) & ~std::uintptr_t{15};
  auto* frame = reinterpret_cast<std::uint64_t*>(top - 80);
  std::uint32_t mxcsr = 0;
  std::uint16_t fpucw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  frame[0] = static_cast<std::uint64_t>(mxcsr) | (static_cast<std::uint64_t>(fpucw) << 32);
  frame[1] = 0;                                                          // r15
  frame[2] = 0;                                                          // r14
  frame[3] = reinterpret_cast<std::uint64_t>(&fiber::trampoline_entry);  // r13
  frame[4] = reinterpret_cast<std::uint64_t>(this);                      // r12
  frame[5] = 0;                                                          // rbx
  frame[6] = 0;                                                          // rbp
  frame[7] = reinterpret_cast<std::uint64_t>(&gpubatch_emu_fiber_trampoline);
  sp_ = frame;
}

void fiber::resume() {
  if (__tsan_switch_to_fiber != nullptr) {
    tsan_scheduler_ = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(tsan_fiber_, 1 /* no synchronisation: races between threads show */);
  }
  void* fake = nullptr;
  if (__sanitizer_start_switch_fiber != nullptr) {
    __sanitizer_start_switch_fiber(&fake, stack_, stack_bytes_);
  }
  gpubatch_emu_switch_stack(&scheduler_sp_, sp_);
  if (__sanitizer_finish_switch_fiber != nullptr) {
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
  }
}

void fiber::yield(bool finished) {
  if (__tsan_switch_to_fiber != nullptr) __tsan_switch_to_fiber(tsan_scheduler_, 1);
  if (__sanitizer_start_switch_fiber != nullptr) {
    __sanitizer_start_switch_fiber(finished ? nullptr : &asan_fake_stack_, scheduler_stack_bottom_,
                                   scheduler_stack_size_);
  }
  gpubatch_emu_switch_stack(&sp_, scheduler_sp_);
  if (__sanitizer_finish_switch_fiber != nullptr) {
    __sanitizer_finish_switch_fiber(asan_fake_stack_, &scheduler_stack_bottom_,
                                    &scheduler_stack_size_);
  }
}

void fiber::abandon() {
  asan_unpoison(stack_, stack_bytes_);  // frames that never returned leave their redzones
  if (tsan_fiber_ != nullptr) {         // and their calls on ThreadSanitizer's shadow stack
    __tsan_destroy_fiber(tsan_fiber_);
    tsan_fiber_ = __tsan_create_fiber(0);
  }
  sp_ = nullptr;
}

void fiber::trampoline_entry(fiber* self) {
  if (__sanitizer_finish_switch_fiber != nullptr) {
    __sanitizer_finish_switch_fiber(nullptr, &self->scheduler_stack_bottom_,
                                    &self->scheduler_stack_size_);
  }
  self->entry_(self->context_);
  self->yield(/*finished=*/true);
  std::fprintf(stderr, "gpubatch emulated device: a finished fiber was resumed\n");
  std::abort();
}

bool tsan_active() { return __tsan_acquire != nullptr; }

void tsan_release(void* address) {
  if (__tsan_release != nullptr) __tsan_release(address);
}
void tsan_acquire(void* address) {
  if (__tsan_acquire != nullptr) __tsan_acquire(address);
}
void asan_poison(const void* address, std::size_t bytes) {
  if (__asan_poison_memory_region != nullptr) __asan_poison_memory_region(address, bytes);
}
void asan_unpoison(const void* address, std::size_t bytes) {
  if (__asan_unpoison_memory_region != nullptr) __asan_unpoison_memory_region(address, bytes);
}

}  // namespace gpubatch_emu
