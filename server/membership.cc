#include "server/membership.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace ps::server {

Membership::Membership(const CoordinatorOptions& options, absl::Time now)
    : on_worker_failure_(options.on_worker_failure),
      rejoin_grace_(options.rejoin_grace),
      needs_plan_(options.lr_schedule.has_value() &&
                  options.lr_schedule->kind() ==
                      update::LrScheduleKind::kCosine),
      replan_after_restore_(options.replan_after_restore),
      ranks_(options.num_workers, options.worker_timeout, now),
      extension_joins_(options.num_workers, false),
      barriers_(options.num_workers, 0),
      last_request_(now),
      hearing_since_(now) {}

absl::Status Membership::Running() const {
  if (shutdown_) return absl::UnavailableError("server is shutting down");
  return failure_;
}

absl::Status Membership::Admit(int rank, uint64_t incarnation, absl::Time now) {
  if (absl::Status s = Running(); !s.ok()) return s;
  if (absl::Status s = ranks_.CheckIncarnation(rank, incarnation); !s.ok()) {
    return s;
  }
  NoteRequest(now);
  if (ranks_.Touch(rank, now)) {
    // Rare, so logged under the coordinator's lock.
    spdlog::info("worker {} is live again", rank);
  }
  return absl::OkStatus();
}

absl::Status Membership::CheckRegistered(int rank, uint64_t incarnation) const {
  const uint64_t registered = ranks_.incarnation(rank);
  if (registered == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", rank, " has not registered with this server"));
  }
  if (incarnation != registered) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", rank, " registered as incarnation ", registered,
                     ", not ", incarnation));
  }
  return absl::OkStatus();
}

absl::StatusOr<Membership::Registration> Membership::Register(
    int rank, uint64_t incarnation, uint64_t planned_steps,
    uint32_t max_examples_per_push, absl::Time now) {
  if (absl::Status s = Running(); !s.ok()) return s;
  if (absl::Status s = TakePlan(rank, planned_steps); !s.ok()) return s;
  Registration registration;
  registration.previous_incarnation = ranks_.SetIncarnation(rank, incarnation);
  registration.extension_join = extension_joins_[rank];
  ranks_.SetMaxExamples(rank, max_examples_per_push);
  NoteRequest(now);
  ranks_.Touch(rank, now);
  extension_joins_[rank] = false;
  return registration;
}

absl::Status Membership::TakePlan(int rank, uint64_t planned_steps) {
  if (planned_steps != 0 && plan_open_) {
    // An extended run: its workers' plan replaces the checkpoint's.
    if (planned_steps != planned_steps_) {
      spdlog::info(
          "worker {} plans {} steps where the restored run planned {}: the "
          "run goes on under the new plan (--extend), which bounds the steps "
          "and spans the learning-rate schedule",
          rank, planned_steps, planned_steps_);
    }
    planned_steps_ = planned_steps;
    plan_open_ = false;
    plan_restored_ = false;
  }
  if (planned_steps != 0 && planned_steps_ != 0 &&
      planned_steps != planned_steps_) {
    if (plan_restored_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", rank, " plans ", planned_steps,
          " steps but the run of the restored checkpoint planned ",
          planned_steps_,
          "; a resumed run keeps its plan (same --epochs, --max_steps and "
          "--batch_size), and servers started with --extend take a new one"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", rank, " plans ", planned_steps,
        " steps but the workers registered before it plan ", planned_steps_,
        "; every worker must plan the same (same --epochs, --max_steps and "
        "--batch_size)"));
  }
  if (planned_steps == 0 && planned_steps_ == 0 && needs_plan_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--lr_schedule=cosine needs the planned number of steps, and worker ",
        rank, " registered with planned_steps 0"));
  }
  if (planned_steps != 0) {
    planned_steps_ = planned_steps;
    plan_restored_ = false;
  }
  return absl::OkStatus();
}

absl::Status Membership::CheckWithinPlan(int rank, absl::string_view what,
                                         uint64_t step) const {
  // Each rank trains planned_steps_ batches, and a step (sync) or a rank's
  // next step (ssp, async) moves only with one of them.
  const uint64_t workers = static_cast<uint64_t>(ranks_.num_workers());
  if (planned_steps_ == 0 ||
      planned_steps_ > std::numeric_limits<uint64_t>::max() / workers) {
    return absl::OkStatus();  // No plan to bound it by.
  }
  const uint64_t limit = planned_steps_ * workers;
  if (step <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", step, " of worker ", rank,
                   " is beyond every step of this job (", ranks_.num_workers(),
                   " workers x ", planned_steps_,
                   " planned steps): no worker of it gets there"));
}

void Membership::NoteRequest(absl::Time now) {
  const absl::Duration silence = now - last_request_;
  if (silence >= ranks_.lease() / 2) {
    hearing_since_ = now;
    last_deaf_spell_ = silence;
  }
  last_request_ = std::max(last_request_, now);
}

bool Membership::MayDeclareDead(int rank, absl::Time now) const {
  bool others_live = false;
  for (int r = 0; r < ranks_.num_workers(); ++r) {
    if (r != rank && !ranks_.dead(r) && !ranks_.done(r)) others_live = true;
  }
  if (!others_live) return true;
  const absl::Duration lease = ranks_.lease();
  const bool deaf = now - last_request_ >= lease / 2;
  return !deaf && now - hearing_since_ >= std::max(lease, 2 * last_deaf_spell_);
}

void Membership::NoteUnheard(std::vector<int> unheard, absl::Time now) {
  std::vector<int> back;
  for (int rank : unheard_) {
    if (!ranks_.dead(rank) &&
        std::find(unheard.begin(), unheard.end(), rank) == unheard.end()) {
      back.push_back(rank);
    }
  }
  if (!back.empty()) {
    spdlog::info("{} heard from again, never declared dead",
                 DescribeWorkers(back));
  }
  if (unheard_.empty() && !unheard.empty()) {
    const absl::Duration deaf = now - last_request_ >= ranks_.lease() / 2
                                    ? now - last_request_
                                    : last_deaf_spell_;
    spdlog::warn(
        "{} silent past --worker_timeout={}, but not declared dead: this "
        "shard heard no request of any worker for {} and may be the one cut "
        "off (or every worker stopped at once); it waits until it hears the "
        "workers again, and then gives the silent ones as long again to come "
        "back",
        DescribeWorkers(unheard), absl::FormatDuration(ranks_.lease()),
        absl::FormatDuration(absl::Trunc(deaf, absl::Milliseconds(100))));
  }
  unheard_ = std::move(unheard);
}

std::vector<int> Membership::ExpireLeases(absl::Time now) {
  if (!Running().ok()) return {};
  std::vector<int> dead;
  std::vector<int> unheard;
  // Decided before any is marked: two silent ranks must not make each
  // other the last one live.
  for (int rank : ranks_.LeasesRunOut(now)) {
    (MayDeclareDead(rank, now) ? dead : unheard).push_back(rank);
  }
  for (int rank : dead) ranks_.MarkDead(rank);
  NoteUnheard(std::move(unheard), now);
  if (dead.empty() || on_worker_failure_ != FailurePolicy::kFail) return dead;
  // Not Aborted: a worker retries a step refused with that (stale), and
  // this ends the job.
  failure_ = absl::FailedPreconditionError(absl::StrCat(
      DescribeWorkers(dead), dead.size() == 1 ? " is" : " are",
      " dead (no heartbeat for ", absl::FormatDuration(ranks_.lease()),
      "); --on_worker_failure=fail stops the job"));
  return dead;
}

MembersSnapshot Membership::Snapshot() const {
  MembersSnapshot snapshot;
  for (int r = 0; r < ranks_.num_workers(); ++r) {
    snapshot.next_steps.push_back(ranks_.next_step(r));
    snapshot.dead.push_back(ranks_.dead(r));
  }
  snapshot.unheard = static_cast<int>(unheard_.size());
  return snapshot;
}

std::vector<int> Membership::OthersTraining(int rank, absl::Time now) const {
  return ranks_.StillTraining(rank, now, rejoin_grace_);
}

std::optional<absl::Status> Membership::EndIfOver(absl::Time now) {
  if (finished_) return std::nullopt;
  if (failure_.ok() && !ranks_.AllFinished(now, rejoin_grace_)) {
    return std::nullopt;
  }
  finished_ = true;
  return failure_;
}

void Membership::ReachBarrier(int rank, uint64_t generation) {
  barriers_[rank] = std::max(barriers_[rank], generation);
}

std::vector<int> Membership::BehindBarrier(uint64_t generation) const {
  std::vector<int> behind;
  for (int r = 0; r < ranks_.num_workers(); ++r) {
    if (ranks_.active(r) && barriers_[r] < generation) behind.push_back(r);
  }
  return behind;
}

void Membership::Restore(RankRegistry ranks, uint64_t planned_steps) {
  ranks_ = std::move(ranks);
  planned_steps_ = planned_steps;
  plan_restored_ = planned_steps_ != 0;
  plan_open_ = replan_after_restore_;
  extension_joins_.assign(ranks_.num_workers(), replan_after_restore_);
}

}  // namespace ps::server
