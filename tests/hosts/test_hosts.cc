#include "tests/hosts/test_hosts.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/http_testing.h"

namespace ps::testing {
namespace {

// Every namespace name starts with this, then the owner's pid and '-'.
constexpr absl::string_view kNamePrefix = "pshost-";
constexpr int kMaxHosts = 200;
// `ip` and `tc` return in milliseconds; this only bounds a hung one.
constexpr absl::Duration kCommandTimeout = absl::Seconds(60);
// The queue a shaped link holds, in time at its rate.
constexpr absl::string_view kQueueLatency = "50ms";
constexpr int64_t kMinBurstBytes = 64 * 1024;

absl::Status Ip(std::vector<std::string> args) {
  args.insert(args.begin(), "ip");
  return RunCommand(std::move(args), kCommandTimeout).status();
}

absl::Status Tc(std::vector<std::string> args) {
  args.insert(args.begin(), "tc");
  return RunCommand(std::move(args), kCommandTimeout).status();
}

// Shapes the egress of `device` in namespace `ns`; both ends of a veth
// shaped make both directions of the link.
absl::Status ShapeEgress(const std::string& ns, const std::string& device,
                         int64_t bits_per_second) {
  if (bits_per_second == 0) {
    absl::StatusOr<std::string> shown = RunCommand(
        {"tc", "-n", ns, "qdisc", "show", "dev", device}, kCommandTimeout);
    if (!shown.ok()) return shown.status();
    if (!absl::StrContains(*shown, "tbf")) return absl::OkStatus();
    return Tc({"-n", ns, "qdisc", "del", "dev", device, "root"});
  }
  // A bucket of a millisecond at the rate (at least 64 KiB, a full GSO
  // segment), so that the timer's resolution does not cap the rate.
  const int64_t burst = std::max(kMinBurstBytes, bits_per_second / 8 / 1000);
  return Tc({"-n", ns, "qdisc", "replace", "dev", device, "root", "tbf", "rate",
             absl::StrCat(bits_per_second, "bit"), "burst",
             absl::StrCat(burst, "b"), "latency", std::string(kQueueLatency)});
}

// The names `ip netns list` shows.
absl::StatusOr<std::vector<std::string>> ListNamespaces() {
  absl::StatusOr<std::string> listed =
      RunCommand({"ip", "netns", "list"}, kCommandTimeout);
  if (!listed.ok()) return listed.status();
  std::vector<std::string> names;
  for (absl::string_view line : absl::StrSplit(*listed, '\n')) {
    // "NAME" or "NAME (id: 3)".
    std::vector<absl::string_view> words =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (!words.empty()) names.emplace_back(words[0]);
  }
  return names;
}

// Kills every process in namespace `ns`, then deletes it.
absl::Status DeleteNamespace(const std::string& ns) {
  absl::StatusOr<std::string> pids =
      RunCommand({"ip", "netns", "pids", ns}, kCommandTimeout);
  if (pids.ok()) {
    for (absl::string_view word :
         absl::StrSplit(*pids, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
      int pid = 0;
      if (absl::SimpleAtoi(word, &pid) && pid > 1) kill(pid, SIGKILL);
    }
  }
  return Ip({"netns", "del", ns});
}

// "pshost-PID-RANDOM-": this process's, and no other TestHosts' in it.
std::string NewPrefix() {
  absl::BitGen random;
  return absl::StrCat(
      kNamePrefix, getpid(), "-",
      absl::Hex(absl::Uniform<uint32_t>(random), absl::kZeroPad8), "-");
}

// The pid a namespace name of ours carries; 0 if it is not one of ours.
int OwnerPid(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kNamePrefix)) return 0;
  int pid = 0;
  const size_t dash = name.find('-');
  if (dash == absl::string_view::npos ||
      !absl::SimpleAtoi(name.substr(0, dash), &pid) || pid <= 0) {
    return 0;
  }
  return pid;
}

}  // namespace

absl::StatusOr<std::string> RunCommand(std::vector<std::string> argv,
                                       absl::Duration timeout) {
  const std::string command = absl::StrJoin(argv, " ");
  SubprocessOptions options;
  options.argv = std::move(argv);
  options.kill_grace = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Start(std::move(options));
  if (!child.ok()) {
    return absl::Status(
        child.status().code(),
        absl::StrCat("`", command, "`: ", child.status().message()));
  }
  const std::optional<ExitStatus> exit = (*child)->WaitFor(timeout);
  if (!exit.has_value()) {
    (*child)->Terminate(absl::Seconds(1));
    return absl::DeadlineExceededError(absl::StrCat(
        "`", command, "` ran longer than ", absl::FormatDuration(timeout), ": ",
        (*child)->LastLines(10)));
  }
  if (!exit->success()) {
    return absl::InternalError(absl::StrCat(
        "`", command, "` ", exit->ToString(), ": ", (*child)->LastLines(10)));
  }
  return absl::StrJoin((*child)->OutputLines(), "\n");
}

std::string TestHosts::WhyUnavailable() {
  if (geteuid() != 0) {
    return "test hosts need root (network namespaces need CAP_SYS_ADMIN and "
           "CAP_NET_ADMIN); CI runs as root";
  }
  const std::string probe = absl::StrCat(NewPrefix(), "probe");
  if (absl::Status s = Ip({"netns", "add", probe}); !s.ok()) {
    return absl::StrCat("cannot make a network namespace: ", s.message());
  }
  // What Create() makes: a bridge, a veth link, its shape.
  absl::Status shaped =
      Ip({"-n", probe, "link", "add", "probebr", "type", "bridge"});
  if (shaped.ok()) {
    shaped = Ip({"-n", probe, "link", "add", "probe0", "type", "veth", "peer",
                 "name", "probe1"});
  }
  if (shaped.ok()) shaped = ShapeEgress(probe, "probe0", 1000 * 1000);
  absl::Status deleted = DeleteNamespace(probe);
  if (!shaped.ok()) {
    return absl::StrCat("cannot make a bridge and a shaped veth link: ",
                        shaped.message());
  }
  if (!deleted.ok()) {
    return absl::StrCat("cannot delete a network namespace: ",
                        deleted.message());
  }
  return "";
}

absl::StatusOr<std::unique_ptr<TestHosts>> TestHosts::Create(
    int num_hosts, int64_t bits_per_second) {
  if (num_hosts < 1 || num_hosts > kMaxHosts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "test hosts: 1 to ", kMaxHosts, " hosts, not ", num_hosts));
  }
  if (bits_per_second < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("test hosts: a negative rate: ", bits_per_second));
  }
  if (absl::Status s = RemoveStaleTestHosts(); !s.ok()) {
    std::fprintf(stderr, "test hosts: stale ones not removed: %s\n",
                 std::string(s.message()).c_str());
  }
  const std::string prefix = NewPrefix();
  std::unique_ptr<TestHosts> hosts(
      new TestHosts(prefix, absl::StrCat(prefix, "sw")));
  // From here on the destructor deletes whatever was made.
  if (absl::Status s = Ip({"netns", "add", hosts->switch_namespace_});
      !s.ok()) {
    return s;
  }
  const std::string& sw = hosts->switch_namespace_;
  for (std::vector<std::string> args : {
           std::vector<std::string>{"link", "add", "br0", "type", "bridge",
                                    "forward_delay", "0"},
           std::vector<std::string>{"link", "set", "br0", "up"},
       }) {
    args.insert(args.begin(), {"-n", sw});
    if (absl::Status s = Ip(std::move(args)); !s.ok()) return s;
  }
  for (int i = 0; i < num_hosts; ++i) {
    if (absl::Status s = hosts->AddHost(bits_per_second); !s.ok()) return s;
  }
  return hosts;
}

absl::Status TestHosts::AddHost(int64_t bits_per_second) {
  const int index = size();
  Host host;
  host.namespace_name = absl::StrCat(prefix_, "h", index);
  host.address = absl::StrCat(kSubnet, ".", index + 1);
  host.switch_port = absl::StrCat("p", index);
  if (absl::Status s = Ip({"netns", "add", host.namespace_name}); !s.ok()) {
    return s;
  }
  // Pushed now so that the destructor deletes it should a step fail.
  hosts_.push_back(host);
  const std::string& ns = host.namespace_name;
  const std::string& sw = switch_namespace_;
  for (const std::vector<std::string>& args : {
           // Made in the switch's namespace, its peer moved at once: no
           // interface ever appears in this process's namespace.
           std::vector<std::string>{"-n", sw, "link", "add", host.switch_port,
                                    "type", "veth", "peer", "name", "eth0",
                                    "netns", ns},
           std::vector<std::string>{"-n", sw, "link", "set", host.switch_port,
                                    "master", "br0", "up"},
           std::vector<std::string>{"-n", ns, "addr", "add",
                                    absl::StrCat(host.address, "/24"), "dev",
                                    "eth0"},
           std::vector<std::string>{"-n", ns, "link", "set", "eth0", "up"},
           std::vector<std::string>{"-n", ns, "link", "set", "lo", "up"},
       }) {
    if (absl::Status s = Ip(args); !s.ok()) return s;
  }
  return SetRate(index, bits_per_second);
}

TestHosts::~TestHosts() { TearDown(); }

void TestHosts::TearDown() {
  // Hosts first: deleting the switch's namespace then removes the links.
  std::vector<std::string> names;
  for (const Host& host : hosts_) names.push_back(host.namespace_name);
  names.push_back(switch_namespace_);
  for (const std::string& name : names) {
    if (absl::Status s = DeleteNamespace(name); !s.ok()) {
      std::fprintf(stderr, "test hosts: %s\n",
                   std::string(s.message()).c_str());
    }
  }
}

const std::string& TestHosts::address(int host) const {
  return hosts_.at(host).address;
}

const std::string& TestHosts::namespace_name(int host) const {
  return hosts_.at(host).namespace_name;
}

std::vector<std::string> TestHosts::InHost(
    int host, std::vector<std::string> argv) const {
  argv.insert(argv.begin(), {"ip", "netns", "exec", namespace_name(host)});
  return argv;
}

absl::StatusOr<std::unique_ptr<Subprocess>> TestHosts::Start(
    int host, SubprocessOptions options) const {
  if (options.name.empty() && !options.argv.empty()) {
    options.name = absl::StrCat(options.argv[0], " on host ", host);
  }
  options.argv = InHost(host, std::move(options.argv));
  return Subprocess::Start(std::move(options));
}

absl::StatusOr<std::unique_ptr<Subprocess>> TestHosts::StartIperf3Server(
    int host, bool one_test) const {
  SubprocessOptions server;
  server.argv = {"iperf3", "-s", "--forceflush", "-B", address(host)};
  if (one_test) server.argv.push_back("-1");
  server.name = absl::StrCat("iperf3 server on host ", host);
  absl::StatusOr<std::unique_ptr<Subprocess>> started =
      Start(host, std::move(server));
  if (!started.ok()) return started.status();
  absl::StatusOr<std::string> listening =
      (*started)->WaitForOutputLine("Server listening", absl::Seconds(30));
  if (!listening.ok()) return listening.status();
  return started;
}

absl::StatusOr<std::string> TestHosts::Run(int host,
                                           std::vector<std::string> argv,
                                           absl::Duration timeout) const {
  return RunCommand(InHost(host, std::move(argv)), timeout);
}

absl::Status TestHosts::SetLinkDown(int host) const {
  return Ip({"-n", switch_namespace_, "link", "set",
             hosts_.at(host).switch_port, "down"});
}

absl::Status TestHosts::SetLinkUp(int host) const {
  return Ip({"-n", switch_namespace_, "link", "set",
             hosts_.at(host).switch_port, "up"});
}

absl::Status TestHosts::DropTcpTo(int host, int port) const {
  if (port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("test hosts: no TCP port ", port, " to drop"));
  }
  const std::string& ns = hosts_.at(host).namespace_name;
  // The first call makes an IFB device never set up (what is redirected
  // there is dropped) and the ingress qdisc.
  if (!Ip({"-n", ns, "link", "show", "drop0"}).ok()) {
    if (absl::Status s = Ip({"-n", ns, "link", "add", "drop0", "type", "ifb"});
        !s.ok()) {
      return s;
    }
    if (absl::Status s =
            Tc({"-n", ns, "qdisc", "add", "dev", "eth0", "ingress"});
        !s.ok()) {
      return s;
    }
  }
  return Tc({"-n",       ns,
             "filter",   "add",
             "dev",      "eth0",
             "parent",   "ffff:",
             "protocol", "ip",
             "prio",     "1",
             "u32",      "match",
             "ip",       "protocol",
             "6",        "0xff",
             "match",    "ip",
             "dport",    absl::StrCat(port),
             "0xffff",   "action",
             "mirred",   "egress",
             "redirect", "dev",
             "drop0"});
}

absl::Status TestHosts::SetRate(int host, int64_t bits_per_second) const {
  if (bits_per_second < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("test hosts: a negative rate: ", bits_per_second));
  }
  const Host& h = hosts_.at(host);
  if (absl::Status s = ShapeEgress(h.namespace_name, "eth0", bits_per_second);
      !s.ok()) {
    return s;
  }
  return ShapeEgress(switch_namespace_, h.switch_port, bits_per_second);
}

absl::Status TestHosts::RunInHost(int host,
                                  const std::function<void()>& fn) const {
  // `ip netns add` bind-mounts each namespace here.
  const std::string path = absl::StrCat("/run/netns/", namespace_name(host));
  absl::Status joined;
  // setns(CLONE_NEWNET) moves only the calling thread, so a thread of its
  // own joins, and ends with the namespace.
  std::thread thread([&] {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
      joined = absl::InternalError(absl::StrCat(
          "joining the network namespace ", path, ": ", std::strerror(errno)));
    }
    if (fd >= 0) close(fd);
    if (joined.ok()) fn();
  });
  thread.join();
  return joined;
}

absl::StatusOr<std::string> TestHosts::HttpGet(int host, int port,
                                               absl::string_view path,
                                               absl::Duration timeout) const {
  absl::StatusOr<std::string> body = absl::UnknownError("not run");
  if (absl::Status s = RunInHost(
          host, [&] { body = ::ps::testing::HttpGet(port, path, timeout); });
      !s.ok()) {
    return s;
  }
  return body;
}

absl::StatusOr<TestHosts::LinkBytes> TestHosts::Bytes(int host) const {
  LinkBytes bytes;
  for (auto [file, field] : {std::pair{"tx_bytes", &bytes.sent},
                             std::pair{"rx_bytes", &bytes.received}}) {
    // `ip netns exec` mounts the namespace's own /sys.
    absl::StatusOr<std::string> text = Run(
        host, {"cat", absl::StrCat("/sys/class/net/eth0/statistics/", file)},
        kCommandTimeout);
    if (!text.ok()) return text.status();
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), field)) {
      return absl::InternalError(
          absl::StrCat("eth0's ", file, " on host ", host, ": '", *text, "'"));
    }
  }
  return bytes;
}

absl::Status TestHosts::AwaitSent(int host, int64_t bytes,
                                  absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  int64_t sent = 0;
  while (true) {
    absl::StatusOr<LinkBytes> now = Bytes(host);
    if (!now.ok()) return now.status();
    sent = now->sent;
    if (sent >= bytes) return absl::OkStatus();
    if (absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("host ", host, " sent ", sent, " bytes, not ", bytes,
                   ", within ", absl::FormatDuration(timeout)));
}

absl::Status RemoveStaleTestHosts() {
  absl::StatusOr<std::vector<std::string>> names = ListNamespaces();
  if (!names.ok()) return names.status();
  absl::Status status;
  for (const std::string& name : *names) {
    const int pid = OwnerPid(name);
    if (pid == 0) continue;  // Not ours.
    // EPERM: the owner runs, under another user.
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
    status.Update(DeleteNamespace(name));
  }
  return status;
}

}  // namespace ps::testing
