#include "worker/pipeline/pipeline_place.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace ps::worker::pipeline {

std::string PipelinePlace::ToString() const {
  return absl::StrFormat("stage %d of %d, replica %d of %d", stage, stages,
                         replica, replicas);
}

absl::StatusOr<PipelinePlace> PipelinePlace::FromRank(int rank, int num_workers,
                                                      int stages) {
  if (stages < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--pipeline_stages=%d: must be at least 1", stages));
  }
  if (num_workers < 1 || num_workers % stages != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--num_workers=%d is not a multiple of --pipeline_stages=%d: a job "
        "runs replicas x stages workers",
        num_workers, stages));
  }
  if (rank < 0 || rank >= num_workers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--rank=%d is not in [0, %d)", rank, num_workers));
  }
  PipelinePlace place;
  place.stages = stages;
  place.replicas = num_workers / stages;
  place.stage = rank % stages;
  place.replica = rank / stages;
  return place;
}

}  // namespace ps::worker::pipeline
