// cp.async (the pipeline primitives) on the emulated device. A copy is checked when issued
// (4, 8 or 16 bytes, both addresses aligned to the size, source in device memory, destination in
// the block's shared memory; the last `zfill` bytes are zeros, not read from the source), its
// destination is poisoned at once, and its data lands only at the
// __pipeline_wait_prior that completes its group: reading a stage before waiting for it, or
// without the barrier after the wait, reads poison (or is a race under ThreadSanitizer).
#pragma once

#include <gpubatch_emulation/device.hpp>

#include <cstddef>
#include <cstring>

inline void __pipeline_memcpy_async(void* dst_shared, const void* src_global,
                                    std::size_t size_and_align, std::size_t zfill = 0,
                                    const char* file = __builtin_FILE(),
                                    int line = __builtin_LINE()) {
  gpubatch_emu::async_copy_issue(dst_shared, src_global, size_and_align, zfill, file, line);
  std::memset(dst_shared, 0xff, size_and_align);  // in flight: the data is not there yet
}

inline void __pipeline_commit() { gpubatch_emu::async_copy_commit(); }

inline void __pipeline_wait_prior(std::size_t prior) {
  gpubatch_emu::landing batch[64];
  for (;;) {
    const std::size_t n = gpubatch_emu::async_copy_complete(prior, batch, 64);
    for (std::size_t i = 0; i < n; ++i) std::memcpy(batch[i].dst, batch[i].bytes, batch[i].size);
    if (n < 64) break;
  }
}
