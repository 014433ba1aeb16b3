// A server shard killed with SIGKILL and restarted with --restore loses no
// acknowledged update (issue 32): it replays its update log after its
// checkpoint. On the real binaries: a sync job of the main job's model ends
// with a model byte for byte the undisturbed job's, whether the shard died
// mid-run or halfway through writing a checkpoint; in async and ssp mode, with
// many clients pushing a constant power-of-two gradient, every weight ends at
// exactly initial - lr * (acknowledged pushes) * g. Both with two shards
// killed at once and with a worker killed with a shard. What the servers
// counted is read from their --report_file (server/shard_report.h).

#include <signal.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/parameter_client.h"
#include "common/progress_line.h"
#include "common/temp_dir_testing.h"
#include "gtest/gtest.h"
#include "server/shard_report.h"
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

// Waits until worker `rank` reports (common/progress_line.h) having done
// `step` steps of its epoch; false at `timeout`.
bool AwaitWorkerStep(const ProcessCluster& cluster, int rank, int64_t step,
                     absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  do {
    for (const std::string& line : cluster.WorkerLines(rank)) {
      const std::optional<ProgressLine> progress =
          ParseProgressLine(InfoMessageOf(line));
      if (!progress.has_value()) continue;
      const auto* s = std::get_if<StepProgress>(&*progress);
      if (s != nullptr && s->step >= step) return true;
    }
    absl::SleepFor(absl::Milliseconds(20));
  } while (absl::Now() < deadline);
  return false;
}

// Where server `index` of the test `name` writes its final report
// (--report_file; a restarted server writes the same file).
std::string ReportPath(const std::string& name, int index) {
  return TempPath(absl::StrCat(name, "_server", index, ".report"));
}

std::vector<std::string> ReportFlag(const std::string& name, int index) {
  return {absl::StrCat("--report_file=", ReportPath(name, index))};
}

// Server `index`'s final report; a failure if it wrote none.
server::ShardReport ReadReport(const std::string& name, int index) {
  absl::StatusOr<server::ShardReport> report =
      server::ReadShardReport(ReportPath(name, index));
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *report : server::ShardReport();
}

// Runs the main job with `fault` on server 1 and returns the saved model's
// bytes; `replayed` gets the updates server 1 replayed after a fault.
std::string RunMainJob(Fault fault, const std::string& name,
                       uint64_t* replayed = nullptr) {
  const std::string dir = TempPath(absl::StrCat(name, "_checkpoints"));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string model_path = TempPath(absl::StrCat(name, ".model"));
  std::filesystem::remove(model_path);
  for (int s = 0; s < 2; ++s) std::filesystem::remove(ReportPath(name, s));
  ProcessCluster cluster(MainJob(dir, model_path));
  EXPECT_TRUE(cluster.StartServer(0, ReportFlag(name, 0)).ok());
  std::vector<std::string> flags1 = ReportFlag(name, 1);
  // Its third checkpoint (the first is of the fresh shard, then every 20
  // updates) is cut short by its own SIGKILL.
  if (fault == Fault::kKillInCheckpointWrite) {
    flags1.push_back("--testonly_kill_in_checkpoint=3");
  }
  EXPECT_TRUE(cluster.StartServer(1, flags1).ok());
  EXPECT_TRUE(cluster.StartAllWorkers().ok());
  if (fault == Fault::kKillMidRun || fault == Fault::kKillBothShards ||
      fault == Fault::kKillWorkerAndShard) {
    EXPECT_TRUE(AwaitWorkerStep(cluster, 0, 60, kJobTimeout));
    if (fault == Fault::kKillWorkerAndShard) cluster.KillWorker(1);
    if (fault == Fault::kKillBothShards) cluster.KillServer(0);
    cluster.KillServer(1);
  } else if (fault == Fault::kKillInCheckpointWrite) {
    const std::optional<ExitStatus> killed = cluster.WaitServer(1, kJobTimeout);
    EXPECT_TRUE(killed.has_value()) << "server 1 did not kill itself";
    if (killed.has_value()) {
      EXPECT_EQ(killed->signal(), SIGKILL) << killed->ToString();
    }
  }
  // A server listens once its log is replayed: StartServer waits for that.
  if (fault == Fault::kKillBothShards) {
    EXPECT_TRUE(cluster.StartServer(0, ReportFlag(name, 0)).ok());
  }
  if (fault != Fault::kNone) {
    EXPECT_TRUE(cluster.StartServer(1, ReportFlag(name, 1)).ok());
  }
  if (fault == Fault::kKillWorkerAndShard) {
    EXPECT_TRUE(cluster.StartWorker(1).ok());
  }
  ExpectExitsZero(cluster.WaitWorker(0, kJobTimeout), "worker 0");
  ExpectExitsZero(cluster.WaitWorker(1, kJobTimeout), "worker 1");
  for (int s = 0; s < 2; ++s) {
    SCOPED_TRACE(absl::StrCat("server ", s));
    ExpectExitsZero(cluster.WaitServer(s, absl::Seconds(60)), "server");
    const server::ShardReport report = ReadReport(name, s);
    EXPECT_EQ(report.updates_lost, 0u);
    // Every example of both workers counted once.
    EXPECT_EQ(report.examples_per_epoch,
              (std::map<uint64_t, uint64_t>{{0, 2 * kSyncSteps * 64}}));
    const bool restarted =
        (s == 1 && fault != Fault::kNone) || fault == Fault::kKillBothShards;
    EXPECT_EQ(report.updates_replayed.has_value(), restarted);
    if (s == 1 && replayed != nullptr) {
      *replayed = report.updates_replayed.value_or(0);
    }
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
// batch of one example; counts those acknowledged. Once `die` is set it
// dies as a killed worker would, in its next push: every tensor sent, the
// push not waited for, the connections closed (Aborted).
absl::Status PushConstant(ClientOptions options, std::atomic<int>* acked,
                          TensorValues* final_weights,
                          const std::atomic<bool>* die = nullptr) {
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
    if (die != nullptr && die->load()) {
      push.reset();
      client->reset();
      return absl::AbortedError("killed");
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

enum class AsyncFault {
  kOneShard,
  kBothShards,
  // The last client (as a killed worker, then started again) and shard 1.
  kClientAndShard,
};

// The mode and the fault. ssp logs and replays each push as async does;
// these clients pull only once, after their last push, so its bound on
// staleness holds none of them back before then.
struct AsyncCase {
  const char* mode;
  AsyncFault fault;
};

class AsyncRecoveryTest : public ::testing::TestWithParam<AsyncCase> {};

TEST_P(AsyncRecoveryTest, EveryAcknowledgedPushIsInTheWeightsExactlyOnce) {
  const AsyncFault fault = GetParam().fault;
  const std::string name =
      absl::StrCat(GetParam().mode, static_cast<int>(fault));
  const std::string dir = TempPath(absl::StrCat(name, "_checkpoints"));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (int s = 0; s < 2; ++s) std::filesystem::remove(ReportPath(name, s));
  LaunchConfig config = SmallJob();
  config.num_workers = kClients;
  config.mode = GetParam().mode;
  if (config.mode == "ssp") config.staleness = 4;
  config.optimizer = "sgd";
  config.learning_rate = kLearningRate;
  config.extra_server_flags = {absl::StrCat("--checkpoint_dir=", dir),
                               "--restore", "--checkpoint_every_steps=100",
                               "--momentum=0", "--worker_timeout=30s"};
  ProcessCluster cluster(config);
  for (int s = 0; s < 2; ++s) {
    ASSERT_TRUE(cluster.StartServer(s, ReportFlag(name, s)).ok());
  }
  std::atomic<int> acked{0};
  std::atomic<bool> die{false};
  std::vector<absl::Status> results(kClients);
  absl::Status died;
  TensorValues final_weights;
  std::vector<std::thread> clients;
  for (int r = 0; r < kClients; ++r) {
    ClientOptions options;
    options.servers = cluster.ServerAddresses();
    options.rank = r;
    options.retry_timeout = absl::Seconds(120);
    options.heartbeat_period = absl::Milliseconds(500);
    options.local_transport = false;
    const bool dies = fault == AsyncFault::kClientAndShard && r == kClients - 1;
    clients.emplace_back([&, r, options, dies] {
      TensorValues* weights = r == 0 ? &final_weights : nullptr;
      if (dies) {
        died = PushConstant(options, &acked, weights, &die);
        if (died.code() != absl::StatusCode::kAborted) {
          results[r] = died;
          return;
        }
      }
      results[r] = PushConstant(options, &acked, weights);
    });
  }
  // Killed with a third of the pushes acknowledged, restarted at once.
  const absl::Time deadline = absl::Now() + kJobTimeout;
  while (acked.load() < kClients * kPushesPerClient / 3 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  die.store(true);
  if (fault == AsyncFault::kBothShards) cluster.KillServer(0);
  cluster.KillServer(1);
  const int acked_at_kill = acked.load();
  if (fault == AsyncFault::kBothShards) {
    ASSERT_TRUE(cluster.StartServer(0, ReportFlag(name, 0)).ok());
  }
  ASSERT_TRUE(cluster.StartServer(1, ReportFlag(name, 1)).ok());
  for (std::thread& t : clients) t.join();
  for (int r = 0; r < kClients; ++r) {
    EXPECT_TRUE(results[r].ok()) << "client " << r << ": " << results[r];
  }
  if (fault == AsyncFault::kClientAndShard) {
    EXPECT_EQ(died.code(), absl::StatusCode::kAborted) << died;
  }
  // Every step of every rank, each applied once.
  const int total = kClients * kPushesPerClient;
  if (fault == AsyncFault::kClientAndShard) {
    // The killed client's last push may have been taken by both shards,
    // never acknowledged to it: its successor goes on after it.
    EXPECT_GE(acked.load(), total - 1);
    EXPECT_LE(acked.load(), total);
  } else {
    ASSERT_EQ(acked.load(), total);
  }
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
    SCOPED_TRACE(absl::StrCat("server ", s));
    ExpectExitsZero(cluster.WaitServer(s, absl::Seconds(60)), "server");
    const server::ShardReport report = ReadReport(name, s);
    EXPECT_EQ(report.version, static_cast<uint64_t>(total));
    EXPECT_EQ(report.updates_lost, 0u);
    EXPECT_EQ(report.updates_replayed.has_value(),
              s == 1 || fault == AsyncFault::kBothShards);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Faults, AsyncRecoveryTest,
    ::testing::Values(AsyncCase{"async", AsyncFault::kOneShard},
                      AsyncCase{"async", AsyncFault::kBothShards},
                      AsyncCase{"async", AsyncFault::kClientAndShard},
                      AsyncCase{"ssp", AsyncFault::kOneShard}),
    [](const ::testing::TestParamInfo<AsyncCase>& info) -> std::string {
      const std::string mode = info.param.mode;
      switch (info.param.fault) {
        case AsyncFault::kOneShard:
          return mode + "OneShard";
        case AsyncFault::kBothShards:
          return mode + "BothShards";
        case AsyncFault::kClientAndShard:
          return mode + "AClientAndAShard";
      }
      return mode + "Unknown";
    });

}  // namespace
}  // namespace ps
