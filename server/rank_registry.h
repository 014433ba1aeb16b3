#ifndef PS_SERVER_RANK_REGISTRY_H_
#define PS_SERVER_RANK_REGISTRY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "update/coordinator_state.h"

namespace ps::server {

// The shard's book of worker ranks: which process (incarnation) holds each
// rank, whether it is alive (a lease renewed by every request), whether it
// is done, its next step and its data progress, and how many examples of each
// epoch its applied pushes carried.
//
// Progress is kept twice: `accepted` (every push taken, including a sync
// push still waiting for its step) decides replays and what a rejoining
// worker is told; `applied` (only what reached the weights) is what a
// checkpoint keeps, so that a restored shard never claims a batch whose
// gradient it lost.
//
// Not thread-safe: UpdateCoordinator holds its mutex around every call.
class RankRegistry {
 public:
  // Every rank's lease starts at `now`: a rank never heard from within
  // `lease` of the shard's start is dead too.
  RankRegistry(int num_workers, absl::Duration lease, absl::Time now);

  int num_workers() const { return static_cast<int>(ranks_.size()); }
  absl::Duration lease() const { return lease_; }

  // OK when `incarnation` is the one the rank registered with.
  // FailedPrecondition when the rank has not registered, or registered
  // another incarnation since (the caller was replaced); InvalidArgument
  // for incarnation 0, which no registered process has.
  absl::Status CheckIncarnation(int rank, uint64_t incarnation) const;
  // Records `incarnation` as the rank's and returns the previous one (0:
  // none). A new incarnation is a restarted process: it is neither done nor
  // finishing.
  uint64_t SetIncarnation(int rank, uint64_t incarnation);
  uint64_t incarnation(int rank) const { return ranks_[rank].incarnation; }
  // The most examples a push of the rank may carry, as its worker said when
  // it registered (its batch size); 0: no bound.
  void SetMaxExamples(int rank, uint32_t max_examples) {
    ranks_[rank].max_examples = max_examples;
  }
  // InvalidArgument naming num_examples when a push of the rank carries
  // more than its bound: one push would outweigh the others in a sync step.
  absl::Status CheckExamples(int rank, uint32_t num_examples) const;

  // The rank was heard from at `now`: renews its lease. Returns true if it
  // had been declared dead (it is live again).
  bool Touch(int rank, absl::Time now);
  // The live ranks that are not done and were not heard from (Touch) within
  // the lease, in rank order.
  std::vector<int> LeasesRunOut(absl::Time now) const;
  // Declares the rank dead (Touch makes it live again).
  void MarkDead(int rank) { ranks_[rank].dead = true; }
  absl::Duration SinceHeard(int rank, absl::Time now) const {
    return now - ranks_[rank].last_heard;
  }
  bool dead(int rank) const { return ranks_[rank].dead; }
  bool done(int rank) const { return ranks_[rank].done; }
  // Takes part in steps and the ssp minimum: neither dead, done, nor
  // finishing (a finishing rank pushes no more; the others' steps go on
  // without it, as it waits for them).
  bool active(int rank) const {
    const Rank& r = ranks_[rank];
    return !r.dead && !r.done && !r.finishing;
  }
  void MarkDone(int rank) { ranks_[rank].done = true; }
  // The rank has trained its last step and waits, in its final pull, for
  // the others to finish too (it is not done: it still pulls).
  void MarkFinishing(int rank) { ranks_[rank].finishing = true; }
  // The ranks other than `rank` that are still training: not done, not
  // finishing, and not dead for their lease plus `rejoin_grace`.
  std::vector<int> StillTraining(int rank, absl::Time now,
                                 absl::Duration rejoin_grace) const;
  // Every rank is done, or every rank is done or dead and one is done,
  // where a dead rank counts only once it has been silent for its lease plus
  // `rejoin_grace`: a worker that is being restarted (as Kubernetes does
  // with a failed pod) finds the shards still there.
  bool AllFinished(absl::Time now, absl::Duration rejoin_grace) const;

  // True unless `progress` is beyond the rank's accepted progress: the push
  // carries a batch this shard already took.
  bool IsReplay(int rank, const update::DataProgress& progress) const {
    return !(ranks_[rank].accepted < progress);
  }
  // OK when a push ending at `progress` with `num_examples` examples can
  // follow the rank's accepted progress: a worker's cursor moves by its
  // batch, within an epoch or into the next one (replays stay behind it).
  // InvalidArgument naming the field otherwise, so that a peer cannot claim
  // progress that would make the rank's real pushes replays. The rank's
  // first push after a restore, for `step`, may be ahead of the restored
  // record (its pushes since were lost), by at most one epoch and one batch
  // (the registered max_examples_per_push, else `num_examples`) per step
  // since the record's clock. (A restarted worker resumes from the
  // smallest record over the shards, so registering changes nothing.)
  absl::Status CheckProgress(int rank, uint64_t step,
                             const update::DataProgress& progress,
                             uint32_t num_examples) const;
  // A push for `step` ending at `progress` was taken.
  void RecordAccepted(int rank, uint64_t step,
                      const update::DataProgress& progress);
  // A push for `step` ending at `progress` reached the weights with
  // `num_examples` examples of epoch progress.epoch.
  void RecordApplied(int rank, uint64_t step,
                     const update::DataProgress& progress,
                     uint32_t num_examples);
  // The rank has done steps [0, next_step) (a pull for step `next_step`
  // says so).
  void RaiseNextStep(int rank, uint64_t next_step);
  // Steps taken: the last accepted step + 1, or more once raised.
  uint64_t next_step(int rank) const { return ranks_[rank].clock; }
  const update::DataProgress& accepted(int rank) const {
    return ranks_[rank].accepted;
  }

  // Active ranks whose next step is below `step`, in rank order.
  std::vector<int> ActiveBefore(uint64_t step) const;

  std::vector<update::RankRecord> Records() const;
  const update::ExampleCounts& examples() const { return examples_; }
  // Replaces every rank's state and the counts; leases restart at `now`.
  // InvalidArgument (nothing changes) if the sizes are not num_workers.
  absl::Status Restore(const std::vector<update::RankRecord>& ranks,
                       const update::ExampleCounts& examples, absl::Time now);

  // "examples per epoch: 0=60000 1=60000 2=13312", summed over ranks.
  std::string ExamplesPerEpochLine() const;
  // "workers: 0=live 1=dead 2=done" and one "worker 0: clock 12, epoch 1,
  // examples_done 3200" line per rank.
  std::string RanksReport() const;

 private:
  struct Rank {
    uint64_t incarnation = 0;
    uint64_t clock = 0;
    uint64_t applied_clock = 0;
    update::DataProgress accepted;
    update::DataProgress applied;
    // `accepted` is where the rank's worker stands (see CheckProgress).
    bool progress_continuous = true;
    bool done = false;
    bool finishing = false;
    bool dead = false;
    uint32_t max_examples = 0;
    absl::Time last_heard;
  };

  // Dead long enough that it is not coming back: silent for its lease plus
  // `rejoin_grace`.
  bool GoneForGood(const Rank& r, absl::Time now,
                   absl::Duration rejoin_grace) const {
    return r.dead && now - r.last_heard >= lease_ + rejoin_grace;
  }

  absl::Duration lease_;
  std::vector<Rank> ranks_;
  update::ExampleCounts examples_;
};

// "worker 2" or "workers 1, 3", for log lines and errors.
std::string DescribeWorkers(const std::vector<int>& ranks);

}  // namespace ps::server

#endif  // PS_SERVER_RANK_REGISTRY_H_
