#ifndef PS_SERVER_COORDINATOR_OPTIONS_H_
#define PS_SERVER_COORDINATOR_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/consistency_mode.h"
#include "server/failure_policy.h"
#include "update/lr_schedule.h"

namespace ps::server {

// How an UpdateCoordinator runs, set once by server_main. Steps are counted
// from 0; "a pull for step t" asks for the weights step t trains on (its
// rank has done steps [0, t): ps.proto's PullRequest.clock).
struct CoordinatorOptions {
  ConsistencyMode mode = ConsistencyMode::kSync;
  int num_workers = 1;
  // ssp only: a pull for step t proceeds once every live rank's next step is
  // >= t - s.
  int staleness = 0;
  FailurePolicy on_worker_failure = FailurePolicy::kElastic;
  // A rank not heard from (any request) for this long is dead.
  absl::Duration worker_timeout = absl::Seconds(10);
  // A dead rank holds the job open this long after its lease ran out, so
  // that a restarted worker can rejoin before the shards exit.
  absl::Duration rejoin_grace = absl::Seconds(60);
  // A pull that has waited this long logs which ranks it waits for.
  absl::Duration slow_wait_log = absl::Seconds(5);
  // How often a waiting pull checks whether its caller gave up.
  absl::Duration poll_interval = absl::Milliseconds(100);
  // The learning rate of each update; unset: the optimizer's own.
  std::optional<update::LearningRateSchedule> lr_schedule;
  // sync, for a shard restarted with --restore: until a step completes, the
  // first pull or push for a step beyond the version moves the version
  // there (the updates since the checkpoint are lost on this shard).
  bool fast_forward_after_restart = false;
  // After a Restore, the first registration that plans steps sets the plan
  // (the run is extended: more epochs, so the step bound and the
  // learning-rate schedule's horizon move with it) instead of having to
  // match the checkpoint's; later registrations must match it.
  bool replan_after_restore = false;
  // Where the shard's update log lives (update/update_log.h; the
  // checkpoint directory); empty: no log, and a restore loses the updates
  // after its checkpoint.
  std::string update_log_dir;
  // Each log append is made durable (fdatasync) before its update is
  // acknowledged: survives power loss, not only a killed process.
  bool update_log_fsync = false;
  // Bytes kept written past the log's last record, so that appends write
  // over blocks the file has (update/log_preallocator.h); 0: none.
  uint64_t update_log_preallocate_bytes = uint64_t{64} << 20;
  // Called, without locks held, after a rank registered as a new process
  // replacing another (a restarted or extended run's worker), so that a
  // checkpoint records it: a shard restored from one that does not would
  // refuse the new process's requests. Must not block for long.
  std::function<void()> on_new_incarnation;
  // Called once, on some thread and without locks held, when the job is
  // over: OK once every rank is done (or every rank is done or dead, one at
  // least done); the failure (FailedPrecondition) when a worker died under
  // kFail. It must only signal (e.g. wake main).
  std::function<void(const absl::Status&)> on_finished;
};

}  // namespace ps::server

#endif  // PS_SERVER_COORDINATOR_OPTIONS_H_
