#include "server/push_admission.h"

#include "absl/strings/str_cat.h"

namespace ps::server {

absl::StatusOr<PushVerdict> AdmitPush(const StagedPush& push,
                                      const ConsistencyPolicy& policy,
                                      Membership& members,
                                      absl::FunctionRef<StepView()> view,
                                      absl::FunctionRef<void()> before_policy,
                                      absl::Time now) {
  const int r = push.rank;
  if (absl::Status s = members.Admit(r, push.incarnation, now); !s.ok()) {
    return s;
  }
  RankRegistry& ranks = members.ranks();
  if (ranks.done(r)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", r, " already said it is done; push for step ", push.step));
  }
  if (absl::Status s = members.CheckWithinPlan(r, "step", push.step); !s.ok()) {
    return s;
  }
  if (absl::Status s = ranks.CheckExamples(r, push.num_examples); !s.ok()) {
    return s;
  }
  const update::DataProgress progress{push.epoch, push.examples_done};
  if (ranks.IsReplay(r, progress)) return PushVerdict::kReplay;
  before_policy();
  if (absl::Status s = policy.AdmitPush(view(), r, push.step); !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ranks.CheckProgress(r, push.step, progress, push.num_examples);
      !s.ok()) {
    return s;
  }
  return PushVerdict::kNew;
}

}  // namespace ps::server
