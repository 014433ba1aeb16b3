#include "worker/pipeline/stage_schedule.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "worker/pipeline/gpipe_schedule.h"
#include "worker/pipeline/one_f_one_b_schedule.h"

namespace ps::worker::pipeline {
namespace {

Tag TagOf(const StepBatch& batch, int i, Direction direction) {
  return {batch.step, static_cast<uint32_t>(i), direction};
}

}  // namespace

std::vector<int> MicroBatchRows(int rows, int micro_batches) {
  const int m = std::max(1, std::min(rows, micro_batches));
  std::vector<int> out(m, rows / m);
  for (int i = 0; i < rows % m; ++i) ++out[i];
  return out;
}

std::vector<ScheduleAction> StageActions(const ScheduleOptions& options,
                                         int micro_batches) {
  switch (options.kind) {
    case ScheduleKind::kGpipe:
      return GpipeActions(options.stage, options.stages, micro_batches);
    case ScheduleKind::kOneFOneB:
      return OneFOneBActions(options.stage, options.stages, micro_batches);
  }
  return {};
}

StageSchedule::StageSchedule(nn::StageModel* stage, StageLink* previous,
                             StageLink* next, const ScheduleOptions& options)
    : stage_(stage), previous_(previous), next_(next), options_(options) {}

absl::StatusOr<float> StageSchedule::Receive(StageLink& link, const Tag& tag,
                                             int rows, absl::Span<float> out) {
  const absl::Time start = absl::Now();
  absl::StatusOr<float> loss = link.Receive(tag, rows, out);
  waited_ += absl::Now() - start;
  return loss;
}

absl::Status StageSchedule::Forward(const StepBatch& batch, int i,
                                    std::vector<float>& out) {
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
  out.resize(next_ == nullptr ? 0 : rows * stage_->output_size());
  nn::StepInfo info{batch.step, batch.first_example + offset};
  absl::StatusOr<float> loss =
      stage_->Forward(input, labels, rows, info, absl::MakeSpan(out));
  if (!loss.ok()) return loss.status();
  forwarded_ = i;
  if (next_ == nullptr) losses_[i] = *loss;
  return absl::OkStatus();
}

absl::Status StageSchedule::Backward(const StepBatch& batch, int i) {
  if (forwarded_ != i) {
    if (absl::Status s = Forward(batch, i, recomputed_); !s.ok()) return s;
  }
  const int rows = rows_[i];
  if (next_ == nullptr) {
    grad_output_.clear();
  } else if (grad_output_of_ != i) {
    return absl::InternalError(absl::StrCat(
        "backward ", i, " without its gradients (the schedule's fault)"));
  }
  grad_input_.resize(previous_ == nullptr ? 0 : rows * stage_->input_size());
  const int first_tensor = stage_->range().first_tensor;
  const bool alone = rows_.size() == 1;
  absl::Status s = stage_->Backward(
      grad_output_,
      [&](int id, absl::Span<const float> g) {
        if (alone) {
          gradients_[id - first_tensor].assign(g.begin(), g.end());
          return absl::OkStatus();
        }
        return sums_.Add(i, id - first_tensor, g);
      },
      absl::MakeSpan(grad_input_));
  forwarded_ = -1;  // Backward may overwrite what Forward left.
  grad_output_of_ = -1;
  if (!s.ok()) return s;
  grad_input_of_ = i;
  if (previous_ != nullptr) {
    spare_.push_back(std::move(inputs_[i]));
    inputs_[i].clear();
  }
  --in_flight_;
  return absl::OkStatus();
}

absl::Status StageSchedule::Run(const StepBatch& batch,
                                const ScheduleAction& action) {
  const int i = action.micro_batch;
  const int rows = rows_[i];
  switch (action.op) {
    case ScheduleAction::kReceiveActivations: {
      std::vector<float>& input = inputs_[i];
      if (!spare_.empty()) {
        input = std::move(spare_.back());
        spare_.pop_back();
      }
      input.resize(static_cast<size_t>(rows) * stage_->input_size());
      return Receive(*previous_, TagOf(batch, i, Direction::kActivations), rows,
                     absl::MakeSpan(input))
          .status();
    }
    case ScheduleAction::kForward:
      if (absl::Status s = Forward(batch, i, output_); !s.ok()) return s;
      output_of_ = i;
      most_in_flight_ = std::max(most_in_flight_, ++in_flight_);
      return absl::OkStatus();
    case ScheduleAction::kSendActivations:
      if (output_of_ != i) break;
      return next_->Send(TagOf(batch, i, Direction::kActivations), rows, 0,
                         output_);
    case ScheduleAction::kReceiveGradients: {
      grad_output_.resize(static_cast<size_t>(rows) * stage_->output_size());
      absl::StatusOr<float> loss =
          Receive(*next_, TagOf(batch, i, Direction::kGradients), rows,
                  absl::MakeSpan(grad_output_));
      if (!loss.ok()) return loss.status();
      losses_[i] = *loss;
      grad_output_of_ = i;
      return absl::OkStatus();
    }
    case ScheduleAction::kBackward:
      return Backward(batch, i);
    case ScheduleAction::kSendGradients:
      if (grad_input_of_ != i) break;
      return previous_->Send(TagOf(batch, i, Direction::kGradients), rows,
                             losses_[i], grad_input_);
  }
  return absl::InternalError(
      absl::StrCat(action.ToString(), ": nothing to send"));
}

absl::StatusOr<float> StageSchedule::Step(const StepBatch& batch) {
  if (batch.rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("StageSchedule: a step of %d rows", batch.rows));
  }
  rows_ = MicroBatchRows(batch.rows, options_.micro_batches);
  const int m = static_cast<int>(rows_.size());
  offsets_.assign(m, 0);
  for (int i = 1; i < m; ++i) offsets_[i] = offsets_[i - 1] + rows_[i - 1];
  losses_.assign(m, 0.0f);
  std::vector<double> weights(m);
  for (int i = 0; i < m; ++i) {
    weights[i] = static_cast<double>(rows_[i]) / batch.rows;
  }
  const nn::StageRange& range = stage_->range();
  const int tensors = range.end_tensor - range.first_tensor;
  if (m > 1) sums_.Start(weights, tensors);
  gradients_.resize(tensors);
  inputs_.resize(m);
  forwarded_ = output_of_ = grad_output_of_ = grad_input_of_ = -1;
  in_flight_ = most_in_flight_ = 0;
  waited_ = absl::ZeroDuration();
  for (const ScheduleAction& action : StageActions(options_, m)) {
    if (absl::Status s = Run(batch, action); !s.ok()) return s;
  }
  double loss = 0;
  for (int i = 0; i < m; ++i) loss += weights[i] * losses_[i];
  for (int t = 0; m > 1 && t < tensors; ++t) {
    if (absl::Status s = sums_.Sum(t, gradients_[t]); !s.ok()) return s;
  }
  return static_cast<float>(loss);
}

int64_t StageSchedule::host_bytes() const {
  size_t floats = output_.capacity() + recomputed_.capacity() +
                  grad_output_.capacity() + grad_input_.capacity();
  for (const std::vector<float>& v : inputs_) floats += v.capacity();
  for (const std::vector<float>& v : spare_) floats += v.capacity();
  for (const std::vector<float>& v : gradients_) floats += v.capacity();
  return static_cast<int64_t>(floats * sizeof(float)) + sums_.held_bytes();
}

}  // namespace ps::worker::pipeline
