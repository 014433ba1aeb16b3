#ifndef PS_ALLREDUCE_JOIN_RING_H_
#define PS_ALLREDUCE_JOIN_RING_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "allreduce/gloo_group.h"

namespace ps::allreduce {

struct RingOptions {
  std::string coordinator;  // "host:port" of allreduce/coordinator_main.
  int rank = 0;
  int num_workers = 1;
  std::string job_id;
  // This rank's address as its peers reach it (GroupOptions::hostname).
  std::string hostname;
  // Waiting for the coordinator and the other ranks to join.
  absl::Duration join_timeout = absl::Seconds(120);
  // Forming the ring and each collective (GroupOptions::timeout).
  absl::Duration timeout = absl::Seconds(60);
};

struct JoinedRing {
  uint64_t round = 0;
  std::unique_ptr<GlooGroup> group;
};

// Joins the coordinator's current round (proto/ring_rendezvous.proto) and forms
// that round's ring, its keys under "<job_id>/<round>". Each worker calls
// this at start, and a restarted one again: its peers' collectives then fail
// and they must join the next round too. Unavailable / DeadlineExceeded when
// the coordinator or a peer cannot be reached; FailedPrecondition when the
// coordinator serves another job or worker count.
absl::StatusOr<JoinedRing> JoinRing(const RingOptions& options);

}  // namespace ps::allreduce

#endif  // PS_ALLREDUCE_JOIN_RING_H_
