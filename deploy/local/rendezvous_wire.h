#ifndef PS_DEPLOY_LOCAL_RENDEZVOUS_WIRE_H_
#define PS_DEPLOY_LOCAL_RENDEZVOUS_WIRE_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "deploy/local/host_layout.h"
#include "proto/rendezvous.pb.h"

namespace ps {

// The rendezvous's messages (proto/rendezvous.proto) as the launcher uses
// them: one writer and one reader per message. Readers check what a peer
// sent (InvalidArgument naming the field) and never trust it further.

// A host's launcher joins the job.
struct HostJoin {
  int host_index = 0;
  int num_hosts = 1;
  std::string address;
  // The job-defining flags' text, by name; every host must give the same.
  std::map<std::string, std::string> settings;
  // The port this host reserved for a stage link to the next host; 0: none.
  int stage_link_port = 0;

  bool operator==(const HostJoin& other) const;
};

// What the rendezvous hands every host once all joined.
struct JobPlan {
  std::string job_id;
  std::vector<HostShare> hosts;  // By host index.
  // Admits the stage links between hosts; empty: none (stage_links.h).
  std::string stage_link_secret;

  bool operator==(const JobPlan& other) const;
};

// How one host's processes ended.
struct HostReport {
  int host_index = 0;
  int exit_code = 0;
  std::string failure;  // Empty on success.
  bool bad_configuration = false;
  std::optional<double> final_test_accuracy;
  std::vector<std::string> processes;  // "worker 1 exited with code 0".

  bool operator==(const HostReport& other) const;
};

// A host as the rendezvous sees it.
struct HostStatus {
  int host_index = 0;
  bool settled = false;  // Reported (report) or lost (lost says why).
  std::optional<HostReport> report;
  std::string lost;

  bool operator==(const HostStatus& other) const;
};

// The most hosts one job may have.
inline constexpr int kMaxHosts = 4096;

rendezvous::JoinRequest WriteJoin(const HostJoin& join);
absl::StatusOr<HostJoin> ReadJoin(const rendezvous::JoinRequest& request);

// The answer to a join: the plan once every host has joined, else the
// hosts still awaited.
struct JoinProgress {
  std::optional<JobPlan> plan;
  std::vector<int> waiting_for;

  bool operator==(const JoinProgress& other) const;
};

rendezvous::JoinResponse WritePlan(const JoinProgress& progress);
absl::StatusOr<JoinProgress> ReadPlan(const rendezvous::JoinResponse& response);

rendezvous::OutcomeRequest WriteReport(const HostReport& report);
absl::StatusOr<HostReport> ReadReport(
    const rendezvous::OutcomeRequest& request);

rendezvous::StatusResponse WriteStatus(const std::vector<HostStatus>& hosts);
absl::StatusOr<std::vector<HostStatus>> ReadStatus(
    const rendezvous::StatusResponse& response);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_RENDEZVOUS_WIRE_H_
