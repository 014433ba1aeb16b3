#include "server/checkpointer.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "update/update_log.h"

namespace ps::server {

Checkpointer::Checkpointer(
    CheckpointPolicy policy,
    std::function<absl::StatusOr<update::ShardCheckpoint>()> snapshot,
    std::function<uint64_t()> version, uint64_t start_version)
    : policy_(std::move(policy)),
      snapshot_(std::move(snapshot)),
      version_(std::move(version)) {
  {
    absl::MutexLock lock(&write_mu_);
    last_version_ = start_version;
    last_time_ = absl::Now();
  }
  thread_ = std::thread([this] { Loop(); });
}

Checkpointer::~Checkpointer() {
  {
    absl::MutexLock lock(&stop_mu_);
    stop_ = true;
  }
  thread_.join();
}

absl::StatusOr<std::string> Checkpointer::WriteNow() {
  absl::MutexLock lock(&write_mu_);
  return WriteLocked();
}

absl::StatusOr<std::string> Checkpointer::WriteLocked() {
  const absl::Time start = absl::Now();
  requested_.store(false);  // What was requested so far is in this one.
  absl::StatusOr<update::ShardCheckpoint> taken = snapshot_();
  // Whatever the outcome, the next trigger is counted from here: a failing
  // disk is retried at the policy's pace, not in a tight loop.
  last_time_ = absl::Now();
  if (!taken.ok()) {
    spdlog::error("checkpoint failed (training goes on): {}",
                  taken.status().ToString());
    return taken.status();
  }
  const update::ShardCheckpoint& checkpoint = *taken;
  last_version_ = checkpoint.version;
  if (++writes_ == policy_.kill_in_write) KillInWrite(checkpoint);
  absl::StatusOr<std::string> path =
      update::WriteCheckpoint(policy_.dir, checkpoint, policy_.keep);
  if (!path.ok()) {
    spdlog::error("checkpoint of version {} failed (training goes on): {}",
                  checkpoint.version, path.status().ToString());
    return path;
  }
  PruneLogs(checkpoint.identity.server_index);
  uint64_t floats = 0;
  for (const update::SliceSnapshot& s : checkpoint.slices) {
    floats += s.weights.size() * (1 + s.state.size());
  }
  spdlog::info("checkpoint {} written: version {}, {:.1f} MiB in {} ms", *path,
               checkpoint.version,
               static_cast<double>(floats * sizeof(float)) / (1 << 20),
               absl::ToInt64Milliseconds(absl::Now() - start));
  if (policy_.on_written) policy_.on_written(checkpoint.version);
  return path;
}

void Checkpointer::PruneLogs(int server_index) {
  absl::StatusOr<std::vector<std::string>> kept =
      update::ListCheckpoints(policy_.dir, server_index);
  if (!kept.ok() || kept->empty()) return;
  // The oldest checkpoint kept (newest first) needs the log from its
  // version on; a restore that falls back to it replays that far.
  const std::optional<uint64_t> oldest = update::CheckpointVersion(
      std::filesystem::path(kept->back()).filename().string(), server_index);
  if (!oldest.has_value()) return;
  if (absl::Status s =
          update::PruneUpdateLogs(policy_.dir, server_index, *oldest);
      !s.ok()) {
    spdlog::warn("old update log files not deleted: {}", s.ToString());
  }
}

void Checkpointer::KillInWrite(const update::ShardCheckpoint& checkpoint) {
  const std::string path =
      absl::StrCat(policy_.dir, "/",
                   update::CheckpointFileName(checkpoint.identity.server_index,
                                              checkpoint.version),
                   ".tmp");
  std::vector<std::string> records = update::EncodeCheckpoint(checkpoint);
  records.resize(records.size() / 2);
  std::ofstream half(path, std::ios::binary);
  for (const std::string& r : records) half << r;
  half.flush();
  spdlog::warn("killing this process in the middle of checkpoint {} (test)",
               path);
  ::kill(::getpid(), SIGKILL);
}

void Checkpointer::Loop() {
  for (;;) {
    {
      absl::MutexLock lock(&stop_mu_);
      if (stop_mu_.AwaitWithTimeout(absl::Condition(&stop_), policy_.poll)) {
        return;
      }
    }
    const uint64_t version = version_();
    absl::MutexLock lock(&write_mu_);
    const bool by_updates = policy_.every_updates > 0 &&
                            version >= last_version_ + policy_.every_updates;
    const bool by_time = policy_.every > absl::ZeroDuration() &&
                         absl::Now() - last_time_ >= policy_.every &&
                         version != last_version_;
    if (by_updates || by_time || requested_.load()) {
      absl::StatusOr<std::string> written = WriteLocked();
      (void)written;  // Logged by WriteLocked.
    }
  }
}

}  // namespace ps::server
