#include "worker/trainer.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/model_file.h"
#include "common/progress_line.h"

namespace ps::worker {
namespace {

std::string FormatEta(absl::Duration eta) {
  const int64_t seconds = absl::ToInt64Seconds(eta);
  return absl::StrFormat("%d:%02d", seconds / 60, seconds % 60);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(
    const TrainerOptions& options, WeightExchange* weights, nn::Model* model,
    const LabeledImages* train, const LabeledImages* test) {
  absl::StatusOr<EpochSharder> sharder =
      EpochSharder::Create(train->num_examples, options.num_workers,
                           options.batch_size, options.seed);
  if (!sharder.ok()) return sharder.status();
  if (options.evaluate && test == nullptr) {
    return absl::InvalidArgumentError("evaluation needs a test set");
  }
  if (model->max_batch() < options.batch_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the model takes batches of up to %d examples, not %d",
                        model->max_batch(), options.batch_size));
  }
  for (const LabeledImages* data : {train, test}) {
    if (data != nullptr && data->example_size() != model->example_size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the model's input is %d floats per example, the data's %d",
          model->example_size(), data->example_size()));
    }
  }
  return absl::WrapUnique(
      new Trainer(options, weights, model, train, test, *std::move(sharder)));
}

Trainer::Trainer(const TrainerOptions& options, WeightExchange* weights,
                 nn::Model* model, const LabeledImages* train,
                 const LabeledImages* test, EpochSharder sharder)
    : options_(options),
      exchange_(weights),
      model_(model),
      train_(train),
      test_(test),
      sharder_(std::move(sharder)),
      planned_steps_(
          options.max_steps > 0
              ? std::min<uint64_t>(options.max_steps,
                                   sharder_.steps_per_epoch() * options.epochs)
              : sharder_.steps_per_epoch() * options.epochs) {}

absl::Status Trainer::LoadWeights(uint64_t clock, uint64_t* version) {
  if (pulled_.has_value() && pulled_->clock == clock) {
    *version = pulled_->version;
  } else {
    pulled_.reset();
    absl::StatusOr<uint64_t> pulled = exchange_->Pull(clock, weights_);
    if (!pulled.ok()) return pulled.status();
    *version = *pulled;
  }
  return SetModelWeights();
}

absl::Status Trainer::SetModelWeights() {
  for (size_t t = 0; t < weights_.size(); ++t) {
    absl::Status status = model_->SetWeights(static_cast<int>(t), weights_[t]);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<Trainer::StepResult> Trainer::Step(const EpochPlan& plan,
                                                  uint64_t epoch,
                                                  uint64_t step_in_epoch,
                                                  uint64_t clock,
                                                  ConsistencyMode mode) {
  StepResult result;
  absl::Time mark = absl::Now();
  // Adds the time since `mark` to `phase`.
  auto lap = [&mark](absl::Duration& phase) {
    const absl::Time now = absl::Now();
    phase += now - mark;
    mark = now;
  };
  // Outside the push, so that killing a slowed worker never cuts a push.
  if (options_.slowdown > absl::ZeroDuration()) {
    absl::SleepFor(options_.slowdown);
    lap(result.timing.waiting);
  }
  uint64_t version = 0;
  absl::Status status = LoadWeights(clock, &version);
  if (!status.ok()) return status;
  lap(result.timing.communication);
  result.clock = NextPushClock(mode, clock, version);

  absl::StatusOr<absl::Span<const uint32_t>> indices =
      plan.BatchIndices(step_in_epoch, options_.rank);
  if (!indices.ok()) return indices.status();
  status = GatherBatch(*train_, *indices, &batch_);
  if (!status.ok()) return status;
  absl::StatusOr<uint64_t> done_before =
      plan.sharder().ExamplesBeforeStep(step_in_epoch, options_.rank);
  if (!done_before.ok()) return done_before.status();

  StepInfo info;
  info.step = result.clock;
  info.base_version = version;
  info.num_examples = static_cast<uint32_t>(batch_.size);
  info.cursor = {epoch, *done_before + batch_.size};
  // The push brings back the weights of the next clock (one call a step),
  // except on a slowed worker: it sleeps between its push and its next pull
  // (the meaning of --slowdown_ms), so it pulls after the sleep.
  const bool pull_after = options_.slowdown == absl::ZeroDuration();
  pulled_.reset();
  std::unique_ptr<StepPush> push = exchange_->StartStep(info, pull_after);

  if (batch_.size > 0) {
    // This rank's examples follow the lower ranks' in the step's global
    // batch, so dropout masks do not depend on the number of workers.
    nn::StepInfo step_info;
    step_info.step = result.clock;
    step_info.first_example =
        static_cast<uint64_t>(options_.rank) * options_.batch_size;
    absl::StatusOr<float> loss = model_->Forward(
        batch_.images, batch_.labels, static_cast<int>(batch_.size), step_info);
    if (!loss.ok()) return loss.status();
    result.loss = *loss;
    // Each gradient goes out as soon as backward has produced it. The
    // model's span stays unchanged until the next Backward, which comes
    // after this push's Finish: Send may keep it.
    status =
        model_->Backward([&](int tensor_id, absl::Span<const float> gradient) {
          return push->Send(tensor_id, gradient);
        });
    if (!status.ok()) return status;
  } else {
    // An empty share of the epoch's last batch still takes part in the step
    // (sync mode waits for every rank) and weighs nothing.
    for (size_t t = 0; t < zero_gradients_.size(); ++t) {
      status = push->Send(static_cast<int>(t), zero_gradients_[t]);
      if (!status.ok()) return status;
    }
  }
  lap(result.timing.compute);
  if (pull_after) {
    absl::StatusOr<uint64_t> next_version = push->FinishWithPull(weights_);
    status = next_version.status();
    if (next_version.ok()) {
      pulled_ = PulledWeights{result.clock + 1, *next_version};
    }
  } else {
    status = push->Finish();
  }
  lap(result.timing.communication);
  if (status.code() == absl::StatusCode::kAborted) {
    spdlog::warn("step {} refused, will retry the batch: {}", result.clock,
                 status.message());
    result.stale = true;
  } else if (!status.ok()) {
    return status;
  }
  return result;
}

absl::StatusOr<double> Trainer::TestAccuracy() {
  absl::StatusOr<int64_t> correct = model_->Evaluate(
      test_->images, test_->labels, static_cast<int64_t>(test_->num_examples));
  if (!correct.ok()) return correct.status();
  const double accuracy = static_cast<double>(*correct) / test_->num_examples;
  if (options_.metrics != nullptr)
    options_.metrics->RecordTestAccuracy(accuracy);
  return accuracy;
}

absl::StatusOr<TrainingSummary> Trainer::Run(const Registration& resume) {
  const ModelSpec& spec = exchange_->model();
  zero_gradients_.resize(spec.tensors.size());
  for (size_t t = 0; t < spec.tensors.size(); ++t) {
    zero_gradients_[t].assign(spec.tensors[t].num_elements(), 0.0f);
  }
  model_->SetTraining(true);
  const uint64_t steps_per_epoch = sharder_.steps_per_epoch();
  absl::StatusOr<uint64_t> resume_step =
      sharder_.ResumeStep(options_.rank, resume.cursor.examples_done);
  if (!resume_step.ok()) return resume_step.status();
  // `position` counts batches of this rank's data done so far; `clock` is
  // the shards' step, which runs ahead of it after a restart.
  uint64_t position = resume.cursor.epoch * steps_per_epoch + *resume_step;
  uint64_t clock = resume.next_step;
  if (position > 0 || clock > 0) {
    if (options_.metrics != nullptr) options_.metrics->RecordResumed();
    spdlog::info("resuming at epoch {} step {} (clock {})",
                 position / steps_per_epoch + 1, position % steps_per_epoch + 1,
                 clock);
  }
  spdlog::info(
      "{}", FormatProgressLine(PlanProgress{
                static_cast<int64_t>(planned_steps_), options_.epochs,
                static_cast<int64_t>(steps_per_epoch), options_.batch_size}));

  // A step refused as stale (the job completed it without us) is retried
  // with the same batch; this many in a row means something else is wrong.
  constexpr int kMaxStaleRetries = 100;
  int stale_retries = 0;
  TrainingSummary summary;
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
    absl::StatusOr<StepResult> result =
        Step(*plan, epoch, step, clock, resume.mode);
    if (result.ok() && result->stale) {
      if (++stale_retries > kMaxStaleRetries) {
        return absl::AbortedError(absl::StrFormat(
            "epoch %d step %d: refused as stale %d times in a row", epoch + 1,
            step + 1, kMaxStaleRetries));
      }
      clock = result->clock + 1;
      continue;
    }
    if (!result.ok()) {
      return absl::Status(result.status().code(),
                          absl::StrFormat("epoch %d step %d: %s", epoch + 1,
                                          step + 1, result.status().message()));
    }
    stale_retries = 0;
    clock = result->clock + 1;
    ++position;
    summary.examples += batch_.size;
    summary.final_loss = result->loss;
    summary.step_time.compute += result->timing.compute;
    summary.step_time.communication += result->timing.communication;
    summary.step_time.waiting += result->timing.waiting;
    if (options_.metrics != nullptr) {
      options_.metrics->RecordStep(result->timing, batch_.size, result->loss,
                                   epoch, absl::Now());
    }
    interval_loss += result->loss;
    ++interval_steps;
    if (position % options_.log_every == 0) {
      const absl::Duration elapsed = absl::Now() - start;
      const double seconds =
          absl::ToDoubleSeconds(absl::Now() - interval_start);
      // Every worker moves at the pace of the step, so the cluster's rate
      // is this worker's times the number of workers.
      const double samples_per_second =
          interval_steps * options_.batch_size * options_.num_workers / seconds;
      const absl::Duration eta =
          elapsed * (static_cast<double>(planned_steps_ - position) /
                     (position - first_position));
      spdlog::info("{}", FormatProgressLine(StepProgress{
                             static_cast<int>(epoch + 1), options_.epochs,
                             static_cast<int64_t>(step + 1),
                             static_cast<int64_t>(steps_per_epoch),
                             interval_loss / interval_steps, samples_per_second,
                             FormatEta(eta)}));
      interval_loss = 0;
      interval_steps = 0;
      interval_start = absl::Now();
    }
    const bool epoch_complete = position % steps_per_epoch == 0;
    const bool eval_due =
        options_.eval_every > 0 && position % options_.eval_every == 0;
    if (options_.evaluate && (epoch_complete || eval_due) &&
        position < planned_steps_) {
      uint64_t version = 0;
      absl::Status status = LoadWeights(clock, &version);
      if (!status.ok()) return status;
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

  if (options_.evaluate || !options_.save_model_path.empty()) {
    // What every worker trained, not only this one: in ssp and async the
    // others (a restarted one above all) may still be training.
    pulled_.reset();
    absl::StatusOr<uint64_t> version = exchange_->PullFinal(clock, weights_);
    if (!version.ok()) return version.status();
    spdlog::info("final weights: version {}, with every worker's last update",
                 *version);
    absl::Status status = SetModelWeights();
    if (!status.ok()) return status;
    if (options_.evaluate) {
      absl::StatusOr<double> accuracy = TestAccuracy();
      if (!accuracy.ok()) return accuracy.status();
      summary.test_accuracy = *accuracy;
    }
    if (!options_.save_model_path.empty()) {
      status =
          SaveModel(options_.save_model_path, exchange_->model(), weights_);
      if (!status.ok()) return status;
      spdlog::info("saved model (version {}) to {}", *version,
                   options_.save_model_path);
    }
  }
  return summary;
}

}  // namespace ps::worker
