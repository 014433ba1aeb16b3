// UpdateCoordinator's calls from the workers as members of the job:
// registration, heartbeats, Done, leases, and the waits (pulls, the final
// pull, barriers). The members' state is Membership's (membership.h); the
// update path is in update_coordinator.cc.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/update_coordinator.h"
#include "spdlog/spdlog.h"

namespace ps::server {
namespace {

constexpr absl::Duration kMaxCheckInterval = absl::Milliseconds(250);

}  // namespace

MembersSnapshot UpdateCoordinator::Members() const {
  absl::MutexLock lock(&mu_);
  return members_.Snapshot();
}

std::vector<int> UpdateCoordinator::RanksBlocking(uint64_t step) const {
  absl::MutexLock lock(&mu_);
  return policy_->RanksBlocking(ViewLocked(), step);
}

absl::Status UpdateCoordinator::NoteNextStepLocked(int rank,
                                                   uint64_t next_step) {
  // Named as the request's field (PullRequest.clock, HeartbeatRequest.clock).
  if (absl::Status s = members_.CheckWithinPlan(rank, "clock", next_step);
      !s.ok()) {
    return s;
  }
  // The rank has done steps [0, next_step), even if a restarted shard lost
  // some of its pushes.
  members_.ranks().RaiseNextStep(rank, next_step);
  MaybeFastForwardLocked(next_step);
  // Waiting for a push that will not come would wait for ever (the rank's
  // waiting pull and its heartbeats keep it alive).
  if (!policy_->TakesPartWithoutPush(ViewLocked(), rank, next_step)) {
    return absl::OkStatus();
  }
  spdlog::warn(
      "worker {} moved on to step {} without a push for step {} here; it "
      "takes part with weight 0",
      rank, next_step, version_);
  parts_.AddWithoutPush(rank);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> UpdateCoordinator::AwaitPull(
    int rank, uint64_t incarnation, uint64_t step,
    absl::FunctionRef<bool()> cancelled) {
  absl::Status admitted;
  // A step that failed was logged; the wait below sees the version.
  (void)ApplyIfReadyAfter([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    admitted = members_.Admit(rank, incarnation, absl::Now());
    if (admitted.ok()) admitted = NoteNextStepLocked(rank, step);
    return admitted;
  });
  if (!admitted.ok()) return admitted;
  return WaitAsRank(
      rank, incarnation,
      [this, step]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return policy_->PullReady(ViewLocked(), step);
      },
      [this, step]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return policy_->RanksBlocking(ViewLocked(), step);
      },
      [&](const std::string& waiting_on, double waited, uint64_t version) {
        spdlog::warn("{}", policy_->SlowPullMessage(rank, step, waiting_on,
                                                    waited, version));
      },
      cancelled, absl::StrCat("pull for step ", step));
}

absl::StatusOr<uint64_t> UpdateCoordinator::AwaitOthersFinished(
    int rank, uint64_t incarnation, absl::FunctionRef<bool()> cancelled) {
  absl::Status admitted;
  // Steps go on without it: one may have been waiting only for it. A step
  // that failed was logged.
  (void)ApplyIfReadyAfter([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    admitted = members_.Admit(rank, incarnation, absl::Now());
    if (admitted.ok()) members_.ranks().MarkFinishing(rank);
    return admitted;
  });
  if (!admitted.ok()) return admitted;
  return WaitAsRank(
      rank, incarnation,
      [this, rank]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return members_.OthersTraining(rank, absl::Now()).empty();
      },
      [this, rank]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return members_.OthersTraining(rank, absl::Now());
      },
      [&](const std::string& waiting_on, double waited, uint64_t version) {
        spdlog::info(
            "worker {} has trained its last step and waits for workers [{}] "
            "to finish theirs ({:.0f} s, version {})",
            rank, waiting_on, waited, version);
      },
      cancelled, "final pull");
}

absl::StatusOr<uint64_t> UpdateCoordinator::WaitAsRank(
    int rank, uint64_t incarnation, absl::FunctionRef<bool()> ready,
    absl::FunctionRef<std::vector<int>()> blocking,
    absl::FunctionRef<void(const std::string&, double, uint64_t)> log_slow,
    absl::FunctionRef<bool()> cancelled, absl::string_view what) {
  const absl::Time start = absl::Now();
  absl::Time next_log = start + options_.slow_wait_log;
  auto is_ready = [this, ready]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !members_.Running().ok() || !log_failure_.ok() || ready();
  };
  for (;;) {
    bool log_due = false;
    std::vector<int> waiting_on;
    uint64_t version = 0;
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&is_ready),
                               options_.poll_interval)) {
        if (absl::Status s = members_.Running(); !s.ok()) return s;
        if (!log_failure_.ok()) return log_failure_;
        return version_;
      }
      // A replaced process stops waiting; a waiting one is alive.
      if (absl::Status s = members_.ranks().CheckIncarnation(rank, incarnation);
          !s.ok()) {
        return s;
      }
      members_.ranks().Touch(rank, absl::Now());
      log_due = absl::Now() >= next_log;
      if (log_due) {
        waiting_on = blocking();
        version = version_;
      }
    }
    // Logged without the lock: spdlog may block on I/O.
    if (log_due) {
      log_slow(absl::StrJoin(waiting_on, ", "),
               absl::ToDoubleSeconds(absl::Now() - start), version);
      next_log += options_.slow_wait_log;
    }
    if (cancelled()) {
      return absl::CancelledError(
          absl::StrCat(what, " was cancelled by the caller"));
    }
  }
}

absl::StatusOr<RankProgress> UpdateCoordinator::Register(
    int rank, uint64_t incarnation, uint64_t planned_steps,
    uint32_t max_examples_per_push) {
  if (incarnation == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker ", rank,
        " registers without an incarnation; every process picks one"));
  }
  RankProgress progress;
  bool replaced = false;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Membership::Registration> registration = members_.Register(
        rank, incarnation, planned_steps, max_examples_per_push, absl::Now());
    if (!registration.ok()) return registration.status();
    AppendOrWarnLocked(update::LoggedRegister{rank, incarnation, planned_steps,
                                              max_examples_per_push});
    const update::DataProgress& accepted = members_.ranks().accepted(rank);
    progress = {policy_->ResumeStep(ViewLocked(), rank), accepted.epoch,
                accepted.examples_done};
    const uint64_t previous = registration->previous_incarnation;
    replaced = previous != 0 && previous != incarnation;
    if (replaced) {
      spdlog::log(registration->extension_join ? spdlog::level::info
                                               : spdlog::level::warn,
                  "worker {} rejoined: incarnation {} replaces {}; it resumes "
                  "at step {}, epoch {}, examples_done {}",
                  rank, incarnation, previous, progress.next_step,
                  progress.epoch, progress.examples_done);
    }
  }
  // Without mu_, which a checkpoint's snapshot takes.
  if (replaced && options_.on_new_incarnation) options_.on_new_incarnation();
  return progress;
}

absl::StatusOr<uint64_t> UpdateCoordinator::Heartbeat(int rank,
                                                      uint64_t incarnation,
                                                      uint64_t next_step) {
  return ApplyIfReadyAfter([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (absl::Status s = members_.Admit(rank, incarnation, absl::Now());
        !s.ok()) {
      return s;
    }
    return next_step > 0 ? NoteNextStepLocked(rank, next_step)
                         : absl::OkStatus();
  });
}

absl::Status UpdateCoordinator::CheckRegistered(int rank,
                                                uint64_t incarnation) const {
  absl::MutexLock lock(&mu_);
  return members_.CheckRegistered(rank, incarnation);
}

bool UpdateCoordinator::MarkDone(int rank) {
  // The step may have been waiting only for this rank. A step that failed
  // was logged.
  (void)ApplyIfReadyAfter([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    members_.ranks().MarkDone(rank);
    AppendOrWarnLocked(update::LoggedDone{rank});
    return absl::OkStatus();
  });
  MaybeFinish();
  absl::MutexLock lock(&mu_);
  return members_.finished();
}

void UpdateCoordinator::CheckLeases() {
  std::vector<int> dead;
  auto expire = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    dead = members_.ExpireLeases(absl::Now());
    // Under kFail the job failed with them.
    return dead.empty() ? absl::OkStatus() : members_.failure();
  };
  // Under kElastic a step may go on without the dead (one that failed was
  // logged); under kFail the job fails instead and no step is taken.
  const absl::Status failed = ApplyIfReadyAfter(expire).status();
  if (dead.empty()) return;
  if (options_.on_worker_failure == FailurePolicy::kFail) {
    spdlog::error("{}", std::string(failed.message()));
  } else {
    spdlog::warn(
        "{} {} dead (no heartbeat for {}); going on without {} "
        "(--on_worker_failure=elastic)",
        DescribeWorkers(dead), dead.size() == 1 ? "is" : "are",
        absl::FormatDuration(options_.worker_timeout),
        dead.size() == 1 ? "it" : "them");
  }
  MaybeFinish();
}

void UpdateCoordinator::CheckerLoop() {
  const absl::Duration interval =
      std::min(options_.worker_timeout / 4, kMaxCheckInterval);
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto shut_down = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return members_.shut_down();
      };
      if (mu_.AwaitWithTimeout(absl::Condition(&shut_down), interval)) return;
    }
    CheckLeases();
    // Dead ranks count as finished once their rejoin grace has passed.
    MaybeFinish();
  }
}

void UpdateCoordinator::MaybeFinish() {
  std::optional<absl::Status> outcome;
  {
    absl::MutexLock lock(&mu_);
    outcome = members_.EndIfOver(absl::Now());
  }
  if (outcome.has_value() && options_.on_finished) {
    options_.on_finished(*outcome);
  }
}

absl::Status UpdateCoordinator::AwaitBarrier(
    int rank, uint64_t incarnation, uint64_t generation,
    absl::FunctionRef<bool()> cancelled) {
  if (generation == 0) {
    return absl::InvalidArgumentError("barrier generations count from 1");
  }
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = members_.Admit(rank, incarnation, absl::Now());
        !s.ok()) {
      return s;
    }
    members_.ReachBarrier(rank, generation);
  }
  auto behind = [this, generation]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return members_.BehindBarrier(generation);
  };
  absl::StatusOr<uint64_t> reached = WaitAsRank(
      rank, incarnation,
      [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return behind().empty(); },
      behind,
      [&](const std::string& waiting_on, double waited, uint64_t version) {
        spdlog::info(
            "worker {} waits at barrier {} for workers [{}] ({:.0f} s, "
            "version {})",
            rank, generation, waiting_on, waited, version);
      },
      cancelled, "barrier");
  return reached.status();
}

}  // namespace ps::server
