#ifndef PS_SERVER_MEMBERSHIP_H_
#define PS_SERVER_MEMBERSHIP_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/coordinator_options.h"
#include "server/failure_policy.h"
#include "server/rank_registry.h"

namespace ps::server {

// The workers as members of one shard's job, and whether the job still
// runs: which process holds each rank (registration), leases, the plan of
// steps every rank registered, barriers, a failure under kFail, the end of
// the job and shutdown. The ranks' next steps and data progress are kept
// in its RankRegistry (ranks()), which the update path records into.
//
// Not thread-safe: UpdateCoordinator holds its `mu_` around every call, and
// waits on this state under it (a wait's condition reads it together with
// the version and the step being collected, so one lock guards them all).
// Never blocks; logs only rare events (a rank live again, a new plan).
// The ranks as the shard's metrics show them.
struct MembersSnapshot {
  // By rank: the next step (steps [0, next) done here), and whether the
  // rank is declared dead.
  std::vector<uint64_t> next_steps;
  std::vector<bool> dead;
  // How many are unheard (Membership::unheard()).
  int unheard = 0;
};

class Membership {
 public:
  // Every rank's lease starts at `now`. Reads the options it needs and keeps
  // no reference to them.
  Membership(const CoordinatorOptions& options, absl::Time now);

  // OK while the job runs; Unavailable after Shutdown; the failure
  // (FailedPrecondition) once a worker died under FailurePolicy::kFail.
  absl::Status Running() const;
  void Shutdown() { shutdown_ = true; }
  bool shut_down() const { return shutdown_; }
  // OK unless a worker died under FailurePolicy::kFail.
  const absl::Status& failure() const { return failure_; }

  // Admits a request of `rank`: refused when the job does not run (as
  // Running) or `incarnation` is not the rank's (CheckIncarnation; 0 is not
  // checked); otherwise renews the rank's lease at `now`.
  absl::Status Admit(int rank, uint64_t incarnation, absl::Time now);
  // OK if `incarnation` is the one `rank` registered with; FailedPrecondition
  // naming the rank otherwise (none registered, or another one since).
  absl::Status CheckRegistered(int rank, uint64_t incarnation) const;

  // What Register did.
  struct Registration {
    // The rank's incarnation before (0: none).
    uint64_t previous_incarnation = 0;
    // The rank's first registration since a Restore with
    // replan_after_restore: every worker of an extended run is a new
    // process, so its replacing the old one is no news.
    bool extension_join = false;
  };
  // Records the incarnation of a (re)starting rank and renews its lease.
  // Refused when the job does not run (as Running). Every rank must plan the
  // same number of steps (0: not given) as the ranks before it and a
  // restored checkpoint, else FailedPrecondition naming both values; with
  // replan_after_restore, the first plan after a Restore replaces the
  // checkpoint's. A cosine learning-rate schedule needs a plan. The rank's
  // pushes may carry at most `max_examples_per_push` examples (0: no bound).
  // Nothing changes on error.
  absl::StatusOr<Registration> Register(int rank, uint64_t incarnation,
                                        uint64_t planned_steps,
                                        uint32_t max_examples_per_push,
                                        absl::Time now);

  // Steps each rank plans to train (0: not known yet).
  uint64_t planned_steps() const { return planned_steps_; }
  // InvalidArgument naming `what` when `step` lies beyond every step the
  // job's workers can take (num_workers x planned steps), so that a peer
  // cannot move a rank's next step (or a restored shard's version) where the
  // real worker's requests would all be refused. OK while nothing is
  // planned.
  absl::Status CheckWithinPlan(int rank, absl::string_view what,
                               uint64_t step) const;

  // Declares dead the ranks whose lease ran out by `now`, each only while
  // this shard hears the network (MayDeclareDead), and returns them in rank
  // order; under FailurePolicy::kFail, if any, the job
  // fails (see failure()). The others whose lease ran out are unheard().
  // Nothing while the job does not run.
  std::vector<int> ExpireLeases(absl::Time now);
  // The ranks whose lease had run out at the last ExpireLeases but which it
  // did not declare dead (MayDeclareDead); in rank order.
  const std::vector<int>& unheard() const { return unheard_; }
  MembersSnapshot Snapshot() const;
  // The ranks other than `rank` still training (RankRegistry::StillTraining
  // with the rejoin grace).
  std::vector<int> OthersTraining(int rank, absl::Time now) const;
  // Ends the job if it is over: every rank done (or done or dead for good,
  // RankRegistry::AllFinished) or the job failed. Returns its outcome (OK or
  // the failure) the first time only; nullopt otherwise.
  std::optional<absl::Status> EndIfOver(absl::Time now);
  bool finished() const { return finished_; }

  // `rank` made its `generation`-th barrier call (from 1).
  void ReachBarrier(int rank, uint64_t generation);
  // The active ranks that have not made their `generation`-th barrier call,
  // in rank order.
  std::vector<int> BehindBarrier(uint64_t generation) const;

  // Takes a restored checkpoint's ranks and plan (barriers are not
  // checkpointed and stay as they are).
  void Restore(RankRegistry ranks, uint64_t planned_steps);

  // The book of ranks: leases, incarnations, next steps, data progress.
  RankRegistry& ranks() { return ranks_; }
  const RankRegistry& ranks() const { return ranks_; }

 private:
  // Register's check of the plan, and the plan it sets; FailedPrecondition
  // with nothing changed if `planned_steps` does not fit.
  absl::Status TakePlan(int rank, uint64_t planned_steps);

  // Whether `rank`, silent past its lease, may be declared dead at `now`.
  //
  // A shard cut off from the network hears from no worker and cannot tell
  // that from every worker's death. The first is one fault where the
  // second is many, and a wrong verdict loses work for good (a sync step
  // goes on without pushes still on their way; the job fails under kFail)
  // where waiting loses none. So a shard that is deaf, having had no
  // request of any rank for half a lease, declares no one dead: live
  // workers send one at least every --heartbeat_period, below half the
  // --worker_timeout. (A waiting call renews its rank's lease but is no
  // request: it goes on waiting across a cut.) Once it hears again after a
  // deaf spell of length D, the ranks still silent get max(lease, 2 D)
  // more: after a cut each connection comes back only when its own TCP
  // retransmission timer fires, which has backed off to about D.
  //
  // A rank with no other live rank (the rest done or dead) is declared on
  // its lease alone, as ever: nobody could show that the shard hears, and
  // a job whose other workers are done must still end once it is gone for
  // good.
  bool MayDeclareDead(int rank, absl::Time now) const;
  // A request of some rank arrived at `now`: the shard hears the network.
  void NoteRequest(absl::Time now);
  // Takes the ranks now unheard, logging when some first are, and those
  // heard from again.
  void NoteUnheard(std::vector<int> unheard, absl::Time now);

  const FailurePolicy on_worker_failure_;
  const absl::Duration rejoin_grace_;
  // A cosine learning-rate schedule spans the planned steps.
  const bool needs_plan_;
  const bool replan_after_restore_;

  RankRegistry ranks_;
  uint64_t planned_steps_ = 0;
  // planned_steps_ is a restored checkpoint's, not yet confirmed by a
  // registration.
  bool plan_restored_ = false;
  // replan_after_restore: the next plan registered replaces planned_steps_.
  bool plan_open_ = false;
  // replan_after_restore, per rank: not registered since the Restore.
  std::vector<bool> extension_joins_;
  // Per rank: the highest barrier generation it has reached.
  std::vector<uint64_t> barriers_;
  absl::Status failure_;
  // When the last request of any rank arrived.
  absl::Time last_request_;
  // When the shard began to hear requests again after its last deaf spell
  // (half a lease or more without any), and that spell's length.
  absl::Time hearing_since_;
  absl::Duration last_deaf_spell_ = absl::ZeroDuration();
  std::vector<int> unheard_;
  bool finished_ = false;
  bool shutdown_ = false;
};

}  // namespace ps::server

#endif  // PS_SERVER_MEMBERSHIP_H_
