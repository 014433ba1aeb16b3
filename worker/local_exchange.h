#ifndef PS_WORKER_LOCAL_EXCHANGE_H_
#define PS_WORKER_LOCAL_EXCHANGE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "update/lr_schedule.h"
#include "update/optimizer.h"
#include "update/shard_store.h"
#include "worker/weight_exchange.h"

namespace ps::worker {

// The weights in this process, initialised and updated by the servers' own
// code (a one-shard ShardStore, the same optimizer and learning-rate
// schedule): one worker trains here what it would with one sync server,
// bit for bit, without a transfer. The local baseline of our worker
// (--local), that training through the servers is measured against.
//
// Every step is applied when its push (a StepPush of its own, keeping that
// contract) finishes; pulls return the current weights at once, whatever
// the clock, so a push's `pull_after` changes nothing. Not thread-safe.
class LocalExchange final : public WeightExchange {
 public:
  // With no `schedule`, every update has the optimizer's learning rate.
  static absl::StatusOr<std::unique_ptr<LocalExchange>> Create(
      const ModelSpec& model, const update::OptimizerConfig& optimizer,
      std::optional<update::LearningRateSchedule> schedule);

  // What ParameterClient::Declare is to servers: the schedule spans
  // `planned_steps` updates; a new job in sync mode for one worker.
  Registration Declare(uint64_t planned_steps);

  const ModelSpec& model() const override { return partition_.model(); }
  const Partition& partition() const { return partition_; }
  // Steps applied so far, and the steps the schedule spans.
  uint64_t version() const { return version_; }
  uint64_t planned_steps() const { return planned_steps_; }

  // The weights and optimizer state of every slice, for a checkpoint.
  std::vector<update::SliceSnapshot> Snapshot() const;
  // Takes a checkpoint's slices and the version they were taken at;
  // nothing changes on error (ShardStore::Restore).
  absl::Status Restore(const std::vector<update::SliceSnapshot>& slices,
                       uint64_t version);
  absl::StatusOr<uint64_t> Pull(uint64_t clock, TensorValues& weights) override;
  absl::StatusOr<uint64_t> PullFinal(uint64_t clock,
                                     TensorValues& weights) override;
  std::unique_ptr<StepPush> StartStep(const StepInfo& info,
                                      bool pull_after) override;

 private:
  class LocalStepPush;

  LocalExchange(Partition partition, std::unique_ptr<update::ShardStore> store,
                std::optional<update::LearningRateSchedule> schedule);

  // Applies one step's gradients (one span per tensor, each complete).
  absl::Status Apply(absl::Span<const absl::Span<const float>> gradients,
                     uint32_t num_examples);

  const Partition partition_;
  const std::unique_ptr<update::ShardStore> store_;
  const std::optional<update::LearningRateSchedule> schedule_;
  uint64_t planned_steps_ = 0;
  uint64_t version_ = 0;
};

}  // namespace ps::worker

#endif  // PS_WORKER_LOCAL_EXCHANGE_H_
