// HostSession on loopback: two "hosts" in one process, each a LocalCluster
// of shell stand-ins, joined through a real rendezvous.

#include "deploy/local/multi_host_launch.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/temp_dir_testing.h"
#include "deploy/local/local_cluster_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A free port on loopback for host 0's rendezvous.
int FreePort() {
  RendezvousState state(RendezvousOptions{"", {}, *PlanHosts(1, 1, 1, 0)},
                        absl::Now());
  absl::StatusOr<std::unique_ptr<RendezvousServer>> probe =
      RendezvousServer::Start("127.0.0.1:0", &state);
  return probe.ok() ? (*probe)->port() : 0;
}

HostSessionOptions Options(int host, int port) {
  HostSessionOptions options;
  options.placement.num_hosts = 2;
  options.placement.host_index = host;
  options.placement.rendezvous = absl::StrCat("127.0.0.1:", port);
  options.advertise_address = "127.0.0.1";
  options.settings = {{"epochs", "1"}};
  options.host_timeout = absl::Minutes(2);
  options.rendezvous_timeout = absl::Minutes(2);
  return options;
}

LaunchConfig Job() {
  LaunchConfig config;
  config.num_servers = 2;
  config.num_workers = 2;
  config.job_id = "job-host0";
  return config;
}

struct HostRun {
  absl::StatusOr<std::unique_ptr<HostSession>> session;
  ClusterResult result;
  std::vector<std::string> lines;
};

// Runs host `host`'s share: servers until `done` has 2 files, workers
// running `worker_script` (then touching their done file).
void RunHost(int host, int port, const std::string& done,
             const std::string& worker_script, HostRun* run) {
  run->session = HostSession::Join(Options(host, port), Job());
  if (!run->session.ok()) return;
  LaunchConfig config = Job();
  (*run->session)->Apply(&config);
  ClusterSpec spec =
      ShellCluster(config.host_servers, {ServerUntilDone(done, 2)},
                   config.host_workers, {WorkerThenDone(done, worker_script)});
  spec.first_server = config.first_server;
  spec.first_rank = config.first_rank;
  // Stand-in servers write port 4000 + index on 127.0.0.1.
  (*run->session)->Configure(&spec, absl::Minutes(1));
  Output output;
  LocalCluster cluster(std::move(spec), output.writer());
  (*run->session)->StartHeartbeats([&cluster](std::string why) {
    cluster.Abort(std::move(why));
  });
  run->result = cluster.Run();
  (*run->session)->Finish(&run->result);
  run->lines = output.lines();
}

TEST(HostSessionTest, TwoHostsRunTheirSharesAndHostZeroHasEveryOutcome) {
  const int port = FreePort();
  ASSERT_NE(port, 0);
  const std::string done = DoneDir("two_hosts");
  HostRun runs[2];
  std::thread other(
      [&] { RunHost(1, port, done, "echo servers $1", &runs[1]); });
  RunHost(0, port, done, "echo 'final test accuracy: 0.75'", &runs[0]);
  other.join();
  for (const HostRun& run : runs) {
    ASSERT_TRUE(run.session.ok()) << run.session.status();
    EXPECT_TRUE(run.result.status.ok()) << run.result.status;
  }
  EXPECT_EQ((*runs[0].session)->Line(),
            "host 0 (127.0.0.1) of 2 (flags): worker 0, server 0; "
            "rendezvous at 127.0.0.1:" +
                absl::StrCat(port) + " (served here); job job-host0");
  EXPECT_THAT(runs[1].lines,
              Contains("[worker 1] servers 127.0.0.1:4000,127.0.0.1:4001"));
  EXPECT_EQ(runs[0].result.final_test_accuracy, 0.75);
  EXPECT_THAT(runs[0].result.notes,
              Contains("host 1 (127.0.0.1): worker 1: exited with code 0"));
}

TEST(HostSessionTest, AFailureOnOneHostEndsBothAndHostZeroNamesIt) {
  const int port = FreePort();
  ASSERT_NE(port, 0);
  const std::string done = DoneDir("host_fails");
  HostRun runs[2];
  std::thread other(
      [&] { RunHost(1, port, done, "echo 'out of luck'; exit 1", &runs[1]); });
  // Host 0's worker would wait for ever: only the failure ends it.
  RunHost(0, port, done, "exec sleep 1000", &runs[0]);
  other.join();
  ASSERT_TRUE(runs[0].session.ok()) << runs[0].session.status();
  EXPECT_EQ(runs[0].result.ExitCode(), kExitFailed);
  EXPECT_THAT(runs[0].result.status.message(),
              HasSubstr("host 1 (127.0.0.1): worker 1 exited with code 1: "
                        "out of luck"));
  EXPECT_THAT(runs[1].result.status.message(),
              HasSubstr("host 1 (127.0.0.1): worker 1 exited with code 1"));
}

TEST(HostSessionTest, SharedSettingsLeavePathsToEachHost) {
  const std::map<std::string, std::string> shared = SharedJobSettings(
      {{"epochs", "2"}, {"data_dir", "/a"}, {"checkpoint_dir", "/b"}},
      {{"num_hosts", "2"}});
  EXPECT_EQ(shared, (std::map<std::string, std::string>{{"epochs", "2"},
                                                        {"num_hosts", "2"}}));
}

// The launcher's flags that HostOptionsFromSettings reads, with launch's
// defaults, set as `given` says.
RunSettings HostFlags(const std::map<std::string, std::string>& given) {
  using Type = RunSettings::Type;
  RunSettings settings;
  settings.Define("num_hosts", Type::kInt, "1");
  settings.Define("host_index", Type::kInt, "0");
  settings.Define("rendezvous", Type::kString, "");
  settings.Define("advertise_address", Type::kString, "");
  settings.Define("server_hosts", Type::kInt, "0");
  settings.Define("host_timeout", Type::kDuration, "10s");
  settings.Define("rendezvous_timeout", Type::kDuration, "5m");
  settings.Define("max_restarts", Type::kInt, "3");
  settings.Define("auth", Type::kString, "none");
  settings.Define("auth_ca", Type::kString, "");
  settings.Define("epochs", Type::kInt, "10");
  settings.Define("data_dir", Type::kString, "/data");
  settings.Define("save_model", Type::kString, "");
  for (const auto& [name, value] : given) {
    EXPECT_TRUE(settings.Set(name, value).ok()) << name;
  }
  return settings;
}

absl::StatusOr<std::optional<HostSessionOptions>> FromFlags(
    const std::map<std::string, std::string>& flags,
    LaunchKind kind = LaunchKind::kStart, const LaunchConfig& job = Job()) {
  std::set<std::string> given;
  for (const auto& [name, value] : flags) given.insert(name);
  return HostOptionsFromSettings(
      HostFlags(flags), given, kind, {}, "/cwd", job,
      [](const char*) -> const char* { return nullptr; });
}

// Our worker's job of `replicas` x `stages`, a shard per stage's group.
LaunchConfig Pipelined(int stages, int replicas) {
  LaunchConfig config = Job();
  config.pipeline_stages = stages;
  config.num_workers = stages * replicas;
  config.num_servers = 1;
  return config;
}

const std::map<std::string, std::string> kTwoHosts = {
    {"num_hosts", "2"},
    {"host_index", "1"},
    {"rendezvous", "127.0.0.1:29400"},
    {"advertise_address", "10.0.0.2"}};

TEST(HostOptionsTest, OneHostIsNoSession) {
  absl::StatusOr<std::optional<HostSessionOptions>> options = FromFlags({});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_FALSE(options->has_value());
}

TEST(HostOptionsTest, TwoHostsShareTheJobFlagsButNotThePaths) {
  absl::StatusOr<std::optional<HostSessionOptions>> options =
      FromFlags(kTwoHosts);
  ASSERT_TRUE(options.ok()) << options.status();
  ASSERT_TRUE(options->has_value());
  const HostSessionOptions& host = **options;
  EXPECT_EQ(host.placement.host_index, 1);
  EXPECT_EQ(host.advertise_address, "10.0.0.2");
  EXPECT_EQ(host.settings.at("epochs"), "10");
  EXPECT_EQ(host.settings.at("num_hosts"), "2");
  EXPECT_EQ(host.settings.count("data_dir"), 0u);
  EXPECT_EQ(host.host_timeout, absl::Seconds(10));
}

TEST(HostOptionsTest, WhatSeveralHostsDoNotDoIsRefusedNamingTheFlag) {
  auto with = [](std::string name, std::string value) {
    std::map<std::string, std::string> flags = kTwoHosts;
    flags[name] = value;
    return FromFlags(flags).status();
  };
  EXPECT_THAT(with("host_timeout", "0s").message(),
              HasSubstr("--host_timeout must be positive"));
  EXPECT_THAT(with("rendezvous_timeout", "-1s").message(),
              HasSubstr("--rendezvous_timeout must be positive"));
  EXPECT_THAT(with("auth", "tls").message(),
              HasSubstr("--auth with --num_hosts > 1 needs --auth_ca=DIR"));
  EXPECT_THAT(with("advertise_address", "a b").message(),
              HasSubstr("--advertise_address must be"));
  EXPECT_THAT(with("server_hosts", "2").message(),
              HasSubstr("--server_hosts must be in"));
  for (const absl::Status& status :
       {with("host_timeout", "0s"), with("auth", "tls")}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(HostOptionsTest, AResumeOrExtensionIsComparedAcrossHostsWithTheJobId) {
  for (LaunchKind kind : {LaunchKind::kResume, LaunchKind::kExtend}) {
    absl::StatusOr<std::optional<HostSessionOptions>> options =
        FromFlags(kTwoHosts, kind);
    ASSERT_TRUE(options.ok()) << options.status();
    ASSERT_TRUE(options->has_value());
    const std::map<std::string, std::string>& shared = (*options)->settings;
    const char* mine = kind == LaunchKind::kResume ? "resume" : "extend";
    const char* other = kind == LaunchKind::kResume ? "extend" : "resume";
    EXPECT_EQ(shared.at(mine), "on");
    EXPECT_EQ(shared.count(other), 0u);
    EXPECT_EQ(shared.at("job_id"), Job().job_id);
  }
  // A fresh start carries neither: a host that resumes differs from it.
  absl::StatusOr<std::optional<HostSessionOptions>> fresh =
      FromFlags(kTwoHosts);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ((*fresh)->settings.count("resume"), 0u);
  EXPECT_EQ((*fresh)->settings.count("job_id"), 0u);
}

TEST(HostOptionsTest, AuthWithTheJobsCaIsAccepted) {
  std::map<std::string, std::string> flags = kTwoHosts;
  flags["auth"] = "mtls";
  flags["auth_ca"] = "/secrets/job-ca";
  absl::StatusOr<std::optional<HostSessionOptions>> options = FromFlags(flags);
  ASSERT_TRUE(options.ok()) << options.status();
  ASSERT_TRUE(options->has_value());
  EXPECT_EQ((*options)->settings.at("auth"), "mtls");
  // The CA's path is each host's own.
  EXPECT_EQ((*options)->settings.count("auth_ca"), 0u);
}

TEST(HostOptionsTest, StagesAcrossHostsRunWithoutTlsOrAsWholeReplicas) {
  absl::StatusOr<std::optional<HostSessionOptions>> options =
      FromFlags(kTwoHosts, LaunchKind::kStart, Pipelined(2, 1));
  ASSERT_TRUE(options.ok()) << options.status();
  ASSERT_TRUE(options->has_value());
  // Every host gives replica 0's stages a path to save, or none does.
  EXPECT_EQ((*options)->settings.at("save_model"), "");
  std::map<std::string, std::string> flags = kTwoHosts;
  flags["save_model"] = "/here/model.bin";
  options = FromFlags(flags, LaunchKind::kStart, Pipelined(2, 1));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ((*options)->settings.at("save_model"), "(a path on each host)");

  flags = kTwoHosts;
  flags["auth"] = "mtls";
  flags["auth_ca"] = "/secrets/job-ca";
  // The stages of one replica would talk in clear across hosts.
  const absl::Status refused =
      FromFlags(flags, LaunchKind::kStart, Pipelined(2, 1)).status();
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_THAT(refused.message(),
              HasSubstr("links between them are not encrypted"));
  // Each host runs a whole replica: no link leaves a host.
  options = FromFlags(flags, LaunchKind::kStart, Pipelined(2, 2));
  EXPECT_TRUE(options.ok()) << options.status();
}

TEST(HostSessionTest, StagesOnTwoHostsGetEachOthersLinkAndOneSecret) {
  const int port = FreePort();
  ASSERT_NE(port, 0);
  const LaunchConfig job = Pipelined(2, 1);
  absl::StatusOr<std::unique_ptr<HostSession>> sessions[2] = {
      absl::UnknownError(""), absl::UnknownError("")};
  std::thread other(
      [&] { sessions[1] = HostSession::Join(Options(1, port), job); });
  sessions[0] = HostSession::Join(Options(0, port), job);
  other.join();
  LaunchConfig configs[2] = {job, job};
  for (int host = 0; host < 2; ++host) {
    ASSERT_TRUE(sessions[host].ok()) << sessions[host].status();
    (*sessions[host])->Apply(&configs[host]);
  }
  // Host 0 runs stage 0 (rank 0) and listens for stage 1 on host 1.
  const StageLinkPlan& zero = configs[0].stage_links;
  ASSERT_EQ(zero.listen.size(), 1u);
  EXPECT_THAT(zero.listen.at(0), ::testing::StartsWith("127.0.0.1:"));
  EXPECT_TRUE(zero.previous.empty());
  const StageLinkPlan& one = configs[1].stage_links;
  EXPECT_TRUE(one.listen.empty());
  EXPECT_EQ(one.previous, (std::map<int, std::string>{{1, zero.listen.at(0)}}));
  EXPECT_EQ(zero.secret, one.secret);
  EXPECT_GE(zero.secret.size(), 16u);
  // Each host runs its stage's server group.
  EXPECT_EQ(configs[0].first_server, 0);
  EXPECT_EQ(configs[1].first_server, 1);
  EXPECT_EQ(configs[1].host_servers, 1);
  EXPECT_THAT((*sessions[1])->Line(),
              HasSubstr("stage links over TCP: rank 1 reaches 127.0.0.1:"));
  // The workers are told where, and the secret only in their environment.
  const std::vector<std::string> argv = WorkerArgv(configs[1], 1, {"a:1"});
  EXPECT_THAT(argv, Contains(absl::StrCat("--stage_link_previous=",
                                          zero.listen.at(0))));
  for (const std::string& arg : argv) {
    EXPECT_THAT(arg, ::testing::Not(HasSubstr(one.secret)));
  }
  const ClusterSpec spec = MakeClusterSpec(configs[1]);
  ASSERT_TRUE(spec.worker_environment);
  EXPECT_THAT(spec.worker_environment(1, {"a:1"}),
              Contains(std::pair<std::string, std::string>(
                  "PS_STAGE_LINK_SECRET", one.secret)));
}

TEST(HostOptionsTest, AJobCaWithoutAuthIsRefused) {
  // On one host too.
  absl::StatusOr<std::optional<HostSessionOptions>> options =
      FromFlags({{"auth_ca", "/secrets/job-ca"}});
  EXPECT_TRUE(absl::IsInvalidArgument(options.status())) << options.status();
  EXPECT_THAT(options.status().message(), HasSubstr("--auth_ca needs --auth"));
}

// An empty file named as shard `shard`'s checkpoint (only names are read).
void TouchCheckpoint(const std::string& dir, int shard) {
  std::ofstream(absl::StrCat(dir, "/shard-", shard, "-7.ckpt")).put('x');
}

TEST(CheckResumedShardsTest, AcceptsAHostThatHoldsItsOwnShards) {
  const std::string dir = testing::FreshTestDir("own-shards");
  TouchCheckpoint(dir, 2);
  TouchCheckpoint(dir, 3);
  EXPECT_TRUE(CheckResumedShards(dir, 4, 2, 2).ok());
  // One of its shards stopped before its first checkpoint.
  EXPECT_TRUE(CheckResumedShards(dir, 6, 2, 3).ok());
  // A run stopped before any checkpoint; a host without shards.
  EXPECT_TRUE(CheckResumedShards(testing::FreshTestDir("none"), 4, 0, 2).ok());
  EXPECT_TRUE(
      CheckResumedShards(testing::FreshTestDir("no-shards"), 4, 4, 0).ok());
}

TEST(CheckResumedShardsTest, RefusesShardsThatMovedNamingThem) {
  const std::string dir = testing::FreshTestDir("moved");
  TouchCheckpoint(dir, 2);
  TouchCheckpoint(dir, 3);
  const absl::Status status = CheckResumedShards(dir, 4, 0, 2);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("holds the checkpoints of shards 2,3"));
  EXPECT_THAT(status.message(), HasSubstr("gives this host shards 0-1"));
  EXPECT_THAT(status.message(),
              HasSubstr("--num_hosts, --host_index and --server_hosts"));
  // Now a worker-only host (--server_hosts): it holds shards it no longer runs.
  EXPECT_FALSE(CheckResumedShards(dir, 4, 4, 0).ok());
}

TEST(CheckResumedShardsTest, EachStagesGroupIsCheckedInItsOwnFolder) {
  const std::string dir = testing::FreshTestDir("stages");
  LaunchConfig config = Pipelined(2, 1);
  config.checkpoint_dir = dir;
  // This host runs server 1: shard 0 of stage 1's group.
  config.first_server = 1;
  config.host_servers = 1;
  std::filesystem::create_directories(dir + "/stage1");
  TouchCheckpoint(dir + "/stage1", 0);
  EXPECT_TRUE(CheckResumedHostShards(config).ok());
  std::filesystem::create_directories(dir + "/stage0");
  TouchCheckpoint(dir + "/stage0", 0);
  const absl::Status moved = CheckResumedHostShards(config);
  EXPECT_TRUE(absl::IsInvalidArgument(moved)) << moved;
  EXPECT_THAT(moved.message(), HasSubstr("stage0 holds the checkpoints"));
}

TEST(LaunchAuthOptionsTest, CertificatesNameTheHostsAddresses) {
  EXPECT_TRUE(LaunchAuthOptions(std::nullopt, "").server_names.empty());
  EXPECT_EQ(LaunchAuthOptions(std::nullopt, "/ca").job_ca, "/ca");
  HostSessionOptions host;
  host.advertise_address = "10.0.0.2";
  host.placement.host_index = 1;
  host.placement.rendezvous = "rdzv.example:29400";
  EXPECT_THAT(LaunchAuthOptions(host, "/ca").server_names,
              ElementsAre("10.0.0.2"));
  // Host 0 serves the rendezvous too, at the name the others dial.
  host.placement.host_index = 0;
  EXPECT_THAT(LaunchAuthOptions(host, "/ca").server_names,
              ElementsAre("10.0.0.2", "rdzv.example"));
  host.placement.rendezvous = "10.0.0.2:29400";
  EXPECT_THAT(LaunchAuthOptions(host, "/ca").server_names,
              ElementsAre("10.0.0.2"));
}

}  // namespace
}  // namespace ps
