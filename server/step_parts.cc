#include "server/step_parts.h"

#include <algorithm>
#include <utility>

#include "common/tensor_codec.h"
#include "server/rank_registry.h"
#include "spdlog/spdlog.h"
#include "update/gradient_mean.h"
#include "update/slice_apply.h"

namespace ps::server {

StepParts::StepParts(int num_workers)
    : has_part_(num_workers, false), pending_(num_workers) {}

bool StepParts::any_part() const {
  return std::find(has_part_.begin(), has_part_.end(), true) != has_part_.end();
}

void StepParts::Add(StagedPush push) {
  const int rank = push.rank;
  has_part_[rank] = true;
  pending_[rank] = std::move(push);
}

void StepParts::AddWithoutPush(int rank) { has_part_[rank] = true; }

ReadyStep StepParts::Take(uint64_t step, std::optional<float> schedule_rate,
                          std::vector<int> missing) {
  ReadyStep ready;
  ready.step = step;
  ready.learning_rate = schedule_rate;
  for (std::optional<StagedPush>& pending : pending_) {
    if (pending.has_value()) ready.pushes.push_back(*std::move(pending));
    pending.reset();
  }
  // A worker-set learning rate (its scheduler's): the lowest rank's.
  for (const StagedPush& p : ready.pushes) {
    if (p.learning_rate.has_value()) {
      ready.learning_rate = p.learning_rate;
      break;
    }
  }
  applying_ = true;
  if (missing != last_missing_) {
    if (!missing.empty()) {
      spdlog::warn("step {} goes on without dead {}", step,
                   DescribeWorkers(missing));
    } else {
      spdlog::info("step {}: every live worker takes part again", step);
    }
    last_missing_ = std::move(missing);
  }
  return ready;
}

void StepParts::Applied() {
  std::fill(has_part_.begin(), has_part_.end(), false);
  applying_ = false;
}

void StepParts::Clear() {
  std::fill(has_part_.begin(), has_part_.end(), false);
  for (std::optional<StagedPush>& pending : pending_) pending.reset();
}

absl::Status ApplyReadyStep(update::ShardStore& store, const ReadyStep& step) {
  double total_examples = 0;
  for (const StagedPush& p : step.pushes) total_examples += p.num_examples;
  // Only weight-0 pushes: nothing was learned, so nothing changes.
  if (total_examples == 0) return absl::OkStatus();
  return update::ForEachSlice(store, [&](int slice) {
    // g = sum_r (n_r * g_r) / sum_r n_r, always in rank order, so the sum
    // is the same bits whatever order the pushes arrived in. Computed a
    // block at a time as the update reads it, from the pushes where they
    // lie: elementwise, so the blocks change no bit.
    auto aggregate = [&](uint64_t begin, absl::Span<char> scratch) {
      const size_t n = scratch.size() / sizeof(float);
      double sum[update::Optimizer::kGradientBlock] = {};
      for (const StagedPush& p : step.pushes) {
        if (p.num_examples == 0) continue;
        for (size_t done = 0; done < n;) {
          const EncodedFloats g =
              p.gradients[slice].View(begin + done, n - done, scratch);
          update::AddWeighted(g, p.num_examples, sum + done);
          done += g.size();
        }
      }
      float mean[update::Optimizer::kGradientBlock];
      update::DivideToFloats(sum, n, total_examples, mean);
      return EncodeInto(absl::MakeConstSpan(mean, n), scratch);
    };
    return store.ApplyGradient(slice, aggregate, step.learning_rate);
  });
}

}  // namespace ps::server
