#ifndef PS_SERVER_CONSISTENCY_POLICY_H_
#define PS_SERVER_CONSISTENCY_POLICY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/consistency_mode.h"
#include "server/rank_registry.h"

namespace ps::server {

// What a policy decides on: the coordinator's state, read under its lock.
struct StepView {
  // Updates applied; in sync, also the step being collected.
  uint64_t version = 0;
  // sync: step `version` was taken and is being applied.
  bool applying = false;
  // sync: per rank, whether it has its part in step `version` (a push, or
  // weight 0).
  const std::vector<bool>& has_part;
  const RankRegistry& ranks;
};

// The rules of one consistency mode: when a push is taken and whether it
// waits for a step, when a pull may be answered, and who waits for whom.
// UpdateCoordinator keeps the state and applies updates; it asks its policy,
// chosen once from the mode, for every such decision.
//
// A pull for step t asks for the weights step t trains on (its rank has done
// steps [0, t)); a rank's next step is the step after its last.
//
// - sync: a push for step t is taken while version == t and waits in the
//   step; step t is applied once every active rank has its part; a pull for
//   step t waits until version >= t.
// - ssp(s): each push is applied as it comes; a pull for step t waits until
//   every active rank's next step is >= t - s.
// - async: each push is applied as it comes; a pull never waits.
//
// Immutable after construction; the decisions read only their arguments, so
// any thread may call them (the coordinator does under its lock).
class ConsistencyPolicy {
 public:
  // `staleness` is ssp's bound s (>= 0); the other modes ignore it.
  static std::unique_ptr<ConsistencyPolicy> Create(ConsistencyMode mode,
                                                   int staleness);
  virtual ~ConsistencyPolicy() = default;

  virtual ConsistencyMode mode() const = 0;

  // True: a taken push waits in the step being collected, and the step's
  // pushes are applied together (StepReady); false: each push is applied as
  // it comes.
  virtual bool CollectsSteps() const = 0;
  // Whether a new push (not a replay) for `step` from `rank` is taken; else
  // why not: Aborted for a stale step (the worker pulls and goes on),
  // FailedPrecondition for a step ahead, AlreadyExists for a repeated one.
  virtual absl::Status AdmitPush(const StepView& view, int rank,
                                 uint64_t step) const = 0;
  // Whether a replayed push for `step` (its batch is in already) gives
  // `rank` its part, with weight 0, in the step being collected.
  virtual bool ReplayTakesPart(const StepView& view, int rank,
                               uint64_t step) const = 0;
  // `rank` has done steps [0, next_step) and has no part in the step being
  // collected: whether it takes part with weight 0, since it will not push
  // that step here (its push was lost in a restart of this shard, or the
  // step went on without it elsewhere).
  virtual bool TakesPartWithoutPush(const StepView& view, int rank,
                                    uint64_t next_step) const = 0;
  // Whether step `view.version` may be applied now: then the ranks it goes
  // on without (dead, neither done nor finishing), in rank order; nullopt
  // while an active rank's part is missing, nobody has a part yet, or the
  // policy does not collect steps.
  virtual std::optional<std::vector<int>> StepReady(
      const StepView& view) const = 0;

  // Whether a pull for step `step` may be answered now.
  virtual bool PullReady(const StepView& view, uint64_t step) const = 0;
  // The ranks a pull for step `step` waits for, in rank order; empty if
  // none.
  virtual std::vector<int> RanksBlocking(const StepView& view,
                                         uint64_t step) const = 0;
  // The line logged when `rank`'s pull for step `step` has waited `waited`
  // seconds on `waiting_on` ("1, 2").
  virtual std::string SlowPullMessage(int rank, uint64_t step,
                                      const std::string& waiting_on,
                                      double waited,
                                      uint64_t version) const = 0;

  // The step a (re)registering `rank` resumes at.
  virtual uint64_t ResumeStep(const StepView& view, int rank) const = 0;
  // Updates the job makes when every rank plans `planned_steps` steps: the
  // horizon of the learning-rate schedule.
  virtual uint64_t PlannedUpdates(uint64_t planned_steps,
                                  int num_workers) const = 0;
  // Whether a shard restored from a checkpoint may move its version forward
  // to the step the workers are at (sync: steps are global, and the
  // workers' pushes since the checkpoint are lost on this shard).
  virtual bool FastForwardsAfterRestore() const = 0;
};

}  // namespace ps::server

#endif  // PS_SERVER_CONSISTENCY_POLICY_H_
