#include "server/server_config.h"

#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_testing.h"
#include "gtest/gtest.h"

namespace ps::server {
namespace {

// Flags that make a valid configuration: the defaults and a shard index.
ServerFlags Valid() {
  ServerFlags f;
  f.server_index = 0;
  return f;
}

// A machine of 8 GiB named "ps-server-3".
MachineFacts Machine() {
  MachineFacts m;
  m.memory_bytes = uint64_t{8} << 30;
  m.index_from_hostname = [] { return IndexFromHostname("ps-server-3"); };
  return m;
}

absl::StatusOr<ServerConfig> Make(const ServerFlags& f) {
  return MakeServerConfig(f, Machine());
}

TEST(ServerConfigTest, TheDefaultsWithAShardIndexMakeAConfiguration) {
  absl::StatusOr<ServerConfig> c = Make(Valid());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server_index, 0);
  EXPECT_EQ(c->num_servers, 1);
  EXPECT_EQ(c->address, "127.0.0.1:0");
  EXPECT_EQ(c->coordinator.mode, ConsistencyMode::kSync);
  EXPECT_EQ(c->coordinator.num_workers, 1);
  EXPECT_EQ(c->coordinator.on_worker_failure, FailurePolicy::kElastic);
  ASSERT_TRUE(c->coordinator.lr_schedule.has_value());
  EXPECT_EQ(c->coordinator.lr_schedule->kind(),
            update::LrScheduleKind::kConstant);
  EXPECT_EQ(c->optimizer.kind, update::OptimizerConfig().kind);
  EXPECT_FALSE(c->optimizer_given.optimizer);
  EXPECT_FALSE(c->optimizer_given.learning_rate);
  EXPECT_FALSE(c->checkpoints.has_value());
  EXPECT_EQ(c->restore, RestoreMode::kNone);
  EXPECT_TRUE(c->refuse_non_finite);
  EXPECT_TRUE(c->local_transport);
  // Frames over TCP on a free port: no TLS.
  EXPECT_EQ(c->tcp_data_port, 0);
  EXPECT_TRUE(c->cpus.empty());
  EXPECT_FALSE(c->auth.tls());
  EXPECT_EQ(c->health_port, -1);
  EXPECT_EQ(c->metrics_port, 0);
  // --max_message_mb's default holds the largest chunk clients send.
  EXPECT_GT(c->max_message_bytes,
            static_cast<int>(kMaxChunkElements * sizeof(float)));
}

TEST(ServerConfigTest, EveryBadValueIsRefusedNamingItsFlag) {
  struct Case {
    std::string flag;  // What the message must name.
    std::function<void(ServerFlags&)> set;
  };
  const std::vector<Case> cases = {
      {"--server_index", [](ServerFlags& f) { f.server_index = -2; }},
      {"--server_index",
       [](ServerFlags& f) {
         f.server_index = 2;
         f.num_servers = 2;
       }},
      {"--server_index", [](ServerFlags& f) { f.server_index = -3; }},
      // The hostname's ordinal 3 is not below --num_servers=1.
      {"--server_index", [](ServerFlags& f) { f.server_index = -1; }},
      {"--num_servers", [](ServerFlags& f) { f.num_servers = 0; }},
      {"--num_servers", [](ServerFlags& f) { f.num_servers = 4097; }},
      {"--num_workers", [](ServerFlags& f) { f.num_workers = 0; }},
      {"--num_workers", [](ServerFlags& f) { f.num_workers = 65537; }},
      {"--max_model_bytes", [](ServerFlags& f) { f.max_model_bytes = -1; }},
      {"--max_tensors", [](ServerFlags& f) { f.max_tensors = 0; }},
      {"--max_tensors", [](ServerFlags& f) { f.max_tensors = 10000001; }},
      {"--host", [](ServerFlags& f) { f.host = ""; }},
      {"--port", [](ServerFlags& f) { f.port = -1; }},
      {"--port", [](ServerFlags& f) { f.port = 65536; }},
      {"--mode", [](ServerFlags& f) { f.mode = "bsp"; }},
      {"--staleness",
       [](ServerFlags& f) {
         f.mode = "ssp";
         f.staleness = -1;
       }},
      {"--staleness", [](ServerFlags& f) { f.staleness = 2; }},
      {"--optimizer", [](ServerFlags& f) { f.optimizer = "rmsprop"; }},
      {"--learning_rate", [](ServerFlags& f) { f.learning_rate = -1; }},
      {"--learning_rate", [](ServerFlags& f) { f.learning_rate = 0; }},
      {"--momentum", [](ServerFlags& f) { f.momentum = 1.5f; }},
      {"--weight_decay", [](ServerFlags& f) { f.weight_decay = -0.1f; }},
      {"--beta1", [](ServerFlags& f) { f.beta1 = -0.5f; }},
      {"--beta2", [](ServerFlags& f) { f.beta2 = 2; }},
      {"--epsilon", [](ServerFlags& f) { f.epsilon = 0; }},
      {"--max_message_mb", [](ServerFlags& f) { f.max_message_mb = 0; }},
      {"--max_message_mb", [](ServerFlags& f) { f.max_message_mb = 2048; }},
      {"--worker_timeout",
       [](ServerFlags& f) { f.worker_timeout = absl::ZeroDuration(); }},
      {"--worker_timeout",
       [](ServerFlags& f) { f.worker_timeout = absl::Hours(25); }},
      {"--rejoin_grace",
       [](ServerFlags& f) { f.rejoin_grace = absl::Seconds(-1); }},
      {"--slow_wait_log",
       [](ServerFlags& f) { f.slow_wait_log = absl::Seconds(-1); }},
      {"--on_worker_failure",
       [](ServerFlags& f) { f.on_worker_failure = "retry"; }},
      {"--lr_schedule", [](ServerFlags& f) { f.lr_schedule = "linear"; }},
      {"--min_learning_rate", [](ServerFlags& f) { f.min_learning_rate = 1; }},
      {"--min_learning_rate",
       [](ServerFlags& f) { f.min_learning_rate = -0.1f; }},
      {"--checkpoint_every_steps",
       [](ServerFlags& f) { f.checkpoint_every_steps = -1; }},
      {"--checkpoint_every_seconds",
       [](ServerFlags& f) { f.checkpoint_every_seconds = -1; }},
      {"--checkpoint_every_seconds",
       [](ServerFlags& f) { f.checkpoint_every_seconds = 86400 * 366; }},
      {"--update_log_preallocate_mb",
       [](ServerFlags& f) { f.update_log_preallocate_mb = -1; }},
      {"--checkpoint_dir", [](ServerFlags& f) { f.restore = true; }},
      {"--restore",
       [](ServerFlags& f) {
         f.checkpoint_dir = "/tmp/unused";
         f.extend = true;
       }},
      {"--cpus", [](ServerFlags& f) { f.cpus = "1-0"; }},
      {"--cpus", [](ServerFlags& f) { f.cpus = "x"; }},
      {"--non_finite_gradients",
       [](ServerFlags& f) { f.non_finite_gradients = "zero"; }},
      {"--max_threads", [](ServerFlags& f) { f.max_threads = -1; }},
      {"--max_threads", [](ServerFlags& f) { f.max_threads = 100001; }},
      {"--max_calls_per_rank",
       [](ServerFlags& f) { f.max_calls_per_rank = -1; }},
      {"--max_calls_per_rank",
       [](ServerFlags& f) { f.max_calls_per_rank = 10001; }},
      {"--stream_idle_timeout",
       [](ServerFlags& f) { f.stream_idle_timeout = absl::ZeroDuration(); }},
      {"--job_id", [](ServerFlags& f) { f.job_id = "a b"; }},
      {"--job_id", [](ServerFlags& f) { f.job_id = std::string(129, 'j'); }},
      {"--signal_exit_code", [](ServerFlags& f) { f.signal_exit_code = -1; }},
      {"--signal_exit_code", [](ServerFlags& f) { f.signal_exit_code = 256; }},
      {"--tls_key", [](ServerFlags& f) { f.tls_cert = "/no/cert.pem"; }},
      {"--tls_cert", [](ServerFlags& f) { f.tls_key = "/no/key.pem"; }},
      {"--tls_cert",
       [](ServerFlags& f) {
         f.tls_cert = "/no/cert.pem";
         f.tls_key = "/no/key.pem";
       }},
      {"--tls_client_ca", [](ServerFlags& f) { f.tls_client_ca = "/no/ca"; }},
      {"--token_file", [](ServerFlags& f) { f.token_file = "/no/token"; }},
      {"--tcp_data_port", [](ServerFlags& f) { f.tcp_data_port = -2; }},
      {"--tcp_data_port", [](ServerFlags& f) { f.tcp_data_port = 65536; }},
      {"--tcp_data_port",
       [](ServerFlags& f) {
         f.local_transport = false;
         f.tcp_data_port = 0;
       }},
      {"--tcp_data_port",
       [](ServerFlags& f) {
         f.port = 7000;
         f.tcp_data_port = 7000;
       }},
      {"--tcp_data_port",
       [](ServerFlags& f) {
         f.metrics_port = 9100;
         f.tcp_data_port = 9100;
       }},
      {"--health_port", [](ServerFlags& f) { f.health_port = -2; }},
      {"--health_port", [](ServerFlags& f) { f.health_port = 65536; }},
      {"--health_port",
       [](ServerFlags& f) {
         f.port = 9000;
         f.health_port = 9000;
       }},
      {"--metrics_port", [](ServerFlags& f) { f.metrics_port = -1; }},
      {"--metrics_port", [](ServerFlags& f) { f.metrics_port = 65536; }},
      {"--metrics_host",
       [](ServerFlags& f) {
         f.metrics_port = 9100;
         f.metrics_host = "localhost";
       }},
      {"--metrics_port",
       [](ServerFlags& f) {
         f.port = 9100;
         f.metrics_port = 9100;
       }},
      {"--metrics_port",
       [](ServerFlags& f) {
         f.health_port = 9100;
         f.metrics_port = 9100;
       }},
  };
  for (const Case& c : cases) {
    ServerFlags f = Valid();
    c.set(f);
    absl::StatusOr<ServerConfig> config = Make(f);
    SCOPED_TRACE(c.flag);
    ASSERT_FALSE(config.ok());
    ps::testing::ExpectInvalid(config.status(), c.flag);
  }
}

TEST(ServerConfigTest, NamesTheFirstBadFlagInTheFlagsOrder) {
  ServerFlags f = Valid();
  f.max_threads = -1;
  f.port = -1;
  ps::testing::ExpectInvalid(Make(f).status(), "--port must be in [0, 65535]");
}

TEST(ServerConfigTest, KeepsTheMessagesCallersRead) {
  ServerFlags f;
  ps::testing::ExpectInvalid(
      Make(f).status(),
      "--server_index is required: 0-based, or -1 to take it from the "
      "hostname");
  f = Valid();
  f.mode = "async";
  f.staleness = 3;
  ps::testing::ExpectInvalid(
      Make(f).status(),
      "--staleness applies only to --mode=ssp, not --mode=async");
  // One rule with the launcher: ssp without a staleness is refused too.
  f = Valid();
  f.mode = "ssp";
  f.staleness = 0;
  ps::testing::ExpectInvalid(Make(f).status(),
                             "--mode=ssp needs --staleness=N");
  f = Valid();
  f.restore = true;
  ps::testing::ExpectInvalid(
      Make(f).status(),
      "--restore needs --checkpoint_dir (where to restore from)");
}

TEST(ServerConfigTest, TakesTheShardIndexFromTheHostname) {
  ServerFlags f = Valid();
  f.server_index = -1;
  f.num_servers = 4;
  absl::StatusOr<ServerConfig> c = Make(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server_index, 3);

  MachineFacts unnamed = Machine();
  unnamed.index_from_hostname = [] {
    return absl::StatusOr<int>(absl::UnavailableError("no hostname"));
  };
  EXPECT_EQ(MakeServerConfig(f, unnamed).status(),
            absl::UnavailableError("no hostname"));
}

TEST(ServerConfigTest, BoundsTheModelByTheMachinesMemoryUnlessGiven) {
  ServerFlags f = Valid();
  f.num_servers = 2;
  absl::StatusOr<ServerConfig> c = Make(f);
  ASSERT_TRUE(c.ok()) << c.status();
  // Each of 2 shards may use 1/8 of 8 GiB.
  EXPECT_EQ(c->limits.max_model_bytes, uint64_t{2} << 30);
  f.max_model_bytes = 12345;
  f.max_tensors = 7;
  c = Make(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->limits.max_model_bytes, 12345u);
  EXPECT_EQ(c->limits.max_tensors, 7);
}

TEST(ServerConfigTest, BracketsAnIpv6Host) {
  ServerFlags f = Valid();
  f.host = "::1";
  f.port = 7000;
  absl::StatusOr<ServerConfig> c = Make(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->address, "[::1]:7000");
  f.host = "0.0.0.0";
  c = Make(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->address, "0.0.0.0:7000");
}

TEST(ServerConfigTest, RecordsWhichOptimizerFlagsWereGiven) {
  ServerFlags f = Valid();
  f.optimizer = "sgd";
  f.learning_rate = 0.5f;
  f.momentum = 0.0f;
  absl::StatusOr<ServerConfig> c = Make(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->optimizer.kind, OptimizerKind::kSgd);
  EXPECT_EQ(c->optimizer.learning_rate, 0.5f);
  EXPECT_EQ(c->optimizer.momentum, 0.0f);
  EXPECT_TRUE(c->optimizer_given.optimizer);
  EXPECT_TRUE(c->optimizer_given.learning_rate);
  EXPECT_TRUE(c->optimizer_given.momentum);
  EXPECT_FALSE(c->optimizer_given.weight_decay);
  EXPECT_FALSE(c->optimizer_given.beta1);
  EXPECT_FALSE(c->optimizer_given.beta2);
  EXPECT_FALSE(c->optimizer_given.epsilon);
}

TEST(ServerConfigTest, SetsTheCoordinatorsModeAndLiveness) {
  ServerFlags f = Valid();
  f.mode = "ssp";
  f.staleness = 4;
  f.num_workers = 3;
  f.on_worker_failure = "fail";
  f.worker_timeout = absl::Milliseconds(500);
  f.rejoin_grace = absl::Seconds(7);
  f.slow_wait_log = absl::Seconds(2);
  f.lr_schedule = "cosine";
  f.learning_rate = 0.1f;
  f.min_learning_rate = 0.01f;
  absl::StatusOr<ServerConfig> c = Make(f);
  ASSERT_TRUE(c.ok()) << c.status();
  const CoordinatorOptions& o = c->coordinator;
  EXPECT_EQ(o.mode, ConsistencyMode::kSsp);
  EXPECT_EQ(o.staleness, 4);
  EXPECT_EQ(o.num_workers, 3);
  EXPECT_EQ(o.on_worker_failure, FailurePolicy::kFail);
  EXPECT_EQ(o.worker_timeout, absl::Milliseconds(500));
  EXPECT_EQ(o.rejoin_grace, absl::Seconds(7));
  EXPECT_EQ(o.slow_wait_log, absl::Seconds(2));
  ASSERT_TRUE(o.lr_schedule.has_value());
  EXPECT_EQ(o.lr_schedule->kind(), update::LrScheduleKind::kCosine);
  EXPECT_FLOAT_EQ(o.lr_schedule->At(0, 100), 0.1f);
  EXPECT_FLOAT_EQ(o.lr_schedule->At(100, 100), 0.01f);
}

TEST(ServerConfigTest, CheckpointsAndHowTheShardStarts) {
  ServerFlags f = Valid();
  f.checkpoint_dir = "/tmp/ckpt";
  f.checkpoint_every_steps = 50;
  f.checkpoint_every_seconds = 0;
  absl::StatusOr<ServerConfig> c = Make(f);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->checkpoints.has_value());
  EXPECT_EQ(c->checkpoints->dir, "/tmp/ckpt");
  EXPECT_EQ(c->checkpoints->every_updates, 50u);
  EXPECT_EQ(c->checkpoints->every, absl::ZeroDuration());
  EXPECT_EQ(c->restore, RestoreMode::kNone);
  EXPECT_FALSE(c->coordinator.fast_forward_after_restart);
  EXPECT_FALSE(c->coordinator.replan_after_restore);

  f.restore = true;
  c = Make(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->restore, RestoreMode::kRestore);
  EXPECT_TRUE(c->coordinator.fast_forward_after_restart);
  EXPECT_FALSE(c->coordinator.replan_after_restore);

  f.extend = true;
  c = Make(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->restore, RestoreMode::kExtend);
  EXPECT_TRUE(c->coordinator.fast_forward_after_restart);
  EXPECT_TRUE(c->coordinator.replan_after_restore);
}

TEST(ServerConfigTest, KeepsTheUpdateLogBesideTheCheckpoints) {
  ServerFlags f = Valid();
  f.checkpoint_dir = "/tmp/ckpt";
  absl::StatusOr<ServerConfig> c = Make(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator.update_log_dir, "/tmp/ckpt");
  EXPECT_FALSE(c->coordinator.update_log_fsync);

  f.update_log_fsync = true;
  c = Make(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->coordinator.update_log_fsync);
  EXPECT_EQ(c->coordinator.update_log_preallocate_bytes, uint64_t{64} << 20);

  f.update_log_preallocate_mb = 3;
  c = Make(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator.update_log_preallocate_bytes, uint64_t{3} << 20);

  f.update_log = false;
  c = Make(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator.update_log_dir, "");
  EXPECT_EQ(c->report_file, "");

  f.report_file = "/tmp/server0.report";
  c = Make(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->report_file, "/tmp/server0.report");
}

// A PEM file of `kind` under the test's temporary directory: what
// LoadServerAuth reads (it checks the markers, not the contents).
std::string WritePem(const std::string& name, const std::string& kind) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path =
      absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
  std::ofstream(path) << "-----BEGIN " << kind << "-----\nAA\n-----END " << kind
                      << "-----\n";
  return path;
}

TEST(ServerConfigTest, FramesOverTcpByDefaultButNeverBesideTls) {
  ServerFlags f = Valid();
  f.local_transport = false;
  absl::StatusOr<ServerConfig> c = Make(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tcp_data_port, -1) << "no frames without the local transport";

  f = Valid();
  f.tls_cert = WritePem("cert.pem", "CERTIFICATE");
  f.tls_key = WritePem("key.pem", "PRIVATE KEY");
  c = Make(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tcp_data_port, -1) << "tensors in clear beside TLS";
  f.tcp_data_port = -1;
  c = Make(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tcp_data_port, -1);
  // Asked for, a port beside TLS is refused, not quietly left out.
  for (int port : {0, 7002}) {
    f.tcp_data_port = port;
    c = Make(f);
    ASSERT_FALSE(c.ok()) << port;
    ps::testing::ExpectInvalid(c.status(), "--tcp_data_port");
    EXPECT_NE(c.status().message().find("TLS"), absl::string_view::npos)
        << c.status();
  }
}

TEST(ServerConfigTest, SetsTheResourceBounds) {
  ServerFlags f = Valid();
  f.num_workers = 10;
  absl::StatusOr<ServerConfig> c = Make(f);
  ASSERT_TRUE(c.ok()) << c.status();
  // 0: room for each worker's stream, heartbeat and pull.
  EXPECT_EQ(c->max_threads, 64 + 4 * 10);

  f.max_threads = 5;
  f.max_calls_per_rank = 0;
  f.max_message_mb = 3;
  f.stream_idle_timeout = absl::Seconds(9);
  f.non_finite_gradients = "skip";
  f.tcp_data_port = 7000;
  f.cpus = "0";
  f.job_id = "run-1.a_b";
  f.signal_exit_code = 143;
  f.health_port = 0;
  f.metrics_port = 9100;
  f.metrics_host = "0.0.0.0";
  c = Make(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_threads, 5);
  EXPECT_EQ(c->max_calls_per_rank, 0);
  EXPECT_EQ(c->max_message_bytes, 3 << 20);
  EXPECT_EQ(c->stream_idle_timeout, absl::Seconds(9));
  EXPECT_FALSE(c->refuse_non_finite);
  EXPECT_TRUE(c->local_transport);
  EXPECT_EQ(c->tcp_data_port, 7000);
  EXPECT_EQ(c->cpus, std::vector<int>{0});
  EXPECT_EQ(c->job_id, "run-1.a_b");
  EXPECT_EQ(c->signal_exit_code, 143);
  EXPECT_EQ(c->health_port, 0);
  EXPECT_EQ(c->metrics_port, 9100);
  EXPECT_EQ(c->metrics_host, "0.0.0.0");
}

}  // namespace
}  // namespace ps::server
