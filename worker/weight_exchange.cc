#include "worker/weight_exchange.h"

#include <utility>

namespace ps::worker {
namespace {

class ServerWeights final : public WeightExchange {
 public:
  explicit ServerWeights(ParameterClient* client) : client_(client) {}

  const ModelSpec& model() const override { return client_->model(); }
  absl::StatusOr<uint64_t> Pull(uint64_t clock,
                                TensorValues& weights) override {
    return client_->Pull(clock, weights);
  }
  // The final weights are evaluated and saved: the servers' float32, not
  // what the wire's compression makes of them.
  absl::StatusOr<uint64_t> PullFinal(uint64_t clock,
                                     TensorValues& weights) override {
    for (size_t id = 0; id < client_->model().tensors.size(); ++id) {
      if (absl::Status s =
              client_->SetCompression(static_cast<int>(id), Compression());
          !s.ok()) {
        return s;
      }
    }
    return client_->PullFinal(clock, weights);
  }
  std::unique_ptr<StepPush> StartStep(const StepInfo& info,
                                      bool pull_after) override {
    return client_->StartStep(info, pull_after);
  }

 private:
  ParameterClient* const client_;
};

}  // namespace

std::unique_ptr<WeightExchange> ServerExchange(ParameterClient* client) {
  return std::make_unique<ServerWeights>(client);
}

}  // namespace ps::worker
