#include "common/progress_line.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace ps {
namespace {

constexpr absl::string_view kFinalMarker = "final test accuracy:";

bool Probability(double value) {
  return std::isfinite(value) && value >= 0 && value <= 1;
}

struct Formatter {
  std::string operator()(const PlanProgress& p) const {
    return absl::StrFormat(
        "training %d steps: %d epochs of %d steps, batch %d per worker",
        p.planned_steps, p.epochs, p.steps_per_epoch, p.batch_size);
  }
  std::string operator()(const StepProgress& p) const {
    return absl::StrFormat(
        "epoch %d/%d step %d/%d loss %.4f samples/s %.0f eta %s", p.epoch,
        p.epochs, p.step, p.steps_per_epoch, p.loss, p.samples_per_second,
        p.eta);
  }
  std::string operator()(const EvalProgress& p) const {
    return absl::StrFormat("epoch %d/%d step %d test accuracy %.4f after %.1fs",
                           p.epoch, p.epochs, p.step, p.accuracy, p.seconds);
  }
  std::string operator()(const FinalAccuracy& p) const {
    return absl::StrFormat("%s %.4f", kFinalMarker, p.accuracy);
  }
  std::string operator()(const TrainedSummary& p) const {
    return absl::StrFormat(
        "trained %d steps on %d examples in %.3fs, last loss %.4f", p.steps,
        p.examples, p.seconds, p.last_loss);
  }
  std::string operator()(const StepTimeSplit& p) const {
    return absl::StrFormat(
        "time per step: compute %.3f ms, communication %.3f ms, slowdown "
        "%.3f ms",
        p.compute_ms, p.communication_ms, p.slowdown_ms);
  }
};

}  // namespace

std::string FormatProgressLine(const ProgressLine& line) {
  return std::visit(Formatter(), line);
}

std::optional<ProgressLine> ParseProgressLine(absl::string_view message) {
  const std::string text(message);
  StepProgress step;
  char eta[32] = {0};
  if (std::sscanf(text.c_str(),
                  "epoch %d/%d step %" SCNd64 "/%" SCNd64
                  " loss %lf samples/s %lf eta %31s",
                  &step.epoch, &step.epochs, &step.step, &step.steps_per_epoch,
                  &step.loss, &step.samples_per_second, eta) == 7) {
    if (step.epoch < 1 || step.epoch > step.epochs || step.step < 1 ||
        step.step > step.steps_per_epoch || !std::isfinite(step.loss) ||
        !std::isfinite(step.samples_per_second)) {
      return std::nullopt;
    }
    step.eta = eta;
    return step;
  }
  PlanProgress plan;
  if (std::sscanf(text.c_str(),
                  "training %" SCNd64 " steps: %d epochs of %" SCNd64
                  " steps, batch %d",
                  &plan.planned_steps, &plan.epochs, &plan.steps_per_epoch,
                  &plan.batch_size) >= 3) {
    if (plan.planned_steps <= 0 || plan.epochs <= 0 ||
        plan.steps_per_epoch <= 0) {
      return std::nullopt;
    }
    return plan;
  }
  EvalProgress eval;
  if (std::sscanf(text.c_str(),
                  "epoch %d/%d step %" SCNd64 " test accuracy %lf after %lfs",
                  &eval.epoch, &eval.epochs, &eval.step, &eval.accuracy,
                  &eval.seconds) == 5) {
    if (eval.epoch < 1 || !Probability(eval.accuracy)) return std::nullopt;
    return eval;
  }
  TrainedSummary trained;
  if (std::sscanf(text.c_str(),
                  "trained %" SCNd64 " steps on %" SCNd64
                  " examples in %lfs, last loss %lf",
                  &trained.steps, &trained.examples, &trained.seconds,
                  &trained.last_loss) == 4) {
    if (trained.steps < 0 || trained.examples < 0 ||
        !std::isfinite(trained.seconds) || trained.seconds < 0) {
      return std::nullopt;
    }
    return trained;
  }
  StepTimeSplit split;
  if (std::sscanf(text.c_str(),
                  "time per step: compute %lf ms, communication %lf ms, "
                  "slowdown %lf ms",
                  &split.compute_ms, &split.communication_ms,
                  &split.slowdown_ms) == 3) {
    for (double ms :
         {split.compute_ms, split.communication_ms, split.slowdown_ms}) {
      if (!std::isfinite(ms) || ms < 0) return std::nullopt;
    }
    return split;
  }
  if (absl::StartsWith(message, kFinalMarker)) {
    std::optional<double> accuracy = FindFinalTestAccuracy(message);
    if (!accuracy.has_value()) return std::nullopt;
    return FinalAccuracy{*accuracy};
  }
  return std::nullopt;
}

absl::string_view InfoMessageOf(absl::string_view log_line) {
  constexpr absl::string_view kMarker = "] info: ";
  const size_t at = log_line.find(kMarker);
  // The pattern puts it right after the time and "[worker N".
  if (at == absl::string_view::npos || at > 40) return "";
  return log_line.substr(at + kMarker.size());
}

std::optional<double> FindFinalTestAccuracy(absl::string_view line) {
  const size_t at = line.find(kFinalMarker);
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view rest =
      absl::StripLeadingAsciiWhitespace(line.substr(at + kFinalMarker.size()));
  size_t end = 0;
  while (end < rest.size() &&
         (absl::ascii_isdigit(rest[end]) || rest[end] == '.')) {
    ++end;
  }
  double value = 0;
  if (end == 0 || !absl::SimpleAtod(rest.substr(0, end), &value) ||
      !Probability(value)) {
    return std::nullopt;
  }
  return value;
}

}  // namespace ps
