#ifndef PS_TESTS_HOSTS_HOST_LAUNCHER_H_
#define PS_TESTS_HOSTS_HOST_LAUNCHER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/subprocess.h"
#include "tests/hosts/test_hosts.h"

namespace ps::testing {

// Host 0's rendezvous, "ADDRESS:29400".
std::string Rendezvous(const TestHosts& hosts);

// Starts, on test host `host`, that host's `launch` of the main job (2
// workers, 2 shards, 1 epoch, CPU) on every host of `hosts`, with its run
// directory `run_dir` and `extra` flags after the others; its output is
// streamed with the prefix "host N". Null (and a test failure) if it
// cannot start.
std::unique_ptr<Subprocess> StartHostLauncher(const TestHosts& hosts, int host,
                                              const std::string& run_dir,
                                              std::vector<std::string> extra);

// Starts, on test host `host`, its `launch` as host `host` of `hosts` (the
// rendezvous on host 0) with our binaries and only `flags` besides: a job
// of the test's own.
std::unique_ptr<Subprocess> StartHostLaunch(const TestHosts& hosts, int host,
                                            std::vector<std::string> flags);

// Starts, on test host `host`, `launch --resume=run_dir` (or --extend, as
// `how` says) of that host's run, as host `host_index` of `hosts` (its own
// index unless a test moves the hosts) with the rendezvous on test host
// `rendezvous_host` (the one that runs index 0), with `extra` flags.
std::unique_ptr<Subprocess> ContinueHostLauncher(
    const TestHosts& hosts, int host, int host_index, int rendezvous_host,
    const std::string& how, const std::string& run_dir,
    std::vector<std::string> extra);

// Waits for every host's launcher (index: host) in turn, each for up to
// `timeout`, and fails the test for one that still runs or did not succeed,
// naming its host.
void ExpectLaunchersSucceed(
    const std::vector<std::unique_ptr<Subprocess>>& launchers,
    absl::Duration timeout);

}  // namespace ps::testing

#endif  // PS_TESTS_HOSTS_HOST_LAUNCHER_H_
