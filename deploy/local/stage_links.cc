#include "deploy/local/stage_links.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/tcp_frames.h"

namespace ps {
namespace {

std::string HostPort(const std::string& host, int port) {
  return absl::StrContains(host, ':') ? absl::StrCat("[", host, "]:", port)
                                      : absl::StrCat(host, ":", port);
}

// Where host `index` listens for its next stage.
absl::StatusOr<std::string> ListenAddress(const std::vector<HostShare>& hosts,
                                          int index) {
  const HostShare& host = hosts[index];
  if (host.stage_link_port <= 0 || host.address.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        HostName(index, host.address),
        " runs a stage whose next stage is on another host, but the "
        "rendezvous gave no port for that link"));
  }
  return HostPort(host.address, host.stage_link_port);
}

}  // namespace

int CrossHostListener(const HostShare& host, int num_workers, int stages) {
  if (host.num_workers <= 0 || stages <= 1) return -1;
  const int last = host.first_rank + host.num_workers - 1;
  if (last % stages == stages - 1 || last + 1 >= num_workers) return -1;
  return last;
}

int CrossHostConnector(const HostShare& host, int stages) {
  if (host.num_workers <= 0 || stages <= 1) return -1;
  return host.first_rank % stages == 0 ? -1 : host.first_rank;
}

bool AnyCrossHostLink(const std::vector<HostShare>& hosts, int num_workers,
                      int stages) {
  for (const HostShare& host : hosts) {
    if (CrossHostListener(host, num_workers, stages) >= 0) return true;
  }
  return false;
}

absl::StatusOr<StageLinkPlan> PlanStageLinks(
    const std::vector<HostShare>& hosts, int host_index, int num_workers,
    int stages, const std::string& secret) {
  StageLinkPlan plan;
  const HostShare& mine = hosts[host_index];
  if (const int rank = CrossHostListener(mine, num_workers, stages);
      rank >= 0) {
    absl::StatusOr<std::string> address = ListenAddress(hosts, host_index);
    if (!address.ok()) return address.status();
    plan.listen[rank] = *address;
  }
  if (const int rank = CrossHostConnector(mine, stages); rank >= 0) {
    // The host whose block holds the previous stage.
    for (size_t i = 0; i < hosts.size(); ++i) {
      const HostShare& other = hosts[i];
      if (rank - 1 >= other.first_rank &&
          rank - 1 < other.first_rank + other.num_workers) {
        absl::StatusOr<std::string> address =
            ListenAddress(hosts, static_cast<int>(i));
        if (!address.ok()) return address.status();
        plan.previous[rank] = *address;
      }
    }
    if (plan.previous.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "no host runs rank ", rank - 1, ", the stage before rank ", rank));
    }
  }
  if (!plan.empty()) {
    if (secret.empty()) {
      return absl::InvalidArgumentError(
          "the rendezvous gave no secret for the stage links between hosts");
    }
    plan.secret = secret;
  }
  return plan;
}

absl::StatusOr<int> ReserveStageLinkPort(const std::string& address) {
  absl::StatusOr<TcpFrameListener> reserved = ListenTcpFrames(address, 0);
  if (!reserved.ok()) {
    return absl::Status(reserved.status().code(),
                        absl::StrCat("reserving a port for a stage link: ",
                                     reserved.status().message()));
  }
  // Closed here: the worker binds it again when it starts.
  return reserved->port;
}

}  // namespace ps
