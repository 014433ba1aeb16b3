#include "common/malloc_tuning.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Resident bytes of this process.
size_t ResidentBytes() {
  long pages_total = 0;
  long pages_resident = 0;
  FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return 0;
  const int read = std::fscanf(statm, "%ld %ld", &pages_total, &pages_resident);
  std::fclose(statm);
  return read == 2 ? pages_resident * sysconf(_SC_PAGESIZE) : 0;
}

TEST(FreedMemoryTrimmerTest, GivesBackWhatKeepFreedMemoryKept) {
  KeepFreedMemory();
  const size_t before = ResidentBytes();
  {
    // Touched 1 MiB blocks, as gRPC's message buffers are.
    std::vector<std::unique_ptr<char[]>> blocks;
    for (int i = 0; i < 256; ++i) {
      blocks.emplace_back(new char[kMiB]);
      std::memset(blocks.back().get(), 1, kMiB);
    }
  }
  // Kept: that is what KeepFreedMemory is for.
  ASSERT_GT(ResidentBytes(), before + 128 * kMiB);
  ASSERT_GT(FreedMemoryTrimmer::FreeBytes(), 128 * kMiB);

  FreedMemoryTrimmer trimmer(absl::Milliseconds(10), 16 * kMiB);
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (ResidentBytes() > before + 64 * kMiB && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_LT(ResidentBytes(), before + 64 * kMiB);
}

// What threads of a server do in a flood: each receives and frees blocks of
// about a message. Run in a fresh process (a death test re-executes this
// binary), since the arena limit must come before any thread allocates.
void FloodThreadsThenTrim() {
  UseOneMallocArena();
  KeepFreedMemory();
  const size_t before = ResidentBytes();
  constexpr int kThreads = 8;
  absl::Mutex mu;
  int allocated = 0;
  int freed = 0;
  bool release = false;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      {
        std::vector<std::unique_ptr<char[]>> blocks;
        for (int i = 0; i < 32; ++i) {
          blocks.emplace_back(new char[kMiB]);
          std::memset(blocks.back().get(), 1, kMiB);
        }
        // Every thread holds its blocks at once, as in a flood, whatever
        // the scheduler does: a thread that ran after another had freed
        // would reuse its memory, and less would be kept.
        absl::MutexLock lock(&mu);
        ++allocated;
        mu.Await(absl::Condition(
            +[](int* n) { return *n == kThreads; }, &allocated));
      }
      // The threads stay, as a server's do.
      absl::MutexLock lock(&mu);
      ++freed;
      mu.Await(absl::Condition(&release));
    });
  }
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](int* n) { return *n == kThreads; }, &freed));
  }
  const size_t kept = ResidentBytes();
  size_t now = kept;
  {
    FreedMemoryTrimmer trimmer(absl::Milliseconds(10), 16 * kMiB);
    // Well inside the test's time limit: without one arena it never ends.
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while ((now = ResidentBytes()) > before + 32 * kMiB &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  {
    absl::MutexLock lock(&mu);
    release = true;
  }
  for (std::thread& t : threads) t.join();
  std::fprintf(stderr,
               "resident: %zu MiB before, %zu MiB kept, %zu MiB after\n",
               before / kMiB, kept / kMiB, now / kMiB);
  std::exit(kept > before + 128 * kMiB && now <= before + 32 * kMiB ? 0 : 1);
}

TEST(FreedMemoryTrimmerTest, GivesBackWhatThreadsFreedWithOneArena) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(FloodThreadsThenTrim(), ::testing::ExitedWithCode(0),
              "resident: ");
}

}  // namespace
}  // namespace ps
