#ifndef PS_DEPLOY_LOCAL_ALLREDUCE_MODE_H_
#define PS_DEPLOY_LOCAL_ALLREDUCE_MODE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "deploy/local/launch_config.h"

namespace ps {

// --mode=allreduce in the local launcher: no parameter servers. One small
// coordinator (//allreduce:coordinator: rendezvous only, no model) runs in
// the place of server 0, so the cluster starts, restarts and stops it as
// it would a server; the workers average their gradients among themselves
// (worker/allreduce_exchange.h) and each applies the update the servers
// would, with the update flags the servers would have had.

inline constexpr char kLaunchAllreduceMode[] = "allreduce";

bool IsAllreduce(const LaunchConfig& config);

// What the all-reduce mode does not support: --auth (Gloo's TCP transport is
// plaintext), staleness, and --server_flags other than the update's
// (--momentum, ...), which a program after -- does not take either (its
// PyTorch optimizer is its own).
absl::Status CheckAllreduceConfig(const LaunchConfig& config);

// For a job on several hosts (--num_hosts), before the hosts' shares are
// planned: one coordinator, which the plan puts on host 0, where it listens
// on the host's advertised address (config->server_host, as the ring's
// workers do on theirs). InvalidArgument for --server_hosts (`server_hosts`
// > 0): there are no servers to put on hosts of their own.
absl::Status PlaceAllreduceOnHosts(int server_hosts, LaunchConfig* config);

// The coordinator beside the server binary: "<root>/allreduce/coordinator"
// for "<root>/server/server" (bazel-bin and runfiles trees alike).
std::string CoordinatorBinary(const std::string& server_binary);

// argv of the coordinator, in the place of server 0.
std::vector<std::string> CoordinatorArgv(const LaunchConfig& config,
                                         const std::string& port_file,
                                         int port);

// Flags each worker takes in this mode on top of the usual: the update
// flags (the servers' --optimizer, --learning_rate, --lr_schedule and the
// update flags among --server_flags), the address the others reach it at
// (server_host: 127.0.0.1 on one host, the host's advertised address on
// several),
// and --checkpoint_dir (rank 0 checkpoints there, as servers would).
std::vector<std::string> AllreduceWorkerFlags(const LaunchConfig& config);

// Variables a program after -- gets in this mode besides the usual
// (common/worker_environment.h, where PS_SERVERS then names the
// coordinator): PS_MODE=allreduce, which makes paramserver.torch join the
// ring (python/paramserver/torch/_allreduce.py); PS_ALLREDUCE_HOST, the
// address the other workers reach it at (as --allreduce_host); with
// --checkpoint_dir, PS_CHECKPOINT_DIR, where rank 0 checkpoints.
std::vector<std::pair<std::string, std::string>> AllreduceProgramEnvironment(
    const LaunchConfig& config);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_ALLREDUCE_MODE_H_
