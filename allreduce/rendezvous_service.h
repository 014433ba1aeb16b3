#ifndef PS_ALLREDUCE_RENDEZVOUS_SERVICE_H_
#define PS_ALLREDUCE_RENDEZVOUS_SERVICE_H_

#include <string>

#include "absl/time/time.h"
#include "allreduce/rendezvous_state.h"
#include "proto/ring_rendezvous.grpc.pb.h"

namespace ps::allreduce {

// The coordinator's gRPC face (proto/ring_rendezvous.proto): checks each
// request (job, worker count, sizes), then calls RendezvousState. Waits are
// capped at kMaxWait whatever the caller asks, so that no call holds a thread
// forever.
//
// Thread-safe (gRPC calls it from its threads). Borrows `state`, which must
// outlive it.
class RendezvousService final : public proto::RingRendezvous::Service {
 public:
  static constexpr absl::Duration kMaxWait = absl::Minutes(10);
  // Keys and values are a few hundred bytes (Gloo's addresses).
  static constexpr size_t kMaxKeyBytes = 1024;
  static constexpr size_t kMaxValueBytes = 1 << 20;
  static constexpr int kMaxKeysPerGet = 4096;

  RendezvousService(RendezvousState* state, std::string job_id);

  grpc::Status Join(grpc::ServerContext* context,
                    const proto::JoinRequest* request,
                    proto::JoinReply* reply) override;
  grpc::Status Set(grpc::ServerContext* context,
                   const proto::SetRequest* request,
                   proto::SetReply* reply) override;
  grpc::Status Get(grpc::ServerContext* context,
                   const proto::GetRequest* request,
                   proto::GetReply* reply) override;

 private:
  RendezvousState* const state_;
  const std::string job_id_;
};

}  // namespace ps::allreduce

#endif  // PS_ALLREDUCE_RENDEZVOUS_SERVICE_H_
