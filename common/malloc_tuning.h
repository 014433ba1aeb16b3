#ifndef PS_COMMON_MALLOC_TUNING_H_
#define PS_COMMON_MALLOC_TUNING_H_

#include <cstddef>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ps {

// gRPC allocates a buffer of about a message (1 MiB) for every message
// received or sent, and glibc by default gives freed memory back to the
// kernel (trimming heaps; mapping blocks above a moving threshold afresh),
// so every transfer faulted its pages in again inside recvmsg/sendmsg, a
// large share of a shard's CPU at large pushes (bench/README.md, "Server
// memory and the update"). Keeps freed memory instead, at most a few
// transfers' worth. Called first thing in main, by servers and workers.
void KeepFreedMemory();

// Makes every thread allocate from malloc's main arena. glibc gives each
// new thread an arena of its own (up to 8 per core), and malloc_trim gives
// back only the free blocks inside those arenas, never their top: what a
// burst freed at the top of a thread's arena stays resident for good, and
// grows with each flood of refused pushes (bench/README.md, "Server memory
// and the update"; tests/flood_test). With one arena, FreedMemoryTrimmer gives
// everything back. Call first thing in main, before any thread allocates:
// the arena limit is read once, when the second thread needs an arena.
void UseOneMallocArena();

// Gives freed memory back to the kernel once the process stops reusing it.
// With KeepFreedMemory, a burst (a flood of calls a server refused, a job's
// last transfers) would otherwise stay resident for good. Every `period`,
// trims malloc's arenas if more than `max_free_bytes` lie free in them: in
// steady training that costs one transfer's page faults per period at most.
// Gives back all of it only in a process that called UseOneMallocArena.
//
// Owns a thread, stopped and joined by the destructor.
class FreedMemoryTrimmer {
 public:
  FreedMemoryTrimmer(absl::Duration period, size_t max_free_bytes);
  ~FreedMemoryTrimmer();
  FreedMemoryTrimmer(const FreedMemoryTrimmer&) = delete;
  FreedMemoryTrimmer& operator=(const FreedMemoryTrimmer&) = delete;

  // Bytes free in malloc's arenas now.
  static size_t FreeBytes();

 private:
  void Run(absl::Duration period, size_t max_free_bytes);

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ps

#endif  // PS_COMMON_MALLOC_TUNING_H_
