#ifndef PS_WORKER_ALLREDUCE_EXCHANGE_H_
#define PS_WORKER_ALLREDUCE_EXCHANGE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "allreduce/bucketed_allreduce.h"
#include "allreduce/gloo_group.h"
#include "common/model_spec.h"
#include "worker/local_exchange.h"
#include "worker/weight_exchange.h"

namespace ps::worker {

// The weights of the all-reduce mode (--mode=allreduce): every worker holds
// the full model in a LocalExchange (the servers' update code: optimizer,
// schedule) and the workers average each step's gradients among themselves
// over a Gloo ring, so all of them apply the same step to the same weights.
//
// A step's gradient is what a sync server would apply: sum_r n_r g_r /
// sum_r n_r, for rank r's mean gradient g_r of n_r examples. Each rank puts
// n_r g_r into the buckets (allreduce::BucketedAllreduce, with n_r itself
// as one more element), each bucket is summed across the ranks as soon as
// backward has filled it, and Finish divides by the summed count. The sums
// are taken in float in Gloo's ring order; a sync server sums in double in
// rank order, then rounds once. Where the n_r are powers of two (2 workers
// at batch 32: n_r g_r is exact) and two ranks sum (one addition, in
// either order), both round the same exact value once: the same bits.
// Otherwise each step differs by a few float roundings of the sum.
//
// Not thread-safe (one trainer's thread); the push must not outlive the
// exchange. Owns the local weights and the ring.
class AllreduceExchange final : public WeightExchange {
 public:
  static absl::StatusOr<std::unique_ptr<AllreduceExchange>> Create(
      std::unique_ptr<LocalExchange> local,
      std::unique_ptr<allreduce::GlooGroup> group, size_t bucket_bytes);
  ~AllreduceExchange() override;

  // LocalExchange::Declare for the ring's workers.
  Registration Declare(uint64_t planned_steps);

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
                    std::unique_ptr<allreduce::GlooGroup> group);

  // After every tensor was added: the mean gradient, applied locally.
  absl::Status FinishStep(const StepInfo& info);

  const std::unique_ptr<LocalExchange> local_;
  const std::unique_ptr<allreduce::GlooGroup> group_;
  // After group_, which it borrows: destroyed first.
  std::unique_ptr<allreduce::BucketedAllreduce> reduce_;
  // The mean gradient of the step, reused.
  TensorValues mean_;
};

}  // namespace ps::worker

#endif  // PS_WORKER_ALLREDUCE_EXCHANGE_H_
