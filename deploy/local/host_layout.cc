#include "deploy/local/host_layout.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace {

// Where block `i` of `count` items split over `parts` starts.
int BlockStart(int count, int parts, int i) {
  const int base = count / parts;
  const int extra = count % parts;
  return i * base + (i < extra ? i : extra);
}

}  // namespace

bool HostShare::operator==(const HostShare& other) const {
  return address == other.address && first_rank == other.first_rank &&
         num_workers == other.num_workers &&
         first_server == other.first_server &&
         num_servers == other.num_servers &&
         stage_link_port == other.stage_link_port;
}

absl::StatusOr<std::vector<HostShare>> PlanHosts(int num_hosts, int num_workers,
                                                 int num_servers,
                                                 int server_hosts) {
  if (num_hosts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num_hosts must be at least 1, got ", num_hosts));
  }
  if (server_hosts < 0 || (num_hosts > 1 && server_hosts >= num_hosts) ||
      (num_hosts == 1 && server_hosts != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--server_hosts must be in [0, --num_hosts - 1] = [0, ", num_hosts - 1,
        "] (0: servers beside the workers), got ", server_hosts));
  }
  const int worker_hosts = num_hosts - server_hosts;
  if (num_workers < worker_hosts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--num_workers=", num_workers, " is fewer than the ", worker_hosts,
        " hosts that run workers (--num_hosts=", num_hosts,
        ", --server_hosts=", server_hosts, "): each runs at least one"));
  }
  if (server_hosts > 0 && num_servers < server_hosts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--num_servers=", num_servers, " is fewer than --server_hosts=",
        server_hosts, ": each server host runs at least one shard"));
  }
  std::vector<HostShare> hosts(num_hosts);
  const int shard_hosts = server_hosts > 0 ? server_hosts : num_hosts;
  for (int i = 0; i < shard_hosts; ++i) {
    hosts[i].first_server = BlockStart(num_servers, shard_hosts, i);
    hosts[i].num_servers =
        BlockStart(num_servers, shard_hosts, i + 1) - hosts[i].first_server;
  }
  for (int i = 0; i < worker_hosts; ++i) {
    HostShare& host = hosts[server_hosts + i];
    host.first_rank = BlockStart(num_workers, worker_hosts, i);
    host.num_workers =
        BlockStart(num_workers, worker_hosts, i + 1) - host.first_rank;
  }
  return hosts;
}

std::string HostName(int index, const std::string& address) {
  return address.empty() ? absl::StrCat("host ", index)
                         : absl::StrCat("host ", index, " (", address, ")");
}

}  // namespace ps
