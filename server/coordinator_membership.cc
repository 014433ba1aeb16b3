// UpdateCoordinator's side facing the workers as members of the job:
// admission and leases, registration, heartbeats, Done, and waiting pulls.
// The update path is in update_coordinator.cc.
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

std::string Workers(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "worker " : "workers ",
                      absl::StrJoin(ranks, ", "));
}

}  // namespace

absl::Status UpdateCoordinator::AdmitLocked(int rank, uint64_t incarnation) {
  if (shutdown_) return absl::UnavailableError("server is shutting down");
  if (!failure_.ok()) return failure_;
  if (absl::Status s = ranks_.CheckIncarnation(rank, incarnation); !s.ok()) {
    return s;
  }
  if (ranks_.Touch(rank, absl::Now())) {
    // Rare, so logged under the lock.
    spdlog::info("worker {} is live again", rank);
  }
  return absl::OkStatus();
}

std::vector<int> UpdateCoordinator::RanksBlocking(uint64_t clock) const {
  absl::MutexLock lock(&mu_);
  return policy_->RanksBlocking(ViewLocked(), clock);
}

absl::Status UpdateCoordinator::NoteClockLocked(int rank, uint64_t clock) {
  if (absl::Status s = CheckClockLocked(rank, "clock", clock); !s.ok()) {
    return s;
  }
  // The rank has done steps [0, clock), even if a restarted shard lost some
  // of its pushes.
  ranks_.RaiseClock(rank, clock);
  MaybeFastForwardLocked(clock);
  // Waiting for a push that will not come would wait for ever (the rank's
  // waiting pull and its heartbeats keep it alive).
  if (!policy_->TakesPartWithoutPush(ViewLocked(), rank, clock)) {
    return absl::OkStatus();
  }
  spdlog::warn(
      "worker {} is at clock {} without a push for step {} here; it takes "
      "part with weight 0",
      rank, clock, version_);
  has_part_[rank] = true;
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> UpdateCoordinator::AwaitPull(
    int rank, uint64_t incarnation, uint64_t clock,
    absl::FunctionRef<bool()> cancelled) {
  absl::Status admitted;
  // A step that failed was logged; the wait below sees the version.
  (void)ApplyIfReadyAfter([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    admitted = AdmitLocked(rank, incarnation);
    if (admitted.ok()) admitted = NoteClockLocked(rank, clock);
    return admitted;
  });
  if (!admitted.ok()) return admitted;
  return WaitAsRank(
      rank, incarnation,
      [this, clock]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return policy_->PullReady(ViewLocked(), clock);
      },
      [this, clock]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return policy_->RanksBlocking(ViewLocked(), clock);
      },
      [&](const std::string& waiting_on, double waited, uint64_t version) {
        spdlog::warn("{}", policy_->SlowPullMessage(rank, clock, waiting_on,
                                                    waited, version));
      },
      cancelled, absl::StrCat("pull for clock ", clock));
}

absl::StatusOr<uint64_t> UpdateCoordinator::AwaitOthersFinished(
    int rank, uint64_t incarnation, absl::FunctionRef<bool()> cancelled) {
  absl::Status admitted;
  // Steps go on without it: one may have been waiting only for it. A step
  // that failed was logged.
  (void)ApplyIfReadyAfter([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    admitted = AdmitLocked(rank, incarnation);
    if (admitted.ok()) ranks_.MarkFinishing(rank);
    return admitted;
  });
  if (!admitted.ok()) return admitted;
  return WaitAsRank(
      rank, incarnation,
      [this, rank]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return ranks_.StillTraining(rank, absl::Now(), options_.rejoin_grace)
            .empty();
      },
      [this, rank]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return ranks_.StillTraining(rank, absl::Now(), options_.rejoin_grace);
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
    return shutdown_ || !failure_.ok() || ready();
  };
  for (;;) {
    bool log_due = false;
    std::vector<int> waiting_on;
    uint64_t version = 0;
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&is_ready),
                               options_.poll_interval)) {
        if (shutdown_) return absl::UnavailableError("server is shutting down");
        if (!failure_.ok()) return failure_;
        return version_;
      }
      // A replaced process stops waiting; a waiting one is alive.
      if (absl::Status s = ranks_.CheckIncarnation(rank, incarnation);
          !s.ok()) {
        return s;
      }
      ranks_.Touch(rank, absl::Now());
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
  uint64_t previous = 0;
  absl::StatusOr<RankProgress> result;
  {
    absl::MutexLock lock(&mu_);
    result = RegisterLocked(rank, incarnation, planned_steps,
                            max_examples_per_push, &previous);
  }
  // Without mu_, which a checkpoint's snapshot takes.
  if (result.ok() && previous != 0 && previous != incarnation &&
      options_.on_new_incarnation) {
    options_.on_new_incarnation();
  }
  return result;
}

absl::StatusOr<RankProgress> UpdateCoordinator::RegisterLocked(
    int rank, uint64_t incarnation, uint64_t planned_steps,
    uint32_t max_examples_per_push, uint64_t* previous_incarnation) {
  if (shutdown_) return absl::UnavailableError("server is shutting down");
  if (!failure_.ok()) return failure_;
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
  if (planned_steps == 0 && planned_steps_ == 0 &&
      options_.lr_schedule.has_value() &&
      options_.lr_schedule->kind() == LrScheduleKind::kCosine) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--lr_schedule=cosine needs the planned number of steps, and worker ",
        rank, " registered with planned_steps 0"));
  }
  if (planned_steps != 0) {
    planned_steps_ = planned_steps;
    plan_restored_ = false;
  }
  const uint64_t previous = ranks_.SetIncarnation(rank, incarnation);
  *previous_incarnation = previous;
  ranks_.SetMaxExamples(rank, max_examples_per_push);
  ranks_.Touch(rank, absl::Now());
  const DataProgress& progress = ranks_.accepted(rank);
  const RankProgress result{policy_->ResumeStep(ViewLocked(), rank),
                            progress.epoch, progress.examples_done};
  if (previous != 0 && previous != incarnation) {
    // Every worker of an extended run is a new process: no news.
    spdlog::log(
        extension_joins_[rank] ? spdlog::level::info : spdlog::level::warn,
        "worker {} rejoined: incarnation {} replaces {}; it resumes at step "
        "{}, epoch {}, examples_done {}",
        rank, incarnation, previous, result.next_step, result.epoch,
        result.examples_done);
  }
  extension_joins_[rank] = false;
  return result;
}

absl::StatusOr<uint64_t> UpdateCoordinator::Heartbeat(int rank,
                                                      uint64_t incarnation,
                                                      uint64_t clock) {
  return ApplyIfReadyAfter([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (absl::Status s = AdmitLocked(rank, incarnation); !s.ok()) return s;
    return clock > 0 ? NoteClockLocked(rank, clock) : absl::OkStatus();
  });
}

absl::Status UpdateCoordinator::CheckRegistered(int rank,
                                                uint64_t incarnation) const {
  absl::MutexLock lock(&mu_);
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

bool UpdateCoordinator::MarkDone(int rank) {
  // The step may have been waiting only for this rank. A step that failed
  // was logged.
  (void)ApplyIfReadyAfter([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ranks_.MarkDone(rank);
    return absl::OkStatus();
  });
  MaybeFinish();
  absl::MutexLock lock(&mu_);
  return finished_;
}

void UpdateCoordinator::CheckLeases() {
  std::vector<int> dead;
  auto expire = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (shutdown_ || !failure_.ok()) return absl::OkStatus();
    dead = ranks_.ExpireLeases(absl::Now());
    if (dead.empty() || options_.on_worker_failure != FailurePolicy::kFail) {
      return absl::OkStatus();
    }
    // Not Aborted: a worker retries a step refused with that (stale), and
    // this ends the job.
    failure_ = absl::FailedPreconditionError(absl::StrCat(
        Workers(dead), dead.size() == 1 ? " is" : " are",
        " dead (no heartbeat for ", absl::FormatDuration(ranks_.lease()),
        "); --on_worker_failure=fail stops the job"));
    return failure_;
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
        Workers(dead), dead.size() == 1 ? "is" : "are",
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
      if (mu_.AwaitWithTimeout(absl::Condition(&shutdown_), interval)) return;
    }
    CheckLeases();
    // Dead ranks count as finished once their rejoin grace has passed.
    MaybeFinish();
  }
}

void UpdateCoordinator::MaybeFinish() {
  absl::Status outcome;
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    if (failure_.ok() &&
        !ranks_.AllFinished(absl::Now(), options_.rejoin_grace)) {
      return;
    }
    outcome = failure_;
    finished_ = true;
  }
  if (options_.on_finished) options_.on_finished(outcome);
}

absl::Status UpdateCoordinator::AwaitBarrier(
    int rank, uint64_t incarnation, uint64_t generation,
    absl::FunctionRef<bool()> cancelled) {
  if (generation == 0) {
    return absl::InvalidArgumentError("barrier generations count from 1");
  }
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = AdmitLocked(rank, incarnation); !s.ok()) return s;
    barriers_[rank] = std::max(barriers_[rank], generation);
  }
  auto behind = [this, generation]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    std::vector<int> ranks;
    for (int r = 0; r < ranks_.num_workers(); ++r) {
      if (ranks_.active(r) && barriers_[r] < generation) ranks.push_back(r);
    }
    return ranks;
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
