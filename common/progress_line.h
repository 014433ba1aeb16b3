#ifndef PS_COMMON_PROGRESS_LINE_H_
#define PS_COMMON_PROGRESS_LINE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"

namespace ps {

// The progress a worker reports and the launcher reads
// (deploy/local/training_progress.cc, summary.cc): one info line of the
// worker's log each (common/logging.h's pattern, "12:00:00.000 [worker 0]
// info: MESSAGE"), which a person reads too. The messages are written and
// parsed only here, so that rewording one changes both ends.
//
// A program given to the launcher after "--" may print the final accuracy
// line as plain text, "final test accuracy: 0.8971" (as
// examples/pytorch_fashion_mnist.py does); FindFinalTestAccuracy finds it.

// Rank 0 at the start: "training 4690 steps: 10 epochs of 469 steps, batch
// 64 per worker".
struct PlanProgress {
  int64_t planned_steps = 0;
  int epochs = 0;
  int64_t steps_per_epoch = 0;
  int batch_size = 0;
};

// Every --log_every steps, each rank: "epoch 2/10 step 100/469 loss 0.4311
// samples/s 21325 eta 0:12". `loss` is the mean over the steps since the
// last line; `epoch` and `step` are 1-based.
struct StepProgress {
  int epoch = 0;
  int epochs = 0;
  int64_t step = 0;
  int64_t steps_per_epoch = 0;
  double loss = 0;
  double samples_per_second = 0;
  std::string eta;  // "M:SS", no spaces.
};

// Rank 0's evaluation during training: "epoch 2/10 step 469 test accuracy
// 0.8710 after 9.1s".
struct EvalProgress {
  int epoch = 0;
  int epochs = 0;
  int64_t step = 0;
  double accuracy = 0;  // In [0, 1].
  double seconds = 0;   // Since training started.
};

// Rank 0 at the end: "final test accuracy: 0.8971".
struct FinalAccuracy {
  double accuracy = 0;  // In [0, 1].
};

// Each rank at the end: "trained 469 steps on 30016 examples in 7.106s, last
// loss 0.3012".
struct TrainedSummary {
  int64_t steps = 0;
  int64_t examples = 0;
  double seconds = 0;  // Wall time of the training loop.
  double last_loss = 0;
};

// Each rank at the end, where a step's time went: "time per step: compute
// 2.179 ms, communication 4.873 ms, slowdown 0.000 ms" (worker/trainer.h's
// StepTiming over the steps; in sync mode communication includes the wait
// for the other workers).
struct StepTimeSplit {
  double compute_ms = 0;
  double communication_ms = 0;
  double slowdown_ms = 0;
};

using ProgressLine = std::variant<PlanProgress, StepProgress, EvalProgress,
                                  FinalAccuracy, TrainedSummary, StepTimeSplit>;

// The message for `line`, to log at info level. Values print rounded: loss
// and accuracy to 4 decimals, samples/s to units, seconds to tenths.
std::string FormatProgressLine(const ProgressLine& line);

// Reads a message FormatProgressLine wrote; nullopt for any other message,
// and for impossible values (an epoch or step past its total, a non-finite
// loss, an accuracy outside [0, 1], a negative or non-finite time).
std::optional<ProgressLine> ParseProgressLine(absl::string_view message);

// The message of an info line in the worker log's pattern, or "" for any
// other line (a program's own print, another level).
absl::string_view InfoMessageOf(absl::string_view log_line);

// The last of `log_lines` (a worker's output, in the log's pattern) that
// holds a progress message of type T; nullopt if none does.
template <typename T>
std::optional<T> LastProgressOf(const std::vector<std::string>& log_lines) {
  for (auto it = log_lines.rbegin(); it != log_lines.rend(); ++it) {
    std::optional<ProgressLine> line = ParseProgressLine(InfoMessageOf(*it));
    if (line.has_value() && std::holds_alternative<T>(*line)) {
      return std::get<T>(*line);
    }
  }
  return std::nullopt;
}

// The accuracy of a final accuracy message anywhere in `line` (a log line or
// a program's print); nullopt if none, or not a number in [0, 1].
std::optional<double> FindFinalTestAccuracy(absl::string_view line);

}  // namespace ps

#endif  // PS_COMMON_PROGRESS_LINE_H_
