#include "deploy/local/training_progress.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace ps {
namespace {

// The message of one of our worker's info lines, "" for other lines.
std::string InfoMessage(absl::string_view line) {
  constexpr absl::string_view kMarker = "] info: ";
  const size_t at = line.find(kMarker);
  // Our pattern puts it right after the time and "[worker N".
  if (at == absl::string_view::npos || at > 40) return "";
  return std::string(line.substr(at + kMarker.size()));
}

bool Probability(double value) {
  return std::isfinite(value) && value >= 0 && value <= 1;
}

}  // namespace

TrainingProgress::LineKind TrainingProgress::Feed(int rank,
                                                  absl::string_view line) {
  const std::string message = InfoMessage(line);
  if (message.empty()) return LineKind::kOther;
  int epoch = 0, epochs = 0;
  int64_t step = 0, steps = 0;
  double loss = 0, rate = 0, accuracy = 0, seconds = 0;
  char eta[32] = {0};
  if (std::sscanf(message.c_str(),
                  "epoch %d/%d step %" SCNd64 "/%" SCNd64
                  " loss %lf samples/s %lf eta %31s",
                  &epoch, &epochs, &step, &steps, &loss, &rate, eta) == 7 &&
      epoch >= 1 && epoch <= epochs && step >= 1 && step <= steps &&
      std::isfinite(loss) && std::isfinite(rate)) {
    absl::MutexLock lock(&mu_);
    ranks_[rank] = RankState{epoch, step, loss};
    Accumulator& acc = epochs_[epoch];
    acc.loss_sum += loss;
    ++acc.losses;
    max_epoch_ = std::max(max_epoch_, epoch);
    ProgressSnapshot& s = latest_;
    const int64_t done = (epoch - 1) * steps + step;
    const int64_t shown =
        s.started ? (s.epoch - 1) * s.steps_per_epoch + s.step : -1;
    if (done >= shown) {
      s.epoch = epoch;
      s.step = step;
      s.eta = eta;
    }
    s.started = true;
    s.epochs = epochs;
    s.steps_per_epoch = steps;
    s.samples_per_second = rate;
    s.fraction = std::min(
        1.0, static_cast<double>((s.epoch - 1) * steps + s.step) /
                 static_cast<double>(std::max<int64_t>(1, epochs * steps)));
    double sum = 0;
    for (const auto& [r, state] : ranks_) sum += state.loss;
    s.loss = sum / ranks_.size();
    return LineKind::kStep;
  }
  if (rank != 0) return LineKind::kOther;
  int64_t planned = 0;
  if (std::sscanf(message.c_str(),
                  "training %" SCNd64 " steps: %d epochs of %" SCNd64 " steps",
                  &planned, &epochs, &steps) == 3 &&
      planned > 0 && epochs > 0 && steps > 0) {
    absl::MutexLock lock(&mu_);
    latest_.epochs = epochs;
    latest_.steps_per_epoch = steps;
    return LineKind::kStart;
  }
  if (std::sscanf(message.c_str(),
                  "epoch %d/%d step %" SCNd64 " test accuracy %lf after %lfs",
                  &epoch, &epochs, &step, &accuracy, &seconds) == 5 &&
      epoch >= 1 && Probability(accuracy)) {
    absl::MutexLock lock(&mu_);
    epochs_[epoch].test_accuracy = accuracy;
    max_epoch_ = std::max(max_epoch_, epoch);
    latest_.last_test_accuracy = accuracy;
    latest_.last_eval_epoch = epoch;
    latest_.last_eval_at_epoch_end = step == latest_.steps_per_epoch;
    return LineKind::kTestAccuracy;
  }
  if (std::sscanf(message.c_str(), "final test accuracy: %lf", &accuracy) ==
          1 &&
      Probability(accuracy)) {
    absl::MutexLock lock(&mu_);
    if (max_epoch_ > 0) epochs_[max_epoch_].test_accuracy = accuracy;
    latest_.last_test_accuracy = accuracy;
    latest_.fraction = 1;
    return LineKind::kFinalAccuracy;
  }
  return LineKind::kOther;
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
