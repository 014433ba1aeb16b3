#include "common/cpu_affinity.h"

#include <sched.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "common/status_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::ps::testing::ExpectInvalid;
using ::testing::ElementsAre;

// The calling thread's CPUs, in increasing order.
std::vector<int> ThreadCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return {};
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

// A CPU number no machine this runs on has, but one RestrictThreadToCpus
// takes (the largest a cpu_set_t can name), so that the kernel refuses it.
// A CPU merely missing from this thread's affinity will not do: when the
// runner narrows it (taskset), the CPU may be online, and a thread may move
// onto any online CPU of its cgroup.
constexpr int kUnusableCpu = CPU_SETSIZE - 1;

// Runs `fn` on a thread of its own, so that this test's thread keeps its
// CPUs.
template <typename Fn>
void OnOwnThread(Fn fn) {
  std::thread thread(fn);
  thread.join();
}

TEST(ParseCpuListTest, TakesNumbersAndRangesSortedAndOnce) {
  absl::StatusOr<std::vector<int>> cpus = ParseCpuList("8,0-3");
  ASSERT_TRUE(cpus.ok()) << cpus.status();
  EXPECT_THAT(*cpus, ElementsAre(0, 1, 2, 3, 8));
  cpus = ParseCpuList(" 2 , 1-2,1,5-5 ");
  ASSERT_TRUE(cpus.ok()) << cpus.status();
  EXPECT_THAT(*cpus, ElementsAre(1, 2, 5));
  cpus = ParseCpuList("1023");
  ASSERT_TRUE(cpus.ok()) << cpus.status();
  EXPECT_THAT(*cpus, ElementsAre(1023));
}

TEST(ParseCpuListTest, RejectsWhatIsNotACpuList) {
  ExpectInvalid(ParseCpuList("").status(), "CPU list is empty");
  ExpectInvalid(ParseCpuList(" ").status(), "CPU list is empty");
  ExpectInvalid(ParseCpuList("0,,1").status(), "has an empty entry");
  ExpectInvalid(ParseCpuList("0,").status(), "has an empty entry");
  ExpectInvalid(ParseCpuList("a").status(), "\"a\" is not a CPU number");
  ExpectInvalid(ParseCpuList("-1").status(), "\"\" is not a CPU number");
  ExpectInvalid(ParseCpuList("+1").status(), "\"+1\" is not a CPU number");
  ExpectInvalid(ParseCpuList("0-").status(), "entry \"0-\"");
  ExpectInvalid(ParseCpuList("0-8:2").status(), "\"8:2\" is not a CPU");
  ExpectInvalid(ParseCpuList("1024").status(), "in [0, 1023]");
  ExpectInvalid(ParseCpuList("99999999999").status(), "in [0, 1023]");
  ExpectInvalid(ParseCpuList("3-1").status(),
                "entry \"3-1\": the range runs backwards");
}

TEST(CpusFromFlagTest, EmptyMeansAnyAndErrorsNameTheFlag) {
  absl::StatusOr<std::vector<int>> cpus = CpusFromFlag("cpus", "");
  ASSERT_TRUE(cpus.ok()) << cpus.status();
  EXPECT_TRUE(cpus->empty());
  cpus = CpusFromFlag("cpus", "1,0");
  ASSERT_TRUE(cpus.ok()) << cpus.status();
  EXPECT_THAT(*cpus, ElementsAre(0, 1));
  ExpectInvalid(CpusFromFlag("server_cpus", "0-x").status(),
                "--server_cpus: bad CPU list entry \"0-x\"");
}

TEST(FormatCpuListTest, WritesRunsAsRanges) {
  EXPECT_EQ(FormatCpuList({}), "");
  EXPECT_EQ(FormatCpuList({3}), "3");
  EXPECT_EQ(FormatCpuList({0, 1}), "0-1");
  EXPECT_EQ(FormatCpuList({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
  absl::StatusOr<std::vector<int>> cpus = ParseCpuList("0-2,5,7-8");
  ASSERT_TRUE(cpus.ok());
  EXPECT_EQ(FormatCpuList(*cpus), "0-2,5,7-8");
}

TEST(RestrictThreadToCpusTest, RestrictsTheThreadAndWhatItStarts) {
  EXPECT_EQ(UsableCpus(), ThreadCpus());
  EXPECT_EQ(UsableCpuCount(), static_cast<int>(ThreadCpus().size()));
  OnOwnThread([] {
    const int cpu = ThreadCpus().front();
    ASSERT_TRUE(RestrictThreadToCpus({cpu}).ok());
    EXPECT_THAT(ThreadCpus(), ElementsAre(cpu));
    EXPECT_THAT(UsableCpus(), ElementsAre(cpu));
    EXPECT_EQ(UsableCpuCount(), 1);
    OnOwnThread([cpu] { EXPECT_THAT(ThreadCpus(), ElementsAre(cpu)); });
  });
}

TEST(RestrictThreadToCpusTest, RefusesAnUnusableCpuAndChangesNothing) {
  OnOwnThread([] {
    const std::vector<int> before = ThreadCpus();
    const int unusable = kUnusableCpu;
    ExpectInvalid(RestrictThreadToCpus({unusable}),
                  "none of CPUs " + std::to_string(unusable) +
                      " can be used by this process");
    EXPECT_EQ(ThreadCpus(), before);
    // The kernel would take this, dropping the unusable one.
    ExpectInvalid(RestrictThreadToCpus({before.front(), unusable}),
                  "CPU " + std::to_string(unusable) + " cannot be used");
    EXPECT_EQ(ThreadCpus(), before);
    ExpectInvalid(RestrictThreadToCpus({}), "no CPUs given");
    ExpectInvalid(RestrictThreadToCpus({-1}), "CPU -1 is not in [0, 1023]");
    EXPECT_EQ(ThreadCpus(), before);
  });
}

// In a child process (a death test forks), since it changes every thread.
TEST(RestrictProcessToCpusTest, RestrictsThreadsStartedBefore) {
  EXPECT_EXIT(
      {
        const int cpu = ThreadCpus().front();
        absl::Notification restricted;
        std::vector<int> seen;
        std::thread earlier([&] {
          restricted.WaitForNotification();
          seen = ThreadCpus();
        });
        const absl::Status status = RestrictProcessToCpus({cpu});
        restricted.Notify();
        earlier.join();
        std::exit(status.ok() && seen == std::vector<int>{cpu} &&
                          ThreadCpus() == std::vector<int>{cpu}
                      ? 0
                      : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace ps
