#include "worker/worker_config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

WorkerConfig Valid() {
  WorkerConfig config;
  config.num_workers = 2;
  config.servers = "127.0.0.1:1,127.0.0.1:2";
  return config;
}

TEST(WorkerConfigTest, DefaultsWithServersAreValid) {
  EXPECT_TRUE(CheckWorkerConfig(Valid(), 1).ok());
}

TEST(WorkerConfigTest, RankComesFromTheFlagOrTheJobsIndex) {
  WorkerConfig config = Valid();
  config.rank = 1;
  EXPECT_EQ(*ResolveRank(config, "5"), 1);
  config.rank = -1;
  EXPECT_EQ(*ResolveRank(config, "5"), 5);
  EXPECT_FALSE(ResolveRank(config, nullptr).ok());
}

TEST(WorkerConfigTest, ServersComeFromOneOfTwoFlags) {
  WorkerConfig config = Valid();
  absl::StatusOr<std::vector<std::string>> servers = ResolveServers(config);
  ASSERT_TRUE(servers.ok()) << servers.status();
  EXPECT_THAT(*servers, ElementsAre("127.0.0.1:1", "127.0.0.1:2"));
  config.server_pattern = "ps-{index}:50051";
  EXPECT_THAT(ResolveServers(config).status().message(),
              HasSubstr("exactly one of --servers and --server_pattern"));
  config.servers = "";
  config.num_servers = 2;
  servers = ResolveServers(config);
  ASSERT_TRUE(servers.ok()) << servers.status();
  EXPECT_EQ(servers->size(), 2u);
}

TEST(WorkerConfigTest, NamesTheFlagAtFault) {
  auto message = [](void (*change)(WorkerConfig*), int rank = 0) {
    WorkerConfig config = Valid();
    change(&config);
    return std::string(CheckWorkerConfig(config, rank).message());
  };
  EXPECT_THAT(message([](WorkerConfig* c) { c->num_workers = 0; }),
              HasSubstr("--num_workers must be at least 1"));
  EXPECT_THAT(message([](WorkerConfig*) {}, 2),
              HasSubstr("--rank must be in [0, 2), got 2"));
  EXPECT_THAT(message([](WorkerConfig* c) { c->batch_size = 0; }),
              HasSubstr("--batch_size"));
  EXPECT_THAT(message([](WorkerConfig* c) { c->chunk_kb = 0; }),
              HasSubstr("--chunk_kb"));
  EXPECT_THAT(message([](WorkerConfig* c) { c->mode = "bsp"; }),
              HasSubstr("--mode"));
  EXPECT_THAT(message([](WorkerConfig* c) { c->tls_cert = "c.pem"; }),
              HasSubstr("--tls_cert and --tls_key go together"));
  EXPECT_THAT(message([](WorkerConfig* c) { c->token_file = "t"; }),
              HasSubstr("need --tls_ca"));
  EXPECT_THAT(message([](WorkerConfig* c) {
                c->heartbeat_period = absl::ZeroDuration();
              }),
              HasSubstr("--heartbeat_period must be positive"));
}

TEST(WorkerConfigTest, AllreduceModeTakesItsOwnFlagsOnly) {
  WorkerConfig config = Valid();
  config.mode = kAllreduceMode;
  config.checkpoint_dir = "/tmp/ring";
  EXPECT_TRUE(CheckWorkerConfig(config, 1).ok());
  config.allreduce_bucket_kb = 0;
  EXPECT_THAT(CheckWorkerConfig(config, 1).message(),
              HasSubstr("--allreduce_bucket_kb"));
  config.allreduce_bucket_kb = 256;
  config.checkpoint_every_steps = -1;
  EXPECT_THAT(CheckWorkerConfig(config, 1).message(),
              HasSubstr("--checkpoint_every_steps"));
  config.checkpoint_every_steps = 200;
  config.local = true;
  EXPECT_THAT(CheckWorkerConfig(config, 1).message(), HasSubstr("--local"));
  // The servers checkpoint in their modes.
  config.local = false;
  config.mode = "sync";
  EXPECT_THAT(CheckWorkerConfig(config, 1).message(),
              HasSubstr("--checkpoint_dir"));
}

}  // namespace
}  // namespace ps::worker
