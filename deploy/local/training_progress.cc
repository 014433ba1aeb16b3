#include "deploy/local/training_progress.h"

#include <algorithm>
#include <optional>
#include <variant>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/progress_line.h"

namespace ps {
TrainingProgress::LineKind TrainingProgress::Feed(int rank,
                                                  absl::string_view line) {
  const absl::string_view message = InfoMessageOf(line);
  if (message.empty()) return LineKind::kOther;
  const std::optional<ProgressLine> parsed = ParseProgressLine(message);
  if (!parsed.has_value()) return LineKind::kOther;
  if (const auto* p = std::get_if<StepProgress>(&*parsed)) {
    absl::MutexLock lock(&mu_);
    ranks_[rank] = RankState{p->epoch, p->step, p->loss};
    Accumulator& acc = epochs_[p->epoch];
    acc.loss_sum += p->loss;
    ++acc.losses;
    max_epoch_ = std::max(max_epoch_, p->epoch);
    ProgressSnapshot& s = latest_;
    const int64_t steps = p->steps_per_epoch;
    const int64_t done = (p->epoch - 1) * steps + p->step;
    const int64_t shown =
        s.started ? (s.epoch - 1) * s.steps_per_epoch + s.step : -1;
    if (done >= shown) {
      s.epoch = p->epoch;
      s.step = p->step;
      s.eta = p->eta;
    }
    s.started = true;
    s.epochs = p->epochs;
    s.steps_per_epoch = steps;
    s.samples_per_second = p->samples_per_second;
    s.fraction = std::min(
        1.0, static_cast<double>((s.epoch - 1) * steps + s.step) /
                 static_cast<double>(std::max<int64_t>(1, p->epochs * steps)));
    double sum = 0;
    for (const auto& [r, state] : ranks_) sum += state.loss;
    s.loss = sum / ranks_.size();
    return LineKind::kStep;
  }
  if (rank != 0) return LineKind::kOther;
  if (const auto* p = std::get_if<PlanProgress>(&*parsed)) {
    absl::MutexLock lock(&mu_);
    latest_.epochs = p->epochs;
    latest_.steps_per_epoch = p->steps_per_epoch;
    return LineKind::kStart;
  }
  if (const auto* p = std::get_if<EvalProgress>(&*parsed)) {
    absl::MutexLock lock(&mu_);
    epochs_[p->epoch].test_accuracy = p->accuracy;
    max_epoch_ = std::max(max_epoch_, p->epoch);
    latest_.last_test_accuracy = p->accuracy;
    latest_.last_eval_epoch = p->epoch;
    latest_.last_eval_at_epoch_end = p->step == latest_.steps_per_epoch;
    return LineKind::kTestAccuracy;
  }
  const auto* final_accuracy = std::get_if<FinalAccuracy>(&*parsed);
  // The end-of-training summaries are for people and benchmarks.
  if (final_accuracy == nullptr) return LineKind::kOther;
  const double accuracy = final_accuracy->accuracy;
  absl::MutexLock lock(&mu_);
  if (max_epoch_ > 0) epochs_[max_epoch_].test_accuracy = accuracy;
  latest_.last_test_accuracy = accuracy;
  latest_.fraction = 1;
  return LineKind::kFinalAccuracy;
}

ProgressSnapshot TrainingProgress::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return latest_;
}

std::vector<EpochRecord> TrainingProgress::History() const {
  absl::MutexLock lock(&mu_);
  std::vector<EpochRecord> history;
  for (const auto& [epoch, acc] : epochs_) {
    EpochRecord record;
    record.epoch = epoch;
    if (acc.losses > 0) record.train_loss = acc.loss_sum / acc.losses;
    record.test_accuracy = acc.test_accuracy;
    history.push_back(record);
  }
  return history;
}

std::string HistoryCsv(const std::vector<EpochRecord>& history) {
  std::string csv = "epoch,train_loss,test_accuracy\n";
  for (const EpochRecord& r : history) {
    absl::StrAppend(
        &csv, r.epoch, ",",
        r.train_loss.has_value() ? absl::StrFormat("%.6f", *r.train_loss) : "",
        ",",
        r.test_accuracy.has_value() ? absl::StrFormat("%.4f", *r.test_accuracy)
                                    : "",
        "\n");
  }
  return csv;
}

absl::StatusOr<std::vector<EpochRecord>> ParseHistoryCsv(
    absl::string_view csv) {
  std::vector<EpochRecord> history;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(csv, '\n', absl::SkipEmpty())) {
    if (++number == 1) continue;  // The header.
    const std::vector<absl::string_view> fields = absl::StrSplit(line, ',');
    EpochRecord record;
    double loss = 0, accuracy = 0;
    if (fields.size() != 3 || !absl::SimpleAtoi(fields[0], &record.epoch) ||
        record.epoch < 1 ||
        (!fields[1].empty() && !absl::SimpleAtod(fields[1], &loss)) ||
        (!fields[2].empty() && !absl::SimpleAtod(fields[2], &accuracy))) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", number, " is not epoch,loss,accuracy: ", line));
    }
    if (!fields[1].empty()) record.train_loss = loss;
    if (!fields[2].empty()) record.test_accuracy = accuracy;
    history.push_back(record);
  }
  return history;
}

std::vector<EpochRecord> MergeHistory(const std::vector<EpochRecord>& earlier,
                                      const std::vector<EpochRecord>& later) {
  std::map<int, EpochRecord> merged;
  for (const EpochRecord& r : earlier) merged[r.epoch] = r;
  for (const EpochRecord& r : later) {
    EpochRecord& m = merged[r.epoch];
    m.epoch = r.epoch;
    if (r.train_loss.has_value()) m.train_loss = r.train_loss;
    if (r.test_accuracy.has_value()) m.test_accuracy = r.test_accuracy;
  }
  std::vector<EpochRecord> history;
  for (const auto& [epoch, record] : merged) history.push_back(record);
  return history;
}

}  // namespace ps
