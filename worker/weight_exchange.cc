#include "worker/weight_exchange.h"

#include <utility>

namespace ps::worker {
namespace {

class ServerPush final : public GradientPush {
 public:
  explicit ServerPush(std::unique_ptr<StepPush> push)
      : push_(std::move(push)) {}

  absl::Status Send(int tensor_id, absl::Span<const float> gradient) override {
    return push_->Send(tensor_id, gradient);
  }
  absl::Status Finish() override { return push_->Finish(); }
  absl::StatusOr<uint64_t> FinishWithPull(TensorValues& weights) override {
    return push_->FinishWithPull(weights);
  }

 private:
  const std::unique_ptr<StepPush> push_;
};

class ServerWeights final : public WeightExchange {
 public:
  explicit ServerWeights(ParameterClient* client) : client_(client) {}

  const ModelSpec& model() const override { return client_->model(); }
  absl::StatusOr<uint64_t> Pull(uint64_t clock,
                                TensorValues& weights) override {
    return client_->Pull(clock, weights);
  }
  absl::StatusOr<uint64_t> PullFinal(uint64_t clock,
                                     TensorValues& weights) override {
    return client_->PullFinal(clock, weights);
  }
  std::unique_ptr<GradientPush> StartStep(const StepInfo& info,
                                          bool pull_with_push) override {
    return std::make_unique<ServerPush>(
        client_->StartStep(info, pull_with_push));
  }

 private:
  ParameterClient* const client_;
};

}  // namespace

std::unique_ptr<WeightExchange> ServerExchange(ParameterClient* client) {
  return std::make_unique<ServerWeights>(client);
}

}  // namespace ps::worker
