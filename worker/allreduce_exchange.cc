#include "worker/allreduce_exchange.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "update/checkpoint.h"
#include "worker/ring_checkpoint.h"

namespace ps::worker {

// Puts each gradient, times this rank's example count, into its bucket.
class AllreduceExchange::AllreduceStepPush final : public StepPush {
 public:
  AllreduceStepPush(AllreduceExchange* exchange, const StepInfo& info)
      : exchange_(exchange), info_(info) {
    status_ = exchange_->reduce_->Begin();
    if (status_.ok()) {
      // The step record is the last tensor: first to go, in the first
      // bucket. Float holds counts below 2^24 exactly.
      std::vector<float>& record = exchange_->record_;
      std::fill(record.begin(), record.end(), 0.0f);
      record[0] = static_cast<float>(info.num_examples);
      record[1 + exchange_->group_->rank()] =
          static_cast<float>(info.cursor.examples_done);
      status_ = exchange_->reduce_->Add(
          static_cast<int>(exchange_->model().tensors.size()), record, 1.0f);
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

absl::StatusOr<bool> UseNccl(absl::string_view backend, bool device_is_cuda,
                             const absl::Status& nccl_available) {
  if (backend == "gloo") return false;
  if (backend == "auto") return device_is_cuda && nccl_available.ok();
  if (backend != "nccl") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--allreduce_backend=", backend, " is not auto, gloo or nccl"));
  }
  if (!device_is_cuda) {
    return absl::InvalidArgumentError(
        "--allreduce_backend=nccl needs a CUDA worker (--device=cuda): NCCL "
        "sums GPU memory; use gloo on CPUs");
  }
  if (!nccl_available.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--allreduce_backend=nccl: ", nccl_available.message()));
  }
  return true;
}

uint64_t GpuKey(absl::string_view hostname, int cuda_device) {
  const uint64_t host = std::hash<std::string_view>{}(std::string_view(
                            hostname.data(), hostname.size())) &
                        0x7fffff;
  return uint64_t{1} << 47 | host << 24 |
         (static_cast<uint64_t>(cuda_device) & 0xffffff);
}

absl::StatusOr<std::vector<uint64_t>> GatherGpuKeys(allreduce::GlooGroup& group,
                                                    uint64_t key) {
  const int rank = group.rank();
  const int size = group.size();
  // Two 24-bit halves a rank, exact in float32; the other ranks' slots are
  // zero, so the sum is each rank's own.
  constexpr uint32_t kGpuKeysTag = 0x47505553;  // "GPUS"
  std::vector<float> slots(2 * static_cast<size_t>(size), 0.0f);
  slots[2 * rank] = static_cast<float>(key >> 24);
  slots[2 * rank + 1] = static_cast<float>(key & 0xffffff);
  if (absl::Status s = group.AllreduceSum(absl::MakeSpan(slots), kGpuKeysTag);
      !s.ok()) {
    return s;
  }
  std::vector<uint64_t> keys(size);
  for (int r = 0; r < size; ++r) {
    keys[r] = static_cast<uint64_t>(slots[2 * r]) << 24 |
              static_cast<uint64_t>(slots[2 * r + 1]);
  }
  return keys;
}

std::optional<std::pair<int, int>> FirstSharedGpu(
    absl::Span<const uint64_t> keys) {
  for (size_t b = 1; b < keys.size(); ++b) {
    for (size_t a = 0; a < b; ++a) {
      if (keys[a] == keys[b]) {
        return std::make_pair(static_cast<int>(a), static_cast<int>(b));
      }
    }
  }
  return std::nullopt;
}

std::string WhyNotNccl(absl::Span<const uint64_t> keys) {
  for (size_t r = 0; r < keys.size(); ++r) {
    if (keys[r] == kNoGpuKey) {
      return absl::StrCat("rank ", r,
                          " cannot use NCCL (a CPU worker, or no NCCL there)");
    }
  }
  if (std::optional<std::pair<int, int>> shared = FirstSharedGpu(keys)) {
    return absl::StrCat("ranks ", shared->first, " and ", shared->second,
                        " share one GPU, and NCCL needs a GPU per rank");
  }
  return "";
}

absl::StatusOr<std::unique_ptr<AllreduceExchange>> AllreduceExchange::Create(
    std::unique_ptr<LocalExchange> local,
    std::unique_ptr<allreduce::GlooGroup> group,
    const AllreduceOptions& options,
    std::unique_ptr<allreduce::BucketReducer> reducer) {
  if (reducer != nullptr &&
      (reducer->rank() != group->rank() || reducer->size() != group->size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the bucket reducer is rank ", reducer->rank(), " of ", reducer->size(),
        ", the ring rank ", group->rank(), " of ", group->size()));
  }
  std::vector<size_t> sizes;
  for (const TensorSpec& tensor : local->model().tensors) {
    sizes.push_back(tensor.num_elements());
  }
  sizes.push_back(1 + group->size());  // The step record.
  // Uncompressed, the record shares the last layer's bucket (one
  // collective fewer); compressed, it needs a bucket of its own.
  std::vector<int> exact;
  if (options.compression != allreduce::Compression::kNone) {
    exact.push_back(static_cast<int>(sizes.size()) - 1);
  }
  auto exchange = absl::WrapUnique(new AllreduceExchange(
      std::move(local), std::move(group), options, std::move(reducer)));
  allreduce::BucketReducer* sums = exchange->reducer_ != nullptr
                                       ? exchange->reducer_.get()
                                       : exchange->group_.get();
  absl::StatusOr<std::unique_ptr<allreduce::BucketedAllreduce>> reduce =
      allreduce::BucketedAllreduce::Create(sums, std::move(sizes),
                                           options.bucket_bytes,
                                           options.compression, exact);
  if (!reduce.ok()) return reduce.status();
  exchange->reduce_ = *std::move(reduce);
  return exchange;
}

AllreduceExchange::AllreduceExchange(
    std::unique_ptr<LocalExchange> local,
    std::unique_ptr<allreduce::GlooGroup> group, AllreduceOptions options,
    std::unique_ptr<allreduce::BucketReducer> reducer)
    : local_(std::move(local)),
      group_(std::move(group)),
      options_(std::move(options)),
      reducer_(std::move(reducer)),
      cursors_(group_->size()),
      record_(1 + group_->size()) {
  const ModelSpec& spec = local_->model();
  mean_.resize(spec.tensors.size());
  for (size_t t = 0; t < spec.tensors.size(); ++t) {
    mean_[t].resize(spec.tensors[t].num_elements());
  }
}

AllreduceExchange::~AllreduceExchange() = default;

absl::StatusOr<Registration> AllreduceExchange::Declare(
    uint64_t planned_steps) {
  Registration registration = local_->Declare(planned_steps);
  registration.num_workers = group_->size();
  if (options_.checkpoint_dir.empty()) return registration;
  std::optional<update::ShardCheckpoint> newest;
  if (group_->rank() == 0) {
    absl::StatusOr<std::optional<update::LoadedCheckpoint>> loaded =
        update::LoadNewestCheckpoint(options_.checkpoint_dir,
                                     RingIdentity(group_->size()));
    // The others wait in ShareFromRank0 until their timeout: rank 0's
    // error is the one that says why.
    if (!loaded.ok()) return loaded.status();
    if (loaded->has_value()) newest = std::move((*loaded)->checkpoint);
  }
  absl::StatusOr<std::optional<update::ShardCheckpoint>> shared =
      ShareFromRank0(*group_, newest);
  if (!shared.ok()) return shared.status();
  if (!shared->has_value()) return registration;
  absl::StatusOr<Registration> resumed =
      RestoreRingCheckpoint(**shared, group_->rank(), *local_);
  if (!resumed.ok()) return resumed.status();
  for (size_t r = 0; r < cursors_.size(); ++r) {
    cursors_[r] = {(*shared)->ranks[r].progress.epoch,
                   (*shared)->ranks[r].progress.examples_done};
  }
  return resumed;
}

absl::Status AllreduceExchange::WriteCheckpoint() {
  if (group_->rank() != 0 || options_.checkpoint_dir.empty()) {
    return absl::OkStatus();
  }
  return update::WriteCheckpoint(options_.checkpoint_dir,
                                 TakeRingCheckpoint(*local_, cursors_))
      .status();
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
  absl::Span<const float> record =
      reduce_->Reduced(static_cast<int>(num_tensors));
  const double total = record[0];
  for (size_t r = 0; r < cursors_.size(); ++r) {
    // The ranks move in step: every one is in this step's epoch.
    cursors_[r] = {info.cursor.epoch, static_cast<uint64_t>(record[1 + r])};
  }
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
  if (absl::Status s = apply->Finish(); !s.ok()) return s;
  if (options_.checkpoint_every_steps > 0 &&
      local_->version() % options_.checkpoint_every_steps == 0) {
    return WriteCheckpoint();
  }
  return absl::OkStatus();
}

}  // namespace ps::worker
