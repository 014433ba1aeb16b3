#ifndef PS_DEPLOY_LOCAL_STAGE_LINKS_H_
#define PS_DEPLOY_LOCAL_STAGE_LINKS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "deploy/local/host_layout.h"

namespace ps {

// A pipelined job of our worker on several hosts: which of a replica's
// stage links cross hosts, and where they go.
//
// PlanHosts gives each host a contiguous block of ranks, and a replica's
// stages are consecutive ranks (rank = replica x K + stage), so each host
// holds contiguous runs of stages and a link crosses hosts only at the edge
// of a host's block: from its last rank, when that is not a last stage, to
// the next host's first. A host therefore has at most one stage that
// listens over TCP (for the next host) and at most one that connects over
// TCP (to the previous host); every other link stays on the host's socket.
//
// The listening port is reserved by that host's launcher before it joins
// the rendezvous (ReserveStageLinkPort), which hands every host's port to
// the others with the plan, and the job's secret with them.

// The rank of `host` whose next stage runs on another host (it listens
// over TCP), or -1: none. `num_workers` and `stages` are the job's.
int CrossHostListener(const HostShare& host, int num_workers, int stages);
// The rank of `host` whose previous stage runs on another host (it
// connects over TCP), or -1: none.
int CrossHostConnector(const HostShare& host, int stages);
// Whether any link of the job crosses hosts.
bool AnyCrossHostLink(const std::vector<HostShare>& hosts, int num_workers,
                      int stages);

// What the workers of one host are given: by rank, the address to listen
// at for the next stage (--stage_link_listen) and the previous stage's
// (--stage_link_previous), and the job's secret ($PS_STAGE_LINK_SECRET).
// Empty: every link of the host stays on its socket.
struct StageLinkPlan {
  std::string secret;
  std::map<int, std::string> listen;
  std::map<int, std::string> previous;

  bool empty() const { return listen.empty() && previous.empty(); }
};

// The plan of host `host_index` among `hosts` (addresses and ports as the
// rendezvous handed them out). InvalidArgument (a rendezvous that sent
// something no launcher would) when a host that must listen has no port,
// or the secret is missing while a link crosses hosts.
absl::StatusOr<StageLinkPlan> PlanStageLinks(
    const std::vector<HostShare>& hosts, int host_index, int num_workers,
    int stages, const std::string& secret);

// A free TCP port on `address` (this host's advertised one) for a stage
// link: bound, then let go, since the worker that listens there starts
// later (as torchrun's rendezvous hands out its master port). Another
// process may take it in between; the worker then fails to listen,
// naming the port, after retrying for its --retry_timeout.
absl::StatusOr<int> ReserveStageLinkPort(const std::string& address);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_STAGE_LINKS_H_
