#ifndef PS_CLIENT_HEARTBEATS_H_
#define PS_CLIENT_HEARTBEATS_H_

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/shard_channel.h"

namespace ps::client_internal {

// Tells every shard, between calls, that this rank is alive and which
// steps it has done (ps.proto Heartbeat): a shard restarted since the
// rank's last push to it learns that the rank will not send the pushes it
// lost. A shard's answer may announce a same-host endpoint, which its
// channel takes. Failures are only logged, now and then: a shard that
// misses heartbeats says so itself.
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
