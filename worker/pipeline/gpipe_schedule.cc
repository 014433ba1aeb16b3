#include "worker/pipeline/gpipe_schedule.h"

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/model_spec.h"

namespace ps::worker::pipeline {

std::vector<int> MicroBatchRows(int rows, int micro_batches) {
  const int m = std::max(1, std::min(rows, micro_batches));
  std::vector<int> out(m, rows / m);
  for (int i = 0; i < rows % m; ++i) ++out[i];
  return out;
}

GpipeSchedule::GpipeSchedule(nn::StageModel* stage, StageLink* previous,
                             StageLink* next, int micro_batches)
    : stage_(stage),
      previous_(previous),
      next_(next),
      micro_batches_(micro_batches) {}

absl::StatusOr<float> GpipeSchedule::Receive(StageLink& link, const Tag& tag,
                                             int rows, absl::Span<float> out) {
  const absl::Time start = absl::Now();
  absl::StatusOr<float> loss = link.Receive(tag, rows, out);
  waited_ += absl::Now() - start;
  return loss;
}

absl::Status GpipeSchedule::Forward(const StepBatch& batch, int i) {
  const int rows = rows_[i];
  const int offset = offsets_[i];
  absl::Span<const float> input;
  if (previous_ == nullptr) {
    input =
        batch.images.subspan(static_cast<size_t>(offset) * stage_->input_size(),
                             static_cast<size_t>(rows) * stage_->input_size());
  } else {
    input = inputs_[i];
  }
  absl::Span<const float> labels;
  if (next_ == nullptr) labels = batch.labels.subspan(offset, rows);
  output_.resize(next_ == nullptr ? 0 : rows * stage_->output_size());
  nn::StepInfo info{batch.step, batch.first_example + offset};
  absl::StatusOr<float> loss =
      stage_->Forward(input, labels, rows, info, absl::MakeSpan(output_));
  if (!loss.ok()) return loss.status();
  forwarded_ = i;
  if (next_ == nullptr) losses_[i] = *loss;
  return absl::OkStatus();
}

absl::Status GpipeSchedule::Backward(const StepBatch& batch, int i) {
  if (forwarded_ != i) {
    if (absl::Status s = Forward(batch, i); !s.ok()) return s;
  }
  const int rows = rows_[i];
  grad_output_.resize(next_ == nullptr ? 0 : rows * stage_->output_size());
  if (next_ != nullptr) {
    absl::StatusOr<float> loss = Receive(
        *next_, {batch.step, static_cast<uint32_t>(i), Direction::kGradients},
        rows, absl::MakeSpan(grad_output_));
    if (!loss.ok()) return loss.status();
    losses_[i] = *loss;
  }
  grad_input_.resize(previous_ == nullptr ? 0 : rows * stage_->input_size());
  const double weight = static_cast<double>(rows) / batch.rows;
  const int first_tensor = stage_->range().first_tensor;
  absl::Status s = stage_->Backward(
      grad_output_,
      [&](int id, absl::Span<const float> g) {
        std::vector<double>& sum = sums_[id - first_tensor];
        if (sum.size() != g.size()) sum.assign(g.size(), 0.0);  // First step.
        for (size_t e = 0; e < g.size(); ++e) sum[e] += weight * g[e];
        return absl::OkStatus();
      },
      absl::MakeSpan(grad_input_));
  forwarded_ = -1;  // Backward may overwrite what Forward left.
  if (!s.ok()) return s;
  if (previous_ != nullptr) {
    return previous_->Send(
        {batch.step, static_cast<uint32_t>(i), Direction::kGradients}, rows,
        losses_[i], grad_input_);
  }
  return absl::OkStatus();
}

absl::StatusOr<float> GpipeSchedule::Step(const StepBatch& batch) {
  if (batch.rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GpipeSchedule: a step of %d rows", batch.rows));
  }
  rows_ = MicroBatchRows(batch.rows, micro_batches_);
  const int m = static_cast<int>(rows_.size());
  offsets_.assign(m, 0);
  for (int i = 1; i < m; ++i) offsets_[i] = offsets_[i - 1] + rows_[i - 1];
  losses_.assign(m, 0.0f);
  const nn::StageRange& range = stage_->range();
  sums_.resize(range.end_tensor - range.first_tensor);
  gradients_.resize(sums_.size());
  // Sized by the first step's Backward callbacks.
  for (auto& sum : sums_) std::fill(sum.begin(), sum.end(), 0.0);
  inputs_.resize(m);
  forwarded_ = -1;
  waited_ = absl::ZeroDuration();
  for (int i = 0; i < m; ++i) {
    if (previous_ != nullptr) {
      inputs_[i].resize(static_cast<size_t>(rows_[i]) * stage_->input_size());
      absl::StatusOr<float> received = Receive(
          *previous_,
          {batch.step, static_cast<uint32_t>(i), Direction::kActivations},
          rows_[i], absl::MakeSpan(inputs_[i]));
      if (!received.ok()) return received.status();
    }
    if (absl::Status s = Forward(batch, i); !s.ok()) return s;
    if (next_ != nullptr) {
      absl::Status s = next_->Send(
          {batch.step, static_cast<uint32_t>(i), Direction::kActivations},
          rows_[i], 0, output_);
      if (!s.ok()) return s;
    }
  }
  for (int i = m - 1; i >= 0; --i) {
    if (absl::Status s = Backward(batch, i); !s.ok()) return s;
  }
  double loss = 0;
  for (int i = 0; i < m; ++i) {
    loss += static_cast<double>(rows_[i]) / batch.rows * losses_[i];
  }
  for (size_t t = 0; t < sums_.size(); ++t) {
    gradients_[t].assign(sums_[t].begin(), sums_[t].end());
  }
  return static_cast<float>(loss);
}

}  // namespace ps::worker::pipeline
