#ifndef PS_ALLREDUCE_RING_TESTING_H_
#define PS_ALLREDUCE_RING_TESTING_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "allreduce/gloo_group.h"
#include "allreduce/rendezvous_service.h"
#include "allreduce/rendezvous_state.h"
#include "grpcpp/grpcpp.h"

namespace ps::allreduce {

// For tests: forms a ring of `size` ranks in threads of this process (TCP
// over 127.0.0.1, rendezvous in memory) and runs `body` on each rank's
// thread; returns once every thread has. A rank that cannot connect fails
// the test.
void RunRingInThreads(int size, const std::function<void(GlooGroup&)>& body,
                      absl::Duration timeout = absl::Seconds(60));

// For tests: `n` floats m * 2^e, m uniform in (-1, 1) and e in
// [min_exponent, max_exponent], from a generator seeded with `seed`: values
// across many binades, so that the order and precision of sums show in the
// bits.
std::vector<float> SpreadValues(int seed, size_t n, int min_exponent,
                                int max_exponent);

// For tests: a coordinator (RendezvousService) for `num_workers` of job
// `job_id` on a free loopback port, until destroyed.
class InProcessCoordinator {
 public:
  InProcessCoordinator(int num_workers, const std::string& job_id);
  ~InProcessCoordinator();

  std::string address() const;
  void Shutdown() { server_->Shutdown(); }

 private:
  RendezvousState state_;
  RendezvousService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace ps::allreduce

#endif  // PS_ALLREDUCE_RING_TESTING_H_
