#include "server/update_coordinator.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/tensor_codec.h"
#include "spdlog/spdlog.h"
#include "update/gradient_mean.h"
#include "update/slice_apply.h"

namespace ps::server {
namespace {

std::string Workers(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "worker " : "workers ",
                      absl::StrJoin(ranks, ", "));
}

}  // namespace

UpdateCoordinator::UpdateCoordinator(ShardStore* store,
                                     CoordinatorOptions options)
    : store_(store),
      options_(std::move(options)),
      policy_(ConsistencyPolicy::Create(options_.mode, options_.staleness)),
      ranks_(options_.num_workers, options_.worker_timeout, absl::Now()) {
  absl::MutexLock lock(&mu_);
  has_part_.resize(options_.num_workers, false);
  pending_.resize(options_.num_workers);
  barriers_.resize(options_.num_workers, 0);
  extension_joins_.resize(options_.num_workers, false);
  recovering_ = options_.fast_forward_after_restart &&
                policy_->FastForwardsAfterRestore();
}

absl::StatusOr<std::unique_ptr<UpdateCoordinator>> UpdateCoordinator::Create(
    ShardStore* store, CoordinatorOptions options) {
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

absl::Status UpdateCoordinator::CheckClockLocked(int rank,
                                                 absl::string_view what,
                                                 uint64_t clock) const {
  // Each rank trains planned_steps_ batches, and a step (sync) or a rank's
  // clock (ssp, async) moves only with one of them.
  const uint64_t ranks = static_cast<uint64_t>(options_.num_workers);
  if (planned_steps_ == 0 ||
      planned_steps_ > std::numeric_limits<uint64_t>::max() / ranks) {
    return absl::OkStatus();  // No plan to bound it by.
  }
  const uint64_t limit = planned_steps_ * ranks;
  if (clock <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", clock, " of worker ", rank,
                   " is beyond every step of this job (", options_.num_workers,
                   " workers x ", planned_steps_,
                   " planned steps): no worker of it gets there"));
}

StepView UpdateCoordinator::ViewLocked() const {
  return StepView{version_, applying_, has_part_, ranks_};
}

absl::StatusOr<uint64_t> UpdateCoordinator::CommitToStep(StagedPush push) {
  const int r = push.rank;
  const uint64_t step = push.step;
  const DataProgress progress{push.epoch, push.examples_done};
  // The push that completes the step applies it, on this thread.
  return ApplyIfReadyAfter([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (absl::Status s = AdmitLocked(r, push.incarnation); !s.ok()) return s;
    if (ranks_.done(r)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", r, " already said it is done; push for step ", step));
    }
    if (absl::Status s = CheckClockLocked(r, "step", step); !s.ok()) return s;
    if (absl::Status s = ranks_.CheckExamples(r, push.num_examples); !s.ok()) {
      return s;
    }
    if (ranks_.IsReplay(r, progress)) {
      // The batch is already in; at most it counts as taking part.
      if (push.num_examples > 0) ++replays_;  // Not an empty share.
      if (policy_->ReplayTakesPart(ViewLocked(), r, step)) has_part_[r] = true;
      return absl::OkStatus();
    }
    if (step > version_) MaybeFastForwardLocked(step);
    if (absl::Status s = policy_->AdmitPush(ViewLocked(), r, step); !s.ok()) {
      return s;
    }
    if (absl::Status s = ranks_.CheckProgress(r, progress, push.num_examples);
        !s.ok()) {
      return s;
    }
    has_part_[r] = true;
    ranks_.RecordAccepted(r, step, progress);
    pending_[r] = std::move(push);
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

std::optional<UpdateCoordinator::ReadyStep>
UpdateCoordinator::TakeReadyStepLocked() {
  std::optional<std::vector<int>> missing = policy_->StepReady(ViewLocked());
  if (!missing.has_value()) return std::nullopt;
  ReadyStep ready;
  ready.step = version_;
  ready.learning_rate = LearningRateLocked(version_);
  for (std::optional<StagedPush>& pending : pending_) {
    if (pending.has_value()) ready.pushes.push_back(*std::move(pending));
    pending.reset();
  }
  // A worker-set learning rate (its scheduler's): the lowest rank's.
  for (const StagedPush& p : ready.pushes) {
    if (p.learning_rate.has_value()) {
      ready.learning_rate = p.learning_rate;
      break;
    }
  }
  // Parts stay marked until version_ moves, so repeats are refused meanwhile.
  applying_ = true;
  if (*missing != last_missing_) {
    if (!missing->empty()) {
      spdlog::warn("step {} goes on without dead {}", version_,
                   Workers(*missing));
    } else {
      spdlog::info("step {}: every live worker takes part again", version_);
    }
    last_missing_ = *std::move(missing);
  }
  return ready;
}

absl::StatusOr<uint64_t> UpdateCoordinator::ApplyStep(ReadyStep ready) {
  absl::MutexLock apply_lock(&apply_mu_);
  absl::Status applied = ApplyAggregate(ready);
  WarnOfIncompleteUpdate(absl::StrCat("step ", ready.step));
  absl::MutexLock lock(&mu_);
  for (const StagedPush& p : ready.pushes) {
    if (applied.ok() && p.num_examples > 0) {
      staleness_.Add(version_ >= p.base_version ? version_ - p.base_version
                                                : 0);
    }
    ranks_.RecordApplied(p.rank, ready.step, {p.epoch, p.examples_done},
                         applied.ok() ? p.num_examples : 0);
  }
  std::fill(has_part_.begin(), has_part_.end(), false);
  version_ = ready.step + 1;
  applying_ = false;
  recovering_ = false;
  if (!applied.ok()) {
    spdlog::error("update for step {} failed: {}", ready.step,
                  applied.ToString());
    return absl::InternalError(absl::StrCat("applying step ", ready.step,
                                            " failed: ", applied.message()));
  }
  return version_;
}

absl::Status UpdateCoordinator::ApplyAggregate(ReadyStep& ready) {
  double total_examples = 0;
  for (const StagedPush& p : ready.pushes) total_examples += p.num_examples;
  // Only weight-0 pushes: nothing was learned, so nothing changes.
  if (total_examples == 0) return absl::OkStatus();
  return ForEachSlice(*store_, [&](int slice) {
    // g = sum_r (n_r * g_r) / sum_r n_r, always in rank order, so the sum
    // is the same bits whatever order the pushes arrived in. Computed a
    // block at a time as the update reads it, from the pushes where they
    // lie: elementwise, so the blocks change no bit.
    auto aggregate = [&](uint64_t begin, absl::Span<char> scratch) {
      const size_t n = scratch.size() / sizeof(float);
      double sum[Optimizer::kGradientBlock] = {};
      for (const StagedPush& p : ready.pushes) {
        if (p.num_examples == 0) continue;
        for (size_t done = 0; done < n;) {
          const EncodedFloats g =
              p.gradients[slice].View(begin + done, n - done, scratch);
          AddWeighted(g, p.num_examples, sum + done);
          done += g.size();
        }
      }
      float mean[Optimizer::kGradientBlock];
      DivideToFloats(sum, n, total_examples, mean);
      return EncodeInto(absl::MakeConstSpan(mean, n), scratch);
    };
    return store_->ApplyGradient(slice, aggregate, ready.learning_rate);
  });
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
  const DataProgress progress{push.epoch, push.examples_done};
  // One update at a time, so each sees a definite version and none
  // interleaves with another on a slice.
  absl::MutexLock apply_lock(&apply_mu_);
  uint64_t version_at_apply = 0;
  std::optional<float> learning_rate;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = AdmitLocked(r, push.incarnation); !s.ok()) return s;
    if (ranks_.done(r)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", r, " already said it is done; push for step ", push.step));
    }
    if (absl::Status s = CheckClockLocked(r, "step", push.step); !s.ok()) {
      return s;
    }
    if (absl::Status s = ranks_.CheckExamples(r, push.num_examples); !s.ok()) {
      return s;
    }
    if (ranks_.IsReplay(r, progress)) {
      if (push.num_examples > 0) ++replays_;  // Not an empty share.
      ranks_.RaiseClock(r, push.step + 1);
      return version_;
    }
    if (absl::Status s = policy_->AdmitPush(ViewLocked(), r, push.step);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = ranks_.CheckProgress(r, progress, push.num_examples);
        !s.ok()) {
      return s;
    }
    if (push.num_examples == 0) {
      // Takes its step, changes no weight.
      ranks_.RecordAccepted(r, push.step, progress);
      ranks_.RecordApplied(r, push.step, progress, 0);
      return version_;
    }
    version_at_apply = version_;
    learning_rate = push.learning_rate.has_value()
                        ? push.learning_rate
                        : LearningRateLocked(version_);
  }
  absl::Status applied = ForEachSlice(*store_, [&](int slice) {
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
  ranks_.RecordAccepted(r, push.step, progress);
  ranks_.RecordApplied(r, push.step, progress, push.num_examples);
  return ++version_;
}

void UpdateCoordinator::MaybeFastForwardLocked(uint64_t clock) {
  if (!recovering_ || clock <= version_ || applying_) return;
  // Step version_ is under way: it is current.
  if (std::find(has_part_.begin(), has_part_.end(), true) != has_part_.end()) {
    return;
  }
  spdlog::warn(
      "fast-forwarded from version {} to {} after restore: {} updates of this "
      "shard lost",
      version_, clock, clock - version_);
  updates_lost_ += clock - version_;
  version_ = clock;
}

std::optional<float> UpdateCoordinator::LearningRateLocked(
    uint64_t update) const {
  if (!options_.lr_schedule.has_value()) return std::nullopt;
  return options_.lr_schedule->At(
      update, policy_->PlannedUpdates(planned_steps_, options_.num_workers));
}

uint64_t UpdateCoordinator::version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

absl::Status UpdateCoordinator::failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

void UpdateCoordinator::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
}

CheckpointIdentity UpdateCoordinator::identity() const {
  return {store_->partition().num_servers(), store_->server_index(),
          std::string(ConsistencyModeName(options_.mode)),
          options_.num_workers};
}

ShardCheckpoint UpdateCoordinator::Snapshot() {
  // No update is half applied while apply_mu_ is held; a sync push still
  // waiting for its step is in neither the weights nor the rank records.
  absl::MutexLock apply_lock(&apply_mu_);
  ShardCheckpoint c;
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
  c.planned_steps = planned_steps_;
  c.ranks = ranks_.Records();
  c.examples = ranks_.examples();
  return c;
}

absl::Status UpdateCoordinator::Restore(const ShardCheckpoint& checkpoint) {
  if (absl::Status s = CheckIdentity(identity(), checkpoint.identity);
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
  planned_steps_ = checkpoint.planned_steps;
  plan_restored_ = planned_steps_ != 0;
  plan_open_ = options_.replan_after_restore;
  extension_joins_.assign(options_.num_workers, options_.replan_after_restore);
  ranks_ = std::move(ranks);
  std::fill(has_part_.begin(), has_part_.end(), false);
  for (std::optional<StagedPush>& pending : pending_) pending.reset();
  return absl::OkStatus();
}

std::string UpdateCoordinator::Report() const {
  // Before mu_: it is never held while a slice lock is taken.
  const uint64_t incomplete = store_->IncompleteUpdates();
  absl::MutexLock lock(&mu_);
  return absl::StrCat(ranks_.RanksReport(), "\n", ranks_.ExamplesPerEpochLine(),
                      "\nreplayed pushes acknowledged, not applied: ", replays_,
                      "\nupdates lost in restarts: ", updates_lost_,
                      "\nslice updates that kept non-finite results out: ",
                      incomplete, "\n", staleness_.ToString());
}

}  // namespace ps::server
