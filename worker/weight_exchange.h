#ifndef PS_WORKER_WEIGHT_EXCHANGE_H_
#define PS_WORKER_WEIGHT_EXCHANGE_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/parameter_client.h"
#include "common/model_spec.h"

namespace ps::worker {

// One step's gradients on their way to the weights (see StepPush, whose
// contract each implementation keeps).
class GradientPush {
 public:
  virtual ~GradientPush() = default;
  // `gradient` must stay valid and unchanged until Finish returns.
  virtual absl::Status Send(int tensor_id,
                            absl::Span<const float> gradient) = 0;
  virtual absl::Status Finish() = 0;
  // Finish, then the weights of the next clock into `weights`; returns
  // their version.
  virtual absl::StatusOr<uint64_t> FinishWithPull(TensorValues& weights) = 0;
};

// Where a Trainer's weights live: the parameter servers (ServerExchange) or
// this process alone (LocalExchange, the baseline that training through the
// servers is measured against). The verbs mean what ParameterClient's of
// the same names mean. Not thread-safe.
class WeightExchange {
 public:
  virtual ~WeightExchange() = default;
  virtual const ModelSpec& model() const = 0;
  virtual absl::StatusOr<uint64_t> Pull(uint64_t clock,
                                        TensorValues& weights) = 0;
  virtual absl::StatusOr<uint64_t> PullFinal(uint64_t clock,
                                             TensorValues& weights) = 0;
  virtual std::unique_ptr<GradientPush> StartStep(const StepInfo& info,
                                                  bool pull_with_push) = 0;
};

// Through the servers `client` (declared; borrowed) connects to.
std::unique_ptr<WeightExchange> ServerExchange(ParameterClient* client);

}  // namespace ps::worker

#endif  // PS_WORKER_WEIGHT_EXCHANGE_H_
