// UpdateCoordinator's update log: what it appends before acknowledging an
// update, how the log file follows each checkpoint, and the replay after a
// restore (update/update_log.h, update/update_log_record.h).

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/update_coordinator.h"
#include "spdlog/spdlog.h"

namespace ps::server {
namespace {

update::LoggedPush LoggedMeta(const StagedPush& push) {
  update::LoggedPush p;
  p.rank = push.rank;
  p.incarnation = push.incarnation;
  p.step = push.step;
  p.base_version = push.base_version;
  p.num_examples = push.num_examples;
  p.epoch = push.epoch;
  p.examples_done = push.examples_done;
  p.learning_rate = push.learning_rate;
  return p;
}

StagedPush FromLogged(const update::LoggedPush& p) {
  StagedPush push;
  push.rank = p.rank;
  push.incarnation = p.incarnation;
  push.step = p.step;
  push.base_version = p.base_version;
  push.num_examples = p.num_examples;
  push.epoch = p.epoch;
  push.examples_done = p.examples_done;
  push.learning_rate = p.learning_rate;
  for (const std::vector<float>& g : p.gradients) {
    push.gradients.push_back(SliceGradient::FromFloats(g));
  }
  return push;
}

absl::Status Gap(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("update log gap: ", what));
}

// A sync push or step record replayed (or recognised as restated), kept
// while a later file may restate it.
struct RecentRecord {
  uint64_t step = 0;
  bool takes_step = false;  // A LoggedStep, not a push.
  std::string payload;
};

// Forgets the records of steps before `step`.
void DropBefore(uint64_t step, std::vector<RecentRecord>& recent) {
  recent.erase(
      std::remove_if(recent.begin(), recent.end(),
                     [step](const RecentRecord& r) { return r.step < step; }),
      recent.end());
}

// How many of `next`'s first records restate records already replayed,
// which its replay skips. A file starts at the version of a checkpoint's
// snapshot and restates the sync records logged for that step so far, which
// the file before it holds too; if the snapshot came between the step being
// taken and applied, the step's record as well, so that the file before it
// reaches one version further. Those records must be the same bytes, in the
// same order: anything else is a gap (`next` starts after `at`, or more
// than one step before it) or two files that disagree, and nothing is
// skipped on a guess. The records after them must go on from `at` (the
// replay checks each record's version).
absl::StatusOr<size_t> RestatedRecords(absl::Span<const RecentRecord> recent,
                                       uint64_t at,
                                       const update::UpdateLogContents& next,
                                       const std::string& previous,
                                       const std::string& path) {
  const uint64_t start = next.start_version;
  if (start > at || start + 1 < at) {
    return Gap(absl::StrCat("replay reached version ", at, " at the end of ",
                            previous, " but ", path, " starts at version ",
                            start));
  }
  size_t n = 0;
  for (const RecentRecord& r : recent) {
    if (r.step < start) continue;
    if (n >= next.records.size() || next.records[n] != r.payload) {
      return absl::DataLossError(absl::StrCat(
          "update log: ", path, " starts at version ", start,
          " but its record ", n + 1, " is not the ",
          r.takes_step ? "step" : "push", " record of step ", r.step, " that ",
          previous, " holds: the files disagree about the same updates"));
    }
    ++n;
  }
  return n;
}

}  // namespace

struct UpdateCoordinator::ReplayState {
  // sync: the pushes logged for step version_, by rank.
  std::vector<std::optional<StagedPush>> pending;
  // sync: the push and step records for steps from version_ - 1 on, in the
  // order of the files: what the next file may restate (RestatedRecords),
  // and at the end the pushes of step version_ to restate in later files.
  std::vector<RecentRecord> recent;
  // ssp, async: a push whose LoggedApply has not come yet.
  std::optional<StagedPush> at_once;
  // The size of its record in the file, prefix included.
  uint64_t at_once_bytes = 0;
  uint64_t updates = 0;
};

std::shared_ptr<const update::LogEntry> UpdateCoordinator::PushEntry(
    const StagedPush& push) const {
  std::vector<uint64_t> sizes;
  for (const Slice& s : store_->slices()) sizes.push_back(s.num_elements);
  // The received bytes are written where they lie; the copy of the
  // gradients shares them and keeps them alive.
  auto gradients =
      std::make_shared<const std::vector<SliceGradient>>(push.gradients);
  return std::make_shared<const update::LogEntry>(update::MakePushEntry(
      LoggedMeta(push), sizes,
      [&gradients](int slice, absl::FunctionRef<void(absl::string_view)> emit) {
        (*gradients)[slice].ForEachPiece(emit);
      },
      gradients));
}

absl::Status UpdateCoordinator::AppendLocked(
    absl::Span<const update::LogEntry* const> entries) {
  if (log_ == nullptr) return absl::OkStatus();
  absl::Status s = log_->Append(entries);
  if (!s.ok()) {
    spdlog::error("the update log failed; updates are refused: {}",
                  s.ToString());
  }
  return s;
}

void UpdateCoordinator::AppendOrWarnLocked(const update::LogRecord& record) {
  if (log_ == nullptr) return;
  const update::LogEntry entry =
      update::MakeLogEntry(update::EncodeLogRecord(record));
  (void)AppendLocked({&entry});  // Logged by AppendLocked.
}

absl::Status UpdateCoordinator::RotateLogLocked() {
  std::vector<const update::LogEntry*> restated;
  for (const auto& [step, entry] : unapplied_) restated.push_back(entry.get());
  absl::StatusOr<std::unique_ptr<update::UpdateLogWriter>> writer =
      update::UpdateLogWriter::Create(
          options_.update_log_dir, store_->server_index(), version_, restated,
          options_.update_log_fsync, options_.update_log_preallocate_bytes);
  if (!writer.ok()) return writer.status();
  log_ = *std::move(writer);
  return absl::OkStatus();
}

absl::Status UpdateCoordinator::StartFreshLog() {
  if (!LogsUpdates()) return absl::OkStatus();
  return update::PruneUpdateLogs(options_.update_log_dir,
                                 store_->server_index(), ~uint64_t{0});
}

absl::StatusOr<uint64_t> UpdateCoordinator::ReplayLog() {
  if (!LogsUpdates()) return 0;
  const int index = store_->server_index();
  absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>> files =
      update::ListUpdateLogs(options_.update_log_dir, index);
  if (!files.ok()) return files.status();
  const uint64_t restored = version();
  size_t first = 0;
  while (first < files->size() && (*files)[first].first < restored) ++first;
  if (first == files->size() || (*files)[first].first != restored) {
    if (first < files->size()) {
      return Gap(absl::StrCat(
          "the checkpoint holds version ", restored,
          " but the update log resumes at version ", (*files)[first].first,
          " (", (*files)[first].second, "): the updates between are gone"));
    }
    // The log was off when this checkpoint was written: nothing to replay.
    spdlog::warn(
        "no update log follows the checkpoint of version {}: the updates "
        "this shard applied after it are lost",
        restored);
    absl::MutexLock lock(&mu_);
    if (absl::Status s = RotateLogLocked(); !s.ok()) return s;
    return 0;
  }
  ReplayState state;
  state.pending.resize(options_.num_workers);
  update::UpdateLogContents last;
  for (size_t f = first; f < files->size(); ++f) {
    const std::string& path = (*files)[f].second;
    absl::StatusOr<update::UpdateLogContents> contents =
        update::ReadUpdateLog(path, index);
    if (!contents.ok()) return contents.status();
    size_t restated = 0;
    if (f > first) {
      absl::StatusOr<size_t> n = RestatedRecords(
          state.recent, version(), *contents, (*files)[f - 1].second, path);
      if (!n.ok()) return n.status();
      restated = *n;
      // The records restated are this file's from now on.
      DropBefore(contents->start_version, state.recent);
    }
    if (contents->torn_bytes > 0 && f + 1 < files->size()) {
      return Gap(absl::StrCat(path, " ends in ", contents->torn_bytes,
                              " bytes of a torn record, and ",
                              (*files)[f + 1].second, " follows it"));
    }
    for (size_t i = restated; i < contents->records.size(); ++i) {
      std::string& payload = contents->records[i];
      absl::StatusOr<update::LogRecord> record =
          update::DecodeLogRecord(payload);
      if (!record.ok()) {
        return absl::DataLossError(
            absl::StrCat(path, ": ", record.status().message()));
      }
      if (absl::Status s = ReplayRecord(*record, std::move(payload), state);
          !s.ok()) {
        return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
      }
    }
    if (contents->torn_bytes > 0) {
      spdlog::warn(
          "{}: dropped {} bytes of a record whose append was cut off by the "
          "shard's death (never acknowledged)",
          path, contents->torn_bytes);
    }
    contents->records.clear();
    last = *std::move(contents);
  }
  // A push applied at once without its LoggedApply was never acknowledged:
  // cut off with the torn bytes.
  if (state.at_once.has_value()) last.valid_bytes -= state.at_once_bytes;
  absl::StatusOr<std::unique_ptr<update::UpdateLogWriter>> writer =
      update::UpdateLogWriter::Reopen(files->back().second, last.valid_bytes,
                                      options_.update_log_fsync,
                                      options_.update_log_preallocate_bytes);
  if (!writer.ok()) return writer.status();
  absl::MutexLock lock(&mu_);
  for (std::optional<StagedPush>& push : state.pending) {
    if (!push.has_value()) continue;
    members_.ranks().RecordAccepted(push->rank, push->step,
                                    {push->epoch, push->examples_done});
    parts_.Add(*std::move(push));
  }
  // The pushes of the step being collected, in the order of the file, as
  // the next file restates them.
  for (RecentRecord& r : state.recent) {
    if (r.step != version_) continue;
    unapplied_.emplace_back(r.step,
                            std::make_shared<const update::LogEntry>(
                                update::MakeLogEntry(std::move(r.payload))));
  }
  log_ = *std::move(writer);
  // The log holds every update acknowledged: nothing to fast-forward over.
  recovering_ = false;
  restored_without_log_.reset();
  replayed_updates_ = state.updates;
  spdlog::info("replayed {} updates from the update log: version {} to {}{}",
               state.updates, restored, version_,
               parts_.any_part() ? absl::StrCat(", with step ", version_,
                                                "'s pushes taken so far")
                                 : std::string());
  return state.updates;
}

absl::Status UpdateCoordinator::ReplayRecord(const update::LogRecord& record,
                                             std::string payload,
                                             ReplayState& state) {
  const uint64_t at = version();
  if (const auto* p = std::get_if<update::LoggedPush>(&record)) {
    if (p->rank < 0 || p->rank >= options_.num_workers) {
      return absl::DataLossError(
          absl::StrCat("a push of rank ", p->rank, " outside the job"));
    }
    if (state.at_once.has_value()) {
      return Gap(absl::StrCat("worker ", state.at_once->rank,
                              "'s push of step ", state.at_once->step,
                              " has no record of its application"));
    }
    if (!policy_->CollectsSteps()) {
      state.at_once = FromLogged(*p);
      state.at_once_bytes = update::kLogRecordPrefixBytes + payload.size();
      return absl::OkStatus();
    }
    if (p->step != at) {
      return Gap(absl::StrCat("a push for step ", p->step,
                              " where the shard is at version ", at));
    }
    if (state.pending[p->rank].has_value()) {
      return absl::DataLossError(absl::StrCat("two pushes of worker ", p->rank,
                                              " for step ", p->step));
    }
    state.pending[p->rank].emplace(FromLogged(*p));
    state.recent.push_back({p->step, false, std::move(payload)});
    return absl::OkStatus();
  }
  if (const auto* a = std::get_if<update::LoggedApply>(&record)) {
    if (!state.at_once.has_value()) {
      return Gap(
          absl::StrCat("the update from version ", a->version, " has no push"));
    }
    if (a->version != at) {
      return Gap(absl::StrCat("the update from version ", a->version,
                              " where the shard is at version ", at));
    }
    const StagedPush push = *std::move(state.at_once);
    state.at_once.reset();
    absl::MutexLock apply_lock(&apply_mu_);
    absl::StatusOr<uint64_t> applied =
        ApplyAtOnce(push, a->learning_rate, a->version);
    if (!applied.ok()) return applied.status();
    if (push.num_examples > 0) ++state.updates;
    return absl::OkStatus();
  }
  if (const auto* s = std::get_if<update::LoggedStep>(&record)) {
    if (s->step != at) {
      return Gap(absl::StrCat("step ", s->step,
                              " where the shard is at version ", at));
    }
    ReadyStep ready;
    ready.step = s->step;
    ready.learning_rate = s->learning_rate;
    for (int r : s->ranks) {
      if (r < 0 || r >= options_.num_workers || !state.pending[r].has_value()) {
        return Gap(absl::StrCat("step ", s->step, " sums worker ", r,
                                "'s push, which is not in the log"));
      }
      ready.pushes.push_back(*std::move(state.pending[r]));
      state.pending[r].reset();
    }
    {
      absl::MutexLock lock(&mu_);
      for (const StagedPush& p : ready.pushes) {
        members_.ranks().RecordAccepted(p.rank, p.step,
                                        {p.epoch, p.examples_done});
      }
    }
    absl::StatusOr<uint64_t> applied = ApplyStep(std::move(ready));
    if (!applied.ok()) return applied.status();
    ++state.updates;
    // Only this step's records and the next one's may be restated later.
    DropBefore(s->step, state.recent);
    state.recent.push_back({s->step, true, std::move(payload)});
    return absl::OkStatus();
  }
  const int rank = std::holds_alternative<update::LoggedRegister>(record)
                       ? std::get<update::LoggedRegister>(record).rank
                       : std::get<update::LoggedDone>(record).rank;
  if (rank < 0 || rank >= options_.num_workers) {
    return absl::DataLossError(
        absl::StrCat("a record of rank ", rank, " outside the job"));
  }
  absl::MutexLock lock(&mu_);
  if (const auto* r = std::get_if<update::LoggedRegister>(&record)) {
    return members_
        .Register(r->rank, r->incarnation, r->planned_steps, r->max_examples,
                  absl::Now())
        .status();
  }
  members_.ranks().MarkDone(std::get<update::LoggedDone>(record).rank);
  return absl::OkStatus();
}

}  // namespace ps::server
