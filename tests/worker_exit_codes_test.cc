// The worker's exit codes, which a Kubernetes Job's podFailurePolicy acts on
// (deploy/k8s): 2 for bad configuration (never retried), 3 for servers that
// stayed unreachable (retried), 0 for the index-0 pod whose rank runs
// elsewhere.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"

namespace ps::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(120);

struct Outcome {
  ExitStatus status = ExitStatus::Exited(-1);
  std::string output;
};

Outcome RunWorker(std::vector<std::string> flags,
                  std::vector<std::pair<std::string, std::string>> env = {}) {
  SubprocessOptions options;
  options.argv = {RunfilePath("worker/worker")};
  options.argv.insert(options.argv.end(), flags.begin(), flags.end());
  options.env = std::move(env);
  absl::StatusOr<std::unique_ptr<Subprocess>> worker =
      Subprocess::Start(std::move(options));
  EXPECT_TRUE(worker.ok()) << worker.status();
  if (!worker.ok()) return {};
  std::optional<ExitStatus> status = (*worker)->WaitFor(kTimeout);
  EXPECT_TRUE(status.has_value()) << "worker still running after " << kTimeout;
  return {status.value_or(ExitStatus::Exited(-1)),
          absl::StrJoin((*worker)->OutputLines(), "\n")};
}

// A loopback port that refuses connections while `fd` stays open: bound,
// never listening.
int RefusingPort(int* fd) {
  *fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (*fd < 0 || bind(*fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr))) {
    return -1;
  }
  socklen_t len = sizeof(addr);
  if (getsockname(*fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return -1;
  }
  return ntohs(addr.sin_port);
}

TEST(WorkerExitCodesTest, HelpDocumentsTheExitCodes) {
  const Outcome help = RunWorker({"--help"});
  EXPECT_NE(help.output.find("Exit codes"), std::string::npos) << help.output;
  EXPECT_NE(help.output.find("3 lost the servers"), std::string::npos)
      << help.output;
}

TEST(WorkerExitCodesTest, BadFlagsExitWithTwo) {
  const Outcome bad =
      RunWorker({"--rank=0", "--servers=127.0.0.1:1", "--batch_size=0"});
  EXPECT_EQ(bad.status, ExitStatus::Exited(2)) << bad.output;
  EXPECT_NE(bad.output.find("--batch_size"), std::string::npos) << bad.output;
}

TEST(WorkerExitCodesTest, BadMetricsFlagsExitWithTwo) {
  for (const auto& [flag, name] :
       std::vector<std::pair<std::string, std::string>>{
           {"--metrics_port=65536", "--metrics_port"},
           {"--metrics_host=localhost", "--metrics_host"}}) {
    const Outcome bad = RunWorker(
        {"--rank=0", "--servers=127.0.0.1:1", "--metrics_port=9100", flag});
    EXPECT_EQ(bad.status, ExitStatus::Exited(2)) << bad.output;
    EXPECT_NE(bad.output.find(name), std::string::npos) << bad.output;
  }
}

TEST(WorkerExitCodesTest, UnwritableModelStoreExitsWithTwoAtStart) {
  // Nothing can be created under /proc, not even by root.
  const Outcome unwritable =
      RunWorker({"--rank=0", "--servers=127.0.0.1:1",
                 "--save_model=/proc/ps-no-such-dir/model.psm"});
  EXPECT_EQ(unwritable.status, ExitStatus::Exited(2)) << unwritable.output;
  EXPECT_NE(unwritable.output.find("--save_model: cannot create"),
            std::string::npos)
      << unwritable.output;
}

TEST(WorkerExitCodesTest, UnreachableServersExitWithThree) {
  int fd = -1;
  const int port = RefusingPort(&fd);
  ASSERT_GT(port, 0);
  const Outcome lost = RunWorker({"--rank=0", "--num_workers=1",
                                  absl::StrCat("--servers=127.0.0.1:", port),
                                  "--retry_timeout=1s"});
  close(fd);
  EXPECT_EQ(lost.status, ExitStatus::Exited(3)) << lost.output;
}

TEST(WorkerExitCodesTest, IndexZeroExitsAtOnceWhenRankZeroRunsElsewhere) {
  const Outcome skipped =
      RunWorker({"--rank=-1", "--rank0_elsewhere", "--num_workers=2",
                 "--servers=127.0.0.1:1"},
                {{"JOB_COMPLETION_INDEX", "0"}});
  EXPECT_EQ(skipped.status, ExitStatus::Exited(0)) << skipped.output;
  EXPECT_NE(skipped.output.find("rank 0 runs in its own Job"),
            std::string::npos)
      << skipped.output;

  const Outcome fixed =
      RunWorker({"--rank=0", "--rank0_elsewhere", "--servers=127.0.0.1:1"});
  EXPECT_EQ(fixed.status, ExitStatus::Exited(2)) << fixed.output;
}

}  // namespace
}  // namespace ps::testing
