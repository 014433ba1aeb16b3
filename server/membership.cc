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
      barriers_(options.num_workers, 0) {}

absl::Status Membership::Running() const {
  if (shutdown_) return absl::UnavailableError("server is shutting down");
  return failure_;
}

absl::Status Membership::Admit(int rank, uint64_t incarnation, absl::Time now) {
  if (absl::Status s = Running(); !s.ok()) return s;
  if (absl::Status s = ranks_.CheckIncarnation(rank, incarnation); !s.ok()) {
    return s;
  }
  if (ranks_.Heard(rank, now)) {
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
  ranks_.Heard(rank, now);
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

bool Membership::MayDeclareDead(int rank) const {
  const absl::Time silent_since = ranks_.last_heard(rank);
  bool others_live = false;
  for (int w = 0; w < ranks_.num_workers(); ++w) {
    if (w == rank || ranks_.dead(w) || ranks_.done(w)) continue;
    others_live = true;
    if (ranks_.last_request(w) - silent_since >= ranks_.lease() / 2) {
      return true;
    }
  }
  return !others_live;
}

void Membership::NoteUnheard(std::vector<int> unheard) {
  if (unheard_.empty() && !unheard.empty()) {
    spdlog::warn(
        "heard from none of the workers it waits for ({}) for {}: this shard "
        "may be cut off from them (or they all stopped at once); it declares "
        "none of them dead and waits, until a worker is heard from again",
        DescribeWorkers(unheard), absl::FormatDuration(ranks_.lease()));
  } else if (!unheard_.empty() && unheard.empty()) {
    spdlog::info("hears from the workers again");
  }
  unheard_ = std::move(unheard);
}

std::vector<int> Membership::ExpireLeases(absl::Time now) {
  if (!Running().ok()) return {};
  std::vector<int> dead;
  std::vector<int> unheard;
  // Decided before any is marked: ranks cut off together witness for none
  // of each other.
  for (int rank : ranks_.LeasesRunOut(now)) {
    (MayDeclareDead(rank) ? dead : unheard).push_back(rank);
  }
  for (int rank : dead) ranks_.MarkDead(rank);
  NoteUnheard(std::move(unheard));
  if (dead.empty() || on_worker_failure_ != FailurePolicy::kFail) return dead;
  // Not Aborted: a worker retries a step refused with that (stale), and
  // this ends the job.
  failure_ = absl::FailedPreconditionError(absl::StrCat(
      DescribeWorkers(dead), dead.size() == 1 ? " is" : " are",
      " dead (no heartbeat for ", absl::FormatDuration(ranks_.lease()),
      "); --on_worker_failure=fail stops the job"));
  return dead;
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
