// UpdateCoordinator's update log: what it appends before acknowledging an
// update, how the log file follows each checkpoint, and the replay after a
// restore (update/update_log.h, update/update_log_record.h).

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
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

}  // namespace

struct UpdateCoordinator::ReplayState {
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
    log_failure_ = absl::InternalError(absl::StrCat(
        "the update log failed at version ", version_, ": ", s.message(),
        "; this shard applies and acknowledges no more updates (restart it "
        "with --restore)"));
    spdlog::error("{}", std::string(log_failure_.message()));
  }
  return log_failure_.ok() ? s : log_failure_;
}

void UpdateCoordinator::AppendOrWarnLocked(const update::LogRecord& record) {
  if (log_ == nullptr) return;
  const update::LogEntry entry =
      update::MakeLogEntry(update::EncodeLogRecord(record));
  (void)AppendLocked({&entry});  // Logged by AppendLocked.
}

absl::Status UpdateCoordinator::RotateLogLocked() {
  absl::StatusOr<std::unique_ptr<update::UpdateLogWriter>> writer =
      update::UpdateLogWriter::Create(
          options_.update_log_dir, store_->server_index(), version_, {},
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
  update::UpdateLogContents last;
  for (size_t f = first; f < files->size(); ++f) {
    const std::string& path = (*files)[f].second;
    absl::StatusOr<update::UpdateLogContents> contents =
        update::ReadUpdateLog(path, index);
    if (!contents.ok()) return contents.status();
    if (contents->format < update::kUpdateLogFormat &&
        policy_->CollectsSteps()) {
      // Format 2 logged a sync step's pushes one by one and restated them
      // across files; replaying it would take a second replay of its own.
      return absl::FailedPreconditionError(absl::StrCat(
          path, " is an update log of format ", contents->format,
          ", which logs every sync push; this server logs a sync step's mean "
          "(format ",
          update::kUpdateLogFormat,
          ") and does not replay it: restore with the server that wrote it, "
          "or move the shard's .wal files away to restore the checkpoint of "
          "version ",
          restored, " alone (losing the updates after it)"));
    }
    // A checkpoint starts a file between two updates: the file goes on
    // where the one before it ended.
    if (f > first && contents->start_version != version()) {
      return Gap(absl::StrCat("replay reached version ", version(),
                              " at the end of ", (*files)[f - 1].second,
                              " but ", path, " starts at version ",
                              contents->start_version));
    }
    if (contents->torn_bytes > 0 && f + 1 < files->size()) {
      return Gap(absl::StrCat(path, " ends in ", contents->torn_bytes,
                              " bytes of a torn record, and ",
                              (*files)[f + 1].second, " follows it"));
    }
    for (size_t i = 0; i < contents->records.size(); ++i) {
      const std::string& payload = contents->records[i];
      absl::StatusOr<update::LogRecord> record =
          update::DecodeLogRecord(payload);
      if (!record.ok()) {
        return absl::DataLossError(
            absl::StrCat(path, ": ", record.status().message()));
      }
      if (absl::Status s = ReplayRecord(*record, payload.size(), state);
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
  log_ = *std::move(writer);
  // The log holds every update acknowledged: nothing to fast-forward over.
  recovering_ = false;
  restored_without_log_.reset();
  replayed_updates_ = state.updates;
  spdlog::info("replayed {} updates from the update log: version {} to {}",
               state.updates, restored, version_);
  return state.updates;
}

absl::Status UpdateCoordinator::ReplayRecord(const update::LogRecord& record,
                                             uint64_t payload_bytes,
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
    if (policy_->CollectsSteps()) {
      return absl::DataLossError(absl::StrCat(
          "a push record of worker ", p->rank, " for step ", p->step,
          " in a sync shard's log, which holds steps' means"));
    }
    state.at_once = FromLogged(*p);
    state.at_once_bytes = update::kLogRecordPrefixBytes + payload_bytes;
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
  if (const auto* s = std::get_if<update::LoggedStepMean>(&record)) {
    if (!policy_->CollectsSteps()) {
      return absl::DataLossError(absl::StrCat(
          "a sync step's record (step ", s->step, ") in the log of a ",
          ConsistencyModeName(options_.mode), " shard"));
    }
    if (s->step != at) {
      return Gap(absl::StrCat("step ", s->step,
                              " where the shard is at version ", at));
    }
    int previous = -1;
    for (const update::LoggedStepPart& p : s->parts) {
      if (p.rank <= previous || p.rank >= options_.num_workers) {
        return absl::DataLossError(
            absl::StrCat("step ", s->step, " has a part of worker ", p.rank,
                         ": not one of the job's in rank order"));
      }
      previous = p.rank;
    }
    absl::MutexLock apply_lock(&apply_mu_);
    absl::StatusOr<uint64_t> applied = ApplyLoggedStep(*s);
    if (!applied.ok()) return applied.status();
    ++state.updates;
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
