// A server shard killed with SIGKILL and restarted with --restore loses no
// acknowledged update (issue 32): it replays its update log after its
// checkpoint. On the real binaries: a sync job of the main job's model ends
// with a model byte for byte the undisturbed job's, whether the shard died
// mid-run or halfway through writing a checkpoint; in async mode, with many
// clients pushing a constant power-of-two gradient, every weight ends at
// exactly initial - lr * (acknowledged pushes) * g.

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/parameter_client.h"
#include "common/temp_dir_testing.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "tests/process_cluster.h"

namespace ps {
namespace {

using ::ps::testing::ProcessCluster;
using ::ps::testing::ReadTestFile;
using ::ps::testing::SmallJob;
using ::ps::testing::TempPath;

constexpr absl::Duration kJobTimeout = absl::Seconds(300);
constexpr int kSyncSteps = 120;

// The value after `prefix` on the last line of `lines` that holds it.
std::optional<std::string> LastValue(const std::vector<std::string>& lines,
                                     absl::string_view prefix) {
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    const size_t at = it->find(prefix.data(), 0, prefix.size());
    if (at != std::string::npos) return it->substr(at + prefix.size());
  }
  return std::nullopt;
}

void ExpectExitsZero(std::optional<ExitStatus> status, absl::string_view who) {
  ASSERT_TRUE(status.has_value()) << who << " did not finish in time";
  EXPECT_TRUE(status->success()) << who << " " << status->ToString();
}

// The main job (its model, optimizer and schedule, 2 servers x 2 workers,
// sync), cut to kSyncSteps steps; checkpoints every 20 updates in `dir`,
// restored from on a restart. Worker 0 saves the final model.
LaunchConfig MainJob(const std::string& dir, const std::string& model_path) {
  LaunchConfig config = SmallJob();
  config.optimizer = "adam";
  config.learning_rate = 0;
  config.lr_schedule = "cosine";
  config.batch_size = 64;
  config.save_model = model_path;
  config.extra_server_flags = {absl::StrCat("--checkpoint_dir=", dir),
                               "--restore", "--checkpoint_every_steps=20",
                               "--worker_timeout=30s"};
  config.extra_worker_flags = {absl::StrCat("--max_steps=", kSyncSteps),
                               "--log_every=10", "--retry_timeout=120s"};
  return config;
}

enum class Fault {
  kNone,
  kKillMidRun,
  kKillInCheckpointWrite,
  // Both shards at once.
  kKillBothShards,
  // Worker 1 and shard 1 at once.
  kKillWorkerAndShard,
};

// Runs the main job with `fault` on server 1 and returns the saved model's
// bytes; `replayed` gets server 1's "replayed N updates" count after a
// fault.
std::string RunMainJob(Fault fault, const std::string& name,
                       uint64_t* replayed = nullptr) {
  const std::string dir = TempPath(absl::StrCat(name, "_checkpoints"));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string model_path = TempPath(absl::StrCat(name, ".model"));
  std::filesystem::remove(model_path);
  ProcessCluster cluster(MainJob(dir, model_path));
  EXPECT_TRUE(cluster.StartServer(0).ok());
  // Its third checkpoint (the first is of the fresh shard, then every 20
  // updates) is cut short by its own SIGKILL.
  EXPECT_TRUE(cluster
                  .StartServer(1, fault == Fault::kKillInCheckpointWrite
                                      ? std::vector<std::string>{"--"
                                                                 "testonly_"
                                                                 "kill_in_"
                                                                 "checkpoint="
                                                                 "3"}
                                      : std::vector<std::string>{})
                  .ok());
  EXPECT_TRUE(cluster.StartAllWorkers().ok());
  if (fault == Fault::kKillMidRun || fault == Fault::kKillBothShards ||
      fault == Fault::kKillWorkerAndShard) {
    EXPECT_TRUE(cluster.AwaitWorkerLine(0, " step 60/", kJobTimeout).ok());
    if (fault == Fault::kKillWorkerAndShard) cluster.KillWorker(1);
    if (fault == Fault::kKillBothShards) cluster.KillServer(0);
    cluster.KillServer(1);
  } else if (fault == Fault::kKillInCheckpointWrite) {
    EXPECT_TRUE(
        cluster.AwaitServerLine(1, "killing this process", kJobTimeout).ok());
    EXPECT_TRUE(cluster.WaitServer(1, absl::Seconds(30)).has_value());
  }
  if (fault == Fault::kKillBothShards) {
    EXPECT_TRUE(cluster.StartServer(0).ok());
    EXPECT_TRUE(
        cluster.AwaitServerLine(0, "replayed ", absl::Seconds(30)).ok());
  }
  if (fault != Fault::kNone) {
    EXPECT_TRUE(cluster.StartServer(1).ok());
    absl::StatusOr<std::string> line =
        cluster.AwaitServerLine(1, "replayed ", absl::Seconds(30));
    EXPECT_TRUE(line.ok()) << line.status();
    if (line.ok() && replayed != nullptr) {
      const std::string after = line->substr(line->find("replayed ") + 9);
      EXPECT_TRUE(absl::SimpleAtoi(after.substr(0, after.find(' ')), replayed))
          << *line;
    }
  }
  if (fault == Fault::kKillWorkerAndShard) {
    EXPECT_TRUE(cluster.StartWorker(1).ok());
  }
  ExpectExitsZero(cluster.WaitWorker(0, kJobTimeout), "worker 0");
  ExpectExitsZero(cluster.WaitWorker(1, kJobTimeout), "worker 1");
  for (int s = 0; s < 2; ++s) {
    ExpectExitsZero(cluster.WaitServer(s, absl::Seconds(60)), "server");
    EXPECT_TRUE(LastValue(cluster.ServerLines(s), "updates lost in restarts: 0")
                    .has_value())
        << "server " << s;
    // Every example of both workers counted once.
    EXPECT_EQ(LastValue(cluster.ServerLines(s), "examples per epoch: "),
              absl::StrCat("0=", 2 * kSyncSteps * 64))
        << "server " << s;
  }
  return ReadTestFile(model_path);
}

class SyncRecoveryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    undisturbed_ = new std::string(RunMainJob(Fault::kNone, "undisturbed"));
  }
  static void TearDownTestSuite() { delete undisturbed_; }

  static std::string* undisturbed_;
};
std::string* SyncRecoveryTest::undisturbed_ = nullptr;

TEST_F(SyncRecoveryTest, AShardKilledMidRunEndsWithTheUndisturbedModel) {
  ASSERT_FALSE(undisturbed_->empty());
  const std::string model = RunMainJob(Fault::kKillMidRun, "mid_run");
  EXPECT_EQ(model.size(), undisturbed_->size());
  EXPECT_TRUE(model == *undisturbed_) << "the models differ";
}

TEST_F(SyncRecoveryTest, AShardKilledInACheckpointWriteEndsTheSame) {
  ASSERT_FALSE(undisturbed_->empty());
  uint64_t replayed = 0;
  const std::string model =
      RunMainJob(Fault::kKillInCheckpointWrite, "in_checkpoint", &replayed);
  // Restored from the second checkpoint (version 20 or a little more), the
  // log replayed across the file the third one began.
  EXPECT_GE(replayed, 20u);
  EXPECT_EQ(model.size(), undisturbed_->size());
  EXPECT_TRUE(model == *undisturbed_) << "the models differ";
}

TEST_F(SyncRecoveryTest, BothShardsKilledAtOnceEndTheSame) {
  ASSERT_FALSE(undisturbed_->empty());
  const std::string model = RunMainJob(Fault::kKillBothShards, "both_shards");
  EXPECT_TRUE(model == *undisturbed_) << "the models differ";
}

// The worker's step in flight was never acknowledged: restarted, it resumes
// from the shards' record of its data (the least over the shards) and
// pushes that step again; every example counts once and no acknowledged
// update is lost (RunMainJob checks both). The model is the undisturbed
// one's only when the worker did not die between its pushes to the two
// shards: if it did, the shard that had its push applied the step, and the
// restarted worker computes the step again from that shard's newer weights.
TEST_F(SyncRecoveryTest, AWorkerAndAShardKilledAtOnceLoseNothingAcknowledged) {
  ASSERT_FALSE(undisturbed_->empty());
  const std::string model =
      RunMainJob(Fault::kKillWorkerAndShard, "worker_and_shard");
  EXPECT_EQ(model.size(), undisturbed_->size());
}

// --- async: many clients, a constant gradient -------------------------------

constexpr int kClients = 8;
constexpr int kPushesPerClient = 150;
constexpr int kElements = 3000;
constexpr float kLearningRate = 0.0625f;  // 2^-4
constexpr float kGradient = 0.125f;       // 2^-3: each push moves 2^-7.

ModelSpec ConstantModel() {
  ModelSpec m;
  m.seed = 5;
  m.tensors.push_back(
      {"w", DType::kFloat32, {kElements}, InitializerSpec::Zeros()});
  m.tensors.push_back({"b", DType::kFloat32, {17}, InitializerSpec::Zeros()});
  return m;
}

// One client: kPushesPerClient pushes of kGradient everywhere, each a new
// batch of one example; counts those acknowledged.
absl::Status PushConstant(ClientOptions options, std::atomic<int>* acked,
                          TensorValues* final_weights) {
  absl::StatusOr<std::unique_ptr<ParameterClient>> client =
      ParameterClient::Connect(options);
  if (!client.ok()) return client.status();
  const ModelSpec model = ConstantModel();
  absl::StatusOr<Registration> reg =
      (*client)->Declare(model, kPushesPerClient, 1);
  if (!reg.ok()) return reg.status();
  DataCursor cursor = reg->cursor;
  std::vector<std::vector<float>> gradient;
  for (const TensorSpec& t : model.tensors) {
    gradient.emplace_back(t.num_elements(), kGradient);
  }
  for (uint64_t step = reg->next_step; step < kPushesPerClient; ++step) {
    ++cursor.examples_done;
    std::unique_ptr<StepPush> push =
        (*client)->StartStep({step, 0, 1, cursor}, /*pull_after=*/false);
    for (size_t t = 0; t < gradient.size(); ++t) {
      if (absl::Status s = push->Send(t, gradient[t]); !s.ok()) return s;
    }
    if (absl::Status s = push->Finish(); !s.ok()) return s;
    acked->fetch_add(1);
  }
  if (final_weights != nullptr) {
    absl::StatusOr<uint64_t> v =
        (*client)->PullFinal(kPushesPerClient, *final_weights);
    if (!v.ok()) return v.status();
  }
  return (*client)->Finish();
}

TEST(AsyncRecoveryTest, EveryAcknowledgedPushIsInTheWeightsExactlyOnce) {
  const std::string dir = TempPath("async_checkpoints");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  LaunchConfig config = SmallJob();
  config.num_workers = kClients;
  config.mode = "async";
  config.optimizer = "sgd";
  config.learning_rate = kLearningRate;
  config.extra_server_flags = {absl::StrCat("--checkpoint_dir=", dir),
                               "--restore", "--checkpoint_every_steps=100",
                               "--momentum=0", "--worker_timeout=30s"};
  ProcessCluster cluster(config);
  ASSERT_TRUE(cluster.StartAllServers().ok());
  std::atomic<int> acked{0};
  std::vector<absl::Status> results(kClients);
  TensorValues final_weights;
  std::vector<std::thread> clients;
  for (int r = 0; r < kClients; ++r) {
    ClientOptions options;
    options.servers = cluster.ServerAddresses();
    options.rank = r;
    options.retry_timeout = absl::Seconds(120);
    options.heartbeat_period = absl::Milliseconds(500);
    options.local_transport = false;
    clients.emplace_back([&, r, options] {
      results[r] =
          PushConstant(options, &acked, r == 0 ? &final_weights : nullptr);
    });
  }
  // Killed with a third of the pushes acknowledged, restarted at once.
  const absl::Time deadline = absl::Now() + kJobTimeout;
  while (acked.load() < kClients * kPushesPerClient / 3 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  cluster.KillServer(1);
  const int acked_at_kill = acked.load();
  ASSERT_TRUE(cluster.StartServer(1).ok());
  for (std::thread& t : clients) t.join();
  for (int r = 0; r < kClients; ++r) {
    EXPECT_TRUE(results[r].ok()) << "client " << r << ": " << results[r];
  }
  const int total = acked.load();
  ASSERT_EQ(total, kClients * kPushesPerClient);
  EXPECT_LT(acked_at_kill, total);
  const float expected = 0.0f - kLearningRate * kGradient * total;
  ASSERT_EQ(final_weights.size(), 2u);
  int wrong = 0;
  for (const std::vector<float>& tensor : final_weights) {
    for (float w : tensor) wrong += w != expected ? 1 : 0;
  }
  EXPECT_EQ(wrong, 0) << "weights other than " << expected << ", e.g. "
                      << final_weights[0][0];
  for (int s = 0; s < 2; ++s) {
    ExpectExitsZero(cluster.WaitServer(s, absl::Seconds(60)), "server");
    const std::vector<std::string> lines = cluster.ServerLines(s);
    std::optional<std::string> version =
        LastValue(lines, "mode async version ");
    ASSERT_TRUE(version.has_value()) << "server " << s;
    EXPECT_EQ(version->substr(0, version->find_first_not_of("0123456789")),
              absl::StrCat(total))
        << "server " << s;
  }
  EXPECT_TRUE(LastValue(cluster.ServerLines(1), "replayed ").has_value());
}

}  // namespace
}  // namespace ps
