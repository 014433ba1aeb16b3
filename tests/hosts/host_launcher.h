#ifndef PS_TESTS_HOSTS_HOST_LAUNCHER_H_
#define PS_TESTS_HOSTS_HOST_LAUNCHER_H_

#include <memory>
#include <string>
#include <vector>

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

}  // namespace ps::testing

#endif  // PS_TESTS_HOSTS_HOST_LAUNCHER_H_
