#include "server/update_coordinator.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace ps::server {
namespace {

// Below this many elements an update is applied on the calling thread:
// starting threads would cost more than it saves.
constexpr uint64_t kParallelApplyElements = 1 << 20;
constexpr unsigned kMaxApplyThreads = 8;

}  // namespace

absl::StatusOr<ConsistencyMode> ParseConsistencyMode(absl::string_view name) {
  if (name == "sync") return ConsistencyMode::kSync;
  if (name == "ssp") return ConsistencyMode::kSsp;
  if (name == "async") return ConsistencyMode::kAsync;
  return absl::InvalidArgumentError(absl::StrCat(
      "--mode must be \"sync\", \"ssp\" or \"async\", got \"", name, "\""));
}

absl::string_view ConsistencyModeName(ConsistencyMode mode) {
  switch (mode) {
    case ConsistencyMode::kSync:
      return "sync";
    case ConsistencyMode::kSsp:
      return "ssp";
    case ConsistencyMode::kAsync:
      return "async";
  }
  return "unknown";
}

UpdateCoordinator::UpdateCoordinator(ShardStore* store,
                                     const CoordinatorOptions& options)
    : store_(store), options_(options) {
  absl::MutexLock lock(&mu_);
  ranks_.resize(options.num_workers);
}

absl::StatusOr<std::unique_ptr<UpdateCoordinator>> UpdateCoordinator::Create(
    ShardStore* store, const CoordinatorOptions& options) {
  if (options.num_workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--num_workers must be at least 1, got ", options.num_workers));
  }
  if (options.staleness < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--staleness must be at least 0, got ", options.staleness));
  }
  return std::unique_ptr<UpdateCoordinator>(
      new UpdateCoordinator(store, options));
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
    sizes_match = push.gradients[i].size() == store_->slices()[i].num_elements;
  }
  if (!sizes_match || push.num_examples < 1) {
    return absl::InvalidArgumentError(
        "push does not cover this shard's slices or has no examples");
  }
  return options_.mode == ConsistencyMode::kSync ? CommitSync(std::move(push))
                                                 : CommitAsync(std::move(push));
}

void UpdateCoordinator::RecordProgressLocked(const StagedPush& push) {
  RankState& rank = ranks_[push.rank];
  rank.clock = push.step + 1;
  rank.epoch = push.epoch;
  rank.examples_done = push.examples_done;
}

absl::StatusOr<uint64_t> UpdateCoordinator::CommitSync(StagedPush push) {
  const int r = push.rank;
  const uint64_t step = push.step;
  std::vector<StagedPush> batch;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::UnavailableError("server is shutting down");
    if (step < version_) {
      return absl::AbortedError(absl::StrCat(
          "stale step ", step, " from rank ", r, ": shard is at version ",
          version_, " and collects step ", version_));
    }
    if (step > version_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "step ", step, " from rank ", r, " is ahead: shard is at version ",
          version_, " and collects step ", version_, "; pull with clock ", step,
          " before pushing it"));
    }
    RankState& rank = ranks_[r];
    if (rank.pushed_current_step) {
      return absl::AlreadyExistsError(
          absl::StrCat("rank ", r, " already pushed step ", step));
    }
    rank.pushed_current_step = true;
    RecordProgressLocked(push);
    rank.pending = std::move(push);
    if (++num_pending_ < options_.num_workers) return version_;
    // The last push of the step: this thread applies the update. Flags stay
    // set until version_ moves, so repeats are still refused meanwhile.
    batch.reserve(ranks_.size());
    for (RankState& s : ranks_) {
      batch.push_back(*std::move(s.pending));
      s.pending.reset();
    }
    num_pending_ = 0;
  }

  absl::MutexLock apply_lock(&apply_mu_);
  absl::Status applied = ApplyAggregate(batch);
  absl::MutexLock lock(&mu_);
  for (const StagedPush& p : batch) {
    staleness_.Add(version_ >= p.base_version ? version_ - p.base_version : 0);
  }
  for (RankState& s : ranks_) s.pushed_current_step = false;
  version_ = step + 1;
  if (!applied.ok()) {
    spdlog::error("update for step {} failed: {}", step, applied.ToString());
    return absl::InternalError(
        absl::StrCat("applying step ", step, " failed: ", applied.message()));
  }
  return version_;
}

absl::StatusOr<uint64_t> UpdateCoordinator::CommitAsync(StagedPush push) {
  // One update at a time, so each sees a definite version and none
  // interleaves with another on a slice.
  absl::MutexLock apply_lock(&apply_mu_);
  uint64_t version_at_apply = 0;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::UnavailableError("server is shutting down");
    const RankState& rank = ranks_[push.rank];
    if (push.step < rank.clock) {
      return absl::AlreadyExistsError(
          absl::StrCat("rank ", push.rank, " already pushed step ",
                       rank.clock - 1, "; got step ", push.step, " again"));
    }
    version_at_apply = version_;
  }
  absl::Status applied = ForEachSlice([&](int slice) {
    return store_->ApplyGradient(slice, push.gradients[slice]);
  });
  if (!applied.ok()) {
    spdlog::error("update from rank {} failed: {}", push.rank,
                  applied.ToString());
    return absl::InternalError(
        absl::StrCat("applying push failed: ", applied.message()));
  }
  staleness_.Add(version_at_apply >= push.base_version
                     ? version_at_apply - push.base_version
                     : 0);
  absl::MutexLock lock(&mu_);
  RecordProgressLocked(push);
  return ++version_;
}

absl::Status UpdateCoordinator::ApplyAggregate(std::vector<StagedPush>& batch) {
  double total_examples = 0;
  for (const StagedPush& p : batch) total_examples += p.num_examples;
  return ForEachSlice([&](int slice) {
    // g = sum_r (n_r * g_r) / sum_r n_r, always in rank order, so the sum
    // is the same bits whatever order the pushes arrived in.
    std::vector<float>& out = batch[0].gradients[slice];
    const size_t n = out.size();
    for (size_t i = 0; i < n; ++i) {
      double sum = 0;
      for (const StagedPush& p : batch) {
        sum += static_cast<double>(p.num_examples) * p.gradients[slice][i];
      }
      out[i] = static_cast<float>(sum / total_examples);
    }
    return store_->ApplyGradient(slice, out);
  });
}

absl::Status UpdateCoordinator::ForEachSlice(
    const std::function<absl::Status(int)>& fn) {
  const int num_slices = store_->num_slices();
  const unsigned threads =
      store_->num_elements() < kParallelApplyElements
          ? 1
          : std::min({std::max(1u, std::thread::hardware_concurrency()),
                      kMaxApplyThreads, static_cast<unsigned>(num_slices)});
  std::vector<absl::Status> results(num_slices);
  std::atomic<int> next{0};
  auto work = [&] {
    for (int s = next++; s < num_slices; s = next++) results[s] = fn(s);
  };
  std::vector<std::thread> helpers;
  for (unsigned t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
  for (const absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

bool UpdateCoordinator::PullReadyLocked(uint64_t clock) const {
  if (shutdown_) return true;
  switch (options_.mode) {
    case ConsistencyMode::kAsync:
      return true;
    case ConsistencyMode::kSync:
      return version_ >= clock;
    case ConsistencyMode::kSsp:
      return RanksBlockingLocked(clock).empty();
  }
  return true;
}

std::vector<int> UpdateCoordinator::RanksBlockingLocked(uint64_t clock) const {
  std::vector<int> blocking;
  const uint64_t s = static_cast<uint64_t>(options_.staleness);
  if (options_.mode == ConsistencyMode::kAsync) return blocking;
  if (options_.mode == ConsistencyMode::kSync) {
    if (version_ >= clock) return blocking;
    // Those whose push for the step being collected is missing.
    for (size_t r = 0; r < ranks_.size(); ++r) {
      if (!ranks_[r].pushed_current_step) blocking.push_back(r);
    }
    return blocking;
  }
  if (clock <= s) return blocking;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (!ranks_[r].done && ranks_[r].clock < clock - s) blocking.push_back(r);
  }
  return blocking;
}

std::vector<int> UpdateCoordinator::RanksBlocking(uint64_t clock) const {
  absl::MutexLock lock(&mu_);
  return RanksBlockingLocked(clock);
}

absl::StatusOr<uint64_t> UpdateCoordinator::AwaitPull(
    uint64_t clock, absl::FunctionRef<bool()> cancelled) {
  const absl::Time start = absl::Now();
  absl::Time next_log = start + options_.slow_pull_log_after;
  auto ready = [this, clock]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return PullReadyLocked(clock);
  };
  for (;;) {
    bool log_due = false;
    std::vector<int> waiting_on;
    uint64_t version = 0;
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&ready),
                               options_.poll_interval)) {
        if (shutdown_) {
          return absl::UnavailableError("server is shutting down");
        }
        return version_;
      }
      log_due = absl::Now() >= next_log;
      if (log_due) {
        waiting_on = RanksBlockingLocked(clock);
        version = version_;
      }
    }
    // Logged without the lock: spdlog may block on I/O.
    if (log_due) {
      spdlog::warn(
          "pull for clock {} waiting on workers [{}] for {:.0f} s (mode {}, "
          "version {})",
          clock, absl::StrJoin(waiting_on, ", "),
          absl::ToDoubleSeconds(absl::Now() - start),
          std::string(ConsistencyModeName(options_.mode)), version);
      next_log += options_.slow_pull_log_after;
    }
    if (cancelled()) {
      return absl::CancelledError(absl::StrCat("pull for clock ", clock,
                                               " was cancelled by the caller"));
    }
  }
}

RankProgress UpdateCoordinator::Register(int rank, uint64_t incarnation) {
  absl::MutexLock lock(&mu_);
  RankState& s = ranks_[rank];
  s.incarnation = incarnation;
  return {s.clock, s.epoch, s.examples_done};
}

bool UpdateCoordinator::MarkDone(int rank) {
  absl::MutexLock lock(&mu_);
  ranks_[rank].done = true;
  return std::all_of(ranks_.begin(), ranks_.end(),
                     [](const RankState& s) { return s.done; });
}

uint64_t UpdateCoordinator::version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

void UpdateCoordinator::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
}

}  // namespace ps::server
