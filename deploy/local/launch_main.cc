// Runs one training job on this machine: N servers and M workers as local
// processes on 127.0.0.1, in a run directory that keeps every process's log,
// the checkpoints and the curves; the terminal shows one progress line (or
// every line, --output=stream) and a summary at the end. Failed processes
// are restarted (--max_restarts). The workers run our worker binary, or any
// program given after "--", as torchrun does.
//
//   bazel run //deploy/local:launch -- --num_servers=2 --num_workers=2
//   bazel-bin/deploy/local/launch --mode=ssp --staleness=2
//   bazel-bin/deploy/local/launch --resume=runs/20260314-101500-3fa2
//   bazel-bin/deploy/local/launch --extend=runs/20260314-101500-3fa2
//       --epochs=20
//   bazel-bin/deploy/local/launch --num_workers=4 -- python3 train.py --lr=1
//
// Exit code: 0 when every worker succeeded, 1 when a process failed or the
// cluster could not start, 2 on bad flags, 128 + signal when interrupted.

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/cpu_affinity.h"
#include "common/exit_codes.h"
#include "common/process_control.h"
#include "common/stop_signals.h"
#include "deploy/local/allreduce_mode.h"
#include "deploy/local/binary_locator.h"
#include "deploy/local/cluster_output.h"
#include "deploy/local/config_from_settings.h"
#include "deploy/local/generated_auth.h"
#include "deploy/local/launch_config.h"
#include "deploy/local/line_writer.h"
#include "deploy/local/local_cluster.h"
#include "deploy/local/multi_host_launch.h"
#include "deploy/local/progress_output.h"
#include "deploy/local/run_directory.h"
#include "deploy/local/run_flags.h"
#include "deploy/local/run_report.h"
#include "deploy/local/run_settings.h"
#include "deploy/local/run_setup.h"
#include "deploy/local/training_progress.h"

ABSL_DECLARE_FLAG(std::string, make_auth_ca);

namespace ps {
namespace {

std::string EnvOrEmpty(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

std::string SelfExecutable() {
  char buffer[4096];
  const ssize_t n = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : "";
}

// Where the user typed the command: under `bazel run` the cwd is the
// runfiles tree.
std::string UserDirectory() {
  std::string cwd = EnvOrEmpty("BUILD_WORKING_DIRECTORY");
  if (cwd.empty()) {
    std::error_code ec;
    cwd = std::filesystem::current_path(ec).string();
  }
  return cwd;
}

int BadFlags(absl::string_view message) {
  std::fprintf(stderr, "launch: %s\n", std::string(message).c_str());
  return kExitBadConfig;
}

// An error that ends the launch: bad configuration or a failure.
int Failed(const absl::Status& status) {
  if (absl::IsInvalidArgument(status)) return BadFlags(status.message());
  std::fprintf(stderr, "launch: %s\n", std::string(status.message()).c_str());
  return kExitFailed;
}

// With --auth, makes `*auth`: this host's certificates. For --num_hosts > 1:
// joins the job's hosts (host 0 serving the rendezvous) and gives `config`
// this host's share. Returns the exit code to end with, kExitOk to go on
// (`*session` null on one host).
int JoinHosts(const RunSettings& settings, const std::set<std::string>& given,
              const RunSetup& setup, const std::string& cwd,
              LaunchConfig* config, std::unique_ptr<HostSession>* session,
              std::unique_ptr<GeneratedAuth>* auth) {
  absl::StatusOr<std::optional<HostSessionOptions>> options =
      HostOptionsFromSettings(
          settings, given, setup.kind(), setup.program(), cwd, *config,
          [](const char* name) {
            return static_cast<const char*>(std::getenv(name));
          });
  if (!options.ok()) return BadFlags(options.status().message());
  if (const AuthMode mode = *ParseAuthMode(settings.Text("auth"));
      mode != AuthMode::kNone) {
    absl::StatusOr<std::unique_ptr<GeneratedAuth>> made = GeneratedAuth::Create(
        mode, LaunchAuthOptions(*options, settings.Text("auth_ca")));
    if (!made.ok()) return Failed(made.status());
    *auth = *std::move(made);
    if (options->has_value()) (*options)->auth = (*auth)->files();
  }
  if (!options->has_value()) return kExitOk;
  if (IsAllreduce(*config)) {
    absl::Status placed =
        PlaceAllreduceOnHosts((*options)->server_hosts, config);
    if (!placed.ok()) return BadFlags(placed.message());
  }
  const HostPlacement& placement = (*options)->placement;
  std::fprintf(stderr,
               "launch: host %d of %d: joining the rendezvous at %s (at most "
               "--rendezvous_timeout=%s)\n",
               placement.host_index, placement.num_hosts,
               placement.rendezvous.c_str(),
               absl::FormatDuration((*options)->rendezvous_timeout).c_str());
  absl::StatusOr<std::unique_ptr<HostSession>> joined =
      HostSession::Join(**std::move(options), *config);
  if (!joined.ok()) return Failed(joined.status());
  *session = *std::move(joined);
  (*session)->Apply(config);
  if (setup.kind() != LaunchKind::kStart && !config->checkpoint_dir.empty()) {
    if (absl::Status s = CheckResumedHostShards(*config); !s.ok()) {
      // Told through the rendezvous, so that every host ends now naming
      // this one, rather than wait for it until --rendezvous_timeout.
      ClusterResult refused;
      refused.status = std::move(s);
      refused.bad_configuration = true;
      (*session)->Finish(&refused);
      return Failed(refused.status);
    }
  }
  return kExitOk;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Runs a parameter-server training job as local processes.\n"
      "  launch --num_servers=2 --num_workers=2 --mode=sync --epochs=10\n"
      "  launch --resume=runs/DIR        go on with a stopped or failed run\n"
      "  launch --extend=runs/DIR --epochs=20   train a run further\n"
      "  launch --num_workers=2 -- PROGRAM [ARGS...]\n"
      "Each run has a directory (--run_dir; default runs/<date>-<time>-<id>)"
      " holding\nrun.txt, logs/, checkpoints/, curves.csv and curves.png.\n"
      "With a PROGRAM, each worker runs it with PS_RANK, PS_NUM_WORKERS, "
      "PS_LOCAL_RANK,\nPS_LOCAL_NUM_WORKERS, PS_NUM_SERVERS, PS_SERVERS and "
      "PS_JOB_ID (and torchrun's\nRANK, WORLD_SIZE, LOCAL_RANK, "
      "LOCAL_WORLD_SIZE) in its environment, with --auth also the paths\n"
      "PS_TLS_CA, PS_TLS_CERT, PS_TLS_KEY and PS_TOKEN_FILE; the servers are "
      "stopped\nonce every copy has exited 0.\n"
      "Exit codes: 0 every worker succeeded; 1 a process failed for good or "
      "the cluster\ncould not start; 2 bad flags, or a run that cannot be "
      "started, resumed or\nextended, or a process that exited 2 (bad "
      "configuration: a resume would fail\nthe same way); 128+N stopped by "
      "signal N.");
  // Everything after the first "--" is the worker program, untouched.
  int flag_count = argc;
  std::vector<std::string> program;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") {
      flag_count = i;
      program.assign(argv + i + 1, argv + argc);
      if (program.empty()) return BadFlags("no program after --");
      break;
    }
  }
  for (int i = 1; i < flag_count; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-help" || arg == "--helpshort") {
      PrintFlagHelp(/*full=*/false, "deploy/local/");
      return 0;
    }
    if (arg == "--helpfull" || arg == "-helpfull") {
      PrintFlagHelp(/*full=*/true, "");
      return 0;
    }
  }
  if (absl::Status s = CheckFlagSyntax(flag_count, argv); !s.ok()) {
    return BadFlags(s.message());
  }
  std::vector<char*> positional = absl::ParseCommandLine(flag_count, argv);
  if (positional.size() > 1) {
    return BadFlags(absl::StrCat("unexpected argument '", positional[1],
                                 "' (a worker program goes after --)"));
  }
  const std::set<std::string> given = FlagsOnCommandLine(flag_count, argv);
  if (const std::string dir = absl::GetFlag(FLAGS_make_auth_ca); !dir.empty()) {
    if (absl::Status s = MakeJobCa(dir); !s.ok()) return BadFlags(s.message());
    std::fprintf(stderr, "launch: made %s: copy it to every host, --auth_ca\n",
                 dir.c_str());
    return kExitOk;
  }
  const std::string cwd = UserDirectory();
  // The run's settings are a value from here on: --resume and --extend set
  // the run's own in it, never in the flag registry.
  absl::StatusOr<RunSetup> setup = RunSetup::Plan(
      RunSettings::FromFlagsDefinedIn("deploy/local/launch_flags.cc"), given,
      std::move(program), cwd, absl::Now());
  if (!setup.ok()) return BadFlags(setup.status().message());
  const RunSettings& settings = setup->settings();
  const LauncherLocation location{SelfExecutable(), argv[0],
                                  EnvOrEmpty("RUNFILES_DIR")};
  absl::StatusOr<LaunchConfig> config = ConfigFromSettings(
      settings, location, cwd, setup->program(), setup->path());
  if (!config.ok()) return BadFlags(config.status().message());
  for (const std::string& warning : LaunchConfigWarnings(*config)) {
    std::fprintf(stderr, "launch: warning: %s\n", warning.c_str());
  }
  if (!config->program.empty() && std::getenv("OMP_NUM_THREADS") == nullptr) {
    // The math libraries' threads of workers sharing the cores would
    // otherwise outnumber them, and spin.
    config->program_threads = std::max<int>(
        1, static_cast<int>(UsableCpus().size()) / config->num_workers);
  }
  // Servers restore an extended run's checkpoints with --extend: the newest
  // may be of the run before the extension.
  config->extend = setup->extended();
  std::unique_ptr<HostSession> session;
  // Made once the flags are checked, before the hosts join; removed when
  // Main returns, after every process has stopped.
  std::unique_ptr<GeneratedAuth> auth;
  if (const int code =
          JoinHosts(settings, given, *setup, cwd, &*config, &session, &auth);
      code != kExitOk) {
    return code;
  }
  if (absl::Status s = setup->Begin(*config, absl::Now()); !s.ok()) {
    return Failed(s);
  }

  // Before any thread exists, so that every thread inherits the mask and
  // only the signals' thread receives these signals. Children get a clean
  // mask.
  absl::StatusOr<std::unique_ptr<StopSignals>> stop_signals =
      StopSignals::Install({SIGINT, SIGTERM, SIGHUP});
  if (!stop_signals.ok()) {
    std::fprintf(stderr, "launch: %s\n",
                 std::string(stop_signals.status().message()).c_str());
    return kExitFailed;
  }
  // A closed stdout (launch | head) must not kill us before the children.
  signal(SIGPIPE, SIG_IGN);

  std::string output = settings.Text("output");
  if (output == "auto") {
    output = config->program.empty() ? "progress" : "stream";
  }
  LineWriter writer(LineWriter::FileSink(stdout));
  StreamedOutput streamed(&writer);
  TrainingProgress progress;
  ProgressTap tap(&progress, &streamed);
  ProgressOutput progress_line(
      stdout, isatty(fileno(stdout)) == 1,
      settings.Get<absl::Duration>("progress_interval"), &progress);
  ClusterOutput* console =
      output == "stream" ? static_cast<ClusterOutput*>(&tap) : &progress_line;
  absl::StatusOr<std::unique_ptr<LogFiles>> logs =
      LogFiles::Create(setup->dir().File("logs"), console);
  if (!logs.ok()) {
    std::fprintf(stderr, "launch: %s\n",
                 std::string(logs.status().message()).c_str());
    return kExitFailed;
  }
  ClusterOutput* out = logs->get();
  for (const std::string& line : setup->OpeningLines(*config)) {
    out->LauncherLine(LaunchLevel::kNotice, line);
  }
  if (session != nullptr) {
    out->LauncherLine(LaunchLevel::kNotice, session->Line());
  }
  if (config->metrics_port_base != 0) {
    out->LauncherLine(LaunchLevel::kNotice, MetricsPortsLine(*config));
  }
  if (config->program_threads > 0) {
    out->LauncherLine(LaunchLevel::kNotice,
                      absl::StrCat("each worker gets OMP_NUM_THREADS=",
                                   config->program_threads,
                                   " (its share of the CPUs; set "
                                   "OMP_NUM_THREADS to choose)"));
  }
  if (auth != nullptr) {
    config->auth = auth->files();
    out->LauncherLine(
        LaunchLevel::kNotice,
        absl::StrCat(auth->files().mtls() ? "mutual TLS" : "TLS",
                     " with a job token on every call",
                     session != nullptr ? " (and on the rendezvous)" : "",
                     "; this run's certificates and token are in ",
                     auth->dir()));
  }
  ClusterSpec spec = MakeClusterSpec(*config);
  if (session != nullptr) session->Configure(&spec, config->startup_timeout);
  LocalCluster cluster(std::move(spec), out);
  if (session != nullptr) {
    session->StartHeartbeats([&cluster, out](std::string why) {
      out->LauncherLine(LaunchLevel::kError,
                        absl::StrCat("the job failed elsewhere: ", why));
      cluster.Abort(std::move(why));
    });
  }
  // Each signal becomes a RequestStop call, on a plain thread.
  (*stop_signals)->Watch([&cluster, out](int signal) {
    out->LauncherLine(LaunchLevel::kNotice,
                      absl::StrCat("got signal ", signal,
                                   ": stopping the cluster (repeat to kill at "
                                   "once)"));
    cluster.RequestStop(signal);
  });
  ClusterResult result = cluster.Run();
  stop_signals->reset();
  if (session != nullptr) {
    if (session->is_host_zero()) {
      out->LauncherLine(LaunchLevel::kNotice,
                        "this host is done; waiting for every host's outcome");
    }
    session->Finish(&result);
  }
  progress_line.Close();

  for (const std::string& line :
       FinishRun(result, *config, progress.History(),
                 setup->kind() != LaunchKind::kStart, cwd, setup->dir(),
                 setup->record())) {
    // Each host goes on with its own run directory, as it was placed.
    out->LauncherLine(
        LaunchLevel::kNotice,
        session != nullptr && absl::StartsWith(line, "next: ")
            ? absl::StrCat(line,
                           " (on every host, each with its own run "
                           "directory, and the --num_hosts, --host_index, "
                           "--server_hosts and --rendezvous of this run)")
            : line);
  }
  return result.ExitCode();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) { return ps::Main(argc, argv); }
