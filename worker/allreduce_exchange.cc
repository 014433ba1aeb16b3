#include "worker/allreduce_exchange.h"

#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"

namespace ps::worker {

// Puts each gradient, times this rank's example count, into its bucket.
class AllreduceExchange::AllreduceStepPush final : public StepPush {
 public:
  AllreduceStepPush(AllreduceExchange* exchange, const StepInfo& info)
      : exchange_(exchange), info_(info) {
    status_ = exchange_->reduce_->Begin();
    if (status_.ok()) {
      // The count is the last tensor: first to go, in the first bucket.
      const float one = 1.0f;
      status_ = exchange_->reduce_->Add(
          static_cast<int>(exchange_->model().tensors.size()),
          absl::MakeConstSpan(&one, 1), static_cast<float>(info.num_examples));
    }
  }

  absl::Status Send(int tensor_id, absl::Span<const float> gradient) override {
    if (!status_.ok()) return status_;
    if (tensor_id < 0 ||
        tensor_id >= static_cast<int>(exchange_->model().tensors.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor id ", tensor_id, " is not in [0, ",
                       exchange_->model().tensors.size(), ")"));
    }
    return exchange_->reduce_->Add(tensor_id, gradient,
                                   static_cast<float>(info_.num_examples));
  }

  absl::Status Finish() override {
    if (!status_.ok()) return status_;
    return exchange_->FinishStep(info_);
  }

  absl::StatusOr<uint64_t> FinishWithPull(TensorValues& weights) override {
    if (absl::Status s = Finish(); !s.ok()) return s;
    return exchange_->Pull(0, weights);
  }

 private:
  AllreduceExchange* const exchange_;
  const StepInfo info_;
  absl::Status status_;
};

absl::StatusOr<std::unique_ptr<AllreduceExchange>> AllreduceExchange::Create(
    std::unique_ptr<LocalExchange> local,
    std::unique_ptr<allreduce::GlooGroup> group, size_t bucket_bytes) {
  std::vector<size_t> sizes;
  for (const TensorSpec& tensor : local->model().tensors) {
    sizes.push_back(tensor.num_elements());
  }
  sizes.push_back(1);  // The step's example count.
  auto exchange = absl::WrapUnique(
      new AllreduceExchange(std::move(local), std::move(group)));
  absl::StatusOr<std::unique_ptr<allreduce::BucketedAllreduce>> reduce =
      allreduce::BucketedAllreduce::Create(exchange->group_.get(),
                                           std::move(sizes), bucket_bytes);
  if (!reduce.ok()) return reduce.status();
  exchange->reduce_ = *std::move(reduce);
  return exchange;
}

AllreduceExchange::AllreduceExchange(
    std::unique_ptr<LocalExchange> local,
    std::unique_ptr<allreduce::GlooGroup> group)
    : local_(std::move(local)), group_(std::move(group)) {
  const ModelSpec& spec = local_->model();
  mean_.resize(spec.tensors.size());
  for (size_t t = 0; t < spec.tensors.size(); ++t) {
    mean_[t].resize(spec.tensors[t].num_elements());
  }
}

AllreduceExchange::~AllreduceExchange() = default;

Registration AllreduceExchange::Declare(uint64_t planned_steps) {
  Registration registration = local_->Declare(planned_steps);
  registration.num_workers = group_->size();
  return registration;
}

absl::StatusOr<uint64_t> AllreduceExchange::Pull(uint64_t clock,
                                                 TensorValues& weights) {
  return local_->Pull(clock, weights);
}

absl::StatusOr<uint64_t> AllreduceExchange::PullFinal(uint64_t clock,
                                                      TensorValues& weights) {
  return local_->PullFinal(clock, weights);
}

std::unique_ptr<StepPush> AllreduceExchange::StartStep(const StepInfo& info,
                                                       bool /*pull_after*/) {
  return std::make_unique<AllreduceStepPush>(this, info);
}

absl::Status AllreduceExchange::FinishStep(const StepInfo& info) {
  if (absl::Status s = reduce_->Wait(); !s.ok()) return s;
  const size_t num_tensors = mean_.size();
  const double total = reduce_->Reduced(static_cast<int>(num_tensors))[0];
  StepInfo step = info;
  step.num_examples = static_cast<uint32_t>(total);
  std::unique_ptr<StepPush> apply = local_->StartStep(step, false);
  for (size_t t = 0; t < num_tensors; ++t) {
    absl::Span<const float> sum = reduce_->Reduced(static_cast<int>(t));
    std::vector<float>& mean = mean_[t];
    // As a sync server divides its sum: in double, rounded once.
    for (size_t i = 0; i < sum.size(); ++i) {
      mean[i] = total > 0 ? static_cast<float>(sum[i] / total) : 0.0f;
    }
    if (absl::Status s = apply->Send(static_cast<int>(t), mean); !s.ok()) {
      return s;
    }
  }
  return apply->Finish();
}

}  // namespace ps::worker
