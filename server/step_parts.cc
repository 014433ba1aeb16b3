#include "server/step_parts.h"

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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

update::LoggedStepMean StepMean(const update::ShardStore& store,
                                const ReadyStep& step) {
  update::LoggedStepMean mean;
  mean.step = step.step;
  mean.learning_rate = step.learning_rate;
  double total_examples = 0;
  for (const StagedPush& p : step.pushes) {
    mean.parts.push_back(
        {p.rank, p.base_version, p.num_examples, p.epoch, p.examples_done});
    total_examples += p.num_examples;
  }
  // Only weight-0 pushes: nothing was learned, so nothing changes.
  if (total_examples == 0) return mean;
  mean.mean.resize(store.num_slices());
  // Elementwise: how the elements are split into ranges and blocks changes
  // no bit.
  auto aggregate = [&](int slice, size_t begin, size_t end) {
    float* out = mean.mean[slice].data();
    char scratch[update::Optimizer::kGradientBlock * sizeof(float)];
    for (size_t at = begin; at < end;) {
      const size_t n = std::min(end - at, update::Optimizer::kGradientBlock);
      double sum[update::Optimizer::kGradientBlock] = {};
      for (const StagedPush& p : step.pushes) {
        if (p.num_examples == 0) continue;
        for (size_t done = 0; done < n;) {
          const EncodedFloats g = p.gradients[slice].View(
              at + done, n - done, absl::MakeSpan(scratch));
          update::AddWeighted(g, p.num_examples, sum + done);
          done += g.size();
        }
      }
      update::DivideToFloats(sum, n, total_examples, out + at);
      at += n;
    }
  };
  (void)update::ForEachSlice(store, [&](int slice) {
    const size_t n = store.slices()[slice].num_elements;
    mean.mean[slice].resize(n);
    if (store.pool() == nullptr) {
      aggregate(slice, 0, n);
    } else {
      store.pool()->ForEachRange(
          n, [&](size_t begin, size_t end) { aggregate(slice, begin, end); });
    }
    return absl::OkStatus();
  });
  return mean;
}

absl::Status ApplyStepMean(update::ShardStore& store,
                           const update::LoggedStepMean& step) {
  if (step.mean.empty()) return absl::OkStatus();
  if (step.mean.size() != static_cast<size_t>(store.num_slices())) {
    return absl::InvalidArgumentError(
        absl::StrCat("the mean of step ", step.step, " has ", step.mean.size(),
                     " slices; this shard has ", store.num_slices()));
  }
  for (int s = 0; s < store.num_slices(); ++s) {
    if (step.mean[s].size() != store.slices()[s].num_elements) {
      return absl::InvalidArgumentError(
          absl::StrCat("the mean of step ", step.step, " has ",
                       step.mean[s].size(), " elements in slice ", s,
                       "; this shard's has ", store.slices()[s].num_elements));
    }
  }
  return update::ForEachSlice(store, [&](int slice) {
    const std::vector<float>& mean = step.mean[slice];
    auto read = [&mean](uint64_t begin, absl::Span<char> scratch) {
      const size_t n = std::min(scratch.size() / sizeof(float),
                                static_cast<size_t>(mean.size() - begin));
      return EncodedView(absl::MakeConstSpan(mean.data() + begin, n), scratch);
    };
    return store.ApplyGradient(slice, read, step.learning_rate);
  });
}

}  // namespace ps::server
