#include "worker/pipeline/pipeline_trainer.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/model_file.h"
#include "common/progress_line.h"
#include "spdlog/spdlog.h"

namespace ps::worker::pipeline {

absl::StatusOr<std::unique_ptr<PipelineTrainer>> PipelineTrainer::Create(
    const PipelineTrainerOptions& options, WeightExchange* weights,
    nn::StageModel* stage, Neighbours* neighbours, nn::Model* whole,
    const LabeledImages* train, const LabeledImages* test) {
  absl::StatusOr<EpochSharder> sharder =
      EpochSharder::Create(train->num_examples, options.place.replicas,
                           options.batch_size, options.seed);
  if (!sharder.ok()) return sharder.status();
  if (options.evaluate && (test == nullptr || whole == nullptr)) {
    return absl::InvalidArgumentError(
        "evaluation needs a test set and the whole model");
  }
  if (stage->max_batch() < options.batch_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the stage takes batches of up to %d examples, not %d",
                        stage->max_batch(), options.batch_size));
  }
  if (stage->first() && train->example_size() != stage->input_size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the model's input is %d floats per example, the data's %d",
        stage->input_size(), train->example_size()));
  }
  if ((neighbours->previous == nullptr) != options.place.first() ||
      (neighbours->next == nullptr) != options.place.last() ||
      stage->first() != options.place.first() ||
      stage->last() != options.place.last()) {
    return absl::InvalidArgumentError(
        "the stage's model and links do not fit its place");
  }
  return absl::WrapUnique(new PipelineTrainer(options, weights, stage,
                                              neighbours, whole, train, test,
                                              *std::move(sharder)));
}

PipelineTrainer::PipelineTrainer(const PipelineTrainerOptions& options,
                                 WeightExchange* weights, nn::StageModel* stage,
                                 Neighbours* neighbours, nn::Model* whole,
                                 const LabeledImages* train,
                                 const LabeledImages* test,
                                 EpochSharder sharder)
    : options_(options),
      exchange_(weights),
      stage_(stage),
      whole_(whole),
      train_(train),
      test_(test),
      sharder_(std::move(sharder)),
      planned_steps_(
          options.max_steps > 0
              ? std::min<uint64_t>(options.max_steps,
                                   sharder_.steps_per_epoch() * options.epochs)
              : sharder_.steps_per_epoch() * options.epochs),
      schedule_(stage, neighbours->previous.get(), neighbours->next.get(),
                {options.schedule, options.place.stage, options.place.stages,
                 options.micro_batches}) {}

absl::Status PipelineTrainer::LoadWeights(uint64_t clock, uint64_t* version) {
  if (pulled_clock_ == clock) {
    *version = pulled_version_;
  } else {
    pulled_clock_.reset();
    absl::StatusOr<uint64_t> pulled = exchange_->Pull(clock, weights_);
    if (!pulled.ok()) return pulled.status();
    *version = *pulled;
  }
  const nn::StageRange& range = stage_->range();
  for (int t = range.first_tensor; t < range.end_tensor; ++t) {
    if (absl::Status s = stage_->SetWeights(t, weights_[t]); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<PipelineTrainer::StepResult> PipelineTrainer::Step(
    const EpochPlan& plan, uint64_t epoch, uint64_t step_in_epoch,
    uint64_t clock) {
  StepResult result;
  absl::Time mark = absl::Now();
  auto lap = [&mark](absl::Duration& phase) {
    const absl::Time now = absl::Now();
    phase += now - mark;
    mark = now;
  };
  uint64_t version = 0;
  if (absl::Status s = LoadWeights(clock, &version); !s.ok()) return s;
  lap(result.timing.communication);

  const int replica = options_.place.replica;
  absl::StatusOr<absl::Span<const uint32_t>> indices =
      plan.BatchIndices(step_in_epoch, replica);
  if (!indices.ok()) return indices.status();
  if (absl::Status s = GatherBatch(*train_, *indices, &batch_); !s.ok()) {
    return s;
  }
  absl::StatusOr<uint64_t> done_before =
      plan.sharder().ExamplesBeforeStep(step_in_epoch, replica);
  if (!done_before.ok()) return done_before.status();

  const nn::StageRange& range = stage_->range();
  for (std::vector<float>& g : push_) std::fill(g.begin(), g.end(), 0.0f);
  if (batch_.size > 0) {
    StepBatch batch;
    batch.step = clock;
    batch.rows = static_cast<int>(batch_.size);
    // A replica's examples follow the lower replicas' in the global batch,
    // as an unsplit worker's follow the lower ranks'.
    batch.first_example = static_cast<uint64_t>(replica) * options_.batch_size;
    if (stage_->first()) batch.images = batch_.images;
    if (stage_->last()) batch.labels = batch_.labels;
    absl::StatusOr<float> loss = schedule_.Step(batch);
    if (!loss.ok()) return loss.status();
    result.loss = *loss;
    result.waited = schedule_.waited();
    const float stages = static_cast<float>(options_.place.stages);
    for (int t = range.first_tensor; t < range.end_tensor; ++t) {
      absl::Span<const float> g = schedule_.gradient(t);
      std::transform(g.begin(), g.end(), push_[t].begin(),
                     [stages](float v) { return stages * v; });
    }
  }
  lap(result.timing.compute);

  StepInfo info;
  info.step = clock;
  info.base_version = version;
  info.num_examples = static_cast<uint32_t>(batch_.size);
  info.cursor = {epoch, *done_before + batch_.size};
  std::unique_ptr<StepPush> push = exchange_->StartStep(info, true);
  for (size_t t = 0; t < push_.size(); ++t) {
    if (absl::Status s = push->Send(static_cast<int>(t), push_[t]); !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<uint64_t> next_version = push->FinishWithPull(weights_);
  if (!next_version.ok()) return next_version.status();
  pulled_clock_ = clock + 1;
  pulled_version_ = *next_version;
  lap(result.timing.communication);
  return result;
}

absl::StatusOr<double> PipelineTrainer::TestAccuracy() {
  for (size_t t = 0; t < weights_.size(); ++t) {
    if (absl::Status s = whole_->SetWeights(static_cast<int>(t), weights_[t]);
        !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<int64_t> correct = whole_->Evaluate(
      test_->images, test_->labels, static_cast<int64_t>(test_->num_examples));
  if (!correct.ok()) return correct.status();
  return static_cast<double>(*correct) / test_->num_examples;
}

absl::StatusOr<TrainingSummary> PipelineTrainer::Run(
    const Registration& resume) {
  const ModelSpec& spec = exchange_->model();
  push_.resize(spec.tensors.size());
  for (size_t t = 0; t < spec.tensors.size(); ++t) {
    push_[t].assign(spec.tensors[t].num_elements(), 0.0f);
  }
  const uint64_t steps_per_epoch = sharder_.steps_per_epoch();
  absl::StatusOr<uint64_t> resume_step =
      sharder_.ResumeStep(options_.place.replica, resume.cursor.examples_done);
  if (!resume_step.ok()) return resume_step.status();
  uint64_t position = resume.cursor.epoch * steps_per_epoch + *resume_step;
  uint64_t clock = resume.next_step;
  spdlog::info("pipeline {}: layers {}, {} micro-batches per step ({})",
               options_.place.ToString(),
               absl::StrFormat("%d-%d", stage_->range().first_layer,
                               stage_->range().end_layer - 1),
               options_.micro_batches, ScheduleKindName(options_.schedule));
  spdlog::info(
      "{}", FormatProgressLine(PlanProgress{
                static_cast<int64_t>(planned_steps_), options_.epochs,
                static_cast<int64_t>(steps_per_epoch), options_.batch_size}));
  TrainingSummary summary;
  absl::Duration waited;
  const absl::Time start = absl::Now();
  absl::Time interval_start = start;
  double interval_loss = 0;
  int interval_steps = 0;
  const uint64_t first_position = position;
  std::optional<EpochPlan> plan;
  while (position < planned_steps_) {
    const uint64_t epoch = position / steps_per_epoch;
    const uint64_t step = position % steps_per_epoch;
    if (!plan.has_value() || plan->epoch() != epoch) {
      plan.emplace(sharder_.PlanEpoch(epoch));
    }
    absl::StatusOr<StepResult> result = Step(*plan, epoch, step, clock);
    if (!result.ok()) {
      return absl::Status(
          result.status().code(),
          absl::StrFormat("%s, epoch %d step %d: %s", options_.place.ToString(),
                          epoch + 1, step + 1, result.status().message()));
    }
    ++clock;
    ++position;
    summary.examples += batch_.size;
    summary.final_loss = result->loss;
    summary.step_time.compute += result->timing.compute;
    summary.step_time.communication += result->timing.communication;
    waited += result->waited;
    interval_loss += result->loss;
    ++interval_steps;
    if (position % options_.log_every == 0) {
      const absl::Duration elapsed = absl::Now() - start;
      const double seconds =
          absl::ToDoubleSeconds(absl::Now() - interval_start);
      const absl::Duration eta =
          elapsed * (static_cast<double>(planned_steps_ - position) /
                     (position - first_position));
      const int64_t eta_s = absl::ToInt64Seconds(eta);
      spdlog::info("{}",
                   FormatProgressLine(StepProgress{
                       static_cast<int>(epoch + 1), options_.epochs,
                       static_cast<int64_t>(step + 1),
                       static_cast<int64_t>(steps_per_epoch),
                       interval_loss / interval_steps,
                       interval_steps * options_.batch_size *
                           options_.place.replicas / seconds,
                       absl::StrFormat("%d:%02d", eta_s / 60, eta_s % 60)}));
      interval_loss = 0;
      interval_steps = 0;
      interval_start = absl::Now();
    }
    if (options_.evaluate && position % steps_per_epoch == 0 &&
        position < planned_steps_) {
      // The push brought the next step's whole model back.
      absl::StatusOr<double> accuracy = TestAccuracy();
      if (!accuracy.ok()) return accuracy.status();
      spdlog::info("{}", FormatProgressLine(EvalProgress{
                             static_cast<int>(epoch + 1), options_.epochs,
                             static_cast<int64_t>(step + 1), *accuracy,
                             absl::ToDoubleSeconds(absl::Now() - start)}));
    }
  }
  summary.steps = position - first_position;
  summary.wall_time = absl::Now() - start;
  if (summary.steps > 0) {
    // The bench reads this line (bench/pipeline_bench.sh).
    spdlog::info(
        "pipeline: waited for neighbours {:.3f} ms per step, {:.1f}% of the "
        "schedule (compute) time",
        absl::ToDoubleMilliseconds(waited) / summary.steps,
        100 * absl::ToDoubleSeconds(waited) /
            std::max(1e-9, absl::ToDoubleSeconds(summary.step_time.compute)));
  }
  if (options_.evaluate || !options_.save_model_path.empty()) {
    absl::StatusOr<uint64_t> version = exchange_->PullFinal(clock, weights_);
    if (!version.ok()) return version.status();
    if (options_.evaluate) {
      absl::StatusOr<double> accuracy = TestAccuracy();
      if (!accuracy.ok()) return accuracy.status();
      summary.test_accuracy = *accuracy;
    }
    if (!options_.save_model_path.empty()) {
      if (absl::Status s = SaveModel(options_.save_model_path, spec, weights_);
          !s.ok()) {
        return s;
      }
      spdlog::info("saved the whole model (version {}) to {}", *version,
                   options_.save_model_path);
    }
  }
  return summary;
}

}  // namespace ps::worker::pipeline
