// The main job, cut short, on two test hosts with --auth=mtls: a job CA made
// by `launch --make_auth_ca` and given to each host's launcher
// (--auth_ca), which signs that host's certificates for its own address.
// The workers reach the other host's shard over gRPC with mutual TLS and
// the job token, and the rendezvous is secured the same way; a host with
// another CA is refused. Skips (saying why) where network namespaces cannot
// be made.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/exit_codes.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "tests/hosts/host_launcher.h"
#include "tests/hosts/skip_without_hosts.h"
#include "tests/hosts/test_hosts.h"

namespace ps::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kGbit = 1000 * 1000 * 1000;
// Bounds a hang only: the job takes seconds.
constexpr absl::Duration kTimeout = absl::Seconds(400);

// Runs `launch --make_auth_ca=DIR` on this machine; the test then hands DIR
// to every host, as a user would copy it.
std::string MakeJobCa(const std::string& name) {
  const std::string dir = TempPath(name);
  SubprocessOptions options = TestProcessOptions(
      "make_auth_ca", {RunfilePath("deploy/local/launch"),
                       absl::StrCat("--make_auth_ca=", dir)});
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Start(std::move(options));
  EXPECT_TRUE(child.ok()) << child.status();
  if (child.ok()) {
    const std::optional<ExitStatus> exit = (*child)->WaitFor(kTimeout);
    EXPECT_TRUE(exit.has_value() && exit->success()) << (*child)->LastLines(5);
  }
  return dir;
}

std::unique_ptr<Subprocess> StartHost(const TestHosts& hosts, int host,
                                      const std::string& name,
                                      const std::string& job_ca,
                                      std::vector<std::string> extra) {
  extra.insert(extra.begin(), {"--max_steps=40", "--auth=mtls",
                               absl::StrCat("--auth_ca=", job_ca)});
  return StartHostLauncher(hosts, host,
                           TempPath(absl::StrCat(name, "-host", host)),
                           std::move(extra));
}

class AuthHostsTest : public ::testing::Test {
 protected:
  void SetUp() override { SKIP_WITHOUT_TEST_HOSTS(); }
};

TEST_F(AuthHostsTest, TheMainJobRunsWithMutualTlsAcrossHosts) {
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(2, kGbit);
  ASSERT_TRUE(made.ok()) << made.status();
  const TestHosts& hosts = **made;
  const std::string job_ca = MakeJobCa("job-ca");
  std::unique_ptr<Subprocess> host1 = StartHost(hosts, 1, "mtls", job_ca, {});
  ASSERT_NE(host1, nullptr);
  // Host 0 last: host 1 already tries a rendezvous that is not there.
  ASSERT_TRUE(
      host1->WaitForOutputLine("joining the rendezvous", kTimeout).ok());
  std::unique_ptr<Subprocess> host0 = StartHost(hosts, 0, "mtls", job_ca, {});
  ASSERT_NE(host0, nullptr);
  for (Subprocess* launcher : {host0.get(), host1.get()}) {
    const std::optional<ExitStatus> exit = launcher->WaitFor(kTimeout);
    ASSERT_TRUE(exit.has_value()) << "a launch still runs";
    EXPECT_TRUE(exit->success()) << exit->ToString() << "\n"
                                 << launcher->LastLines(30);
  }
  // Each worker reached the shard on the other host (a certificate for
  // that host's address, checked against the job's CA).
  EXPECT_THAT(host0->LastLines(10000),
              HasSubstr("mutual TLS with a job token on every call (and on "
                        "the rendezvous)"));
  EXPECT_THAT(host0->LastLines(10000), HasSubstr("final test accuracy"));
}

TEST_F(AuthHostsTest, AHostOfAnotherCaCannotJoin) {
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(2, kGbit);
  ASSERT_TRUE(made.ok()) << made.status();
  const TestHosts& hosts = **made;
  const std::vector<std::string> extra = {"--rendezvous_timeout=10s"};
  std::unique_ptr<Subprocess> host1 =
      StartHost(hosts, 1, "stranger", MakeJobCa("stranger-ca"), extra);
  ASSERT_NE(host1, nullptr);
  std::unique_ptr<Subprocess> host0 =
      StartHost(hosts, 0, "stranger", MakeJobCa("own-ca"), extra);
  ASSERT_NE(host0, nullptr);
  for (Subprocess* launcher : {host0.get(), host1.get()}) {
    const std::optional<ExitStatus> exit = launcher->WaitFor(kTimeout);
    ASSERT_TRUE(exit.has_value()) << "a launch still runs";
    EXPECT_FALSE(exit->success()) << launcher->LastLines(30);
  }
  // The stranger never saw the job: no worker of it started.
  EXPECT_THAT(host1->LastLines(100), Not(HasSubstr("[worker")));
  EXPECT_THAT(host0->LastLines(100), HasSubstr("host 1 did not join"));
  EXPECT_THAT(host1->LastLines(100), HasSubstr("the same --auth_ca"));
}

}  // namespace
}  // namespace ps::testing
