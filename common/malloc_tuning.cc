#include "common/malloc_tuning.h"

#include <malloc.h>

namespace ps {

void KeepFreedMemory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);   // glibc's largest allowed value.
  mallopt(M_TRIM_THRESHOLD, 512 << 20);  // Trim only beyond this much free.
}

void UseOneMallocArena() { mallopt(M_ARENA_MAX, 1); }

FreedMemoryTrimmer::FreedMemoryTrimmer(absl::Duration period,
                                       size_t max_free_bytes)
    : thread_([this, period, max_free_bytes] { Run(period, max_free_bytes); }) {
}

FreedMemoryTrimmer::~FreedMemoryTrimmer() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

size_t FreedMemoryTrimmer::FreeBytes() { return mallinfo2().fordblks; }

void FreedMemoryTrimmer::Run(absl::Duration period, size_t max_free_bytes) {
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), period)) {
    if (FreeBytes() > max_free_bytes) malloc_trim(0);
  }
}

}  // namespace ps
