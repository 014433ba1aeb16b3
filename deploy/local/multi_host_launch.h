#ifndef PS_DEPLOY_LOCAL_MULTI_HOST_LAUNCH_H_
#define PS_DEPLOY_LOCAL_MULTI_HOST_LAUNCH_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "deploy/local/generated_auth.h"
#include "deploy/local/host_placement.h"
#include "deploy/local/launch_config.h"
#include "deploy/local/local_cluster.h"
#include "deploy/local/rendezvous_client.h"
#include "deploy/local/rendezvous_server.h"
#include "deploy/local/rendezvous_state.h"
#include "deploy/local/run_settings.h"
#include "deploy/local/run_setup.h"
#include "deploy/local/stage_links.h"

namespace ps {

// What a host's launcher brings to the job besides its LaunchConfig.
struct HostSessionOptions {
  HostPlacement placement;
  // Where this host's servers listen and are reached.
  std::string advertise_address;
  // The job-defining flags' text, compared across hosts.
  std::map<std::string, std::string> settings;
  // 0: servers beside the workers; else hosts [0, server_hosts) run only
  // servers (PlanHosts).
  int server_hosts = 0;
  // A host silent for this long is lost, and so is the rendezvous to the
  // others.
  absl::Duration host_timeout = absl::Seconds(10);
  // How long to wait for every host to join.
  absl::Duration rendezvous_timeout = absl::Minutes(5);
  // With --auth: this host's files of the job's CA (--auth_ca), which
  // secure the rendezvous as they do the servers (rendezvous_auth.h).
  AuthFiles auth;
};

// One host's part in a job on several hosts, torchrun's way: the same
// `launch` runs on each, host 0 also serves the rendezvous. Join() waits
// for every host and hands this host its share (ranks, shards) and the
// job's id; the cluster then exchanges the server list through it; while
// the processes run, heartbeats carry the job's first failure to every
// host (and a host that stops answering is such a failure); Finish()
// reports this host's outcome, and on host 0 waits for every host's and
// folds them into the result that its summary shows, naming the host of
// each failure.
//
// Thread-safety: Join, Apply, Finish from the launcher's main thread; the
// heartbeat thread calls `on_failure` (once); ExchangeServers from the
// cluster's thread.
class HostSession {
 public:
  // A pipelined job of our worker whose stages' links cross hosts: first
  // reserves this host's stage link port (stage_links.h) to announce in the
  // join; host 0 makes the job's link secret, which the plan carries.
  // Errors: InvalidArgument for the job's configuration (flags that differ
  // across hosts, a rendezvous that never answered: check --rendezvous),
  // others when the job failed before it started.
  static absl::StatusOr<std::unique_ptr<HostSession>> Join(
      HostSessionOptions options, const LaunchConfig& config);
  ~HostSession();
  HostSession(const HostSession&) = delete;
  HostSession& operator=(const HostSession&) = delete;

  bool is_host_zero() const { return options_.placement.host_index == 0; }

  // This host's share, servers' address, the job's id and its workers'
  // stage links, into `config`.
  void Apply(LaunchConfig* config) const;
  // Sets `spec` to exchange server lists through the rendezvous, and its
  // servers to wait for the job's workers (on every host) to finish.
  void Configure(ClusterSpec* spec, absl::Duration startup_timeout);
  // "host 1 of 2 (10.0.0.2): workers 2-3, server 1; rendezvous 10.0.0.1:29400"
  std::string Line() const;

  // Heartbeats until Finish; `on_failure` gets the job's failure (another
  // host's, or the rendezvous lost) once.
  void StartHeartbeats(std::function<void(std::string)> on_failure);
  // Reports `result`; host 0 then waits for every host and merges them in:
  // a failure is named by host, a lost host too, the other hosts'
  // processes become notes.
  void Finish(ClusterResult* result);

 private:
  HostSession(HostSessionOptions options,
              std::unique_ptr<RendezvousState> state,
              std::unique_ptr<RendezvousServer> server,
              std::shared_ptr<grpc::ChannelCredentials> credentials);
  void Beat(std::function<void(std::string)> on_failure);
  std::string Name(int host) const;

  const HostSessionOptions options_;
  // Host 0 only.
  std::unique_ptr<RendezvousState> state_;
  std::unique_ptr<RendezvousServer> server_;
  RendezvousClient client_;
  JobPlan plan_;
  // This host's workers' links to stages on other hosts.
  StageLinkPlan stage_links_;
  std::thread heartbeats_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The failure heartbeats delivered (this host's result then has it).
  std::string told_failure_ ABSL_GUARDED_BY(mu_);
};

// The job-defining flags of `settings` that every host must share (paths
// may differ per host), with the multi-host ones.
std::map<std::string, std::string> SharedJobSettings(
    const std::vector<std::pair<std::string, std::string>>& run_flags,
    const std::map<std::string, std::string>& multi_host_flags);

// A launch's multi-host settings from its flags (`given`: those on the
// command line) and the scheduler's variables (`lookup`, std::getenv):
// nullopt for a job on one host. InvalidArgument naming the flag for a bad
// --num_hosts, --host_index, --rendezvous, --server_hosts (with the job's
// worker and shard counts in `config`), --host_timeout,
// --rendezvous_timeout or --advertise_address; --auth needs --auth_ca (one
// CA for every host), which needs --auth. Without --advertise_address, this
// host's address on the route to the rendezvous. A --resume or --extend
// (`kind`) is compared across hosts with the run's job id (`config.job_id`),
// so that every host goes on with its part of one run.
absl::StatusOr<std::optional<HostSessionOptions>> HostOptionsFromSettings(
    const RunSettings& settings, const std::set<std::string>& given,
    LaunchKind kind, const std::vector<std::string>& program,
    const std::string& cwd, const LaunchConfig& config,
    absl::FunctionRef<const char*(const char*)> lookup);

// How this host makes its certificates under --auth: signed by the job's
// CA in `job_ca` (--auth_ca; empty: a CA of the run's own). On several
// hosts (`host`), the server's are for this host's advertised address, and
// on host 0 also for the rendezvous's host.
// On --resume or --extend of a job on several hosts: each host restores the
// shards whose checkpoints its own run directory holds, so the job must give
// it the same shards, [first_server, first_server + host_servers) of
// `num_servers`. InvalidArgument, naming the shards found and how to start
// the hosts, where `checkpoint_dir` holds checkpoints of another host's
// shard (the hosts were started with other --num_hosts, --host_index or
// --server_hosts). Its own shards may lack checkpoints: the run stopped
// before their first.
absl::Status CheckResumedShards(const std::string& checkpoint_dir,
                                int num_servers, int first_server,
                                int host_servers);

// CheckResumedShards for this host's part of `config` (after
// HostSession::Apply): with a pipelined job of our worker, for each stage's
// server group in its own checkpoint folder, with the shards of that group
// the host runs.
absl::Status CheckResumedHostShards(const LaunchConfig& config);

GeneratedAuthOptions LaunchAuthOptions(
    const std::optional<HostSessionOptions>& host, const std::string& job_ca);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_MULTI_HOST_LAUNCH_H_
