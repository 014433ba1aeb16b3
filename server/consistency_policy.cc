#include "server/consistency_policy.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ps::server {
namespace {

// Bulk-synchronous: one step at a time, every active rank's part in each.
class SyncPolicy final : public ConsistencyPolicy {
 public:
  ConsistencyMode mode() const override { return ConsistencyMode::kSync; }
  bool CollectsSteps() const override { return true; }

  absl::Status AdmitPush(const StepView& view, int rank,
                         uint64_t step) const override {
    const bool has_part = view.has_part[rank];
    // A step being applied without this rank completed without it too.
    if (step < view.version ||
        (step == view.version && view.applying && !has_part)) {
      return absl::AbortedError(absl::StrCat(
          "stale step ", step, " from worker ", rank, ": shard is at version ",
          view.version, view.applying ? " and applies it" : "",
          " (the step completed without this worker); pull again"));
    }
    if (step > view.version) {
      return absl::FailedPreconditionError(
          absl::StrCat("step ", step, " from worker ", rank,
                       " is ahead: shard is at version ", view.version,
                       " and collects step ", view.version, "; pull for step ",
                       step, " before pushing it"));
    }
    if (has_part) {
      return absl::AlreadyExistsError(
          absl::StrCat("worker ", rank, " already pushed step ", step));
    }
    return absl::OkStatus();
  }

  bool ReplayTakesPart(const StepView& view, int rank,
                       uint64_t step) const override {
    return step == view.version && !view.has_part[rank] && !view.applying;
  }

  bool TakesPartWithoutPush(const StepView& view, int rank,
                            uint64_t next_step) const override {
    return next_step == view.version + 1 && !view.has_part[rank] &&
           !view.applying;
  }

  std::optional<std::vector<int>> StepReady(
      const StepView& view) const override {
    if (view.applying) return std::nullopt;
    bool any = false;
    std::vector<int> missing;
    for (int r = 0; r < view.ranks.num_workers(); ++r) {
      if (view.has_part[r]) {
        any = true;
      } else if (view.ranks.active(r)) {
        return std::nullopt;
      } else if (!view.ranks.done(r)) {
        missing.push_back(r);
      }
    }
    if (!any) return std::nullopt;
    return missing;
  }

  bool PullReady(const StepView& view, uint64_t step) const override {
    return view.version >= step;
  }

  std::vector<int> RanksBlocking(const StepView& view,
                                 uint64_t step) const override {
    std::vector<int> blocking;
    if (view.version >= step) return blocking;
    for (int r = 0; r < view.ranks.num_workers(); ++r) {
      if (!view.has_part[r] && view.ranks.active(r)) blocking.push_back(r);
    }
    return blocking;
  }

  std::string SlowPullMessage(int rank, uint64_t step,
                              const std::string& waiting_on, double waited,
                              uint64_t version) const override {
    return absl::StrFormat(
        "step %d waiting on workers [%s] for %.0f s (pull for step %d from "
        "worker %d, version %d)",
        step - 1, waiting_on, waited, step, rank, version);
  }

  uint64_t ResumeStep(const StepView& view, int /*rank*/) const override {
    return view.version;
  }
  uint64_t PlannedUpdates(uint64_t planned_steps,
                          int /*num_workers*/) const override {
    return planned_steps;
  }
  bool FastForwardsAfterRestore() const override { return true; }
};

// ssp and async: each push is applied as it comes, and each rank goes at its
// own pace; they differ only in when a pull waits.
class PerPushPolicy : public ConsistencyPolicy {
 public:
  bool CollectsSteps() const override { return false; }

  absl::Status AdmitPush(const StepView& view, int rank,
                         uint64_t step) const override {
    const uint64_t next_step = view.ranks.next_step(rank);
    if (step < next_step) {
      return absl::AlreadyExistsError(
          absl::StrCat("worker ", rank, " already pushed step ", next_step - 1,
                       "; got step ", step, " again"));
    }
    return absl::OkStatus();
  }
  bool ReplayTakesPart(const StepView& /*view*/, int /*rank*/,
                       uint64_t /*step*/) const override {
    return false;
  }
  bool TakesPartWithoutPush(const StepView& /*view*/, int /*rank*/,
                            uint64_t /*next_step*/) const override {
    return false;
  }
  std::optional<std::vector<int>> StepReady(
      const StepView& /*view*/) const override {
    return std::nullopt;
  }
  uint64_t ResumeStep(const StepView& view, int rank) const override {
    return view.ranks.next_step(rank);
  }
  uint64_t PlannedUpdates(uint64_t planned_steps,
                          int num_workers) const override {
    return planned_steps * static_cast<uint64_t>(num_workers);
  }
  bool FastForwardsAfterRestore() const override { return false; }
  std::string SlowPullMessage(int rank, uint64_t step,
                              const std::string& waiting_on, double waited,
                              uint64_t version) const final {
    return absl::StrFormat(
        "pull for step %d from worker %d waiting on workers [%s] for %.0f s "
        "(%s, version %d)",
        step, rank, waiting_on, waited, WaitRule(), version);
  }

 private:
  // When a pull waits, for the log: "ssp staleness 2".
  virtual std::string WaitRule() const = 0;
};

class SspPolicy final : public PerPushPolicy {
 public:
  explicit SspPolicy(int staleness)
      : staleness_(static_cast<uint64_t>(staleness)) {}

  ConsistencyMode mode() const override { return ConsistencyMode::kSsp; }

  bool PullReady(const StepView& view, uint64_t step) const override {
    return RanksBlocking(view, step).empty();
  }
  std::vector<int> RanksBlocking(const StepView& view,
                                 uint64_t step) const override {
    if (step <= staleness_) return {};
    return view.ranks.ActiveBefore(step - staleness_);
  }

 private:
  std::string WaitRule() const override {
    return absl::StrCat("ssp staleness ", staleness_);
  }

  const uint64_t staleness_;
};

class AsyncPolicy final : public PerPushPolicy {
 public:
  ConsistencyMode mode() const override { return ConsistencyMode::kAsync; }

  bool PullReady(const StepView& /*view*/, uint64_t /*step*/) const override {
    return true;
  }
  std::vector<int> RanksBlocking(const StepView& /*view*/,
                                 uint64_t /*step*/) const override {
    return {};
  }

 private:
  std::string WaitRule() const override { return "async"; }
};

}  // namespace

std::unique_ptr<ConsistencyPolicy> ConsistencyPolicy::Create(
    ConsistencyMode mode, int staleness) {
  switch (mode) {
    case ConsistencyMode::kSync:
      return std::make_unique<SyncPolicy>();
    case ConsistencyMode::kSsp:
      return std::make_unique<SspPolicy>(staleness);
    case ConsistencyMode::kAsync:
      return std::make_unique<AsyncPolicy>();
  }
  return std::make_unique<SyncPolicy>();
}

}  // namespace ps::server
