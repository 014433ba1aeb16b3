#ifndef PS_SERVER_CHECKPOINTER_H_
#define PS_SERVER_CHECKPOINTER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "update/checkpoint.h"

namespace ps::server {

struct CheckpointPolicy {
  std::string dir;
  // A checkpoint once the version is this many updates past the last one;
  // 0: never for that reason.
  uint64_t every_updates = 200;
  // A checkpoint once this long has passed since the last one, if the
  // version moved; zero: never for that reason.
  absl::Duration every = absl::Seconds(60);
  // Checkpoints of the shard kept in `dir`.
  int keep = 2;
  // How often the version is looked at: often enough that every_updates
  // holds at a few hundred updates a second (a small model's pace here).
  absl::Duration poll = absl::Milliseconds(10);
  // Called after each checkpoint written, with its version (e.g. for
  // metrics); on the writing thread, under no shard lock.
  std::function<void(uint64_t version)> on_written;
  // Test only: the process kills itself with SIGKILL in the middle of
  // writing its checkpoint number `kill_in_write` (from 1; 0: never), half
  // of the file written, so that a test can hit that moment exactly.
  int kill_in_write = 0;
};

// Writes a shard's checkpoints (WriteCheckpoint) in the background when the
// policy says so, and on request (WriteNow, e.g. on SIGTERM). The snapshot
// is taken by `snapshot` (UpdateCoordinator::SnapshotForCheckpoint: a brief
// pause of updates, never of pulls or pushes; it also starts the update
// log's file for the snapshot's version); the file is written with no shard
// lock held. Once it is durable, the update log files that only checkpoints
// no longer kept need are deleted. A failed write is logged and retried at
// the next trigger: it never stops training.
//
// Thread-safe; one write at a time. Owns its thread, stopped by the
// destructor; `snapshot` and `version` must stay valid until then.
class Checkpointer {
 public:
  // `start_version`: the version the shard starts from (restored or 0).
  Checkpointer(
      CheckpointPolicy policy,
      std::function<absl::StatusOr<update::ShardCheckpoint>()> snapshot,
      std::function<uint64_t()> version, uint64_t start_version);
  ~Checkpointer();

  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Takes and writes a checkpoint now; returns its path.
  absl::StatusOr<std::string> WriteNow();
  // Makes a checkpoint due, changed version or not: the background thread
  // writes one within a poll. Does not wait (e.g. for a write in progress).
  void RequestSoon() { requested_.store(true); }

 private:
  void Loop();
  absl::StatusOr<std::string> WriteLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Deletes the update log files older than the oldest checkpoint kept.
  void PruneLogs(int server_index);
  // policy_.kill_in_write: writes half of `checkpoint`'s temporary file,
  // then SIGKILLs this process.
  void KillInWrite(const update::ShardCheckpoint& checkpoint);

  const CheckpointPolicy policy_;
  const std::function<absl::StatusOr<update::ShardCheckpoint>()> snapshot_;
  const std::function<uint64_t()> version_;

  absl::Mutex write_mu_;
  uint64_t last_version_ ABSL_GUARDED_BY(write_mu_);
  int writes_ ABSL_GUARDED_BY(write_mu_) = 0;
  absl::Time last_time_ ABSL_GUARDED_BY(write_mu_);

  // RequestSoon was called since the last write began.
  std::atomic<bool> requested_{false};

  absl::Mutex stop_mu_;
  bool stop_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::thread thread_;
};

}  // namespace ps::server

#endif  // PS_SERVER_CHECKPOINTER_H_
