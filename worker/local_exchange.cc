#include "worker/local_exchange.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"

namespace ps::worker {

// Keeps the spans Send is given (as a push to the servers streams them) and
// applies them all when the push finishes.
class LocalExchange::LocalStepPush final : public StepPush {
 public:
  LocalStepPush(LocalExchange* exchange, uint32_t num_examples)
      : exchange_(exchange),
        num_examples_(num_examples),
        gradients_(exchange->model().tensors.size()),
        sent_(gradients_.size(), false) {}

  absl::Status Send(int tensor_id, absl::Span<const float> gradient) override {
    const ModelSpec& model = exchange_->model();
    if (tensor_id < 0 || tensor_id >= static_cast<int>(model.tensors.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor id ", tensor_id, " is not in [0, ",
                       model.tensors.size(), ")"));
    }
    const TensorSpec& spec = model.tensors[tensor_id];
    if (sent_[tensor_id]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "StepPush: tensor ", tensor_id, " \"", spec.name, "\" sent twice"));
    }
    if (gradient.size() != static_cast<size_t>(spec.num_elements())) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient of ", spec.name, " has ", gradient.size(),
                       " elements, the tensor ", spec.num_elements()));
    }
    gradients_[tensor_id] = gradient;
    sent_[tensor_id] = true;
    return absl::OkStatus();
  }

  absl::Status Finish() override {
    return exchange_->Apply(gradients_, num_examples_);
  }

  absl::StatusOr<uint64_t> FinishWithPull(TensorValues& weights) override {
    if (absl::Status s = Finish(); !s.ok()) return s;
    return exchange_->Pull(0, weights);
  }

 private:
  LocalExchange* const exchange_;
  const uint32_t num_examples_;
  std::vector<absl::Span<const float>> gradients_;
  std::vector<bool> sent_;
};

absl::StatusOr<std::unique_ptr<LocalExchange>> LocalExchange::Create(
    const ModelSpec& model, const update::OptimizerConfig& optimizer,
    std::optional<update::LearningRateSchedule> schedule) {
  absl::StatusOr<Partition> partition = Partition::Create(model, 1);
  if (!partition.ok()) return partition.status();
  absl::StatusOr<std::unique_ptr<update::ShardStore>> store =
      update::ShardStore::Create(*partition, 0, optimizer);
  if (!store.ok()) return store.status();
  return absl::WrapUnique(
      new LocalExchange(*std::move(partition), *std::move(store), schedule));
}

LocalExchange::LocalExchange(
    Partition partition, std::unique_ptr<update::ShardStore> store,
    std::optional<update::LearningRateSchedule> schedule)
    : partition_(std::move(partition)),
      store_(std::move(store)),
      schedule_(schedule) {}

Registration LocalExchange::Declare(uint64_t planned_steps) {
  planned_steps_ = planned_steps;
  Registration registration;
  registration.mode = ConsistencyMode::kSync;
  registration.num_workers = 1;
  return registration;
}

absl::StatusOr<uint64_t> LocalExchange::Pull(uint64_t /*clock*/,
                                             TensorValues& weights) {
  const ModelSpec& spec = model();
  weights.resize(spec.tensors.size());
  for (size_t t = 0; t < spec.tensors.size(); ++t) {
    weights[t].resize(spec.tensors[t].num_elements());
  }
  for (int i = 0; i < store_->num_slices(); ++i) {
    const Slice& slice = store_->slices()[i];
    const update::VersionedWeights::Version values = store_->ShareWeights(i);
    std::copy(values->begin(), values->end(),
              weights[slice.tensor_id].begin() + slice.offset);
  }
  return version_;
}

std::vector<update::SliceSnapshot> LocalExchange::Snapshot() const {
  std::vector<update::SliceSnapshot> slices;
  for (int i = 0; i < store_->num_slices(); ++i) {
    slices.push_back(store_->Snapshot(i));
  }
  return slices;
}

absl::Status LocalExchange::Restore(
    const std::vector<update::SliceSnapshot>& slices, uint64_t version) {
  if (absl::Status s = store_->Restore(slices); !s.ok()) return s;
  version_ = version;
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> LocalExchange::PullFinal(uint64_t clock,
                                                  TensorValues& weights) {
  return Pull(clock, weights);
}

std::unique_ptr<StepPush> LocalExchange::StartStep(const StepInfo& info,
                                                   bool /*pull_after*/) {
  return std::make_unique<LocalStepPush>(this, info.num_examples);
}

absl::Status LocalExchange::Apply(
    absl::Span<const absl::Span<const float>> gradients,
    uint32_t num_examples) {
  const ModelSpec& spec = model();
  for (size_t t = 0; t < gradients.size(); ++t) {
    if (gradients[t].size() !=
        static_cast<size_t>(spec.tensors[t].num_elements())) {
      return absl::InvalidArgumentError(
          absl::StrCat("the push sent no gradient of ", spec.tensors[t].name));
    }
  }
  // An empty share changes nothing but still takes its step, as on a
  // sync server.
  if (num_examples > 0) {
    std::optional<float> learning_rate;
    if (schedule_.has_value()) {
      learning_rate = schedule_->At(version_, planned_steps_);
    }
    for (int i = 0; i < store_->num_slices(); ++i) {
      const Slice& slice = store_->slices()[i];
      if (absl::Status s =
              store_->ApplyGradient(i,
                                    gradients[slice.tensor_id].subspan(
                                        slice.offset, slice.num_elements),
                                    learning_rate);
          !s.ok()) {
        return s;
      }
    }
  }
  ++version_;
  return absl::OkStatus();
}

}  // namespace ps::worker
