// The test hosts: reachable from each other and from nowhere else, shaped,
// cut and restored, and gone afterwards, whatever way the test ended.
// Skips (saying why) where network namespaces cannot be made.

#include "tests/hosts/test_hosts.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "tests/hosts/skip_without_hosts.h"

namespace ps::testing {
namespace {

constexpr int64_t kMbit = 1000 * 1000;
constexpr char kPort[] = "5001";
// Bounds a hang only; nothing here is asserted against a short time.
constexpr absl::Duration kTimeout = absl::Seconds(120);

std::string NetProbe() { return RunfilePath("tests/hosts/net_probe"); }

std::vector<std::string> NamespacesNow() {
  absl::StatusOr<std::string> listed =
      RunCommand({"ip", "netns", "list"}, kTimeout);
  EXPECT_TRUE(listed.ok()) << listed.status();
  std::vector<std::string> names;
  if (!listed.ok()) return names;
  for (absl::string_view line : absl::StrSplit(*listed, '\n')) {
    std::vector<std::string> words =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (!words.empty()) names.push_back(words[0]);
  }
  return names;
}

bool Listed(const std::string& name) {
  for (const std::string& listed : NamespacesNow()) {
    if (listed == name) return true;
  }
  return false;
}

// `net_probe serve` on `host`, listening once it returns.
std::unique_ptr<Subprocess> Serve(const TestHosts& hosts, int host) {
  SubprocessOptions options;
  options.argv = {NetProbe(), "serve", hosts.address(host), kPort};
  absl::StatusOr<std::unique_ptr<Subprocess>> server =
      hosts.Start(host, std::move(options));
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  absl::StatusOr<std::string> line =
      (*server)->WaitForOutputLine("listening on", kTimeout);
  EXPECT_TRUE(line.ok()) << line.status();
  return line.ok() ? *std::move(server) : nullptr;
}

// Whether a TCP socket can bind `address` (one of this namespace's).
bool Bindable(const std::string& address) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, address.c_str(), &addr.sin_addr);
  const bool bound =
      bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return bound;
}

// A socket listening on 127.0.0.1 (of the calling thread's namespace), its
// port in `port`; -1 on failure.
int ListenOnLoopback(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 1) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

// Sends `bytes` from host `from` to host `to`'s net_probe.
absl::Status Send(const TestHosts& hosts, int from, int to, int64_t bytes,
                  absl::Duration connect_timeout) {
  return hosts
      .Run(from,
           {NetProbe(), "send", hosts.address(to), kPort, absl::StrCat(bytes),
            absl::StrCat(absl::ToInt64Milliseconds(connect_timeout))},
           kTimeout)
      .status();
}

TEST(TestHostsTest, RefusesBadArgumentsWithoutMakingAnything) {
  EXPECT_EQ(TestHosts::Create(0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TestHosts::Create(201, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TestHosts::Create(2, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TestHostsTest, HostsReachEachOtherAtTheShapedRate) {
  SKIP_WITHOUT_TEST_HOSTS();
  absl::StatusOr<std::unique_ptr<TestHosts>> hosts =
      TestHosts::Create(3, 50 * kMbit);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  const TestHosts& h = **hosts;
  EXPECT_EQ(h.address(0), "10.250.89.1");
  EXPECT_EQ(h.address(2), "10.250.89.3");
  std::unique_ptr<Subprocess> server = Serve(h, 0);
  ASSERT_NE(server, nullptr);

  constexpr int64_t kBytes = 10 * 1000 * 1000;
  ASSERT_TRUE(Send(h, 1, 0, kBytes, kTimeout).ok());
  absl::StatusOr<std::string> received = server->WaitForOutputLine(
      absl::StrCat("received ", kBytes, " bytes in "), kTimeout);
  ASSERT_TRUE(received.ok()) << received.status();
  // 10 MB at 50 Mbit/s take 1.6 s; only a shaping that does not hold makes
  // it faster (a loaded machine makes it slower, never faster).
  // "received N bytes in S s"
  const std::vector<std::string> words = absl::StrSplit(*received, ' ');
  double seconds = 0;
  ASSERT_EQ(words.size(), 6u) << *received;
  ASSERT_TRUE(absl::SimpleAtod(words[4], &seconds)) << *received;
  EXPECT_GE(seconds, 1.3) << *received;

  // The third host reaches the first too.
  EXPECT_TRUE(Send(h, 2, 0, 1000, kTimeout).ok());

  absl::StatusOr<TestHosts::LinkBytes> sender = h.Bytes(1);
  absl::StatusOr<TestHosts::LinkBytes> receiver = h.Bytes(0);
  ASSERT_TRUE(sender.ok()) << sender.status();
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  EXPECT_GE(sender->sent, kBytes);
  EXPECT_GE(receiver->received, kBytes);
}

TEST(TestHostsTest, AwaitSentWaitsForWhatTheHostSent) {
  SKIP_WITHOUT_TEST_HOSTS();
  absl::StatusOr<std::unique_ptr<TestHosts>> hosts = TestHosts::Create(2, 0);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  const TestHosts& h = **hosts;
  std::unique_ptr<Subprocess> server = Serve(h, 0);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(h.AwaitSent(1, 100000, absl::Milliseconds(100)).code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(Send(h, 1, 0, 100000, kTimeout).ok());
  EXPECT_TRUE(h.AwaitSent(1, 100000, kTimeout).ok());
}

TEST(TestHostsTest, RunInHostOpensSocketsOnTheHost) {
  SKIP_WITHOUT_TEST_HOSTS();
  absl::StatusOr<std::unique_ptr<TestHosts>> hosts = TestHosts::Create(1, 0);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  const TestHosts& h = **hosts;
  // The host's address can be bound there, and only there.
  bool bound_there = false;
  ASSERT_TRUE(
      h.RunInHost(0, [&] { bound_there = Bindable(h.address(0)); }).ok());
  EXPECT_TRUE(bound_there);
  EXPECT_FALSE(Bindable(h.address(0)));
  // HttpGet reaches a server on the host's own loopback.
  int listener = -1;
  int port = 0;
  ASSERT_TRUE(h.RunInHost(0, [&] { listener = ListenOnLoopback(&port); }).ok());
  ASSERT_GE(listener, 0);
  std::thread answer([listener] {
    const int client = accept(listener, nullptr, nullptr);
    if (client < 0) return;
    char request[1024];
    (void)read(client, request, sizeof(request));
    const std::string reply = "HTTP/1.0 200 OK\r\n\r\nfrom host 0";
    (void)write(client, reply.data(), reply.size());
    close(client);
  });
  absl::StatusOr<std::string> body = h.HttpGet(0, port, "/x", kTimeout);
  answer.join();
  close(listener);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, "from host 0");
}

TEST(TestHostsTest, NothingIsRoutedOutsideTheHosts) {
  SKIP_WITHOUT_TEST_HOSTS();
  absl::StatusOr<std::unique_ptr<TestHosts>> hosts = TestHosts::Create(1, 0);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  absl::StatusOr<std::string> routes =
      (*hosts)->Run(0, {"ip", "-4", "route", "show"}, kTimeout);
  ASSERT_TRUE(routes.ok()) << routes.status();
  EXPECT_EQ(*routes,
            "10.250.89.0/24 dev eth0 proto kernel scope link src "
            "10.250.89.1 ");
  // No route: refused at once, before any packet leaves.
  absl::StatusOr<std::string> out = (*hosts)->Run(
      0, {NetProbe(), "send", "10.250.90.1", kPort, "0", "1000"}, kTimeout);
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::StrContains(out.status().message(), "unreachable"))
      << out.status();
}

TEST(TestHostsTest, ADownedLinkCarriesNothingUntilItIsUpAgain) {
  SKIP_WITHOUT_TEST_HOSTS();
  absl::StatusOr<std::unique_ptr<TestHosts>> hosts = TestHosts::Create(2, 0);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  const TestHosts& h = **hosts;
  std::unique_ptr<Subprocess> server = Serve(h, 0);
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(Send(h, 1, 0, 1000, kTimeout).ok());

  ASSERT_TRUE(h.SetLinkDown(0).ok());
  // Whether the connection times out or is found unreachable, it fails.
  EXPECT_FALSE(Send(h, 1, 0, 1000, absl::Seconds(2)).ok());

  ASSERT_TRUE(h.SetLinkUp(0).ok());
  // Neighbour discovery starts again; a few tries may fail meanwhile.
  absl::Status sent;
  const absl::Time deadline = absl::Now() + kTimeout;
  do {
    sent = Send(h, 1, 0, 1000, absl::Seconds(2));
  } while (!sent.ok() && absl::Now() < deadline);
  EXPECT_TRUE(sent.ok()) << sent;
}

TEST(TestHostsTest, DropTcpToMakesConnectingToThatPortTimeOut) {
  SKIP_WITHOUT_TEST_HOSTS();
  absl::StatusOr<std::unique_ptr<TestHosts>> hosts = TestHosts::Create(2, 0);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  const TestHosts& h = **hosts;
  std::unique_ptr<Subprocess> server = Serve(h, 0);
  ASSERT_NE(server, nullptr);
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(kPort, &port));
  EXPECT_FALSE(h.DropTcpTo(0, 0).ok());
  // Another port: nothing else of the host is dropped.
  ASSERT_TRUE(h.DropTcpTo(0, port + 1).ok());
  ASSERT_TRUE(Send(h, 1, 0, 1000, kTimeout).ok());
  ASSERT_TRUE(h.DropTcpTo(0, port).ok());
  EXPECT_FALSE(Send(h, 1, 0, 1000, absl::Seconds(2)).ok());
}

TEST(TestHostsTest, SetRateReshapesAndUnshapesTheLink) {
  SKIP_WITHOUT_TEST_HOSTS();
  absl::StatusOr<std::unique_ptr<TestHosts>> hosts = TestHosts::Create(1, 0);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  auto qdisc = [&] {
    absl::StatusOr<std::string> shown =
        (*hosts)->Run(0, {"tc", "qdisc", "show", "dev", "eth0"}, kTimeout);
    EXPECT_TRUE(shown.ok()) << shown.status();
    return shown.ok() ? *shown : "";
  };
  EXPECT_FALSE(absl::StrContains(qdisc(), "tbf"));
  ASSERT_TRUE((*hosts)->SetRate(0, 10000 * kMbit).ok());
  EXPECT_TRUE(absl::StrContains(qdisc(), "rate 10Gbit")) << qdisc();
  ASSERT_TRUE((*hosts)->SetRate(0, 0).ok());
  EXPECT_FALSE(absl::StrContains(qdisc(), "tbf")) << qdisc();
  EXPECT_FALSE((*hosts)->SetRate(0, -1).ok());
}

// A test body that fails half-way, as an ASSERT does.
void MakeHostsAndFail(std::vector<std::string>* names) {
  absl::StatusOr<std::unique_ptr<TestHosts>> hosts = TestHosts::Create(2, 0);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  for (int i = 0; i < (*hosts)->size(); ++i) {
    names->push_back((*hosts)->namespace_name(i));
  }
  for (const std::string& name : *names) ASSERT_TRUE(Listed(name)) << name;
  FAIL() << "deliberately";
}

TEST(TestHostsTest, AFailedTestLeavesNoNamespace) {
  SKIP_WITHOUT_TEST_HOSTS();
  std::vector<std::string> names;
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter intercept(
        ::testing::ScopedFakeTestPartResultReporter::
            INTERCEPT_ONLY_CURRENT_THREAD,
        &failures);
    MakeHostsAndFail(&names);
  }
  ASSERT_EQ(failures.size(), 1);
  EXPECT_TRUE(absl::StrContains(failures.GetTestPartResult(0).message(),
                                "deliberately"));
  ASSERT_EQ(names.size(), 2u);
  for (const std::string& name : names) EXPECT_FALSE(Listed(name)) << name;
}

TEST(TestHostsTest, HostsOfAKilledProcessAreRemovedAsStale) {
  SKIP_WITHOUT_TEST_HOSTS();
  SubprocessOptions options;
  options.argv = {RunfilePath("tests/hosts/hosts"), "--num_hosts=2"};
  absl::StatusOr<std::unique_ptr<Subprocess>> owner =
      Subprocess::Start(std::move(options));
  ASSERT_TRUE(owner.ok()) << owner.status();
  ASSERT_TRUE((*owner)->WaitForOutputLine("ready", kTimeout).ok())
      << (*owner)->LastLines(10);
  std::vector<std::string> names;
  for (const std::string& line : (*owner)->OutputLines()) {
    // "host I ADDRESS NAMESPACE"
    std::vector<std::string> words = absl::StrSplit(line, ' ');
    if (words.size() == 4 && words[0] == "host") names.push_back(words[3]);
  }
  ASSERT_EQ(names.size(), 2u);
  // Killed before its destructor runs: its namespaces stay behind (unless
  // a test running beside this one removed them already).
  ASSERT_TRUE((*owner)->Kill(SIGKILL).ok());
  (*owner)->Wait();
  owner->reset();

  ASSERT_TRUE(RemoveStaleTestHosts().ok());
  for (const std::string& name : names) EXPECT_FALSE(Listed(name)) << name;
}

TEST(TestHostsTest, Iperf3MeasuresALink) {
  SKIP_WITHOUT_TEST_HOSTS();
  if (!RunCommand({"iperf3", "--version"}, kTimeout).ok()) {
    GTEST_SKIP() << "no iperf3 (scripts/install_deps.sh installs it)";
  }
  absl::StatusOr<std::string> out =
      RunCommand({RunfilePath("tests/hosts/hosts"), "--iperf3_seconds=1",
                  "--iperf3_rates_mbit=50"},
                 kTimeout);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(absl::StrContains(*out, "50 Mbit/s: ")) << *out;
  EXPECT_TRUE(absl::StrContains(*out, "receiver")) << *out;
}

}  // namespace
}  // namespace ps::testing
