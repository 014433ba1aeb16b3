#ifndef PS_WORKER_ALLREDUCE_EXCHANGE_H_
#define PS_WORKER_ALLREDUCE_EXCHANGE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "allreduce/bucket_reducer.h"
#include "allreduce/bucketed_allreduce.h"
#include "allreduce/compression.h"
#include "allreduce/gloo_group.h"
#include "common/model_spec.h"
#include "worker/local_exchange.h"
#include "worker/weight_exchange.h"

namespace ps::worker {

// Which library sums a worker's buckets (--allreduce_backend): "gloo",
// "nccl", or "auto" (NCCL where `device_is_cuda` and `nccl_available` is OK:
// allreduce::NcclAvailable(), else Gloo). True for NCCL. InvalidArgument,
// naming the flag, for nccl on a CPU worker or where NCCL is not available
// (with its reason), or an unknown name.
absl::StatusOr<bool> UseNccl(absl::string_view backend, bool device_is_cuda,
                             const absl::Status& nccl_available);

// Which GPU a worker sums on, as a key equal for two workers exactly when
// they are on one host (by `hostname`) and use one device ordinal: 48 bits,
// never kNoGpuKey, which a rank that cannot use NCCL gives instead.
uint64_t GpuKey(absl::string_view hostname, int cuda_device);
inline constexpr uint64_t kNoGpuKey = 0;

// Every rank's GpuKey through `group` (collective: every rank calls it with
// its own); index r holds rank r's.
absl::StatusOr<std::vector<uint64_t>> GatherGpuKeys(allreduce::GlooGroup& group,
                                                    uint64_t key);

// The first two ranks that share a GPU (equal keys), which NCCL refuses
// ("Duplicate GPU detected"); none where every rank has its own.
std::optional<std::pair<int, int>> FirstSharedGpu(
    absl::Span<const uint64_t> keys);

// Why the ring cannot sum with NCCL, given every rank's key: a rank that
// cannot use it (kNoGpuKey) or two that share a GPU; "" where it can.
std::string WhyNotNccl(absl::Span<const uint64_t> keys);

struct AllreduceOptions {
  // Gradients are summed in buckets of about this size.
  size_t bucket_bytes = 25 << 20;
  // How the gradient buckets travel (the step record never is compressed:
  // its counts and positions must stay exact).
  allreduce::Compression compression = allreduce::Compression::kNone;
  // Empty: no checkpoints. Else rank 0 writes one here every
  // `checkpoint_every_steps` steps (worker/ring_checkpoint.h), and the ring
  // resumes from the newest rank 0 reads there.
  std::string checkpoint_dir;
  int64_t checkpoint_every_steps = 200;
};

// The weights of the all-reduce mode (--mode=allreduce): every worker holds
// the full model in a LocalExchange (the servers' update code: optimizer,
// schedule) and the workers average each step's gradients among themselves
// over a Gloo ring, so all of them apply the same step to the same weights.
// On GPU workers the buckets may be summed by another library's ring of the
// same ranks (an NcclGroup): the Gloo ring then only shares checkpoints.
//
// A step's gradient is what a sync server would apply: sum_r n_r g_r /
// sum_r n_r, for rank r's mean gradient g_r of n_r examples. Each rank puts
// n_r g_r into the buckets (allreduce::BucketedAllreduce, with one more
// tensor: n_r, and each rank's data position for checkpoints), each bucket is
// summed across the ranks as soon as backward has filled it, and Finish divides
// by the summed count. The sums are taken in float in Gloo's ring order; a sync
// server sums in double in rank order, then rounds once. Where the n_r are
// powers of two (2 workers at batch 32: n_r g_r is exact) and two ranks sum
// (one addition, in either order), both round the same exact value once: the
// same bits. Otherwise each step differs by a few float roundings of the sum.
//
// Not thread-safe (one trainer's thread); the push must not outlive the
// exchange. Owns the local weights and the ring.
class AllreduceExchange final : public WeightExchange {
 public:
  // `reducer`, when given, sums the buckets instead of `group` (same
  // ranks, same order); it is destroyed before `group`.
  static absl::StatusOr<std::unique_ptr<AllreduceExchange>> Create(
      std::unique_ptr<LocalExchange> local,
      std::unique_ptr<allreduce::GlooGroup> group,
      const AllreduceOptions& options,
      std::unique_ptr<allreduce::BucketReducer> reducer = nullptr);
  ~AllreduceExchange() override;

  // LocalExchange::Declare for the ring's workers, from the newest
  // checkpoint rank 0 finds (if any): every rank calls it, first.
  absl::StatusOr<Registration> Declare(uint64_t planned_steps);

  // On rank 0 with a checkpoint directory: writes the checkpoint of the
  // current step (the end of training's, say); elsewhere does nothing.
  absl::Status WriteCheckpoint();

  const ModelSpec& model() const override { return local_->model(); }
  absl::StatusOr<uint64_t> Pull(uint64_t clock, TensorValues& weights) override;
  absl::StatusOr<uint64_t> PullFinal(uint64_t clock,
                                     TensorValues& weights) override;
  std::unique_ptr<StepPush> StartStep(const StepInfo& info,
                                      bool pull_after) override;

  LocalExchange& local() { return *local_; }
  allreduce::GlooGroup& group() { return *group_; }
  const allreduce::BucketPlan& buckets() const { return reduce_->plan(); }

 private:
  class AllreduceStepPush;

  AllreduceExchange(std::unique_ptr<LocalExchange> local,
                    std::unique_ptr<allreduce::GlooGroup> group,
                    AllreduceOptions options,
                    std::unique_ptr<allreduce::BucketReducer> reducer);

  // After every tensor was added: the mean gradient, applied locally.
  absl::Status FinishStep(const StepInfo& info);

  const std::unique_ptr<LocalExchange> local_;
  const std::unique_ptr<allreduce::GlooGroup> group_;
  const AllreduceOptions options_;
  // Null: group_ sums the buckets.
  const std::unique_ptr<allreduce::BucketReducer> reducer_;
  // After group_ and reducer_, which it borrows: destroyed first.
  std::unique_ptr<allreduce::BucketedAllreduce> reduce_;
  // The mean gradient of the step, reused.
  TensorValues mean_;
  // Every rank's data position after the last step.
  std::vector<DataCursor> cursors_;
  // The step record's tensor: [n_r, examples done by rank 0, by rank 1...],
  // this rank's entries only.
  std::vector<float> record_;
};

}  // namespace ps::worker

#endif  // PS_WORKER_ALLREDUCE_EXCHANGE_H_
