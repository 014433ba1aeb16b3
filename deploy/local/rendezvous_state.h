#ifndef PS_DEPLOY_LOCAL_RENDEZVOUS_STATE_H_
#define PS_DEPLOY_LOCAL_RENDEZVOUS_STATE_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "deploy/local/host_layout.h"
#include "deploy/local/rendezvous_wire.h"

namespace ps {

// What host 0's launcher gives its rendezvous.
struct RendezvousOptions {
  std::string job_id;
  // The job-defining flags as host 0 was given them: every host must give
  // the same.
  std::map<std::string, std::string> settings;
  // Every host's share (PlanHosts); addresses and stage link ports are
  // filled as hosts join.
  std::vector<HostShare> plan;
  // Handed to every host in the plan (stage_links.h); empty: none.
  std::string stage_link_secret;
  // A host that has joined and not reported its outcome is lost once it has
  // not called for this long.
  absl::Duration host_timeout = absl::Seconds(10);
};

// The rendezvous's decisions, without the network (rendezvous_server.h
// serves them): hosts join, tell their servers, send heartbeats and report
// how they ended; the first failure of any host (a process that failed for
// good, flags that disagree, a host that stopped answering) is the job's,
// and every host learns it from its next heartbeat.
//
// Every call takes the time now, so tests drive the clock. Errors are
// InvalidArgument where the job's configuration is at fault (the launchers
// exit with kExitBadConfig) and FailedPrecondition once the job has failed.
//
// Thread-safe.
class RendezvousState {
 public:
  RendezvousState(RendezvousOptions options, absl::Time now);

  // The plan once every host has joined, else who is awaited. A host whose
  // settings differ from host 0's fails the job, naming the host and the
  // first flag that differs, as does a second host claiming a taken index.
  // Once the job has failed, Join returns the failure, except to a host
  // that had joined when every host had: it still gets the plan, so that it
  // goes on to report its own outcome (which host 0 waits for) rather than
  // leave without one.
  absl::StatusOr<JoinProgress> Join(const HostJoin& join, absl::Time now);
  // Host `host`'s servers, in shard order (as many as its share); every
  // shard's once every host has told its own.
  absl::StatusOr<std::optional<std::vector<std::string>>> Servers(
      int host, const std::vector<std::string>& servers, absl::Time now);
  // Marks `host` alive; returns the job's failure ("" while none).
  absl::StatusOr<std::string> Heartbeat(int host, absl::Time now);
  // `report.host_index` ended; a failure becomes the job's, named by host.
  absl::Status Report(const HostReport& report, absl::Time now);
  // Every host, after declaring lost those silent beyond host_timeout.
  std::vector<HostStatus> Status(absl::Time now);

 private:
  struct Host {
    bool joined = false;
    std::string address;
    int stage_link_port = 0;
    absl::Time last_seen;
    std::optional<std::vector<std::string>> servers;
    std::optional<HostReport> report;
    std::string lost;
  };

  absl::Status CheckHost(int host) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Declares lost the hosts silent beyond host_timeout.
  void Sweep(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Fail(std::string why, bool bad_configuration)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The failure as an error for calls that cannot go on.
  absl::Status FailureStatus() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool AllJoined() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::string Name(int host) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const RendezvousOptions options_;
  mutable absl::Mutex mu_;
  std::vector<Host> hosts_ ABSL_GUARDED_BY(mu_);
  std::string failure_ ABSL_GUARDED_BY(mu_);
  bool failure_is_bad_configuration_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_RENDEZVOUS_STATE_H_
