#ifndef PS_TESTS_HOSTS_TEST_HOSTS_H_
#define PS_TESTS_HOSTS_TEST_HOSTS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/subprocess.h"

namespace ps::testing {

// Several hosts on this machine, for tests and benchmarks of what crosses a
// network: each host is a Linux network namespace with one interface, eth0,
// whose veth peer is a port of a bridge (the switch) in a namespace of its
// own. Every link is shaped by `tc`'s token bucket (tbf) on both of its
// ends, so a host sends and receives at most the link's rate.
//
// Addresses are 10.250.89.(index + 1)/24 on each host's eth0, and each
// host's loopback is up; nothing else is routed, and nothing is added to the
// namespace this process runs in, so traffic of a host reaches only the
// other hosts of the same TestHosts. Two TestHosts share no namespace (their
// names carry this process's id and a random part), so tests may run side by
// side, each with the same addresses.
//
// Processes started on different hosts do not share the abstract Unix
// socket namespace (it is per network namespace): a worker and a server on
// two hosts talk over TCP, as on two machines.
//
// Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2's `ip` and `tc`;
// WhyUnavailable() says whether they are there.
//
// The destructor kills whatever still runs in the namespaces and deletes
// them, which deletes the bridge and the links: a test that fails (an
// ASSERT returns early) leaves nothing behind. Namespaces of a process that
// died before its destructor ran are deleted by RemoveStaleTestHosts(),
// which Create() calls.
//
// Thread-safety: const after Create(); every method may be called from any
// thread. Changing one host's link from two threads at once leaves it as
// the last call said.
class TestHosts {
 public:
  // The first three octets of every host's address.
  static constexpr absl::string_view kSubnet = "10.250.89";

  // "" where hosts can be made here; else why not, for a test's skip
  // message. Makes and deletes a probe namespace.
  static std::string WhyUnavailable();

  // Makes `num_hosts` hosts (1 to 200) whose links run at
  // `bits_per_second` in each direction (0: unshaped, as fast as the
  // machine copies). On error, whatever was made is deleted again.
  static absl::StatusOr<std::unique_ptr<TestHosts>> Create(
      int num_hosts, int64_t bits_per_second);

  ~TestHosts();
  TestHosts(const TestHosts&) = delete;
  TestHosts& operator=(const TestHosts&) = delete;

  int size() const { return static_cast<int>(hosts_.size()); }
  // Host `host`'s address, e.g. "10.250.89.1" for host 0.
  const std::string& address(int host) const;
  // The network namespace's name (for `ip netns exec NAME ...` by hand).
  const std::string& namespace_name(int host) const;

  // `argv` wrapped to run on host `host` (through `ip netns exec`, which
  // execs the program itself: the pid is the program's).
  std::vector<std::string> InHost(int host,
                                  std::vector<std::string> argv) const;
  // Starts a process on host `host`; options.argv is wrapped as InHost()
  // does. The caller owns it; the destructor of TestHosts also kills
  // anything still running there.
  absl::StatusOr<std::unique_ptr<Subprocess>> Start(
      int host, SubprocessOptions options) const;
  // iperf3's server on host `host`, bound to its address, once it listens
  // (the raw TCP baseline of a link). With `one_test` it exits after one
  // client's test. Owned as Start()'s processes are.
  absl::StatusOr<std::unique_ptr<Subprocess>> StartIperf3Server(
      int host, bool one_test) const;
  // Runs `argv` on host `host` to its end: its output (stdout and stderr),
  // or an error naming the command, how it ended and its last lines when it
  // fails or outlives `timeout` (it is then killed).
  absl::StatusOr<std::string> Run(int host, std::vector<std::string> argv,
                                  absl::Duration timeout) const;

  // Cuts host `host`'s cable at the switch (the bridge's port goes down) or
  // plugs it back in. The host keeps its address and routes, so its
  // packets, and those sent to it, vanish as on a real cut: connections
  // time out rather than fail at once.
  absl::Status SetLinkDown(int host) const;
  absl::Status SetLinkUp(int host) const;

  // Drops every TCP packet that reaches host `host` for its port `port`
  // (IPv4), from now on: a firewall that drops, so that connecting there
  // times out rather than being refused. `tc`: an ingress u32 filter on
  // the host's eth0 redirecting them to a device left down (this kernel has
  // no gact `drop` action; a redirect to a down device drops).
  absl::Status DropTcpTo(int host, int port) const;

  // Shapes host `host`'s link anew, both directions (0: unshaped).
  absl::Status SetRate(int host, int64_t bits_per_second) const;

  // Runs `fn` on a thread of its own that has joined host `host`'s network
  // namespace (sockets it opens are the host's: 127.0.0.1 is the host's
  // loopback), and returns once `fn` has. The calling thread stays where it
  // is. An error, with `fn` not run, if the thread cannot join it.
  absl::Status RunInHost(int host, const std::function<void()>& fn) const;
  // GETs http://127.0.0.1:`port``path` on host `host` (e.g. the /metrics of
  // a process that listens on its loopback there), as ps::testing::HttpGet
  // does: the body of a 200 answer.
  absl::StatusOr<std::string> HttpGet(int host, int port,
                                      absl::string_view path,
                                      absl::Duration timeout) const;

  // Bytes host `host`'s eth0 sent and received since Create().
  struct LinkBytes {
    int64_t sent = 0;
    int64_t received = 0;
  };
  absl::StatusOr<LinkBytes> Bytes(int host) const;
  // Polls Bytes(host) until the host has sent at least `bytes`, e.g. to cut
  // its link in the middle of a transfer of known size: OK then,
  // DeadlineExceeded after `timeout`.
  absl::Status AwaitSent(int host, int64_t bytes, absl::Duration timeout) const;

 private:
  struct Host {
    std::string namespace_name;
    std::string address;
    std::string switch_port;  // Its veth peer, in the switch's namespace.
  };

  TestHosts(std::string prefix, std::string switch_namespace)
      : prefix_(std::move(prefix)),
        switch_namespace_(std::move(switch_namespace)) {}

  absl::Status AddHost(int64_t bits_per_second);
  // Kills what runs in the namespaces and deletes them; errors logged.
  void TearDown();

  const std::string prefix_;
  const std::string switch_namespace_;
  std::vector<Host> hosts_;  // Filled by Create() only.
};

// Deletes the namespaces of TestHosts whose process no longer runs (one
// that crashed or was killed before its destructor ran), with whatever
// still runs in them. Namespaces of live processes are left alone.
absl::Status RemoveStaleTestHosts();

// Runs a command (in this namespace) to its end, as TestHosts::Run does.
absl::StatusOr<std::string> RunCommand(std::vector<std::string> argv,
                                       absl::Duration timeout);

}  // namespace ps::testing

#endif  // PS_TESTS_HOSTS_TEST_HOSTS_H_
