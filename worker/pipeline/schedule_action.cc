#include "worker/pipeline/schedule_action.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps::worker::pipeline {

const char* ScheduleKindName(ScheduleKind kind) {
  return kind == ScheduleKind::kGpipe ? "gpipe" : "1f1b";
}

absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name) {
  for (ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::kOneFOneB}) {
    if (name == ScheduleKindName(kind)) return kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--pipeline_schedule=", name, ": must be gpipe or 1f1b"));
}

std::string ScheduleAction::ToString() const {
  static constexpr const char* kNames[] = {
      "receive activations", "forward",  "send activations",
      "receive gradients",   "backward", "send gradients"};
  return absl::StrCat(kNames[op], " ", micro_batch);
}

int MaxInFlight(absl::Span<const ScheduleAction> actions) {
  int in_flight = 0;
  int most = 0;
  for (const ScheduleAction& a : actions) {
    if (a.op == ScheduleAction::kForward) most = std::max(most, ++in_flight);
    if (a.op == ScheduleAction::kBackward) --in_flight;
  }
  return most;
}

void AppendForward(int stage, int stages, int micro_batch,
                   std::vector<ScheduleAction>& out) {
  if (stage > 0) {
    out.push_back({ScheduleAction::kReceiveActivations, micro_batch});
  }
  out.push_back({ScheduleAction::kForward, micro_batch});
  if (stage + 1 < stages) {
    out.push_back({ScheduleAction::kSendActivations, micro_batch});
  }
}

void AppendBackward(int stage, int stages, int micro_batch,
                    std::vector<ScheduleAction>& out) {
  if (stage + 1 < stages) {
    out.push_back({ScheduleAction::kReceiveGradients, micro_batch});
  }
  out.push_back({ScheduleAction::kBackward, micro_batch});
  if (stage > 0) out.push_back({ScheduleAction::kSendGradients, micro_batch});
}

}  // namespace ps::worker::pipeline
