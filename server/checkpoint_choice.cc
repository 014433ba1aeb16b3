#include "server/checkpoint_choice.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace ps::server {
namespace {

absl::Status CheckCheckpointDir(const std::string& dir, int server_index,
                                RestoreMode mode) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint_dir: cannot create ", dir, ": ", ec.message()));
  }
  const std::string probe = absl::StrCat(dir, "/.write-check-", server_index);
  std::FILE* f = std::fopen(probe.c_str(), "w");
  if (f == nullptr || std::fclose(f) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint_dir: cannot write in ", dir, ": ", std::strerror(errno)));
  }
  std::remove(probe.c_str());
  if (mode != RestoreMode::kNone) return absl::OkStatus();
  absl::StatusOr<std::vector<std::string>> existing =
      update::ListCheckpoints(dir, server_index);
  if (!existing.ok()) return existing.status();
  if (existing->empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--checkpoint_dir ", dir, " holds checkpoints of shard ", server_index,
      " (newest ", existing->front(),
      "); pass --restore to resume from them, or use an empty directory"));
}

}  // namespace

absl::StatusOr<std::optional<update::LoadedCheckpoint>> ChooseCheckpoint(
    const std::string& dir, const update::CheckpointIdentity& shard,
    RestoreMode mode) {
  if (absl::Status s = CheckCheckpointDir(dir, shard.server_index, mode);
      !s.ok()) {
    return s;
  }
  if (mode == RestoreMode::kNone) return std::nullopt;
  const bool extend = mode == RestoreMode::kExtend;
  absl::StatusOr<std::optional<update::LoadedCheckpoint>> loaded =
      update::LoadNewestCheckpoint(dir, shard);
  if (!loaded.ok()) return loaded;
  if (!loaded->has_value()) {
    if (extend) {
      return absl::FailedPreconditionError(
          absl::StrCat("--extend: ", dir, " holds no checkpoint of shard ",
                       shard.server_index, ", so there is no run to extend"));
    }
    spdlog::info("--restore: no checkpoint of shard {} in {}; starting fresh",
                 shard.server_index, dir);
    return loaded;
  }
  update::LoadedCheckpoint& found = **loaded;
  for (const std::string& skipped : found.skipped) {
    spdlog::error("checkpoint refused, using an older one: {}", skipped);
  }
  std::vector<update::RankRecord>& ranks = found.checkpoint.ranks;
  if (!std::all_of(ranks.begin(), ranks.end(),
                   [](const update::RankRecord& r) { return r.done; })) {
    return loaded;
  }
  // Resuming a run that finished would only wait for workers with nothing
  // left to do; extending it gives them more.
  if (!extend) {
    return absl::FailedPreconditionError(absl::StrCat(
        found.path, " is of a finished run (every worker was done at version ",
        found.checkpoint.version,
        "): pass --extend to train it further under the workers' new plan, "
        "or start a new run in another --checkpoint_dir (a new PS_RUN_ID on "
        "Kubernetes)"));
  }
  for (update::RankRecord& rank : ranks) rank.done = false;
  spdlog::info(
      "--extend: {} is of a finished run (version {}, {} planned steps); its "
      "workers train on under the plan they register",
      found.path, found.checkpoint.version, found.checkpoint.planned_steps);
  return loaded;
}

}  // namespace ps::server
