#ifndef PS_ALLREDUCE_RENDEZVOUS_CLIENT_H_
#define PS_ALLREDUCE_RENDEZVOUS_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/ring_rendezvous.grpc.pb.h"

namespace ps::allreduce {

// A worker's calls to the coordinator (proto/ring_rendezvous.proto), each
// returning the coordinator's status (Unavailable while it cannot be
// reached). Thread-safe (gRPC stubs are); owns its channel.
class RendezvousClient {
 public:
  // Plaintext, as Gloo's TCP transport is: the coordinator at "host:port".
  explicit RendezvousClient(const std::string& address);

  // Waits until every rank has joined; the round's number. The wait for
  // the coordinator to come up counts in `timeout`.
  absl::StatusOr<uint64_t> Join(int rank, int num_workers,
                                const std::string& job_id,
                                absl::Duration timeout);
  absl::Status Set(const std::string& key, const std::string& value);
  absl::StatusOr<std::vector<std::string>> Get(
      const std::vector<std::string>& keys, absl::Duration timeout);

 private:
  std::unique_ptr<proto::RingRendezvous::Stub> stub_;
};

}  // namespace ps::allreduce

#endif  // PS_ALLREDUCE_RENDEZVOUS_CLIENT_H_
