#include "server/update_coordinator.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "update/slice_apply.h"

namespace ps::server {

UpdateCoordinator::UpdateCoordinator(update::ShardStore* store,
                                     CoordinatorOptions options)
    : store_(store),
      options_(std::move(options)),
      policy_(ConsistencyPolicy::Create(options_.mode, options_.staleness)),
      members_(options_, absl::Now()),
      parts_(options_.num_workers) {
  absl::MutexLock lock(&mu_);
  recovering_ = options_.fast_forward_after_restart &&
                policy_->FastForwardsAfterRestore();
}

absl::StatusOr<std::unique_ptr<UpdateCoordinator>> UpdateCoordinator::Create(
    update::ShardStore* store, CoordinatorOptions options) {
  if (options.num_workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--num_workers must be at least 1, got ", options.num_workers));
  }
  if (options.staleness < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--staleness must be at least 0, got ", options.staleness));
  }
  for (auto [flag, value] :
       {std::pair("--worker_timeout", options.worker_timeout),
        std::pair("--slow_wait_log", options.slow_wait_log),
        std::pair("poll interval", options.poll_interval)}) {
    if (value <= absl::ZeroDuration() || value == absl::InfiniteDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " must be positive and finite, got ",
                       absl::FormatDuration(value)));
    }
  }
  std::unique_ptr<UpdateCoordinator> c(
      new UpdateCoordinator(store, std::move(options)));
  c->checker_ = std::thread([p = c.get()] { p->CheckerLoop(); });
  return c;
}

UpdateCoordinator::~UpdateCoordinator() {
  Shutdown();
  if (checker_.joinable()) checker_.join();
  if (LogsUpdates()) {
    update::RemoveSpareLog(options_.update_log_dir, store_->server_index());
  }
}

absl::StatusOr<uint64_t> UpdateCoordinator::Commit(StagedPush push) {
  // The stager guarantees these; checked again because a mismatch here
  // would corrupt weights rather than refuse a request.
  if (push.rank < 0 || push.rank >= options_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat("worker rank ", push.rank,
                                                   " is outside [0, ",
                                                   options_.num_workers, ")"));
  }
  bool sizes_match = push.gradients.size() == store_->slices().size();
  for (size_t i = 0; sizes_match && i < push.gradients.size(); ++i) {
    sizes_match =
        push.gradients[i].num_elements() == store_->slices()[i].num_elements;
  }
  if (!sizes_match) {
    return absl::InvalidArgumentError(
        "push does not cover this shard's slices");
  }
  return policy_->CollectsSteps() ? CommitToStep(std::move(push))
                                  : CommitAtOnce(std::move(push));
}

StepView UpdateCoordinator::ViewLocked() const {
  return StepView{version_, parts_.applying(), parts_.has_part(),
                  members_.ranks()};
}

absl::StatusOr<PushVerdict> UpdateCoordinator::AdmitPushLocked(
    const StagedPush& push) {
  // The fast-forward does nothing but in sync after --restore
  // (recovering_).
  absl::StatusOr<PushVerdict> verdict = AdmitPush(
      push, *policy_, members_,
      [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return ViewLocked(); },
      [this, &push]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (push.step > version_) MaybeFastForwardLocked(push.step);
      },
      absl::Now());
  // An empty share is no replayed batch.
  if (verdict.ok() && *verdict == PushVerdict::kReplay &&
      push.num_examples > 0) {
    ++replays_;
  }
  return verdict;
}

absl::StatusOr<uint64_t> UpdateCoordinator::CommitToStep(StagedPush push) {
  const int r = push.rank;
  const uint64_t step = push.step;
  // The push that completes the step applies it, on this thread. Nothing is
  // logged here: the step's mean is, once (ApplyStep).
  return ApplyIfReadyAfter([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!log_failure_.ok()) return log_failure_;
    absl::StatusOr<PushVerdict> verdict = AdmitPushLocked(push);
    if (!verdict.ok()) return verdict.status();
    if (*verdict == PushVerdict::kReplay) {
      // The batch is already in; at most it counts as taking part.
      if (policy_->ReplayTakesPart(ViewLocked(), r, step)) {
        parts_.AddWithoutPush(r);
      }
      return absl::OkStatus();
    }
    members_.ranks().RecordAccepted(r, step, {push.epoch, push.examples_done});
    parts_.Add(std::move(push));
    return absl::OkStatus();
  });
}

absl::StatusOr<uint64_t> UpdateCoordinator::ApplyIfReadyAfter(
    absl::FunctionRef<absl::Status()> event) {
  std::optional<ReadyStep> ready;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = event(); !s.ok()) return s;
    ready = TakeReadyStepLocked();
    if (!ready.has_value()) return version_;
  }
  return ApplyStep(*std::move(ready));
}

std::optional<ReadyStep> UpdateCoordinator::TakeReadyStepLocked() {
  std::optional<std::vector<int>> missing = policy_->StepReady(ViewLocked());
  if (!missing.has_value()) return std::nullopt;
  return parts_.Take(version_, LearningRateLocked(version_),
                     *std::move(missing));
}

absl::StatusOr<uint64_t> UpdateCoordinator::ApplyStep(ReadyStep ready) {
  // Under apply_mu_ from the log's append to the version's change, so that
  // a checkpoint's snapshot has the step in both or in neither.
  absl::MutexLock apply_lock(&apply_mu_);
  // Computed, encoded and checksummed without mu_: only the write is under
  // it.
  const update::LoggedStepMean step = StepMean(*store_, ready);
  if (LogsUpdates()) {
    const update::LogEntry entry = update::MakeStepMeanEntry(step);
    absl::MutexLock lock(&mu_);
    if (absl::Status s = AppendLocked({&entry}); !s.ok()) {
      // Logged before it is applied: nothing of it took effect, and its
      // pushes, waiting for it, are refused with the failure.
      parts_.Applied();
      return log_failure_;
    }
  }
  return ApplyLoggedStep(step);
}

absl::StatusOr<uint64_t> UpdateCoordinator::ApplyLoggedStep(
    const update::LoggedStepMean& step) {
  absl::Status applied = ApplyStepMean(*store_, step);
  WarnOfIncompleteUpdate(absl::StrCat("step ", step.step));
  absl::MutexLock lock(&mu_);
  for (const update::LoggedStepPart& p : step.parts) {
    if (applied.ok() && p.num_examples > 0) {
      staleness_.Add(version_ >= p.base_version ? version_ - p.base_version
                                                : 0);
    }
    const update::DataProgress progress{p.epoch, p.examples_done};
    // Done by Commit already, but not in a replay.
    members_.ranks().RecordAccepted(p.rank, step.step, progress);
    members_.ranks().RecordApplied(p.rank, step.step, progress,
                                   applied.ok() ? p.num_examples : 0);
  }
  parts_.Applied();
  version_ = step.step + 1;
  recovering_ = false;
  if (!applied.ok()) {
    spdlog::error("update for step {} failed: {}", step.step,
                  applied.ToString());
    return absl::InternalError(absl::StrCat("applying step ", step.step,
                                            " failed: ", applied.message()));
  }
  return version_;
}

bool UpdateCoordinator::AcksAppliedSteps() const {
  // Without a log nothing is kept past a kill anyway: a push is
  // acknowledged once taken.
  return policy_->CollectsSteps() && LogsUpdates();
}

absl::StatusOr<uint64_t> UpdateCoordinator::AwaitStepApplied(
    int rank, uint64_t incarnation, uint64_t step,
    absl::FunctionRef<bool()> cancelled) {
  if (!AcksAppliedSteps()) return version();
  return WaitAsRank(
      rank, incarnation,
      [this, step]()
          ABSL_SHARED_LOCKS_REQUIRED(mu_) { return version_ > step; },
      [this, step]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return policy_->RanksBlocking(ViewLocked(), step + 1);
      },
      [&](const std::string& waiting_on, double waited, uint64_t version) {
        spdlog::warn(
            "worker {}'s push of step {} has waited {:.0f} s to be applied "
            "(version {}), for workers [{}]",
            rank, step, waited, version, waiting_on);
      },
      cancelled, absl::StrCat("push of step ", step));
}

void UpdateCoordinator::WarnOfIncompleteUpdate(absl::string_view what) {
  const uint64_t incomplete = store_->IncompleteUpdates();
  if (incomplete == incomplete_updates_seen_) return;
  spdlog::warn(
      "the update for {} kept some elements of {} slices as they were: their "
      "new weight or optimizer state would not have been finite (is training "
      "diverging?)",
      std::string(what), incomplete - incomplete_updates_seen_);
  incomplete_updates_seen_ = incomplete;
}

absl::StatusOr<uint64_t> UpdateCoordinator::CommitAtOnce(StagedPush push) {
  const int r = push.rank;
  const std::shared_ptr<const update::LogEntry> entry =
      LogsUpdates() ? PushEntry(push) : nullptr;
  // One update at a time, so each sees a definite version and none
  // interleaves with another on a slice.
  absl::MutexLock apply_lock(&apply_mu_);
  uint64_t version_at_apply = 0;
  std::optional<float> learning_rate;
  {
    absl::MutexLock lock(&mu_);
    if (!log_failure_.ok()) return log_failure_;
    absl::StatusOr<PushVerdict> verdict = AdmitPushLocked(push);
    if (!verdict.ok()) return verdict.status();
    if (*verdict == PushVerdict::kReplay) {
      members_.ranks().RaiseNextStep(r, push.step + 1);
      return version_;
    }
    version_at_apply = version_;
    learning_rate = push.learning_rate.has_value()
                        ? push.learning_rate
                        : LearningRateLocked(version_);
    // Logged before it is applied and acknowledged: the push, then what
    // applied it (the version and rate, known only now).
    if (entry != nullptr) {
      const update::LogEntry apply =
          update::MakeLogEntry(update::EncodeLogRecord(
              update::LoggedApply{version_, learning_rate}));
      if (absl::Status s = AppendLocked({entry.get(), &apply}); !s.ok()) {
        return s;
      }
    }
  }
  return ApplyAtOnce(push, learning_rate, version_at_apply);
}

absl::StatusOr<uint64_t> UpdateCoordinator::ApplyAtOnce(
    const StagedPush& push, std::optional<float> learning_rate,
    uint64_t version_at_apply) {
  const int r = push.rank;
  const update::DataProgress progress{push.epoch, push.examples_done};
  if (push.num_examples == 0) {
    // Takes its step, changes no weight.
    absl::MutexLock lock(&mu_);
    members_.ranks().RecordAccepted(r, push.step, progress);
    members_.ranks().RecordApplied(r, push.step, progress, 0);
    return version_;
  }
  absl::Status applied = update::ForEachSlice(*store_, [&](int slice) {
    const SliceGradient& gradient = push.gradients[slice];
    return store_->ApplyGradient(
        slice,
        [&gradient](uint64_t begin, absl::Span<char> scratch) {
          return gradient.View(begin, scratch.size() / sizeof(float), scratch);
        },
        learning_rate);
  });
  WarnOfIncompleteUpdate(absl::StrCat("worker ", r, "'s step ", push.step));
  if (!applied.ok()) {
    spdlog::error("update from worker {} failed: {}", r, applied.ToString());
    return absl::InternalError(
        absl::StrCat("applying push failed: ", applied.message()));
  }
  staleness_.Add(version_at_apply >= push.base_version
                     ? version_at_apply - push.base_version
                     : 0);
  absl::MutexLock lock(&mu_);
  members_.ranks().RecordAccepted(r, push.step, progress);
  members_.ranks().RecordApplied(r, push.step, progress, push.num_examples);
  return ++version_;
}

void UpdateCoordinator::MaybeFastForwardLocked(uint64_t step) {
  if (!recovering_ || step <= version_ || parts_.applying()) return;
  // Step version_ is under way: it is current.
  if (parts_.any_part()) return;
  spdlog::warn(
      "fast-forwarded from version {} to {} after restore: {} updates of this "
      "shard lost",
      version_, step, step - version_);
  updates_lost_ += step - version_;
  version_ = step;
}

std::optional<float> UpdateCoordinator::LearningRateLocked(
    uint64_t update) const {
  if (!options_.lr_schedule.has_value()) return std::nullopt;
  return options_.lr_schedule->At(
      update,
      policy_->PlannedUpdates(members_.planned_steps(), options_.num_workers));
}

uint64_t UpdateCoordinator::version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

absl::Status UpdateCoordinator::failure() const {
  absl::MutexLock lock(&mu_);
  return members_.failure();
}

void UpdateCoordinator::Shutdown() {
  absl::MutexLock lock(&mu_);
  members_.Shutdown();
}

update::CheckpointIdentity UpdateCoordinator::identity() const {
  return {store_->partition().num_servers(), store_->server_index(),
          std::string(ConsistencyModeName(options_.mode)),
          options_.num_workers};
}

update::ShardCheckpoint UpdateCoordinator::Snapshot() {
  return *TakeSnapshot(/*rotate_log=*/false);
}

absl::StatusOr<update::ShardCheckpoint>
UpdateCoordinator::SnapshotForCheckpoint() {
  return TakeSnapshot(/*rotate_log=*/LogsUpdates());
}

absl::StatusOr<update::ShardCheckpoint> UpdateCoordinator::TakeSnapshot(
    bool rotate_log) {
  // No update is half applied while apply_mu_ is held; a sync push still
  // waiting for its step is in neither the weights nor the rank records.
  absl::MutexLock apply_lock(&apply_mu_);
  update::ShardCheckpoint c;
  c.identity = identity();
  c.model = store_->partition().model();
  c.partition_fingerprint = store_->partition().fingerprint();
  c.slices.reserve(store_->num_slices());
  for (int i = 0; i < store_->num_slices(); ++i) {
    c.slices.push_back(store_->Snapshot(i));
  }
  c.staleness = staleness_.state();
  absl::MutexLock lock(&mu_);
  c.version = version_;
  c.planned_steps = members_.planned_steps();
  c.ranks = members_.ranks().Records();
  c.examples = members_.ranks().examples();
  // At this version, under both locks: every record before the new file's
  // start is in the snapshot (an update is logged and applied under
  // apply_mu_).
  if (rotate_log) {
    if (absl::Status s = RotateLogLocked(); !s.ok()) return s;
  }
  return c;
}

absl::Status UpdateCoordinator::WhileUpdatesPaused(
    absl::FunctionRef<absl::Status(uint64_t version)> fn) {
  absl::MutexLock apply_lock(&apply_mu_);
  uint64_t version = 0;
  {
    absl::MutexLock lock(&mu_);
    version = version_;
  }
  // Without mu_: fn takes slice locks (the lock order forbids both).
  return fn(version);
}

absl::Status UpdateCoordinator::Restore(
    const update::ShardCheckpoint& checkpoint) {
  if (absl::Status s = update::CheckIdentity(identity(), checkpoint.identity);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CompareModelSpecs(checkpoint.model, "the checkpoint",
                            store_->partition().model(), "this shard");
      !s.ok()) {
    return s;
  }
  RankRegistry ranks(options_.num_workers, options_.worker_timeout,
                     absl::Now());
  if (absl::Status s =
          ranks.Restore(checkpoint.ranks, checkpoint.examples, absl::Now());
      !s.ok()) {
    return s;
  }
  absl::MutexLock apply_lock(&apply_mu_);
  if (absl::Status s = store_->Restore(checkpoint.slices); !s.ok()) return s;
  staleness_.Restore(checkpoint.staleness);
  absl::MutexLock lock(&mu_);
  version_ = checkpoint.version;
  members_.Restore(std::move(ranks), checkpoint.planned_steps);
  parts_.Clear();
  // Until ReplayLog finds the log.
  restored_without_log_ = checkpoint.version;
  return absl::OkStatus();
}

std::string UpdateCoordinator::Report() const {
  // Before mu_: it is never held while a slice lock is taken.
  const uint64_t incomplete = store_->IncompleteUpdates();
  absl::MutexLock lock(&mu_);
  const RankRegistry& ranks = members_.ranks();
  std::string lost = absl::StrCat(updates_lost_);
  if (restored_without_log_.has_value()) {
    lost = absl::StrCat(
        "unknown: restored from the checkpoint of version ",
        *restored_without_log_,
        " without an update log, so the updates this shard applied after it "
        "are lost",
        updates_lost_ > 0
            ? absl::StrCat(" (", updates_lost_, " steps fast-forwarded)")
            : "");
  } else if (replayed_updates_.has_value()) {
    absl::StrAppend(&lost, " (", *replayed_updates_,
                    " updates replayed from the update log)");
  }
  return absl::StrCat(ranks.RanksReport(), "\n", ranks.ExamplesPerEpochLine(),
                      "\nreplayed pushes acknowledged, not applied: ", replays_,
                      "\nupdates lost in restarts: ", lost,
                      "\nslice updates that kept non-finite results out: ",
                      incomplete, "\n", staleness_.ToString());
}

ShardReport UpdateCoordinator::ReportFields() const {
  ShardReport r;
  r.server_index = store_->server_index();
  r.mode = std::string(ConsistencyModeName(options_.mode));
  absl::MutexLock lock(&mu_);
  r.version = version_;
  r.updates_replayed = replayed_updates_;
  if (restored_without_log_.has_value()) {
    r.updates_lost.reset();
  } else {
    r.updates_lost = updates_lost_;
  }
  r.replayed_pushes = replays_;
  r.staleness_updates = staleness_.count();
  r.staleness_max = staleness_.max();
  for (const auto& [epoch, counts] : members_.ranks().examples()) {
    uint64_t sum = 0;
    for (uint64_t c : counts) sum += c;
    r.examples_per_epoch[epoch] = sum;
  }
  return r;
}

}  // namespace ps::server
