#include "worker/pipeline/schedule_testing.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ps::worker::pipeline::testing {
namespace {

using Op = ScheduleAction::Op;

absl::Status Fault(int stage, size_t index, const ScheduleAction& a,
                   absl::string_view why) {
  return absl::FailedPreconditionError(absl::StrCat(
      "stage ", stage, " action ", index, " (", a.ToString(), "): ", why));
}

// The receive that a send of `a` by `stage` meets, and on which stage.
bool Matches(const ScheduleAction& send, const ScheduleAction& receive) {
  const Op want = send.op == ScheduleAction::kSendActivations
                      ? ScheduleAction::kReceiveActivations
                      : ScheduleAction::kReceiveGradients;
  return receive.op == want;
}

}  // namespace

absl::Status CheckStageActions(const std::vector<ScheduleAction>& actions,
                               int stage, int stages, int micro_batches) {
  const bool first = stage == 0;
  const bool last = stage + 1 == stages;
  std::vector<int> forwards(micro_batches), backwards(micro_batches);
  std::vector<int> received(micro_batches), gradients(micro_batches);
  int output_of = -1;  // The micro-batch whose output awaits its send.
  for (size_t n = 0; n < actions.size(); ++n) {
    const ScheduleAction& a = actions[n];
    if (a.micro_batch < 0 || a.micro_batch >= micro_batches) {
      return Fault(stage, n, a, "no such micro-batch");
    }
    const int i = a.micro_batch;
    switch (a.op) {
      case ScheduleAction::kReceiveActivations:
        if (first) return Fault(stage, n, a, "the first stage receives none");
        if (received[i]++ > 0) return Fault(stage, n, a, "received twice");
        break;
      case ScheduleAction::kForward:
        if (!first && received[i] == 0) {
          return Fault(stage, n, a, "its input has not been received");
        }
        if (forwards[i]++ > 0) return Fault(stage, n, a, "forward twice");
        if (output_of >= 0) {
          return Fault(stage, n, a, "replaces an output not yet sent");
        }
        if (!last) output_of = i;
        break;
      case ScheduleAction::kSendActivations:
        if (last) return Fault(stage, n, a, "the last stage sends none");
        if (output_of != i) return Fault(stage, n, a, "not the last output");
        output_of = -1;
        break;
      case ScheduleAction::kReceiveGradients:
        if (last) return Fault(stage, n, a, "the last stage receives none");
        if (gradients[i]++ > 0) return Fault(stage, n, a, "received twice");
        break;
      case ScheduleAction::kBackward:
        if (forwards[i] == 0) return Fault(stage, n, a, "before its forward");
        if (!last && gradients[i] == 0) {
          return Fault(stage, n, a, "its gradients have not been received");
        }
        if (backwards[i]++ > 0) return Fault(stage, n, a, "backward twice");
        if (output_of >= 0) {
          return Fault(stage, n, a, "its recomputation replaces an output");
        }
        break;
      case ScheduleAction::kSendGradients:
        if (first) return Fault(stage, n, a, "the first stage sends none");
        if (backwards[i] == 0) return Fault(stage, n, a, "before its backward");
        break;
    }
  }
  for (int i = 0; i < micro_batches; ++i) {
    if (forwards[i] != 1 || backwards[i] != 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "stage ", stage, ": micro-batch ", i, " has ", forwards[i],
          " forwards and ", backwards[i], " backwards"));
    }
  }
  return absl::OkStatus();
}

absl::Status SimulatePipeline(
    const std::vector<std::vector<ScheduleAction>>& pipeline) {
  const int stages = static_cast<int>(pipeline.size());
  std::vector<size_t> next(stages, 0);
  auto done = [&](int s) { return next[s] == pipeline[s].size(); };
  for (;;) {
    bool moved = false;
    for (int s = 0; s < stages; ++s) {
      if (done(s)) continue;
      const ScheduleAction& a = pipeline[s][next[s]];
      if (a.op == ScheduleAction::kForward ||
          a.op == ScheduleAction::kBackward) {
        ++next[s];
        moved = true;
        continue;
      }
      const bool sends = a.op == ScheduleAction::kSendActivations ||
                         a.op == ScheduleAction::kSendGradients;
      if (!sends) continue;  // A receive moves with its neighbour's send.
      const int peer = a.op == ScheduleAction::kSendActivations ? s + 1 : s - 1;
      if (peer < 0 || peer >= stages || done(peer)) {
        return Fault(s, next[s], a, "no neighbour receives it");
      }
      const ScheduleAction& r = pipeline[peer][next[peer]];
      if (!Matches(a, r)) continue;
      if (r.micro_batch != a.micro_batch) {
        return Fault(s, next[s], a,
                     absl::StrCat("stage ", peer, " receives ", r.ToString(),
                                  " instead"));
      }
      ++next[s];
      ++next[peer];
      moved = true;
    }
    bool all_done = true;
    for (int s = 0; s < stages; ++s) all_done = all_done && done(s);
    if (all_done) return absl::OkStatus();
    if (!moved) {
      std::vector<std::string> waits;
      for (int s = 0; s < stages; ++s) {
        waits.push_back(absl::StrCat(
            "stage ", s, " at ",
            done(s) ? "its end" : pipeline[s][next[s]].ToString()));
      }
      return absl::FailedPreconditionError(
          absl::StrCat("deadlock: ", absl::StrJoin(waits, ", ")));
    }
  }
}

}  // namespace ps::worker::pipeline::testing
