#include "worker/pipeline/memory_budget.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/byte_size.h"

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

WorkerMemory CountedMemory(const nn::StageModel& stage,
                           const CountingBackend& counted) {
  WorkerMemory memory;
  memory.backend_bytes = counted.allocated_bytes();
  memory.host_bytes = stage.host_bytes();
  memory.pulled_bytes = stage.range().parameter_bytes;
  return memory;
}

absl::StatusOr<WorkerMemory> MeasureStage(
    const nn::ModelDescription& description, const nn::StageRange& range,
    int rows) {
  CountingBackend counter(nullptr);
  nn::ModelOptions options;
  options.max_batch = rows;
  absl::StatusOr<std::unique_ptr<nn::StageModel>> stage =
      nn::StageModel::Create(description, range, options, &counter);
  if (!stage.ok()) return stage.status();
  return CountedMemory(**stage, counter);
}

int RowsPerMicroBatch(int stages, int batch_size, int micro_batches) {
  return stages > 1 ? batch_size / std::max(1, micro_batches) : batch_size;
}

absl::StatusOr<int64_t> MostWorkerBytes(const nn::ModelDescription& description,
                                        nn::StageSplitKind split, int stages,
                                        int batch_size, int micro_batches) {
  absl::StatusOr<std::vector<nn::StageRange>> ranges =
      nn::SplitStages(description, stages, split);
  if (!ranges.ok()) return ranges.status();
  const int rows = RowsPerMicroBatch(stages, batch_size, micro_batches);
  int64_t most = 0;
  for (const nn::StageRange& range : *ranges) {
    absl::StatusOr<WorkerMemory> memory =
        MeasureStage(description, range, rows);
    if (!memory.ok()) return memory.status();
    most = std::max(most, memory->total());
  }
  return most;
}

absl::Status CheckMemoryBudget(const nn::ModelDescription& description,
                               nn::StageSplitKind split, int stages,
                               int batch_size, int micro_batches,
                               int64_t budget) {
  if (budget <= 0) return absl::OkStatus();
  absl::StatusOr<int64_t> needed =
      MostWorkerBytes(description, split, stages, batch_size, micro_batches);
  if (!needed.ok()) return needed.status();
  if (*needed <= budget) return absl::OkStatus();
  std::string fits = "no split into pipeline stages fits it";
  const int layers = static_cast<int>(description.layers().size());
  for (int k = stages + 1; k <= layers; ++k) {
    // The same micro-batches where they divide the batch; else one.
    const int m = batch_size % micro_batches == 0 ? micro_batches : 1;
    absl::StatusOr<int64_t> bytes =
        MostWorkerBytes(description, split, k, batch_size, m);
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
      budget, stages, FormatBytes(*needed),
      RowsPerMicroBatch(stages, batch_size, micro_batches), fits));
}

}  // namespace ps::worker::pipeline
