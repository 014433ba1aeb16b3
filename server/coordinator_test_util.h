#ifndef PS_SERVER_COORDINATOR_TEST_UTIL_H_
#define PS_SERVER_COORDINATOR_TEST_UTIL_H_

// Helpers shared by the UpdateCoordinator tests: small stores, pushes with
// realistic data progress, weight comparisons and a log capture.
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "server/push_stager.h"
#include "server/update_coordinator.h"
#include "spdlog/spdlog.h"
#include "update/shard_store.h"

namespace ps::server::testing {

// SGD with learning rate 1 and no momentum: w' = w - g, easy to read back.
update::OptimizerConfig PlainSgd();

std::unique_ptr<update::ShardStore> MakeStore(
    std::vector<int> layers, const update::OptimizerConfig& config,
    int num_servers = 1, int index = 0);

// Options with a fast poll; callers set what the test is about.
CoordinatorOptions FastOptions(ConsistencyMode mode, int num_workers,
                               int staleness = 0);

// The incarnation the helpers here register rank `rank` with and put in its
// pushes and pulls.
uint64_t IncarnationOf(int rank);

// Registers ranks [0, num_workers) as IncarnationOf(rank).
void RegisterAll(UpdateCoordinator& coordinator, int num_workers);

// A coordinator with every rank registered (RegisterAll).
std::unique_ptr<UpdateCoordinator> MakeCoordinator(update::ShardStore* store,
                                                   ConsistencyMode mode,
                                                   int num_workers,
                                                   int staleness = 0);

// A push whose every gradient element is `value`. Its data progress is
// (epoch 0, examples_done (step + 1) * num_examples): the cursor of a
// worker that took every step before `step` with batches of this size.
StagedPush ConstantPush(const update::ShardStore& store, int rank,
                        uint64_t step, float value, uint32_t num_examples = 1,
                        uint64_t base_version = 0);

// Adam at learning rate 0.01.
update::OptimizerConfig Adam();

// A push like ConstantPush's (3 + rank examples, based on the version
// before `step`) whose gradient varies by element, rank and step, so that
// every bit of the weights and optimizer state depends on it.
StagedPush VariedPush(const update::ShardStore& store, int rank, uint64_t step);

// A store of an MLP trained with Adam (learning rate 0.01).
std::unique_ptr<update::ShardStore> MakeAdamStore();

// Ranks of RandomPushes.
inline constexpr int kRandomPushRanks = 4;
// One push for step 0 from each of kRandomPushRanks ranks, in rank order:
// random gradients of very different sizes and example counts, the same on
// every call, so that any change in summation order shows in the low bits.
std::vector<StagedPush> RandomPushes(const update::ShardStore& store);
// The weights of a MakeAdamStore after one update by the documented sync
// formula, g = sum_r(n_r * g_r) / sum_r(n_r) in rank order, over
// RandomPushes, applied straight to the store.
std::vector<std::vector<float>> ReferenceMeanStep();

// Each slice's gradient in `push`, decoded.
std::vector<std::vector<float>> GradientValues(const StagedPush& push);
// Replaces `push`'s gradients with `values`, one vector per slice.
void SetGradientValues(StagedPush& push,
                       const std::vector<std::vector<float>>& values);

std::vector<std::vector<float>> AllWeights(const update::ShardStore& store);

// Every weight of `after` equals the same weight of `before` minus `delta`.
void ExpectShiftedBy(const std::vector<std::vector<float>>& before,
                     const std::vector<std::vector<float>>& after, float delta);

void ExpectBitIdentical(const std::vector<std::vector<float>>& a,
                        const std::vector<std::vector<float>>& b,
                        const std::string& what);

// AwaitPull without cancellation, as IncarnationOf(rank), heartbeating
// meanwhile as a client does.
absl::StatusOr<uint64_t> Pull(UpdateCoordinator& coordinator, int rank,
                              uint64_t step);

// Sends spdlog's default logger to a string for the object's life.
class LogCapture {
 public:
  LogCapture();
  ~LogCapture();
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace ps::server::testing

#endif  // PS_SERVER_COORDINATOR_TEST_UTIL_H_
