#include "worker/pipeline/memory_budget.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/byte_size.h"
#include "kernels/backend.h"
#include "worker/pipeline/schedule_memory.h"

namespace ps::worker::pipeline {

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  absl::StatusOr<uint64_t> bytes = ps::ParseByteSize(text, uint64_t{1} << 62);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--worker_memory_budget=", text,
        ": not a byte count (digits with an optional K, M or G; 0: none)"));
  }
  return static_cast<int64_t>(*bytes);
}

std::string FormatBytes(int64_t bytes) {
  return absl::StrFormat("%.2f MiB (%d bytes)",
                         static_cast<double>(bytes) / (1 << 20), bytes);
}

namespace {

// The bytes `backend` keeps for the largest convolution of `range` at
// `rows` rows.
int64_t ConvScratch(const nn::ModelDescription& description,
                    const nn::StageRange& range, int rows,
                    const kernels::Backend& backend) {
  int64_t most = 0;
  for (int l = range.first_layer; l < range.end_layer; ++l) {
    const nn::LayerConfig& layer = description.layers()[l];
    if (layer.kind != nn::LayerKind::kConv) continue;
    const nn::ActivationShape& in =
        l == 0 ? description.input() : description.output_shapes()[l - 1];
    most = std::max(most,
                    backend.ConvScratchBytes(nn::ConvShape(layer, in, rows)));
  }
  return most;
}

}  // namespace

int RowsPerMicroBatch(int stages, int batch_size, int micro_batches) {
  return stages > 1 ? batch_size / std::max(1, micro_batches) : batch_size;
}

WorkerMemory CountedMemory(const nn::ModelDescription& description,
                           const nn::StageModel& model, int stage,
                           const MemoryFlags& flags,
                           const CountingBackend& counted) {
  const nn::StageRange& range = model.range();
  const int rows =
      RowsPerMicroBatch(flags.stages, flags.batch_size, flags.micro_batches);
  const int64_t parameters = range.parameter_bytes / sizeof(float);
  WorkerMemory memory;
  memory.backend_bytes = counted.allocated_bytes();
  memory.host_bytes = model.host_bytes();
  memory.pulled_bytes = range.parameter_bytes;
  memory.schedule_bytes = ScheduleHostBytes(
      {flags.schedule, stage, flags.stages, flags.micro_batches}, rows,
      model.input_size(), model.output_size(), parameters);
  memory.scratch_bytes = ConvScratch(description, range, rows, counted);
  if (flags.topk) {
    memory.compression_bytes = 3 * parameters * sizeof(float);
  }
  return memory;
}

absl::StatusOr<WorkerMemory> MeasureStage(
    const nn::ModelDescription& description,
    const std::vector<nn::StageRange>& ranges, int stage,
    const MemoryFlags& flags) {
  if (stage < 0 || stage >= static_cast<int>(ranges.size())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("MeasureStage: stage %d of %d", stage, ranges.size()));
  }
  CountingBackend counter(nullptr);
  nn::ModelOptions options;
  options.max_batch =
      RowsPerMicroBatch(flags.stages, flags.batch_size, flags.micro_batches);
  absl::StatusOr<std::unique_ptr<nn::StageModel>> model =
      nn::StageModel::Create(description, ranges[stage], options, &counter);
  if (!model.ok()) return model.status();
  return CountedMemory(description, **model, stage, flags, counter);
}

absl::StatusOr<int64_t> MostWorkerBytes(const nn::ModelDescription& description,
                                        nn::StageSplitKind split,
                                        const MemoryFlags& flags) {
  absl::StatusOr<std::vector<nn::StageRange>> ranges =
      nn::SplitStages(description, flags.stages, split);
  if (!ranges.ok()) return ranges.status();
  int64_t most = 0;
  for (int s = 0; s < flags.stages; ++s) {
    absl::StatusOr<WorkerMemory> memory =
        MeasureStage(description, *ranges, s, flags);
    if (!memory.ok()) return memory.status();
    most = std::max(most, memory->total());
  }
  return most;
}

absl::Status CheckMemoryBudget(const nn::ModelDescription& description,
                               nn::StageSplitKind split,
                               const MemoryFlags& flags, int64_t budget) {
  if (budget <= 0) return absl::OkStatus();
  absl::StatusOr<int64_t> needed = MostWorkerBytes(description, split, flags);
  if (!needed.ok()) return needed.status();
  if (*needed <= budget) return absl::OkStatus();
  std::string fits = "no split into pipeline stages fits it";
  const int layers = static_cast<int>(description.layers().size());
  for (int k = flags.stages + 1; k <= layers; ++k) {
    MemoryFlags more = flags;
    more.stages = k;
    // The same micro-batches where they divide the batch; else one.
    if (flags.batch_size % flags.micro_batches != 0) more.micro_batches = 1;
    absl::StatusOr<int64_t> bytes = MostWorkerBytes(description, split, more);
    if (!bytes.ok()) return bytes.status();
    if (*bytes <= budget) {
      fits = absl::StrFormat(
          "the smallest --pipeline_stages that fits it is %d (%s a worker)", k,
          FormatBytes(*bytes));
      break;
    }
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "--worker_memory_budget=%d bytes: a worker of --pipeline_stages=%d "
      "needs %s for its tensors at %d rows per micro-batch; %s",
      budget, flags.stages, FormatBytes(*needed),
      RowsPerMicroBatch(flags.stages, flags.batch_size, flags.micro_batches),
      fits));
}

}  // namespace ps::worker::pipeline
