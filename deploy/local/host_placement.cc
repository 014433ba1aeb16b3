#include "deploy/local/host_placement.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/cluster_address.h"
#include "common/launch_environment.h"
#include "deploy/local/rendezvous_wire.h"

namespace ps {

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(
    const std::string& host_port) {
  if (absl::Status s = ValidateServerAddress(host_port); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rendezvous must be HOST:PORT (host 0's address and a free port, "
        "e.g. 10.0.0.1:",
        kDefaultRendezvousPort, "): ", s.message()));
  }
  const size_t colon = host_port.rfind(':');
  std::string host = host_port.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = 0;
  (void)absl::SimpleAtoi(host_port.substr(colon + 1), &port);
  return std::make_pair(host, port);
}

absl::StatusOr<HostPlacement> ResolveHostPlacement(
    std::optional<int> num_hosts, std::optional<int> host_index,
    const std::string& rendezvous,
    absl::FunctionRef<const char*(const char*)> lookup) {
  HostPlacement placement;
  std::optional<LaunchEnvironment> environment;
  if (!num_hosts.has_value()) {
    absl::StatusOr<std::optional<LaunchEnvironment>> read =
        ReadLaunchEnvironment(lookup);
    if (!read.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          read.status().message(),
          " (or give --num_hosts=1 to run the job on this host only)"));
    }
    environment = *read;
  }
  std::string found_rendezvous;
  if (environment.has_value()) {
    placement.source = SchedulerName(environment->scheduler);
    if (environment->local_num_tasks != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          placement.source, " started ", environment->local_num_tasks,
          " launch tasks on this node: run one per host (srun "
          "--ntasks-per-node=1, mpirun --map-by ppr:1:node), which starts "
          "that host's workers"));
    }
    if (environment->scheduler == Scheduler::kSlurm) {
      placement.num_hosts = environment->num_nodes;
      placement.host_index = environment->node_rank;
      if (!environment->nodes.empty()) {
        found_rendezvous =
            absl::StrCat(environment->nodes[0], ":", kDefaultRendezvousPort);
      }
    } else {
      placement.num_hosts = environment->num_tasks;
      placement.host_index = environment->rank;
    }
  } else if (num_hosts.has_value()) {
    placement.num_hosts = *num_hosts;
  }
  if (placement.num_hosts < 1 || placement.num_hosts > kMaxHosts) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num_hosts must be in [1, ", kMaxHosts, "], got ",
                     placement.num_hosts));
  }
  if (host_index.has_value()) {
    if (*host_index < 0 || *host_index >= placement.num_hosts) {
      return absl::InvalidArgumentError(
          absl::StrCat("--host_index must be in [0, --num_hosts) = [0, ",
                       placement.num_hosts, "), got ", *host_index));
    }
    placement.host_index = *host_index;
  } else if (!environment.has_value() && placement.num_hosts > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--num_hosts=", placement.num_hosts,
        " needs --host_index (this host's, 0 on the host that runs the "
        "rendezvous), or a launch under srun or mpirun"));
  }
  if (placement.num_hosts == 1) {
    placement.host_index = 0;
    return placement;
  }
  placement.rendezvous = rendezvous.empty() ? found_rendezvous : rendezvous;
  if (placement.rendezvous.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--num_hosts=", placement.num_hosts,
        " needs --rendezvous=HOST:PORT: host 0's address and a free port "
        "(e.g. :",
        kDefaultRendezvousPort, "), the same on every host"));
  }
  if (absl::StatusOr<std::pair<std::string, int>> split =
          SplitHostPort(placement.rendezvous);
      !split.ok()) {
    return split.status();
  }
  return placement;
}

absl::StatusOr<std::string> AddressTowards(const std::string& host_port) {
  absl::StatusOr<std::pair<std::string, int>> split = SplitHostPort(host_port);
  if (!split.ok()) return split.status();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const std::string port = absl::StrCat(split->second);
  if (const int error =
          getaddrinfo(split->first.c_str(), port.c_str(), &hints, &found);
      error != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", split->first,
                                               ": ", gai_strerror(error)));
  }
  std::string why = "no address";
  for (addrinfo* each = found; each != nullptr; each = each->ai_next) {
    const int fd = socket(each->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    // Connecting a UDP socket only chooses the route and source address.
    if (connect(fd, each->ai_addr, each->ai_addrlen) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) {
      why = strerror(errno);
      close(fd);
      continue;
    }
    close(fd);
    char text[INET6_ADDRSTRLEN] = {};
    const void* address =
        local.ss_family == AF_INET6
            ? static_cast<const void*>(
                  &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
            : static_cast<const void*>(
                  &reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
    if (inet_ntop(local.ss_family, address, text, sizeof(text)) == nullptr) {
      continue;
    }
    freeaddrinfo(found);
    return local.ss_family == AF_INET6 ? absl::StrCat("[", text, "]")
                                       : std::string(text);
  }
  freeaddrinfo(found);
  return absl::UnavailableError(absl::StrCat("no route from this host to ",
                                             host_port, " (", why,
                                             "): give --advertise_address"));
}

}  // namespace ps
