// The parameter-server shard binary. See --help (the flags are in
// server_flags.cc); launchers read --port_file to learn the bound port.
// Here: the order in which the server's parts start and stop; the parts are
// tested classes (server_config.h, shard_builder.h, server_transports.h,
// ...).
#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/cpu_affinity.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/malloc_tuning.h"
#include "common/process_control.h"
#include "common/stop_signals.h"
#include "server/server_config.h"
#include "server/server_flags.h"
#include "server/server_metrics_endpoint.h"
#include "server/server_transports.h"
#include "server/shard_builder.h"
#include "server/shard_host.h"
#include "server/shard_report.h"
#include "server/startup_summary.h"
#include "spdlog/spdlog.h"

namespace ps::server {
namespace {

constexpr absl::Duration kShutdownGrace = absl::Seconds(5);
// Under --on_worker_failure=fail: how long the other workers' requests are
// still answered (with FAILED_PRECONDITION, naming the dead worker) before
// the exit.
constexpr absl::Duration kFailureGrace = absl::Seconds(2);

// `signals` were installed first thing in main.
int Run(const ServerConfig& config, StopSignals* signals) {
  // What a flood of refused calls made malloc keep goes back to the kernel.
  FreedMemoryTrimmer trimmer(absl::Seconds(2), size_t{16} << 20);
  ShutdownRequest shutdown;
  ShardBuilder builder(config, [&shutdown](const absl::Status& outcome) {
    if (outcome.ok()) {
      shutdown.Request("every worker is done (or dead)");
    } else {
      shutdown.Request(std::string(outcome.message()), kExitFailed);
    }
  });
  ShardHost host(builder.ForDeclarations(), config.limits);
  // After `host`, which its scrapes read: stops before it is destroyed.
  // The shard's checkpointer keeps the metrics it counts in.
  std::unique_ptr<ServerMetricsEndpoint> metrics;
  if (config.metrics_port > 0) {
    absl::StatusOr<std::unique_ptr<ServerMetricsEndpoint>> started =
        ServerMetricsEndpoint::Start(config.metrics_host, config.metrics_port,
                                     config.server_index, &host);
    if (!started.ok()) {
      spdlog::error("--metrics_port: {}", started.status().message());
      return kExitFailed;
    }
    metrics = *std::move(started);
    builder.set_metrics(metrics->metrics());
  }
  absl::StatusOr<std::unique_ptr<DeclaredShard>> restored = builder.AtStart();
  if (!restored.ok()) {
    const absl::Status& s = restored.status();
    spdlog::error("{}", s.ToString());
    // A checkpoint of another run (mode, model, shard count) is refused
    // with FailedPrecondition: configuration, which no retry fixes.
    return s.code() == absl::StatusCode::kInvalidArgument ||
                   s.code() == absl::StatusCode::kFailedPrecondition
               ? kExitBadConfig
               : kExitFailed;
  }
  if (*restored != nullptr) host.Install(*std::move(restored));

  ServerTransports transports(
      config, &host, metrics != nullptr ? metrics->metrics().get() : nullptr);

  // A signal asks for the shutdown; the first request wins.
  RequestShutdownOnSignal(signals, config.signal_exit_code, &shutdown);

  if (absl::Status s = transports.Listen(); !s.ok()) {
    spdlog::error("{}", s.ToString());
    shutdown.Request("startup failed");
    return kExitFailed;
  }
  const DeclaredShard* shard = host.get();
  for (const std::string& line : StartupSummary(
           config,
           {transports.port(), transports.health_port(),
            transports.serves_local(),
            shard != nullptr ? std::optional<size_t>(shard->store->num_slices())
                             : std::nullopt})) {
    spdlog::info("{}", line);
  }
  if (!config.port_file.empty()) {
    if (absl::Status s = WritePortFile(config.port_file, transports.port());
        !s.ok()) {
      spdlog::error("{}", s.ToString());
      shutdown.Request("port file failed");
      transports.StopListening();
      return kExitFailed;
    }
  }

  const ShutdownRequest::Reason reason = shutdown.Wait();
  if (reason.exit_code == 0 || reason.by_signal) {
    spdlog::info("shutting down: {}", reason.text);
  } else {
    spdlog::error("shutting down in {}: {}",
                  absl::FormatDuration(kFailureGrace), reason.text);
    // Workers' requests meanwhile get FAILED_PRECONDITION naming the dead
    // worker, rather than UNAVAILABLE, which they would retry.
    absl::SleepFor(kFailureGrace);
  }
  // Wake waiting pulls first so that the transports need not wait out their
  // polls; the final checkpoint then sees no update in flight.
  host.StopAndCheckpoint();
  transports.Shutdown(absl::Now() + kShutdownGrace);
  if (const std::optional<ShardReport> report = transports.ReportFields();
      report.has_value() && !config.report_file.empty()) {
    if (absl::Status s = WriteShardReport(config.report_file, *report);
        !s.ok()) {
      spdlog::error("--report_file: {}", s.ToString());
    }
  }
  return reason.exit_code;
}

}  // namespace
}  // namespace ps::server

int main(int argc, char** argv) {
  // First, before any thread exists, so every thread inherits the mask
  // (common/stop_signals.h).
  absl::StatusOr<std::unique_ptr<ps::StopSignals>> signals =
      ps::StopSignals::Install({SIGINT, SIGTERM});
  if (!signals.ok()) {
    std::fprintf(stderr, "server: %s\n",
                 std::string(signals.status().message()).c_str());
    return ps::kExitFailed;
  }
  // Before any thread allocates, so that the trimmer in Run can give back
  // what a flood of calls left behind.
  ps::UseOneMallocArena();
  ps::KeepFreedMemory();
  // Debian's Abseil checks every lock order at run time; a release binary
  // need not pay for it on each call's locks.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::SetProgramUsageMessage(
      "A parameter-server shard: holds its slices of the model, applies "
      "workers' gradients and serves weights over gRPC.\n"
      "  server --server_index=0 --num_servers=2 --num_workers=4 "
      "--mode=sync --port_file=/tmp/ps0.port\n"
      "It holds whatever model rank 0 declares (or a restored checkpoint "
      "holds).\n"
      "Exit codes: 0 every worker is done, or stopped by SIGTERM/SIGINT "
      "after the final checkpoint (see --signal_exit_code); 1 failed (the "
      "log says why; worth a retry); 2 bad configuration: flags, a "
      "--checkpoint_dir it cannot write, or a checkpoint of another run "
      "(never retry).");
  ps::server::ListServerFlagsInHelp();
  if (absl::Status s = ps::CheckFlagSyntax(argc, argv); !s.ok()) {
    std::fprintf(stderr, "server: %s\n", std::string(s.message()).c_str());
    return ps::kExitBadConfig;
  }
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "server: unexpected argument \"%s\" (see --help)\n",
                 rest[1]);
    return ps::kExitBadConfig;
  }
  absl::StatusOr<ps::server::ServerConfig> config =
      ps::server::MakeServerConfig(ps::server::ServerFlagValues(),
                                   ps::server::MachineFacts::OfThisMachine());
  if (!config.ok()) {
    std::fprintf(stderr, "server: %s\n",
                 std::string(config.status().message()).c_str());
    return ps::kExitBadConfig;
  }
  if (!config->cpus.empty()) {
    if (absl::Status s = ps::RestrictProcessToCpus(config->cpus); !s.ok()) {
      std::fprintf(stderr, "server: --cpus: %s\n",
                   std::string(s.message()).c_str());
      return ps::kExitBadConfig;
    }
  }
  ps::InitLogging("server", config->server_index);
  return ps::server::Run(*config, signals->get());
}
