#include "allreduce/join_ring.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "allreduce/grpc_store.h"
#include "allreduce/rendezvous_client.h"

namespace ps::allreduce {

absl::StatusOr<JoinedRing> JoinRing(const RingOptions& options) {
  RendezvousClient client(options.coordinator);
  absl::StatusOr<uint64_t> round = client.Join(
      options.rank, options.num_workers, options.job_id, options.join_timeout);
  if (!round.ok()) {
    return absl::Status(
        round.status().code(),
        absl::StrCat("joining the ring at ", options.coordinator, ": ",
                     round.status().message()));
  }
  GrpcStore store(&client, absl::StrCat(options.job_id, "/", *round));
  GroupOptions group;
  group.rank = options.rank;
  group.size = options.num_workers;
  group.hostname = options.hostname;
  group.timeout = options.timeout;
  absl::StatusOr<std::unique_ptr<GlooGroup>> connected =
      GlooGroup::Connect(group, store);
  if (!connected.ok()) return connected.status();
  return JoinedRing{*round, *std::move(connected)};
}

}  // namespace ps::allreduce
