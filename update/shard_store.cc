#include "update/shard_store.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/cpu_affinity.h"
#include "common/initializer.h"

namespace ps::update {

namespace {

int ApplyThreads() {
  constexpr int kMaxThreads = 8;
  return std::min(UsableCpuCount(), kMaxThreads);
}

}  // namespace

ShardStore::ShardStore(const Partition& partition, int server_index,
                       const OptimizerConfig& optimizer)
    : partition_(partition),
      server_index_(server_index),
      optimizer_(optimizer),
      slices_(partition.SlicesOfServer(server_index)),
      pool_(std::make_unique<RangePool>(ApplyThreads())) {}

absl::StatusOr<std::unique_ptr<ShardStore>> ShardStore::Create(
    const Partition& partition, int server_index,
    const OptimizerConfig& optimizer) {
  if (server_index < 0 || server_index >= partition.num_servers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--server_index must be in [0, ", partition.num_servers(),
                     "), got ", server_index));
  }
  if (absl::Status s = ValidateOptimizerConfig(optimizer); !s.ok()) return s;
  std::unique_ptr<ShardStore> store(
      new ShardStore(partition, server_index, optimizer));
  OptimizerConfig without_decay = optimizer;
  without_decay.weight_decay = 0.0f;
  for (const Slice& slice : store->slices_) {
    const TensorSpec& spec = partition.model().tensors[slice.tensor_id];
    auto state = std::make_unique<SliceState>();
    absl::StatusOr<std::unique_ptr<Optimizer>> opt =
        spec.assigned
            ? CreateAssignment(slice.num_elements)
            : CreateOptimizer(spec.weight_decay ? optimizer : without_decay,
                              slice.num_elements);
    if (!opt.ok()) return opt.status();
    {
      std::vector<float> weights(slice.num_elements);
      InitializeSlice(partition.model(), slice.tensor_id, slice.offset,
                      absl::MakeSpan(weights));
      absl::MutexLock lock(&state->mu);
      state->weights = std::make_unique<VersionedWeights>(std::move(weights));
      state->optimizer = *std::move(opt);
      state->awaiting_values =
          spec.initializer.kind == InitializerSpec::Kind::kFromRank0;
      if (state->awaiting_values) ++store->slices_awaiting_values_;
    }
    store->num_elements_ += slice.num_elements;
    store->states_.push_back(std::move(state));
  }
  return store;
}

int ShardStore::FindSlice(uint32_t tensor_id, uint64_t offset,
                          uint64_t n) const {
  // First slice positioned after (tensor_id, offset); the candidate is the
  // one before it.
  auto it = std::upper_bound(
      slices_.begin(), slices_.end(), std::make_pair(tensor_id, offset),
      [](const std::pair<uint32_t, uint64_t>& key, const Slice& s) {
        return key.first != s.tensor_id ? key.first < s.tensor_id
                                        : key.second < s.offset;
      });
  if (it == slices_.begin()) return -1;
  --it;
  const Slice& s = *it;
  // Written to avoid overflow for hostile offsets and counts.
  if (s.tensor_id != tensor_id || n < 1 || offset < s.offset ||
      offset - s.offset >= s.num_elements ||
      n > s.num_elements - (offset - s.offset)) {
    return -1;
  }
  return static_cast<int>(it - slices_.begin());
}

VersionedWeights::Version ShardStore::ShareWeights(int slice) const {
  const SliceState& state = *states_[slice];
  absl::ReaderMutexLock lock(&state.mu);
  return state.weights->Share();
}

absl::Status ShardStore::ApplyGradient(int slice,
                                       absl::Span<const float> gradient,
                                       std::optional<float> learning_rate) {
  return UpdateSlice(slice, [&](Optimizer& optimizer, absl::Span<float> w) {
    return optimizer.Apply(gradient, w,
                           learning_rate.value_or(optimizer.learning_rate()),
                           pool_.get());
  });
}

absl::Status ShardStore::ApplyGradient(int slice, GradientReader gradient,
                                       std::optional<float> learning_rate) {
  return UpdateSlice(slice, [&](Optimizer& optimizer, absl::Span<float> w) {
    return optimizer.Apply(gradient, w,
                           learning_rate.value_or(optimizer.learning_rate()),
                           pool_.get());
  });
}

absl::Status ShardStore::UpdateSlice(
    int slice,
    absl::FunctionRef<absl::Status(Optimizer&, absl::Span<float>)> update) {
  if (slice < 0 || slice >= num_slices()) {
    return absl::OutOfRangeError(absl::StrCat("no slice ", slice));
  }
  SliceState& state = *states_[slice];
  absl::MutexLock lock(&state.mu);
  return update(*state.optimizer, state.weights->Writable());
}

uint64_t ShardStore::IncompleteUpdates() const {
  uint64_t incomplete = 0;
  for (const std::unique_ptr<SliceState>& state : states_) {
    absl::ReaderMutexLock lock(&state->mu);
    incomplete += state->optimizer->incomplete_updates();
  }
  return incomplete;
}

SliceSnapshot ShardStore::Snapshot(int slice) const {
  const SliceState& state = *states_[slice];
  absl::ReaderMutexLock lock(&state.mu);
  SliceSnapshot snapshot;
  snapshot.weights = state.weights->values();
  snapshot.update_count = state.optimizer->update_count();
  for (const OptimizerStateVector& v : state.optimizer->state()) {
    snapshot.state.emplace_back(
        v.name, std::vector<float>(v.values.begin(), v.values.end()));
  }
  return snapshot;
}

absl::Status ShardStore::CheckSliceState(int i,
                                         const SliceSnapshot& snap) const {
  const Slice& slice = slices_[i];
  const SliceState& state = *states_[i];
  absl::ReaderMutexLock lock(&state.mu);
  const std::vector<OptimizerStateVector> own = state.optimizer->state();
  bool same = own.size() == snap.state.size();
  for (size_t v = 0; same && v < own.size(); ++v) {
    same = own[v].name == snap.state[v].first &&
           own[v].values.size() == snap.state[v].second.size();
  }
  if (same) return absl::OkStatus();
  std::vector<std::string> names;
  for (const auto& [name, values] : snap.state) names.push_back(name);
  std::vector<std::string> own_names;
  for (const OptimizerStateVector& v : own) own_names.push_back(v.name);
  return absl::InvalidArgumentError(absl::StrCat(
      "slice ", i, " (tensor ", slice.tensor_id, " [", slice.offset, ", ",
      slice.offset + slice.num_elements, ")): checkpoint's optimizer state [",
      absl::StrJoin(names, ", "), "] does not match this optimizer's [",
      absl::StrJoin(own_names, ", "),
      "] (another --optimizer or --momentum?)"));
}

void ShardStore::CopyStateLocked(SliceState& state, const SliceSnapshot& snap) {
  state.optimizer->set_update_count(snap.update_count);
  std::vector<OptimizerStateVector> own = state.optimizer->state();
  for (size_t v = 0; v < own.size(); ++v) {
    std::copy(snap.state[v].second.begin(), snap.state[v].second.end(),
              own[v].values.begin());
  }
}

absl::Status ShardStore::Restore(const std::vector<SliceSnapshot>& slices) {
  if (slices.size() != slices_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint has ", slices.size(),
                     " slices, this shard holds ", slices_.size()));
  }
  // Check everything before changing anything.
  for (int i = 0; i < num_slices(); ++i) {
    const Slice& slice = slices_[i];
    const SliceSnapshot& snap = slices[i];
    if (snap.weights.size() != slice.num_elements) {
      return absl::InvalidArgumentError(absl::StrCat(
          "slice ", i, " (tensor ", slice.tensor_id, " [", slice.offset, ", ",
          slice.offset + slice.num_elements, ")): checkpoint has ",
          snap.weights.size(), " weights, expected ", slice.num_elements));
    }
    if (absl::Status s = CheckSliceState(i, snap); !s.ok()) return s;
  }
  for (int i = 0; i < num_slices(); ++i) {
    SliceState& state = *states_[i];
    absl::MutexLock lock(&state.mu);
    state.weights->Assign(slices[i].weights);
    // Checkpoints are written only once every value is in.
    if (state.awaiting_values) {
      state.awaiting_values = false;
      slices_awaiting_values_.fetch_sub(1, std::memory_order_release);
    }
    CopyStateLocked(state, slices[i]);
  }
  return absl::OkStatus();
}

SliceSnapshot ShardStore::SnapshotOptimizerState(int slice) const {
  const SliceState& state = *states_[slice];
  absl::ReaderMutexLock lock(&state.mu);
  SliceSnapshot snapshot;
  snapshot.update_count = state.optimizer->update_count();
  for (const OptimizerStateVector& v : state.optimizer->state()) {
    snapshot.state.emplace_back(
        v.name, std::vector<float>(v.values.begin(), v.values.end()));
  }
  return snapshot;
}

absl::Status ShardStore::RestoreOptimizerState(
    const std::vector<SliceSnapshot>& slices) {
  if (slices.size() != slices_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer state of ", slices.size(),
                     " slices, this shard holds ", slices_.size()));
  }
  for (int i = 0; i < num_slices(); ++i) {
    if (absl::Status s = CheckSliceState(i, slices[i]); !s.ok()) return s;
  }
  for (int i = 0; i < num_slices(); ++i) {
    SliceState& state = *states_[i];
    absl::MutexLock lock(&state.mu);
    CopyStateLocked(state, slices[i]);
  }
  return absl::OkStatus();
}

std::string ShardStore::FirstTensorAwaitingValues() const {
  for (int i = 0; i < num_slices(); ++i) {
    absl::ReaderMutexLock lock(&states_[i]->mu);
    if (states_[i]->awaiting_values) {
      return partition_.model().tensors[slices_[i].tensor_id].name;
    }
  }
  return "";
}

bool ShardStore::TakesValuesFromRank0(int slice) const {
  return partition_.model()
             .tensors[slices_[slice].tensor_id]
             .initializer.kind == InitializerSpec::Kind::kFromRank0;
}

bool ShardStore::SetInitialValues(
    absl::FunctionRef<void(int slice, absl::Span<float> out)> read) {
  absl::MutexLock upload(&initial_values_mu_);
  if (!awaiting_initial_values()) return false;
  for (int i = 0; i < num_slices(); ++i) {
    SliceState& state = *states_[i];
    absl::MutexLock lock(&state.mu);
    if (!state.awaiting_values) continue;
    read(i, state.weights->Writable());
    state.awaiting_values = false;
    slices_awaiting_values_.fetch_sub(1, std::memory_order_release);
  }
  return true;
}

std::vector<float> ShardStore::ReadSlice(int slice) const {
  const SliceState& state = *states_[slice];
  absl::ReaderMutexLock lock(&state.mu);
  return state.weights->values();
}

}  // namespace ps::update
