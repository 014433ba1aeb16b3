#ifndef PS_SERVER_PUSH_ADMISSION_H_
#define PS_SERVER_PUSH_ADMISSION_H_

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/consistency_policy.h"
#include "server/membership.h"
#include "server/push_stager.h"

namespace ps::server {

// What the admission check makes of a push it does not refuse.
enum class PushVerdict {
  // To be taken: its batch is beyond the rank's accepted data progress.
  kNew,
  // Its batch is in already (a worker killed between its pushes to two
  // shards resumes from the minimum over shards): acknowledged, not
  // applied.
  kReplay,
};

// The one check a push passes before either commit path (sync's step
// collection, or the update applied at once) takes it, in this order: the
// job runs and the push's incarnation is the rank's (Membership::Admit,
// which renews the rank's lease at `now`); the rank did not say it is done
// (FailedPrecondition); its step lies within the job's plan and it carries
// at most the rank's bound of examples (InvalidArgument). A push whose data
// progress is not beyond the rank's is then a kReplay. A new push calls
// `before_policy` (it may move the version: a restored sync shard's
// fast-forward), must be admitted by `policy` for the StepView that `view`
// gives then, and its data progress must follow the rank's
// (RankRegistry::CheckProgress); then it is kNew. Records nothing of the
// push: the caller does, once it takes it.
//
// Called under the lock that guards `members` and what `view` reads.
absl::StatusOr<PushVerdict> AdmitPush(const StagedPush& push,
                                      const ConsistencyPolicy& policy,
                                      Membership& members,
                                      absl::FunctionRef<StepView()> view,
                                      absl::FunctionRef<void()> before_policy,
                                      absl::Time now);

}  // namespace ps::server

#endif  // PS_SERVER_PUSH_ADMISSION_H_
