#ifndef PS_WORKER_KILL_POINT_H_
#define PS_WORKER_KILL_POINT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps::worker {

// --test_kill_self=rank=R,at=MOMENT[,once=PATH]: the worker of rank R kills
// itself with SIGKILL at MOMENT, so that a fault test dies exactly where it
// means to rather than wherever a signal from outside lands. MOMENT is
//   step:N  a pipeline stage at the start of step N (the servers' clock,
//           from 0), before its pull: no stage of its replica has pushed
//           step N;
//   push:N  a pipeline stage in step N after its forward and backward
//           (its neighbours have had its messages and may push), before
//           its own push;
//   upload  a pipeline stage after its last step (and replica 0's final
//           evaluation), before its final weights go up the links to rank
//           0's saved model (rank 0: before it receives and writes them);
//   done    any worker, after its done line ("trained N steps", printed
//           once the servers acknowledged its Done).
// With once=PATH it fires only if PATH does not exist yet, creating it
// first: the restarted worker, given the same flags, goes on.
enum class KillMoment { kStep, kPush, kUpload, kDone };

class KillPoint {
 public:
  // A point that never fires.
  KillPoint() = default;

  // Parses the flag's value; "" never fires. InvalidArgument naming
  // --test_kill_self and what is wrong: an unknown or repeated key, a
  // missing rank or at, a rank or step that is not a number >= 0, an
  // unknown moment, an empty once path.
  static absl::StatusOr<KillPoint> Parse(absl::string_view text);

  // Whether the worker of `rank` dies at `moment` (and `step`, for kStep
  // and kPush),
  // once= aside.
  bool Matches(int rank, KillMoment moment, uint64_t step = 0) const;

  // If it Matches and its once file (if any) did not exist: creates that
  // file, logs why, flushes the logs and raises SIGKILL. Returns otherwise
  // (also when the once file cannot be created, which it logs).
  void FireIf(int rank, KillMoment moment, uint64_t step = 0) const;

  bool armed() const { return armed_; }
  KillMoment moment() const { return moment_; }
  // "rank 1 at step 20", for logs.
  std::string ToString() const;

 private:
  bool armed_ = false;
  int rank_ = 0;
  KillMoment moment_ = KillMoment::kDone;
  uint64_t step_ = 0;
  std::string once_path_;
};

}  // namespace ps::worker

#endif  // PS_WORKER_KILL_POINT_H_
