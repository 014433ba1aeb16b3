#include "worker/pipeline/pipeline_place.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
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

std::string StageGroupJobId(absl::string_view job_id, int stage) {
  if (job_id.empty()) return "";
  return absl::StrCat(job_id, "-stage", stage);
}

absl::StatusOr<std::vector<std::string>> StageGroupServers(
    const std::vector<std::string>& servers, int stages, int stage) {
  if (stages < 1 || stage < 0 || stage >= stages || servers.empty() ||
      servers.size() % stages != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--servers: %d servers are not %d stages' groups of the same size "
        "(each stage's servers, in stage order)",
        servers.size(), stages));
  }
  const size_t per_group = servers.size() / stages;
  return std::vector<std::string>(servers.begin() + stage * per_group,
                                  servers.begin() + (stage + 1) * per_group);
}

}  // namespace ps::worker::pipeline
