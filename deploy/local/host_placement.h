#ifndef PS_DEPLOY_LOCAL_HOST_PLACEMENT_H_
#define PS_DEPLOY_LOCAL_HOST_PLACEMENT_H_

#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

namespace ps {

// The port the rendezvous listens on when only its host is known (a Slurm
// node list): torchrun's default.
inline constexpr int kDefaultRendezvousPort = 29400;

// Where this launcher stands among the job's hosts, in torchrun's terms:
// how many hosts (--nnodes), which one this is (--node_rank) and where
// host 0's rendezvous listens (--rdzv_endpoint).
struct HostPlacement {
  int num_hosts = 1;
  int host_index = 0;
  // "HOST:PORT"; empty for one host.
  std::string rendezvous;
  // Where the numbers came from: "flags", "Slurm" or "Open MPI".
  std::string source = "flags";
};

// The flags as given (nullopt / "": not on the command line), completed from
// the scheduler's variables read through `lookup` (std::getenv):
//   Slurm (srun, one task per node): SLURM_NNODES hosts, this is
//     SLURM_NODEID, the rendezvous on the first host of SLURM_STEP_NODELIST
//     at kDefaultRendezvousPort;
//   Open MPI (mpirun, one process per node): OMPI_COMM_WORLD_SIZE hosts,
//     this is OMPI_COMM_WORLD_RANK; --rendezvous must be given.
// Flags win over the environment. Without flags or a scheduler: one host.
//
// InvalidArgument naming the flag or variable: --num_hosts below 1 or
// above 4096, a --host_index outside [0, --num_hosts), several hosts
// without a host index or rendezvous, a rendezvous that is not HOST:PORT,
// several launcher tasks on one node, or the scheduler's own error for a
// half-set environment.
absl::StatusOr<HostPlacement> ResolveHostPlacement(
    std::optional<int> num_hosts, std::optional<int> host_index,
    const std::string& rendezvous,
    absl::FunctionRef<const char*(const char*)> lookup);

// The address of this host's interface that reaches `host_port`'s host
// (where the kernel would route a packet to it; none is sent): what a host
// advertises when --advertise_address is not given. Unavailable when the
// name does not resolve or no route leads there.
absl::StatusOr<std::string> AddressTowards(const std::string& host_port);

// Splits "HOST:PORT" (HOST a name, an IPv4 or a bracketed IPv6 address).
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(
    const std::string& host_port);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_HOST_PLACEMENT_H_
