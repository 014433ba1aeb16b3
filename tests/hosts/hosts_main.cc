// Test hosts by hand, and the raw TCP baseline of a link (needs root):
//
//   bazel run //tests/hosts:hosts -- --num_hosts=3 --rate_mbit=1000
//     makes the hosts, prints "host I ADDRESS NAMESPACE" for each and then
//     "ready", and keeps them until SIGINT or SIGTERM; start processes on
//     them with `ip netns exec NAMESPACE ...`.
//   bazel run //tests/hosts:hosts -- --iperf3_seconds=5
//       --iperf3_rates_mbit=1000,10000,0
//     streams with iperf3 from host 1 to host 0 for each rate (0:
//     unshaped) and prints iperf3's sender and receiver lines, then exits.

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/hosts/test_hosts.h"

ABSL_FLAG(int, num_hosts, 2, "How many hosts.");
ABSL_FLAG(int64_t, rate_mbit, 0,
          "Each link's rate in Mbit/s, both directions; 0: unshaped.");
ABSL_FLAG(int, iperf3_seconds, 0,
          "If set: measure with iperf3 for this long per rate, then exit.");
ABSL_FLAG(std::vector<std::string>, iperf3_rates_mbit,
          std::vector<std::string>({"1000", "10000", "0"}),
          "With --iperf3_seconds: the link rates to measure, Mbit/s.");

namespace ps::testing {
namespace {

constexpr int64_t kMbit = 1000 * 1000;

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "hosts: %s\n", std::string(status.message()).c_str());
  return 1;
}

// iperf3 from host 1 to host 0 at each rate; prints its summary lines.
int MeasureWithIperf3(const TestHosts& hosts, int seconds,
                      const std::vector<std::string>& rates) {
  for (const std::string& text : rates) {
    int64_t mbit = 0;
    if (!absl::SimpleAtoi(text, &mbit) || mbit < 0) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--iperf3_rates_mbit: not a rate: '", text, "'")));
    }
    for (int host : {0, 1}) {
      if (absl::Status s = hosts.SetRate(host, mbit * kMbit); !s.ok()) {
        return Fail(s);
      }
    }
    absl::StatusOr<std::unique_ptr<Subprocess>> listening =
        hosts.StartIperf3Server(0, /*one_test=*/true);
    if (!listening.ok()) return Fail(listening.status());
    absl::StatusOr<std::string> output =
        hosts.Run(1,
                  {"iperf3", "-c", hosts.address(0), "-t",
                   absl::StrCat(seconds), "-f", "m"},
                  absl::Seconds(seconds + 60));
    if (!output.ok()) return Fail(output.status());
    const std::string shape =
        mbit == 0 ? "unshaped" : absl::StrCat(mbit, " Mbit/s");
    for (absl::string_view line : absl::StrSplit(*output, '\n')) {
      if (absl::StrContains(line, "sender") ||
          absl::StrContains(line, "receiver")) {
        std::printf("%s: %.*s\n", shape.c_str(), static_cast<int>(line.size()),
                    line.data());
      }
    }
    std::fflush(stdout);
  }
  return 0;
}

int Main() {
  if (std::string why = TestHosts::WhyUnavailable(); !why.empty()) {
    return Fail(absl::FailedPreconditionError(why));
  }
  // Blocked before any thread starts, so that sigwait below receives them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  const int seconds = absl::GetFlag(FLAGS_iperf3_seconds);
  const int num_hosts = absl::GetFlag(FLAGS_num_hosts);
  absl::StatusOr<std::unique_ptr<TestHosts>> hosts =
      TestHosts::Create(seconds > 0 ? std::max(num_hosts, 2) : num_hosts,
                        absl::GetFlag(FLAGS_rate_mbit) * kMbit);
  if (!hosts.ok()) return Fail(hosts.status());
  if (seconds > 0) {
    return MeasureWithIperf3(**hosts, seconds,
                             absl::GetFlag(FLAGS_iperf3_rates_mbit));
  }
  for (int i = 0; i < (*hosts)->size(); ++i) {
    std::printf("host %d %s %s\n", i, (*hosts)->address(i).c_str(),
                (*hosts)->namespace_name(i).c_str());
  }
  std::printf("ready\n");
  std::fflush(stdout);
  int signal = 0;
  sigwait(&stop, &signal);
  return 0;  // The hosts are deleted on the way out.
}

}  // namespace
}  // namespace ps::testing

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ps::testing::Main();
}
