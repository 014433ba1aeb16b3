#ifndef PS_CLIENT_HEARTBEATS_H_
#define PS_CLIENT_HEARTBEATS_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/shard_channel.h"

namespace ps::client_internal {

// What a worker says of one shard whose heartbeats go unanswered (down,
// restarting, or cut off from this host): whom it waits for, from the
// first failure on and then every `report_period`, and that it answers
// again. Not thread-safe (one per shard, on the heartbeat thread).
class UnansweredShard {
 public:
  // `name` as ShardChannel names the shard: "server I (ADDRESS)".
  UnansweredShard(std::string name, absl::Duration report_period)
      : name_(std::move(name)), report_period_(report_period) {}

  // A beat failed at `now` with `status`: the line to log now, if one is
  // due.
  std::optional<std::string> Failed(absl::Time now, const absl::Status& status);
  // A beat was answered at `now`: after failures, the line saying so.
  std::optional<std::string> Answered(absl::Time now);

 private:
  const std::string name_;
  const absl::Duration report_period_;
  // The first failure of the current run; nullopt while answered.
  std::optional<absl::Time> failing_since_;
  absl::Time next_report_ = absl::InfinitePast();
};

// Tells every shard, between calls, that this rank is alive and which
// steps it has done (ps.proto Heartbeat): a shard restarted since the
// rank's last push to it learns that the rank will not send the pushes it
// lost. A shard's answer may announce a same-host endpoint, which its
// channel takes. A shard that does not answer is named now and then
// (UnansweredShard): this worker's calls to it wait for it.
//
// Thread-safe. Borrows the channels, which must outlive it.
class Heartbeats {
 public:
  explicit Heartbeats(std::vector<ShardChannel*> shards);
  // Stops the thread, if started.
  ~Heartbeats() ABSL_LOCKS_EXCLUDED(mu_);
  Heartbeats(const Heartbeats&) = delete;
  Heartbeats& operator=(const Heartbeats&) = delete;

  // Starts a thread that sends every shard a heartbeat each `period` until
  // this is destroyed. Once.
  void Start(absl::Duration period);

  // The rank has done steps [0, clock) on every shard; heartbeats say so
  // from now on. Never lowers the clock.
  void RaiseClock(uint64_t clock);
  uint64_t clock() const { return clock_.load(); }

 private:
  void Send(absl::Duration period) ABSL_LOCKS_EXCLUDED(mu_);

  const std::vector<ShardChannel*> shards_;
  std::atomic<uint64_t> clock_{0};
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ps::client_internal

#endif  // PS_CLIENT_HEARTBEATS_H_
