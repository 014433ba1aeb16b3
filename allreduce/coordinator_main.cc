// The all-reduce mode's coordinator: where the workers of one job find each
// other (proto/ring_rendezvous.proto). It holds no model and sees no gradient;
// the launcher starts it in place of the parameter servers
// (--mode=allreduce) and stops it once the workers are done.
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "allreduce/rendezvous_service.h"
#include "allreduce/rendezvous_state.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/process_control.h"
#include "common/stop_signals.h"
#include "grpcpp/grpcpp.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, host, "0.0.0.0", "Address to listen on");
ABSL_FLAG(int, port, 0, "Port to listen on; 0 picks a free one");
ABSL_FLAG(std::string, port_file, "",
          "Writes the bound port here (PATH.tmp, then renamed)");
ABSL_FLAG(int, num_workers, 1, "Workers in the ring");
ABSL_FLAG(std::string, job_id, "", "Refuses workers of another job");

namespace ps::allreduce {
namespace {

int Run(StopSignals* signals) {
  const int num_workers = absl::GetFlag(FLAGS_num_workers);
  if (num_workers < 1) {
    spdlog::error("bad flags: --num_workers must be at least 1, got {}",
                  num_workers);
    return kExitBadConfig;
  }
  RendezvousState state(num_workers);
  RendezvousService service(&state, absl::GetFlag(FLAGS_job_id));
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(
      absl::StrCat(absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_port)),
      grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    spdlog::error("cannot listen on {}:{}", absl::GetFlag(FLAGS_host),
                  absl::GetFlag(FLAGS_port));
    return kExitFailed;
  }
  ShutdownRequest shutdown;
  RequestShutdownOnSignal(signals, kExitOk, &shutdown);
  if (const std::string path = absl::GetFlag(FLAGS_port_file); !path.empty()) {
    if (absl::Status s = WritePortFile(path, port); !s.ok()) {
      spdlog::error("--port_file: {}", s.message());
      return kExitFailed;
    }
  }
  spdlog::info("all-reduce coordinator for {} workers on port {}", num_workers,
               port);
  const ShutdownRequest::Reason reason = shutdown.Wait();
  spdlog::info("stopping: {}", reason.text);
  // Joins still waiting end with the server.
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  return reason.exit_code;
}

}  // namespace
}  // namespace ps::allreduce

int main(int argc, char** argv) {
  absl::StatusOr<std::unique_ptr<ps::StopSignals>> signals =
      ps::StopSignals::Install({SIGINT, SIGTERM});
  if (!signals.ok()) {
    std::fprintf(stderr, "coordinator: %s\n",
                 std::string(signals.status().message()).c_str());
    return ps::kExitFailed;
  }
  absl::SetProgramUsageMessage(
      "The all-reduce mode's coordinator: the workers' rendezvous.\n"
      "  allreduce_coordinator --num_workers=2 --port_file=/tmp/ring.port\n"
      "Exit codes: 0 stopped by SIGTERM/SIGINT; 1 failed; 2 bad flags.");
  if (absl::Status s = ps::CheckFlagSyntax(argc, argv); !s.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", std::string(s.message()).c_str());
    return ps::kExitBadConfig;
  }
  absl::ParseCommandLine(argc, argv);
  ps::InitLogging("coordinator", 0);
  return ps::allreduce::Run(signals->get());
}
