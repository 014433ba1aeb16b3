#ifndef PS_DEPLOY_LOCAL_HOST_LAYOUT_H_
#define PS_DEPLOY_LOCAL_HOST_LAYOUT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ps {

// What one host of a multi-host job runs: workers of ranks [first_rank,
// first_rank + num_workers) and server shards [first_server, first_server +
// num_servers). `address` is where its servers are reached (empty until the
// host joined the rendezvous).
struct HostShare {
  std::string address;
  int first_rank = 0;
  int num_workers = 0;
  int first_server = 0;
  int num_servers = 0;
  // A pipelined job: the TCP port on `address` at which this host's last
  // stage listens for its next stage on the next host; 0: none
  // (stage_links.h).
  int stage_link_port = 0;

  bool operator==(const HostShare& other) const;
};

// Splits a job's `num_workers` workers and `num_servers` shards over
// `num_hosts` hosts, in contiguous blocks, the first hosts taking one more
// where they do not divide evenly. `server_hosts` 0: every host runs
// workers and its share of the shards (co-located, as BytePS and ps-lite
// deploy; a host may get no shard when there are fewer shards than hosts).
// Else hosts [0, server_hosts) run only shards and the others only
// workers.
//
// InvalidArgument naming the flag (--num_hosts, --num_workers,
// --num_servers, --server_hosts) when a host would have nothing to do: fewer
// workers than hosts that run workers, fewer shards than server hosts, or no
// host left for workers.
absl::StatusOr<std::vector<HostShare>> PlanHosts(int num_hosts, int num_workers,
                                                 int num_servers,
                                                 int server_hosts);

// "host 1 (10.250.89.2)", or "host 1" before its address is known: how
// messages name a host.
std::string HostName(int index, const std::string& address);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_HOST_LAYOUT_H_
