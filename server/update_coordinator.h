#ifndef PS_SERVER_UPDATE_COORDINATOR_H_
#define PS_SERVER_UPDATE_COORDINATOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/consistency_policy.h"
#include "server/coordinator_options.h"
#include "server/membership.h"
#include "server/push_admission.h"
#include "server/push_stager.h"
#include "server/server_stats.h"
#include "server/shard_report.h"
#include "server/step_parts.h"
#include "update/checkpoint.h"
#include "update/shard_store.h"
#include "update/update_log.h"
#include "update/update_log_record.h"

namespace ps::server {

// Where a rank stands, as told to a registering worker.
struct RankProgress {
  uint64_t next_step = 0;
  uint64_t epoch = 0;
  uint64_t examples_done = 0;
};

// Decides when validated pushes reach the shard's weights and when pulls may
// be answered, tracking the workers' liveness and data progress. `version`
// counts updates applied. Steps count from 0; a pull for step t asks for the
// weights step t trains on (its rank has done steps [0, t)). The rules of
// each consistency mode are its ConsistencyPolicy's
// (server/consistency_policy.h); here:
//
// - sync: step t's pushes are combined in rank order, weighted by
//   num_examples, so the result is bit-identical whatever the arrival
//   order; version = t + 1. A pull for step version + 1 from a rank that did
//   not push step `version` here takes part in it with weight 0: the rank
//   has moved on (its push was lost in a restart of this shard, or the step
//   went on without it elsewhere) and will not push it. Every event that may
//   complete a step (a push, a pull or heartbeat naming a step, a final
//   pull, Done, a lease running out) goes through ApplyIfReadyAfter, the one
//   place a step is taken and applied.
// - ssp and async: each push is applied as it comes.
//
// Its parts, one idea each: Membership (server/membership.h) keeps the
// workers as members of the job (registration, leases, the plan, barriers,
// the end of the job); StepParts (server/step_parts.h) collects the sync
// step, StepMean computes its update and ApplyStepMean applies it (live and
// in the log's replay); AdmitPush (server/push_admission.h) is
// the one admission check of both commit paths. This class holds them under
// one lock, applies updates and runs the waits.
//
// Liveness: every request renews the rank's lease (a waiting pull too);
// a rank not heard from within worker_timeout is declared dead by a checker
// thread, which re-evaluates the waits, so a dead worker never blocks the
// others. Under kElastic the step or the ssp minimum goes on without it;
// under kFail every waiting and later request gets FailedPrecondition (not
// Aborted, which tells a worker to retry a stale step). A rank heard from
// again is live again; a restarted process (new incarnation) rejoins through
// Register, and requests from the incarnation it replaced are refused.
//
// Exactly-once data: a push whose (epoch, examples_done) is not beyond the
// rank's recorded progress repeats a batch this shard already took (a worker
// killed between its pushes to two shards resumes from the minimum over
// shards); it is acknowledged and not applied (in sync it takes part in the
// step with weight 0). Pushes with 0 examples take part but change no
// weights; a sync step whose pushes all have 0 examples applies nothing.
//
// Thread-safe. Pushes are received and validated by PushStager without any
// lock; Commit takes `mu_` only briefly. Updates are applied one at a time
// under `apply_mu_` (slices of one update in parallel), outside `mu_`, so a
// waiting pull or a refused push never waits behind the optimizer, and a
// checkpoint taken under `apply_mu_` never sees half an update. `mu_` guards
// the version, the Membership and the StepParts together (they are not
// thread-safe themselves: every wait's condition reads them at once). Lock
// order: apply_mu_, then mu_ or a slice lock; mu_ is never held while a
// slice lock is taken. Does not own the store, which must outlive it. Owns
// the checker thread, stopped by Shutdown or the destructor.
class UpdateCoordinator {
 public:
  static absl::StatusOr<std::unique_ptr<UpdateCoordinator>> Create(
      update::ShardStore* store, CoordinatorOptions options);
  ~UpdateCoordinator();

  UpdateCoordinator(const UpdateCoordinator&) = delete;
  UpdateCoordinator& operator=(const UpdateCoordinator&) = delete;

  // Takes a complete, validated push. Returns the version after it was
  // taken. sync: the update of its step may still be pending, and with an
  // update log the push is in no log until its step is (as the step's
  // mean): it may be acknowledged only after AwaitStepApplied.
  absl::StatusOr<uint64_t> Commit(StagedPush push);
  // sync with an update log: blocks, as `rank`, until step `step` was
  // applied and logged, and returns the version then (at once if it was).
  // Errors as AwaitPull's, and the log's failure. Otherwise returns the
  // version at once: without a log a kill keeps nothing since the last
  // checkpoint anyway, and in ssp and async Commit logged and applied the
  // push.
  absl::StatusOr<uint64_t> AwaitStepApplied(
      int rank, uint64_t incarnation, uint64_t step,
      absl::FunctionRef<bool()> cancelled);
  // Whether AwaitStepApplied waits (sync with an update log): a push is
  // then acknowledged only once its step was applied.
  bool AcksAppliedSteps() const;

  // Blocks until `rank`'s pull for step `step` may be answered and returns
  // the version then. Cancelled once `cancelled()` (polled, called without any
  // lock held) says the caller gave up; Unavailable after Shutdown;
  // FailedPrecondition if the job failed. `incarnation` 0 is not checked.
  absl::StatusOr<uint64_t> AwaitPull(int rank, uint64_t incarnation,
                                     uint64_t step,
                                     absl::FunctionRef<bool()> cancelled);
  // For a rank's final pull (ps.proto PullRequest.after_others_finish):
  // marks `rank` finishing, then blocks until every other rank is done,
  // finishing too, or dead for its lease plus `rejoin_grace`, and returns
  // the version then, which holds every other rank's last update. Errors as
  // AwaitPull's. Finishing ranks do not wait for each other.
  absl::StatusOr<uint64_t> AwaitOthersFinished(
      int rank, uint64_t incarnation, absl::FunctionRef<bool()> cancelled);

  // `rank` makes its `generation`-th barrier call (from 1): blocks until
  // every rank that is active (live, neither done nor finishing) has made
  // its `generation`-th. Errors as AwaitPull's; InvalidArgument for
  // generation 0. Barrier counts are not checkpointed: a restarted rank
  // counts from 1 again.
  absl::Status AwaitBarrier(int rank, uint64_t incarnation, uint64_t generation,
                            absl::FunctionRef<bool()> cancelled);

  // Records the incarnation of a (re)starting rank and where it resumes.
  // Every rank must plan the same number of steps (0: not given) as the
  // ranks before it and a restored checkpoint, else FailedPrecondition
  // naming both values; with replan_after_restore, the first plan after a
  // Restore replaces the checkpoint's. The rank's pushes may carry at most
  // `max_examples_per_push` examples (0: no bound).
  absl::StatusOr<RankProgress> Register(int rank, uint64_t incarnation,
                                        uint64_t planned_steps,
                                        uint32_t max_examples_per_push = 0);
  // The rank is alive and has done steps [0, next_step) (0: not known);
  // returns the version. Like a pull for step `next_step`, it tells a
  // restarted sync shard that the rank will not push a step whose push was
  // lost here.
  absl::StatusOr<uint64_t> Heartbeat(int rank, uint64_t incarnation,
                                     uint64_t next_step = 0);
  // OK if `incarnation` is the one `rank` registered with here;
  // FailedPrecondition naming the rank otherwise (none registered, or
  // another one since).
  absl::Status CheckRegistered(int rank, uint64_t incarnation) const;
  // Marks `rank` finished; true once the job is (see on_finished).
  // Idempotent.
  bool MarkDone(int rank);

  // Declares dead the ranks whose lease expired and lets waits go on; the
  // checker thread calls it every worker_timeout / 4 (at most 250 ms).
  void CheckLeases();

  // Ranks a pull for step `step` is waiting for; empty if it need not wait.
  std::vector<int> RanksBlocking(uint64_t step) const;

  uint64_t version() const;
  // The ranks' next steps and deaths, and how many are unheard (for the
  // metrics).
  MembersSnapshot Members() const;
  // FailedPrecondition once a worker died under FailurePolicy::kFail; OK
  // otherwise.
  absl::Status failure() const;
  // Wakes every waiting pull with Unavailable, refuses later requests and
  // stops the checker thread.
  void Shutdown();

  // A consistent copy of the shard's state: waits for an update being
  // applied, blocks updates (not pulls or pushes) while the slices are
  // copied.
  update::ShardCheckpoint Snapshot();
  // Snapshot for a checkpoint: with an update log, also starts the log file
  // of the snapshot's version, so that the checkpoint and its file together
  // hold every update acknowledged (updates are logged as they are applied,
  // under the lock the snapshot takes). The error of creating that file;
  // the old file then goes on.
  absl::StatusOr<update::ShardCheckpoint> SnapshotForCheckpoint();
  // Runs `fn` with the version while no update is being applied, and lets
  // none start until it returns (pulls and pushes go on): a consistent
  // point between two updates, where the optimizer state is read or
  // replaced (server/optimizer_state_service.h). Returns fn's status.
  absl::Status WhileUpdatesPaused(
      absl::FunctionRef<absl::Status(uint64_t version)> fn)
      ABSL_LOCKS_EXCLUDED(apply_mu_, mu_);
  // Replaces the shard's state with `checkpoint`, before serving.
  // FailedPrecondition if it is another job's (identity), InvalidArgument
  // if it does not fit; nothing changes on error.
  absl::Status Restore(const update::ShardCheckpoint& checkpoint);
  update::CheckpointIdentity identity() const;

  // With an update log (CoordinatorOptions::update_log_dir), after Restore
  // and before serving: replays the log records after the restored version
  // through the update code, so that the weights, optimizer state, version,
  // rank records and the sync step being collected are as they were when
  // the shard died, then appends to the log again. Returns the updates
  // replayed. A record cut short at the end (an interrupted append, never
  // acknowledged) is dropped; DataLoss naming the versions for a gap (a file
  // or record missing, a log that does not start at the restored version,
  // a file that does not start where the one before it ended) or a record
  // that cannot be read. sync: FailedPrecondition naming the file for a
  // format-2 log (it holds pushes, not step means; restore with the server
  // that wrote it). The step being collected when the shard died starts
  // again: its pushes were not acknowledged, and the workers push them
  // again. Without log files for the restored version (the log was off),
  // replays nothing and the report says the updates after it are lost.
  absl::StatusOr<uint64_t> ReplayLog();
  // A fresh shard's log (no checkpoint restored): removes every earlier log
  // file of the shard. Logging starts with the first SnapshotForCheckpoint.
  absl::Status StartFreshLog();

  // Multi-line: worker states and progress, "examples per epoch: 0=60000
  // 1=60000", replayed pushes, updates lost in restarts (a number only when
  // known: "unknown" after a restore without an update log), staleness.
  std::string Report() const;
  // The same figures as fields, for --report_file (the request figures
  // are the service's).
  ShardReport ReportFields() const;

  const CoordinatorOptions& options() const { return options_; }
  const StalenessHistogram& staleness() const { return staleness_; }

 private:
  UpdateCoordinator(update::ShardStore* store, CoordinatorOptions options);

  // A push into the step being collected (the policy collects steps).
  absl::StatusOr<uint64_t> CommitToStep(StagedPush push);
  // A push applied as it comes (the policy does not collect steps).
  absl::StatusOr<uint64_t> CommitAtOnce(StagedPush push);
  // Applies `push`, admitted, at once at `learning_rate` as the update from
  // `version_at_apply` and records it (a push without examples only
  // records its progress). Shared by CommitAtOnce and ReplayLog.
  absl::StatusOr<uint64_t> ApplyAtOnce(const StagedPush& push,
                                       std::optional<float> learning_rate,
                                       uint64_t version_at_apply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // The snapshot, rotating the log if `rotate_log`.
  absl::StatusOr<update::ShardCheckpoint> TakeSnapshot(bool rotate_log);

  // The update log (server/coordinator_log.cc).
  bool LogsUpdates() const { return !options_.update_log_dir.empty(); }
  // An ssp or async `push` as a log record, encoded without any lock held.
  std::shared_ptr<const update::LogEntry> PushEntry(
      const StagedPush& push) const;
  // Appends `entries` with one write; OK without a log (or before its first
  // file). Internal when the write fails: the update must not be
  // acknowledged, and log_failure_ refuses every later update and wait.
  absl::Status AppendLocked(absl::Span<const update::LogEntry* const> entries)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends `record`, logging (not returning) a failure: for events that
  // have already taken effect.
  void AppendOrWarnLocked(const update::LogRecord& record)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts the log file of version_.
  absl::Status RotateLogLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replays one decoded record (ReplayLog); `state.at_once` holds an
  // ssp/async push awaiting its LoggedApply.
  struct ReplayState;
  absl::Status ReplayRecord(const update::LogRecord& record,
                            uint64_t payload_bytes, ReplayState& state);
  // The admission check both commit paths share (AdmitPush), with this
  // coordinator's state; counts the replays.
  absl::StatusOr<PushVerdict> AdmitPushLocked(const StagedPush& push)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The one path by which a step is applied: runs `event` under mu_ (it may
  // give a rank its part in the step being collected, or let the step go on
  // without one); then, if the step is ready, takes it and applies it on
  // this thread, without mu_. Returns the event's error, else the version
  // after the event (and the step); a step that failed is logged, and its
  // error (Internal) returned.
  absl::StatusOr<uint64_t> ApplyIfReadyAfter(
      absl::FunctionRef<absl::Status()> event) ABSL_LOCKS_EXCLUDED(mu_);
  // Applies a step taken by TakeReadyStepLocked: its mean, logged first;
  // returns the new version. If the log append fails the step is not
  // applied, and its pushes (waiting in AwaitStepApplied) and every later
  // call get log_failure_.
  absl::StatusOr<uint64_t> ApplyStep(ReadyStep step)
      ABSL_LOCKS_EXCLUDED(mu_, apply_mu_);
  // Applies sync step `step`'s mean and records its parts: the ranks'
  // progress, the staleness, the version. Shared by ApplyStep and ReplayLog.
  absl::StatusOr<uint64_t> ApplyLoggedStep(const update::LoggedStepMean& step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // Warns when the update just applied for `what` kept elements as they were
  // because their result would not have been finite.
  void WarnOfIncompleteUpdate(absl::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);

  // What the policy decides on; valid while mu_ is held.
  StepView ViewLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // If the policy says step version_ may be applied, takes it out of the
  // parts. Only ApplyIfReadyAfter calls it.
  std::optional<ReadyStep> TakeReadyStepLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `rank` has done steps [0, next_step) (it pulls for step `next_step`, or
  // said so in a heartbeat): raises its next step and, if the policy says
  // so, gives it a weight-0 part in a step it will not push here.
  // InvalidArgument, with nothing changed, for a step beyond the job's plan.
  absl::Status NoteNextStepLocked(int rank, uint64_t next_step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // sync, after --restore: moves version_ forward to `step` if allowed.
  void MaybeFastForwardLocked(uint64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<float> LearningRateLocked(uint64_t update) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Waits, as `rank` (kept alive, and stopped if a new incarnation replaced
  // it), until `ready()` (called under mu_), shutdown or failure; returns
  // the version then. Every slow_wait_log it calls `log_slow` (without the
  // lock) with the ranks `blocking()` names, the seconds waited and the
  // version. `what` names the wait in its Cancelled error.
  absl::StatusOr<uint64_t> WaitAsRank(
      int rank, uint64_t incarnation, absl::FunctionRef<bool()> ready,
      absl::FunctionRef<std::vector<int>()> blocking,
      absl::FunctionRef<void(const std::string&, double, uint64_t)> log_slow,
      absl::FunctionRef<bool()> cancelled, absl::string_view what);
  // Calls on_finished once the job is over.
  void MaybeFinish() ABSL_LOCKS_EXCLUDED(mu_);
  void CheckerLoop();

  update::ShardStore* const store_;
  const CoordinatorOptions options_;
  const std::unique_ptr<const ConsistencyPolicy> policy_;
  StalenessHistogram staleness_;

  // Lock order: apply_mu_, then mu_ or a slice lock; mu_ is never held while
  // a slice lock is taken.
  //
  // Held for the whole of one update's application.
  absl::Mutex apply_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // The store's incomplete slice updates as of the last warning.
  uint64_t incomplete_updates_seen_ ABSL_GUARDED_BY(apply_mu_) = 0;
  // Guards the state every decision and wait reads together: the version,
  // the members and the step being collected.
  mutable absl::Mutex mu_;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  Membership members_ ABSL_GUARDED_BY(mu_);
  // sync: the parts of step version_.
  StepParts parts_ ABSL_GUARDED_BY(mu_);
  // sync, after --restore: no step completed yet (MaybeFastForwardLocked).
  bool recovering_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t updates_lost_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t replays_ ABSL_GUARDED_BY(mu_) = 0;
  // The log file being appended to; null without a log, or before its
  // first file.
  std::unique_ptr<update::UpdateLogWriter> log_ ABSL_GUARDED_BY(mu_);
  // Not OK once an append to the log failed: nothing more is applied or
  // acknowledged, and every later update and wait gets this error.
  absl::Status log_failure_ ABSL_GUARDED_BY(mu_);
  // Restored from a checkpoint of this version with no log to replay: the
  // updates after it are lost, how many is not known here.
  std::optional<uint64_t> restored_without_log_ ABSL_GUARDED_BY(mu_);
  // Restored, and this many updates replayed from the log.
  std::optional<uint64_t> replayed_updates_ ABSL_GUARDED_BY(mu_);

  std::thread checker_;
};

}  // namespace ps::server

#endif  // PS_SERVER_UPDATE_COORDINATOR_H_
