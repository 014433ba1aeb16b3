#ifndef PS_WORKER_PIPELINE_MEMORY_BUDGET_H_
#define PS_WORKER_PIPELINE_MEMORY_BUDGET_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/nn/model_description.h"
#include "worker/nn/stage_model.h"
#include "worker/nn/stage_split.h"
#include "worker/pipeline/counting_backend.h"

namespace ps::worker::pipeline {

// --worker_memory_budget: a cap on one worker's tensor memory, so that a
// model too large for one worker shows as such on any machine, and splits
// into pipeline stages that fit. The worker (and the launcher, before it
// starts anything) refuses a job whose workers would not fit, naming the
// budget, the bytes needed and the smallest --pipeline_stages that fits.
//
// A worker's tensor memory, as counted: what its stage model allocates on
// its backend (parameters, their gradients, each layer's activations and
// their gradients for one micro-batch's rows, the loss's buffers), the
// stage's host buffers (StageModel::host_bytes) and the weights it pulls
// from the servers (one copy of the stage's parameters). Not counted: the
// schedule's per-step host buffers (worker/pipeline/gpipe_schedule.h), the
// data set, and a backend's scratch (the CPU backend's im2col rows).

// Parses a byte count: digits with an optional K, M or G suffix (powers of
// 1024), "0" for none. InvalidArgument naming --worker_memory_budget.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

// "1.50 GiB (1610612736 bytes)".
std::string FormatBytes(int64_t bytes);

struct WorkerMemory {
  int64_t backend_bytes = 0;
  int64_t host_bytes = 0;
  int64_t pulled_bytes = 0;
  int64_t total() const { return backend_bytes + host_bytes + pulled_bytes; }
};

// The memory of a worker holding `stage`, built on `counted`.
WorkerMemory CountedMemory(const nn::StageModel& stage,
                           const CountingBackend& counted);

// Builds stage `range` of `description` for `rows` rows per micro-batch on
// a CountingBackend that allocates nothing, and counts it.
absl::StatusOr<WorkerMemory> MeasureStage(
    const nn::ModelDescription& description, const nn::StageRange& range,
    int rows);

// The rows a worker's layers hold: a micro-batch's with stages, the whole
// batch without (micro-batches need stages).
int RowsPerMicroBatch(int stages, int batch_size, int micro_batches);

// The most any worker of `stages` stages needs (its largest stage).
absl::StatusOr<int64_t> MostWorkerBytes(const nn::ModelDescription& description,
                                        int stages, int batch_size,
                                        int micro_batches);

// OK when `budget` is 0 or the workers of `stages` stages fit it; else
// InvalidArgument naming --worker_memory_budget, the bytes needed and the
// smallest --pipeline_stages whose workers fit (or that none does).
absl::Status CheckMemoryBudget(const nn::ModelDescription& description,
                               int stages, int batch_size, int micro_batches,
                               int64_t budget);

}  // namespace ps::worker::pipeline

#endif  // PS_WORKER_PIPELINE_MEMORY_BUDGET_H_
