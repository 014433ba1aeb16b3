#ifndef PS_WORKER_PIPELINE_MEMORY_BUDGET_H_
#define PS_WORKER_PIPELINE_MEMORY_BUDGET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/nn/model_description.h"
#include "worker/nn/stage_model.h"
#include "worker/nn/stage_split.h"
#include "worker/pipeline/counting_backend.h"
#include "worker/pipeline/schedule_action.h"

namespace ps::worker::pipeline {

// --worker_memory_budget: a cap on one worker's tensor memory, so that a
// model too large for one worker shows as such on any machine, and splits
// into pipeline stages that fit. The worker (and the launcher, before it
// starts anything) refuses a job whose workers would not fit, naming the
// budget, the bytes needed and the smallest --pipeline_stages that fits.
//
// A worker's tensor memory, as counted (WorkerMemory):
//   - what its stage model allocates on its backend (parameters, their
//     gradients, each layer's activations and their gradients for one
//     micro-batch's rows, the loss's buffers), counted where the model
//     allocates (CountingBackend);
//   - the stage's host buffers (StageModel::host_bytes) and the weights it
//     pulls from the servers (one copy of the stage's parameters);
//   - its schedule's host buffers (ScheduleHostBytes, schedule_memory.h;
//     none unsplit);
//   - the backend's convolution scratch (Backend::ConvScratchBytes of the
//     stage's largest convolution: the CPU backend's im2col matrix);
//   - with --compression=topk, 3 floats per parameter: the error-feedback
//     residual the client keeps between steps, the push's copy it adds the
//     gradient to (the next residual, kept until every shard took the
//     push), and the dense vector of the values sent
//     (client/tensor_compression.h, client/sharded_step_push.h).
// Not counted: the data set, a few words per micro-batch, ColumnSum's row
// of doubles, the wire's chunk buffers and a CUDA backend's scratch.

// Parses a byte count: digits with an optional K, M or G suffix (powers of
// 1024), "0" for none. InvalidArgument naming --worker_memory_budget.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

// "1.50 GiB (1610612736 bytes)".
std::string FormatBytes(int64_t bytes);

struct WorkerMemory {
  int64_t backend_bytes = 0;
  int64_t host_bytes = 0;
  int64_t pulled_bytes = 0;
  int64_t schedule_bytes = 0;
  int64_t scratch_bytes = 0;
  int64_t compression_bytes = 0;
  int64_t total() const {
    return backend_bytes + host_bytes + pulled_bytes + schedule_bytes +
           scratch_bytes + compression_bytes;
  }
};

// The flags besides --model and --stage_split that size a worker's memory.
struct MemoryFlags {
  int stages = 1;         // --pipeline_stages.
  int batch_size = 64;    // Per replica.
  int micro_batches = 1;  // Dividing batch_size.
  ScheduleKind schedule = ScheduleKind::kGpipe;
  bool topk = false;  // --compression=topk.
};

// The rows a worker's layers hold: a micro-batch's with stages, the whole
// batch without (micro-batches need stages).
int RowsPerMicroBatch(int stages, int batch_size, int micro_batches);

// The memory of the worker of stage `stage` (of flags.stages; its range
// stage.range()) holding `stage`, built on `counted`.
WorkerMemory CountedMemory(const nn::ModelDescription& description,
                           const nn::StageModel& model, int stage,
                           const MemoryFlags& flags,
                           const CountingBackend& counted);

// Builds stage `stage` of `ranges` (a split of `description` into
// flags.stages) on a CountingBackend that allocates nothing, and counts it.
absl::StatusOr<WorkerMemory> MeasureStage(
    const nn::ModelDescription& description,
    const std::vector<nn::StageRange>& ranges, int stage,
    const MemoryFlags& flags);

// The most any worker of flags.stages stages, split by `split`, needs (its
// largest stage's).
absl::StatusOr<int64_t> MostWorkerBytes(const nn::ModelDescription& description,
                                        nn::StageSplitKind split,
                                        const MemoryFlags& flags);

// OK when `budget` is 0 or the workers of flags.stages stages fit it; else
// InvalidArgument naming --worker_memory_budget, the bytes needed and the
// smallest --pipeline_stages whose workers fit (or that none does).
absl::Status CheckMemoryBudget(const nn::ModelDescription& description,
                               nn::StageSplitKind split,
                               const MemoryFlags& flags, int64_t budget);

}  // namespace ps::worker::pipeline

#endif  // PS_WORKER_PIPELINE_MEMORY_BUDGET_H_
