#ifndef PS_SERVER_STEP_PARTS_H_
#define PS_SERVER_STEP_PARTS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "server/push_stager.h"
#include "update/shard_store.h"
#include "update/update_log_record.h"

namespace ps::server {

// A sync step taken out of the parts, ready to be applied.
struct ReadyStep {
  uint64_t step = 0;
  // A worker-set learning rate (the lowest rank's that set one), else the
  // shard's schedule's; unset: the optimizer's own.
  std::optional<float> learning_rate;
  // The pushes of the ranks that took part with one, in rank order.
  std::vector<StagedPush> pushes;
};

// The parts of the sync step being collected: per rank, whether it has its
// part in the step (a push, or weight 0: StepView::has_part) and its push,
// and whether the step was taken and is being applied. Whether the step is
// ready is the policy's to say (ConsistencyPolicy::StepReady); which step it
// is, the coordinator's version.
//
// Not thread-safe: UpdateCoordinator holds its `mu_` around every call.
class StepParts {
 public:
  explicit StepParts(int num_workers);

  // Per rank: whether it has its part in the step being collected.
  const std::vector<bool>& has_part() const { return has_part_; }
  bool any_part() const;
  // The step was taken (Take) and is being applied.
  bool applying() const { return applying_; }

  // `push.rank`'s part, with its push.
  void Add(StagedPush push);
  // `rank`'s part with weight 0: it will not push this step here.
  void AddWithoutPush(int rank);

  // Takes step `step` out of the parts, which go on without the ranks
  // `missing` (logged when they change from the last step's): its pushes in
  // rank order, and the learning rate of the lowest rank that set one, else
  // `schedule_rate`. The parts stay marked until Applied, so a repeated push
  // is refused meanwhile.
  ReadyStep Take(uint64_t step, std::optional<float> schedule_rate,
                 std::vector<int> missing);
  // The step taken was applied (or failed): the parts are cleared for the
  // next.
  void Applied();
  // Drops every part and push (the shard was restored).
  void Clear();

 private:
  std::vector<bool> has_part_;
  // Per rank: its push for the step; none for a weight-0 part.
  std::vector<std::optional<StagedPush>> pending_;
  bool applying_ = false;
  // The ranks the last step went on without (to log changes only).
  std::vector<int> last_missing_;
};

// A sync step's update, as it is logged and applied (one home for both the
// live path and the replay of the update log, so they cannot diverge):
// the parts of the ranks that pushed, in rank order, and the mean of their
// gradients weighted by num_examples, g = sum_r (n_r * g_r) / sum_r n_r,
// summed in double in rank order, so that the result is the same bits
// whatever order the pushes arrived in. No mean when no push carries
// examples (nothing was learned). Reads the pushes where they lie.
update::LoggedStepMean StepMean(const update::ShardStore& store,
                                const ReadyStep& step);

// Applies `step`'s mean to `store` as one update at its learning rate;
// changes nothing without a mean. InvalidArgument, with nothing changed,
// if the mean does not cover the store's slices (a log of another shard
// layout). The caller holds no lock that a slice update takes (see
// UpdateCoordinator's lock order).
absl::Status ApplyStepMean(update::ShardStore& store,
                           const update::LoggedStepMean& step);

}  // namespace ps::server

#endif  // PS_SERVER_STEP_PARTS_H_
