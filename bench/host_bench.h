#ifndef PS_BENCH_HOST_BENCH_H_
#define PS_BENCH_HOST_BENCH_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "common/subprocess.h"
#include "tests/hosts/test_hosts.h"

namespace ps::testing {

// What the benches that run a job on test hosts (ring_vs_servers_bench,
// torch_ring_vs_ddp_bench) share: where the servers or the ring's
// coordinator run, and starting them there.

// Sync-PS with 2 servers on hosts of their own (after the workers') or
// beside workers 0 and 1, or the all-reduce ring's coordinator beside
// worker 0.
enum class ServiceLayout { kServersApart, kServersBeside, kRing };

// Hosts a job of `num_workers` workers needs: one per worker, and the
// servers' own in kServersApart.
int HostsFor(ServiceLayout layout, int num_workers);

// TestHosts::Create(num_hosts, bits_per_second); null, the error printed,
// if it fails.
std::unique_ptr<TestHosts> CreateHosts(int num_hosts, int64_t bits_per_second);

// A binary of this workspace in the bench's runfiles (`bazel run` starts
// it in their workspace directory).
std::string RunfilePath(const std::string& workspace_relative);

// Starts `argv` with `env` added to this process's environment on host
// `host`, named `name`; null (the error printed) if it cannot start.
std::unique_ptr<Subprocess> StartOn(
    const TestHosts& hosts, int host, const std::string& name,
    std::vector<std::string> argv,
    std::vector<std::pair<std::string, std::string>> env = {});

// Starts the servers (each with `server_flags` added) or the coordinator
// of `layout` for `num_workers` workers, each listening on its host's
// address, into `services`; their "ADDRESS:PORT", server 0 first, once
// they listen (within `timeout`). nullopt, the error printed, on failure.
std::optional<std::vector<std::string>> StartServices(
    const TestHosts& hosts, ServiceLayout layout, int num_workers,
    const std::vector<std::string>& server_flags, absl::Duration timeout,
    std::vector<std::unique_ptr<Subprocess>>& services);

// Waits for each of `workers` (worker `rank` at index rank) to exit, each
// within `timeout`: true if every one exited 0; else false, the first that
// did not named on stderr with its last lines.
bool AwaitWorkers(const std::vector<std::unique_ptr<Subprocess>>& workers,
                  absl::Duration timeout);

}  // namespace ps::testing

#endif  // PS_BENCH_HOST_BENCH_H_
