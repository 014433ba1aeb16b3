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
    nn::StageModel* stage, Neighbours* neighbours, const LabeledImages* train,
    const LabeledImages* test) {
  absl::StatusOr<EpochSharder> sharder =
      EpochSharder::Create(train->num_examples, options.place.replicas,
                           options.batch_size, options.seed);
  if (!sharder.ok()) return sharder.status();
  if (options.evaluate && test == nullptr) {
    return absl::InvalidArgumentError("evaluation needs a test set");
  }
  // The schedule runs a micro-batch at a time (M divides the batch).
  const int micro_rows =
      options.batch_size / std::max(1, options.micro_batches);
  if (stage->max_batch() < micro_rows) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the stage takes micro-batches of up to %d examples, not %d",
        stage->max_batch(), micro_rows));
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
  return absl::WrapUnique(new PipelineTrainer(
      options, weights, stage, neighbours, train, test, *std::move(sharder)));
}

PipelineTrainer::PipelineTrainer(const PipelineTrainerOptions& options,
                                 WeightExchange* weights, nn::StageModel* stage,
                                 Neighbours* neighbours,
                                 const LabeledImages* train,
                                 const LabeledImages* test,
                                 EpochSharder sharder)
    : options_(options),
      exchange_(weights),
      stage_(stage),
      neighbours_(neighbours),
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
                 options.micro_batches}) {
  if (options.evaluate) {
    const size_t rows = stage->max_batch();
    if (!stage->first()) eval_input_.resize(rows * stage->input_size());
    if (!stage->last()) eval_output_.resize(rows * stage->output_size());
  }
}

absl::Status PipelineTrainer::CheckDeclaration() const {
  const nn::StageRange& range = stage_->range();
  const ModelSpec& declared = exchange_->model();
  bool fits =
      static_cast<int>(declared.tensors.size()) ==
          range.end_tensor - range.first_tensor &&
      static_cast<int>(options_.whole_spec.tensors.size()) >= range.end_tensor;
  for (int t = range.first_tensor; fits && t < range.end_tensor; ++t) {
    fits = declared.tensors[t - range.first_tensor].name ==
               options_.whole_spec.tensors[t].name &&
           declared.tensors[t - range.first_tensor].num_elements() ==
               options_.whole_spec.tensors[t].num_elements();
  }
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the declared model is not the stage's tensors %d-%d of the whole "
        "model",
        range.first_tensor, range.end_tensor - 1));
  }
  return absl::OkStatus();
}

absl::Status PipelineTrainer::SetStageWeights() {
  const int first = stage_->range().first_tensor;
  for (size_t i = 0; i < weights_.size(); ++i) {
    absl::Status s =
        stage_->SetWeights(first + static_cast<int>(i), weights_[i]);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status PipelineTrainer::LoadWeights(uint64_t clock, uint64_t* version) {
  if (pulled_clock_ == clock) {
    *version = pulled_version_;
  } else {
    pulled_clock_.reset();
    absl::StatusOr<uint64_t> pulled = exchange_->Pull(clock, weights_);
    if (!pulled.ok()) return pulled.status();
    *version = *pulled;
  }
  return SetStageWeights();
}

absl::StatusOr<PipelineTrainer::StepResult> PipelineTrainer::Step(
    const EpochPlan& plan, uint64_t epoch, uint64_t step_in_epoch,
    uint64_t clock) {
  options_.kill_point.FireIf(options_.place.rank(), KillMoment::kStep, clock);
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
  }
  lap(result.timing.compute);
  options_.kill_point.FireIf(options_.place.rank(), KillMoment::kPush, clock);

  StepInfo info;
  info.step = clock;
  info.base_version = version;
  info.num_examples = static_cast<uint32_t>(batch_.size);
  info.cursor = {epoch, *done_before + batch_.size};
  std::unique_ptr<StepPush> push = exchange_->StartStep(info, true);
  const int first = stage_->range().first_tensor;
  for (size_t i = 0; i < weights_.size(); ++i) {
    const size_t n = weights_[i].size();
    if (batch_.size == 0 && zeros_.size() < n) zeros_.assign(n, 0.0f);
    absl::Span<const float> gradient =
        batch_.size > 0 ? schedule_.gradient(first + static_cast<int>(i))
                        : absl::MakeConstSpan(zeros_).subspan(0, n);
    if (absl::Status s = push->Send(static_cast<int>(i), gradient); !s.ok()) {
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

absl::StatusOr<double> PipelineTrainer::TestAccuracy(uint64_t tag_step) {
  if (absl::Status s = SetStageWeights(); !s.ok()) return s;
  const int64_t n = test_->num_examples;
  const int64_t in = stage_->input_size();
  const int64_t out = stage_->output_size();
  int64_t correct = 0;
  // In chunks the layers hold (a micro-batch's rows).
  const int64_t most = stage_->max_batch();
  uint32_t chunk = 0;
  for (int64_t start = 0; start < n; start += most, ++chunk) {
    const int rows = static_cast<int>(std::min<int64_t>(most, n - start));
    const Tag tag{tag_step, chunk, Direction::kEvaluation};
    absl::Span<const float> input;
    if (stage_->first()) {
      input = absl::MakeConstSpan(test_->images).subspan(start * in, rows * in);
    } else {
      absl::Span<float> received =
          absl::MakeSpan(eval_input_).subspan(0, rows * in);
      absl::StatusOr<float> got =
          neighbours_->previous->Receive(tag, rows, received);
      if (!got.ok()) return got.status();
      input = received;
    }
    absl::Span<const float> labels;
    absl::Span<float> output;
    if (stage_->last()) {
      labels = absl::MakeConstSpan(test_->labels).subspan(start, rows);
    } else {
      output = absl::MakeSpan(eval_output_).subspan(0, rows * out);
    }
    absl::StatusOr<int64_t> counted =
        stage_->Evaluate(input, labels, rows, output);
    if (!counted.ok()) return counted.status();
    correct += *counted;
    if (!stage_->last()) {
      if (absl::Status s = neighbours_->next->Send(tag, rows, 0, output);
          !s.ok()) {
        return s;
      }
    }
  }
  // The count goes back to rank 0 (a float holds it exactly up to 2^24).
  const Tag back{tag_step, 0, Direction::kCorrect};
  float count = static_cast<float>(correct);
  if (!stage_->last()) {
    absl::StatusOr<float> got =
        neighbours_->next->Receive(back, 1, absl::MakeSpan(&count, 1));
    if (!got.ok()) return got.status();
  }
  if (!stage_->first()) {
    absl::Status s =
        neighbours_->previous->Send(back, 1, 0, absl::MakeConstSpan(&count, 1));
    if (!s.ok()) return s;
  }
  return static_cast<double>(count) / n;
}

absl::Status PipelineTrainer::SaveWholeModel(uint64_t tag_step,
                                             uint64_t version) {
  // Each stage sends its own tensors back, then relays the later stages',
  // so that rank 0 receives them in id order.
  const ModelSpec& whole = options_.whole_spec;
  const nn::StageRange& range = stage_->range();
  const int total = static_cast<int>(whole.tensors.size());
  auto tag = [tag_step](int t) {
    return Tag{tag_step, static_cast<uint32_t>(t), Direction::kWeights};
  };
  if (!stage_->first()) {
    for (size_t i = 0; i < weights_.size(); ++i) {
      absl::Status s = neighbours_->previous->Send(
          tag(range.first_tensor + static_cast<int>(i)), 1, 0, weights_[i]);
      if (!s.ok()) return s;
    }
    std::vector<float> relay;
    for (int t = range.end_tensor; t < total; ++t) {
      relay.resize(whole.tensors[t].num_elements());
      absl::StatusOr<float> got =
          neighbours_->next->Receive(tag(t), 1, absl::MakeSpan(relay));
      if (!got.ok()) return got.status();
      absl::Status s = neighbours_->previous->Send(tag(t), 1, 0, relay);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  // Rank 0 holds the whole model now: after training, outside its budget.
  TensorValues values(total);
  for (int t = 0; t < total; ++t) {
    if (t < range.end_tensor) {
      values[t] = weights_[t - range.first_tensor];
      continue;
    }
    values[t].resize(whole.tensors[t].num_elements());
    absl::StatusOr<float> got =
        neighbours_->next->Receive(tag(t), 1, absl::MakeSpan(values[t]));
    if (!got.ok()) return got.status();
  }
  if (absl::Status s = SaveModel(options_.save_model_path, whole, values);
      !s.ok()) {
    return s;
  }
  spdlog::info("saved the whole model (version {} of stage 0's group) to {}",
               version, options_.save_model_path);
  return absl::OkStatus();
}

namespace {

// A resume point as floats, each holding 16 bits exactly.
constexpr int kResumeFloats = 12;

void EncodeResume(const Registration& r, absl::Span<float> out) {
  const uint64_t fields[3] = {r.next_step, r.cursor.epoch,
                              r.cursor.examples_done};
  for (int f = 0; f < 3; ++f) {
    for (int i = 0; i < 4; ++i) {
      out[4 * f + i] = static_cast<float>((fields[f] >> (16 * i)) & 0xffff);
    }
  }
}

Registration DecodeResume(absl::Span<const float> in) {
  uint64_t fields[3] = {};
  for (int f = 0; f < 3; ++f) {
    for (int i = 0; i < 4; ++i) {
      fields[f] |= static_cast<uint64_t>(in[4 * f + i]) << (16 * i);
    }
  }
  Registration r;
  r.next_step = fields[0];
  r.cursor = {fields[1], fields[2]};
  return r;
}

}  // namespace

absl::Status PipelineTrainer::AgreeOnResume(Registration* resume) {
  const Tag tag{0, 0, Direction::kResume};
  float buffer[kResumeFloats];
  absl::Span<float> floats = absl::MakeSpan(buffer);
  Registration earliest = *resume;
  if (!stage_->first()) {
    absl::StatusOr<float> got = neighbours_->previous->Receive(tag, 1, floats);
    if (!got.ok()) return got.status();
    const Registration before = DecodeResume(floats);
    if (before.next_step < earliest.next_step) earliest = before;
  }
  if (!stage_->last()) {
    EncodeResume(earliest, floats);
    absl::Status s = neighbours_->next->Send(tag, 1, 0, floats);
    if (!s.ok()) return s;
    // The last stage has seen every stage's; its answer comes back.
    absl::StatusOr<float> got = neighbours_->next->Receive(tag, 1, floats);
    if (!got.ok()) return got.status();
    earliest = DecodeResume(floats);
  }
  if (!stage_->first()) {
    EncodeResume(earliest, floats);
    absl::Status s = neighbours_->previous->Send(tag, 1, 0, floats);
    if (!s.ok()) return s;
  }
  resume->next_step = earliest.next_step;
  resume->cursor = earliest.cursor;
  return absl::OkStatus();
}

absl::StatusOr<TrainingSummary> PipelineTrainer::Run(
    const Registration& resume) {
  if (absl::Status s = CheckDeclaration(); !s.ok()) return s;
  Registration agreed = resume;
  if (absl::Status s = AgreeOnResume(&agreed); !s.ok()) return s;
  if (agreed.next_step != resume.next_step) {
    spdlog::info(
        "pipeline {}: the group says step {}, a stage of the replica's {}: "
        "repeating from there",
        options_.place.ToString(), resume.next_step, agreed.next_step);
  }
  return Train(agreed);
}

absl::StatusOr<TrainingSummary> PipelineTrainer::Train(
    const Registration& resume) {
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
      // The push brought the next step's weights back.
      absl::StatusOr<double> accuracy = TestAccuracy(clock);
      if (!accuracy.ok()) return accuracy.status();
      if (options_.place.rank() == 0) {
        spdlog::info("{}", FormatProgressLine(EvalProgress{
                               static_cast<int>(epoch + 1), options_.epochs,
                               static_cast<int64_t>(step + 1), *accuracy,
                               absl::ToDoubleSeconds(absl::Now() - start)}));
      }
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
  uint64_t version = 0;
  if (options_.evaluate || !options_.save_model_path.empty()) {
    absl::StatusOr<uint64_t> pulled = exchange_->PullFinal(clock, weights_);
    if (!pulled.ok()) return pulled.status();
    version = *pulled;
    if (options_.evaluate) {
      absl::StatusOr<double> accuracy = TestAccuracy(clock);
      if (!accuracy.ok()) return accuracy.status();
      summary.test_accuracy = *accuracy;
    }
  }
  options_.kill_point.FireIf(options_.place.rank(), KillMoment::kUpload);
  if (!options_.save_model_path.empty()) {
    if (absl::Status s = SaveWholeModel(clock, version); !s.ok()) return s;
  }
  if (absl::Status s = EndTogether(clock); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrFormat("%s, at the end of training: %s",
                                  options_.place.ToString(), s.message()));
  }
  return summary;
}

absl::Status PipelineTrainer::EndTogether(uint64_t tag_step) {
  const Tag tag{tag_step, 0, Direction::kEnd};
  float end = 0;
  if (!stage_->first()) {
    absl::StatusOr<float> got =
        neighbours_->previous->Receive(tag, 1, absl::MakeSpan(&end, 1));
    if (!got.ok()) return got.status();
  }
  if (!stage_->last()) {
    return neighbours_->next->Send(tag, 1, 0, absl::MakeConstSpan(&end, 1));
  }
  return absl::OkStatus();
}

}  // namespace ps::worker::pipeline
