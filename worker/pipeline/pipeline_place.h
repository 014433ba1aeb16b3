#ifndef PS_WORKER_PIPELINE_PIPELINE_PLACE_H_
#define PS_WORKER_PIPELINE_PIPELINE_PLACE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps::worker::pipeline {

// Where a worker stands in a pipelined job of `replicas` data-parallel
// replicas of `stages` stages each: --num_workers = replicas x stages, and
// rank = replica * stages + stage, so that a replica's stages are
// consecutive ranks (on one host wherever the launcher places ranks in
// order) and rank 0 is the first stage of replica 0.
struct PipelinePlace {
  int stage = 0;
  int replica = 0;
  int stages = 1;
  int replicas = 1;

  int rank() const { return replica * stages + stage; }
  int RankOf(int stage_of_this_replica) const {
    return replica * stages + stage_of_this_replica;
  }
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
  std::string ToString() const;  // "stage 1 of 2, replica 0 of 2"

  // The place of `rank`. InvalidArgument naming --pipeline_stages and
  // --num_workers when stages < 1 or does not divide num_workers, or
  // naming --rank when it is not in [0, num_workers).
  static absl::StatusOr<PipelinePlace> FromRank(int rank, int num_workers,
                                                int stages);
};

// Each stage's parameters live on a server group of their own, a job of
// its own: the R replicas of stage s are its workers (data-parallel rank =
// replica). The launcher and the worker both name a group this way.

// Stage `stage`'s group's job id: "<job_id>-stage<stage>"; "" stays "".
std::string StageGroupJobId(absl::string_view job_id, int stage);

// Stage `stage`'s servers among `servers`, every group's in stage order,
// the same number each. InvalidArgument naming --servers when `stages`
// does not divide their number.
absl::StatusOr<std::vector<std::string>> StageGroupServers(
    const std::vector<std::string>& servers, int stages, int stage);

}  // namespace ps::worker::pipeline

#endif  // PS_WORKER_PIPELINE_PIPELINE_PLACE_H_
