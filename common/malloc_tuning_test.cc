#include "common/malloc_tuning.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

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

}  // namespace
}  // namespace ps
