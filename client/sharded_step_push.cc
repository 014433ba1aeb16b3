#include "client/sharded_step_push.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/pull_reader.h"

namespace ps::client_internal {

ShardedStepPush::ShardedStepPush(const Partition* partition, PushKind kind,
                                 uint64_t step,
                                 const StreamFactory& open_stream,
                                 std::function<void(uint64_t)> on_pulled,
                                 TensorCompression* compression,
                                 std::vector<Compression> choices)
    : partition_(*partition),
      kind_(kind),
      step_(step),
      on_pulled_(std::move(on_pulled)),
      compression_(compression),
      choices_(std::move(choices)),
      sparse_(partition->model().tensors.size()),
      residuals_(partition->model().tensors.size()),
      sent_(partition->model().tensors.size(), false) {
  // A step reaches every shard, even one that holds no element: a sync
  // step waits for every rank's push. Initial values reach only the shards
  // that hold part of a kFromRank0 tensor.
  std::vector<bool> reached(partition->num_servers(),
                            kind != PushKind::kInitialValues);
  for (uint32_t t = 0; kind == PushKind::kInitialValues && t < sent_.size();
       ++t) {
    if (!Carries(t)) continue;
    for (const Slice& slice : partition_.SlicesOfTensor(t)) {
      reached[slice.server] = true;
    }
  }
  for (int s = 0; s < partition->num_servers(); ++s) {
    streams_.push_back(reached[s] ? open_stream(s) : nullptr);
  }
}

ShardedStepPush::~ShardedStepPush() = default;

bool ShardedStepPush::Carries(uint32_t id) const {
  return kind_ != PushKind::kInitialValues ||
         partition_.model().tensors[id].initializer.kind ==
             InitializerSpec::Kind::kFromRank0;
}

absl::Status ShardedStepPush::Send(int id, absl::Span<const float> gradient) {
  absl::MutexLock lock(&mu_);
  if (finished_) {
    return absl::FailedPreconditionError("StepPush: already finished");
  }
  const ModelSpec& model = partition_.model();
  if (id < 0 || static_cast<size_t>(id) >= sent_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "StepPush: no tensor ", id, " in a model of ", sent_.size()));
  }
  const TensorSpec& spec = model.tensors[id];
  if (sent_[id]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "StepPush: tensor ", id, " \"", spec.name, "\" sent twice"));
  }
  if (gradient.size() != static_cast<size_t>(spec.num_elements())) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient for ", spec.name, " has ", gradient.size(),
                     " elements, expected ", spec.num_elements()));
  }
  if (!Carries(id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "initial values for ", spec.name, ", which is not declared FromRank0"));
  }
  // Initial values are weights: always float32.
  const Compression choice = kind_ != PushKind::kInitialValues &&
                                     static_cast<size_t>(id) < choices_.size()
                                 ? choices_[id]
                                 : Compression();
  const float* data = gradient.data();
  if (choice.kind == Compression::Kind::kTopK && compression_ != nullptr) {
    sparse_[id] = compression_->Sparsify(id, gradient, choice.topk_ratio,
                                         &residuals_[id]);
    data = sparse_[id].data();
  }
  for (const Slice& slice : partition_.SlicesOfTensor(id)) {
    streams_[slice.server]->Enqueue({slice, data, PushEncoding(choice)});
  }
  sent_[id] = true;
  return absl::OkStatus();
}

absl::StatusOr<ShardedStepPush::Streams> ShardedStepPush::TakeComplete() {
  Streams streams;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (finished_) {
      return absl::FailedPreconditionError("StepPush: already finished");
    }
    finished_ = true;
    streams = std::move(streams_);
    for (uint32_t id = 0; id < sent_.size(); ++id) {
      if (Carries(id) && !sent_[id]) {
        status = absl::InvalidArgumentError(absl::StrCat(
            "StepPush: tensor ", id, " \"", partition_.model().tensors[id].name,
            "\" was not sent; the step was cancelled, nothing applied"));
        break;
      }
    }
  }
  // Outside the lock: cancelling (dropping the streams) waits for the calls
  // to end.
  if (!status.ok()) return status;
  return streams;
}

absl::Status ShardedStepPush::Finish() {
  if (kind_ == PushKind::kStepPullAfter) {
    return absl::FailedPreconditionError(
        "StepPush: a step started with pull_after ends with FinishWithPull");
  }
  absl::StatusOr<Streams> streams = TakeComplete();
  if (!streams.ok()) return streams.status();
  if (absl::Status s = JoinStreams(*streams, nullptr, nullptr); !s.ok()) {
    return s;
  }
  CommitResiduals();
  return absl::OkStatus();
}

void ShardedStepPush::CommitResiduals() {
  if (compression_ == nullptr) return;
  absl::MutexLock lock(&mu_);
  for (size_t id = 0; id < sparse_.size(); ++id) {
    if (sent_[id] && choices_.size() > id &&
        choices_[id].kind == Compression::Kind::kTopK) {
      compression_->Commit(static_cast<int>(id), std::move(residuals_[id]));
    }
  }
}

absl::StatusOr<uint64_t> ShardedStepPush::FinishWithPull(
    TensorValues& weights) {
  if (kind_ != PushKind::kStepPullAfter) {
    return absl::FailedPreconditionError(
        "StepPush: a step started without pull_after pulls nothing; it ends "
        "with Finish");
  }
  absl::StatusOr<Streams> streams = TakeComplete();
  if (!streams.ok()) return streams.status();
  ShapeWeights(partition_.model(), weights);
  std::vector<uint64_t> versions(streams->size(), 0);
  if (absl::Status s = JoinStreams(*streams, &weights, &versions); !s.ok()) {
    return s;
  }
  CommitResiduals();
  on_pulled_(step_ + 1);
  return *std::min_element(versions.begin(), versions.end());
}

absl::Status ShardedStepPush::JoinStreams(const Streams& streams,
                                          TensorValues* weights,
                                          std::vector<uint64_t>* versions) {
  // Every stream ends its push before any is waited for: a shard's answer
  // may wait (sync) for other ranks, whose pushes to the next shards may
  // wait for this rank's. Closed one after another, a rank whose push one
  // shard refused left the others' steps waiting on the next shard.
  for (const std::unique_ptr<PushStream>& stream : streams) {
    if (stream != nullptr) stream->Close(weights);
  }
  absl::Status first_error;
  for (size_t s = 0; s < streams.size(); ++s) {
    if (streams[s] == nullptr) continue;
    absl::Status status = streams[s]->Join();
    if (first_error.ok()) first_error = status;
    if (versions != nullptr) (*versions)[s] = streams[s]->pulled_version();
  }
  return first_error;
}

}  // namespace ps::client_internal
