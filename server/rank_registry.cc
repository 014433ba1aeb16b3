#include "server/rank_registry.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ps::server {

RankRegistry::RankRegistry(int num_workers, absl::Duration lease,
                           absl::Time now)
    : lease_(lease), ranks_(num_workers) {
  for (Rank& r : ranks_) r.last_heard = now;
}

absl::Status RankRegistry::CheckIncarnation(int rank,
                                            uint64_t incarnation) const {
  const uint64_t registered = ranks_[rank].incarnation;
  if (registered == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", rank, " has not registered with this server"));
  }
  if (incarnation == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request of worker ", rank,
        " carries no incarnation; requests carry the one it registered "
        "with"));
  }
  if (incarnation == registered) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "request from incarnation ", incarnation, " of worker ", rank,
      ", but incarnation ", registered,
      " has registered since: this process was replaced by a restarted "
      "worker"));
}

absl::Status RankRegistry::CheckExamples(int rank,
                                         uint32_t num_examples) const {
  const uint32_t bound = ranks_[rank].max_examples;
  if (bound == 0 || num_examples <= bound) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("num_examples ", num_examples, " of worker ", rank,
                   " is more than its batch: it registered at most ", bound,
                   " examples a push (max_examples_per_push)"));
}

uint64_t RankRegistry::SetIncarnation(int rank, uint64_t incarnation) {
  Rank& r = ranks_[rank];
  const uint64_t previous = r.incarnation;
  if (previous != incarnation && previous != 0) {
    r.done = false;
    r.finishing = false;
  }
  r.incarnation = incarnation;
  return previous;
}

bool RankRegistry::Touch(int rank, absl::Time now) {
  Rank& r = ranks_[rank];
  r.last_heard = std::max(r.last_heard, now);
  const bool was_dead = r.dead;
  r.dead = false;
  return was_dead;
}

std::vector<int> RankRegistry::LeasesRunOut(absl::Time now) const {
  std::vector<int> expired;
  for (int i = 0; i < num_workers(); ++i) {
    const Rank& r = ranks_[i];
    if (r.dead || r.done || now - r.last_heard <= lease_) continue;
    expired.push_back(i);
  }
  return expired;
}

bool RankRegistry::AllFinished(absl::Time now,
                               absl::Duration rejoin_grace) const {
  bool any_done = false;
  for (const Rank& r : ranks_) {
    if (r.done) {
      any_done = true;
      continue;
    }
    if (!GoneForGood(r, now, rejoin_grace)) return false;
  }
  return any_done;
}

std::vector<int> RankRegistry::StillTraining(
    int rank, absl::Time now, absl::Duration rejoin_grace) const {
  std::vector<int> training;
  for (int i = 0; i < num_workers(); ++i) {
    const Rank& r = ranks_[i];
    if (i != rank && !r.done && !r.finishing &&
        !GoneForGood(r, now, rejoin_grace)) {
      training.push_back(i);
    }
  }
  return training;
}

absl::Status RankRegistry::CheckProgress(int rank, uint64_t step,
                                         const update::DataProgress& progress,
                                         uint32_t num_examples) const {
  const Rank& r = ranks_[rank];
  if (progress.epoch < r.accepted.epoch) return absl::OkStatus();
  // Steps the push may be past the record: one, or after a restore those
  // since the restored clock (the worker's pushes for them were lost).
  uint64_t steps = 1;
  uint64_t batch = num_examples;
  if (!r.progress_continuous) {
    steps = step >= r.applied_clock ? step - r.applied_clock + 1 : 1;
    if (r.max_examples != 0) batch = r.max_examples;
  }
  if (progress.epoch - r.accepted.epoch > steps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "epoch ", progress.epoch, " of worker ", rank,
        " skips epochs: its last accepted push was in epoch ", r.accepted.epoch,
        ", ", steps, " step(s) before step ", step));
  }
  const uint64_t done_before =
      progress.epoch == r.accepted.epoch ? r.accepted.examples_done : 0;
  // Saturating: steps x batch may not fit.
  const uint64_t reach =
      batch != 0 && steps > UINT64_MAX / batch ? UINT64_MAX : steps * batch;
  if (progress.examples_done > done_before &&
      progress.examples_done - done_before > reach) {
    return absl::InvalidArgumentError(absl::StrCat(
        "examples_done ", progress.examples_done, " of worker ", rank,
        " in epoch ", progress.epoch, " is more than ", steps, " x ", batch,
        " examples past its last accepted position, ", done_before,
        ": a push moves the cursor by its own batch"));
  }
  return absl::OkStatus();
}

void RankRegistry::RecordAccepted(int rank, uint64_t step,
                                  const update::DataProgress& progress) {
  Rank& r = ranks_[rank];
  r.progress_continuous = true;
  r.clock = std::max(r.clock, step + 1);
  r.accepted = std::max(r.accepted, progress);
}

void RankRegistry::RecordApplied(int rank, uint64_t step,
                                 const update::DataProgress& progress,
                                 uint32_t num_examples) {
  Rank& r = ranks_[rank];
  r.applied_clock = std::max(r.applied_clock, step + 1);
  r.applied = std::max(r.applied, progress);
  if (num_examples == 0) return;
  std::vector<uint64_t>& counts = examples_[progress.epoch];
  counts.resize(ranks_.size(), 0);
  counts[rank] += num_examples;
}

void RankRegistry::RaiseNextStep(int rank, uint64_t next_step) {
  ranks_[rank].clock = std::max(ranks_[rank].clock, next_step);
}

std::vector<int> RankRegistry::ActiveBefore(uint64_t step) const {
  std::vector<int> below;
  for (int i = 0; i < num_workers(); ++i) {
    if (active(i) && ranks_[i].clock < step) below.push_back(i);
  }
  return below;
}

std::vector<update::RankRecord> RankRegistry::Records() const {
  std::vector<update::RankRecord> records;
  records.reserve(ranks_.size());
  for (const Rank& r : ranks_) {
    records.push_back(
        {r.incarnation, r.applied_clock, r.applied, r.done, r.max_examples});
  }
  return records;
}

absl::Status RankRegistry::Restore(const std::vector<update::RankRecord>& ranks,
                                   const update::ExampleCounts& examples,
                                   absl::Time now) {
  if (ranks.size() != ranks_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint has ", ranks.size(), " workers, this job has ",
                     ranks_.size(), " (check --num_workers)"));
  }
  for (const auto& [epoch, counts] : examples) {
    if (counts.size() != ranks_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint counts examples of epoch ", epoch, " for ",
                       counts.size(), " workers, expected ", ranks_.size()));
    }
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    Rank& r = ranks_[i];
    r = Rank();
    r.incarnation = ranks[i].incarnation;
    r.clock = r.applied_clock = ranks[i].clock;
    r.accepted = r.applied = ranks[i].progress;
    r.done = ranks[i].done;
    r.max_examples = ranks[i].max_examples;
    r.progress_continuous = false;
    r.last_heard = now;
  }
  examples_ = examples;
  return absl::OkStatus();
}

std::string RankRegistry::ExamplesPerEpochLine() const {
  std::string line = "examples per epoch:";
  for (const auto& [epoch, counts] : examples_) {
    uint64_t sum = 0;
    for (uint64_t c : counts) sum += c;
    absl::StrAppend(&line, " ", epoch, "=", sum);
  }
  return line;
}

std::string RankRegistry::RanksReport() const {
  std::string states = "workers:";
  std::string details;
  for (int i = 0; i < num_workers(); ++i) {
    const Rank& r = ranks_[i];
    absl::StrAppend(&states, " ", i, "=",
                    r.done ? "done" : (r.dead ? "dead" : "live"));
    absl::StrAppend(&details, "\nworker ", i, ": clock ", r.clock, ", epoch ",
                    r.accepted.epoch, ", examples_done ",
                    r.accepted.examples_done);
  }
  return states + details;
}

std::string DescribeWorkers(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "worker " : "workers ",
                      absl::StrJoin(ranks, ", "));
}

}  // namespace ps::server
