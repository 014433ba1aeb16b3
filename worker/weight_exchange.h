#ifndef PS_WORKER_WEIGHT_EXCHANGE_H_
#define PS_WORKER_WEIGHT_EXCHANGE_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "client/parameter_client.h"
#include "common/model_spec.h"

namespace ps::worker {

// Where a Trainer's weights live: the parameter servers (ServerExchange) or
// this process alone (LocalExchange, the baseline that training through the
// servers is measured against). The verbs mean what ParameterClient's of
// the same names mean; a step's push is a ps::StepPush (its contract in
// client/parameter_client.h), the client's own through the servers. Not
// thread-safe.
class WeightExchange {
 public:
  virtual ~WeightExchange() = default;
  virtual const ModelSpec& model() const = 0;
  virtual absl::StatusOr<uint64_t> Pull(uint64_t clock,
                                        TensorValues& weights) = 0;
  virtual absl::StatusOr<uint64_t> PullFinal(uint64_t clock,
                                             TensorValues& weights) = 0;
  // The push must not outlive this exchange.
  virtual std::unique_ptr<StepPush> StartStep(const StepInfo& info,
                                              bool pull_after) = 0;
};

// Through the servers `client` (declared; borrowed) connects to.
std::unique_ptr<WeightExchange> ServerExchange(ParameterClient* client);

}  // namespace ps::worker

#endif  // PS_WORKER_WEIGHT_EXCHANGE_H_
