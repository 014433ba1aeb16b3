// The launch binary's multi-host flags: what is wrong is said clearly and
// exits 2 (bad configuration), before anything starts. Two "hosts" on
// loopback join one rendezvous for the mismatch.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/exit_codes.h"
#include "common/subprocess.h"
#include "common/temp_dir_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// Bounds a hang only.
constexpr absl::Duration kTimeout = absl::Seconds(120);

std::unique_ptr<Subprocess> StartLaunch(const std::vector<std::string>& args,
                                        const std::string& name) {
  SubprocessOptions options;
  options.argv = {
      "deploy/local/launch",
      absl::StrCat("--run_dir=", ::ps::testing::TestTmpDir(), "/run-", name)};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.name = name;
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Start(std::move(options));
  EXPECT_TRUE(child.ok()) << child.status();
  return child.ok() ? *std::move(child) : nullptr;
}

struct Ended {
  int code = -1;
  std::string output;
};

Ended Finish(Subprocess* launch) {
  if (launch == nullptr) return {};
  std::optional<ExitStatus> exit = launch->WaitFor(kTimeout);
  EXPECT_TRUE(exit.has_value()) << "launch still runs";
  Ended ended;
  ended.output = absl::StrJoin(launch->OutputLines(), "\n");
  if (exit.has_value() && exit->exited()) ended.code = exit->exit_code();
  return ended;
}

Ended RunLaunch(const std::vector<std::string>& args) {
  std::unique_ptr<Subprocess> launch = StartLaunch(args, "launch");
  return Finish(launch.get());
}

// A port nothing listens on once it returns (the kernel's pick, released).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

TEST(LaunchHostsFlagsTest, BadPlacementFlagsExitTwoNamingTheFlag) {
  Ended zero = RunLaunch({"--num_hosts=0"});
  EXPECT_EQ(zero.code, kExitBadConfig);
  EXPECT_THAT(zero.output,
              HasSubstr("--num_hosts must be in [1, 4096], got 0"));

  Ended index = RunLaunch(
      {"--num_hosts=2", "--host_index=2", "--rendezvous=127.0.0.1:29400"});
  EXPECT_EQ(index.code, kExitBadConfig);
  EXPECT_THAT(index.output, HasSubstr("--host_index must be in [0, "
                                      "--num_hosts) = [0, 2), got 2"));

  Ended no_rendezvous = RunLaunch({"--num_hosts=2", "--host_index=1"});
  EXPECT_EQ(no_rendezvous.code, kExitBadConfig);
  EXPECT_THAT(no_rendezvous.output, HasSubstr("needs --rendezvous"));

  Ended advertise =
      RunLaunch({"--num_hosts=2", "--host_index=1",
                 "--rendezvous=127.0.0.1:29400", "--advertise_address=a b"});
  EXPECT_EQ(advertise.code, kExitBadConfig);
  EXPECT_THAT(advertise.output, HasSubstr("--advertise_address must be"));

  Ended layout = RunLaunch({"--num_hosts=2", "--host_index=1",
                            "--num_workers=1", "--rendezvous=127.0.0.1:29400"});
  EXPECT_EQ(layout.code, kExitBadConfig);
  EXPECT_THAT(layout.output, HasSubstr("--num_workers=1 is fewer than the 2"));
}

TEST(LaunchHostsFlagsTest, ARendezvousThatNeverAnswersExitsTwo) {
  Ended ended = RunLaunch({"--num_hosts=2", "--host_index=1",
                           absl::StrCat("--rendezvous=127.0.0.1:", FreePort()),
                           "--rendezvous_timeout=1s"});
  EXPECT_EQ(ended.code, kExitBadConfig);
  EXPECT_THAT(ended.output, HasSubstr("did not answer"));
}

TEST(LaunchHostsFlagsTest, AFlagThatDiffersFailsBothHostsNamingHostAndFlag) {
  const std::string rendezvous =
      absl::StrCat("--rendezvous=127.0.0.1:", FreePort());
  std::unique_ptr<Subprocess> host0 = StartLaunch(
      {"--num_hosts=2", "--host_index=0", rendezvous, "--epochs=1"}, "host0");
  std::unique_ptr<Subprocess> host1 = StartLaunch(
      {"--num_hosts=2", "--host_index=1", rendezvous, "--epochs=2"}, "host1");
  const Ended ended0 = Finish(host0.get());
  const Ended ended1 = Finish(host1.get());
  for (const Ended& ended : {ended0, ended1}) {
    EXPECT_EQ(ended.code, kExitBadConfig) << ended.output;
    EXPECT_THAT(ended.output,
                HasSubstr("host 1 (127.0.0.1) was given --epochs=2, but host "
                          "0 --epochs=1"));
  }
}

}  // namespace
}  // namespace ps
