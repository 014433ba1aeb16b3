// Runs one training job on this machine: N servers and M workers as local
// processes on 127.0.0.1, every line of their output streamed with a prefix,
// a summary (with the final test accuracy) at the end. The workers run our
// worker binary, or any program given after "--", as torchrun does.
//
//   bazel run //deploy/local:launch -- --num_servers=2 --num_workers=2
//   bazel-bin/deploy/local/launch --mode=ssp --staleness=2
//   bazel-bin/deploy/local/launch --num_workers=4 -- python3 train.py --lr=1
//
// Exit code: 0 when every worker succeeded, 1 when a process failed or the
// cluster could not start, 2 on bad flags, 128 + signal when interrupted.

#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "deploy/local/binary_locator.h"
#include "deploy/local/generated_auth.h"
#include "deploy/local/launch_config.h"
#include "deploy/local/line_writer.h"
#include "deploy/local/local_cluster.h"
#include "deploy/local/summary.h"

ABSL_FLAG(int, num_servers, 2, "Parameter-server shards to start.");
ABSL_FLAG(int, num_workers, 2, "Workers to start.");
ABSL_FLAG(std::string, model, "784-256-128-10",
          "The MLP our worker trains (layer sizes); the servers hold whatever "
          "rank 0 declares.");
ABSL_FLAG(int, epochs, 10, "Training epochs.");
ABSL_FLAG(int, batch_size, 64, "Examples per worker per step.");
ABSL_FLAG(std::string, mode, "sync", "Consistency: sync|ssp|async.");
ABSL_FLAG(int, staleness, 0, "Staleness bound for --mode=ssp.");
ABSL_FLAG(std::string, optimizer, "adam", "adam|sgd.");
ABSL_FLAG(std::string, lr_schedule, "cosine",
          "constant, or cosine: the servers decay the learning rate to 0 over "
          "the planned steps.");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Servers checkpoint into this directory and restore from it when "
          "restarted (empty: no checkpoints).");
ABSL_FLAG(double, learning_rate, 0,
          "Learning rate; 0 keeps the server's default for the optimizer.");
ABSL_FLAG(int64_t, seed, 1,
          "Our worker's seed of the initial weights and the data order.");
ABSL_FLAG(std::string, job_id, "",
          "The job's id, given to servers and workers so that servers of "
          "another job refuse them; empty: a new one for this run.");
ABSL_FLAG(std::string, auth, "none",
          "none: plaintext. tls: the launcher makes a CA, a certificate for "
          "the servers (127.0.0.1) and a job token for this run (openssl), "
          "and clients must check the one and send the other on every call. "
          "mtls: also a certificate the clients must present. The files "
          "live in a private temporary directory, removed at the end.");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "Directory of the Fashion-MNIST IDX files.");
ABSL_FLAG(std::string, device, "auto", "Worker compute device: auto|cpu|cuda.");
ABSL_FLAG(std::string, save_model, "",
          "If set, worker 0 saves the trained model to this path.");
ABSL_FLAG(std::string, server_flags, "",
          "More flags for every server, e.g. \"--momentum=0.5\".");
ABSL_FLAG(std::string, worker_flags, "", "More flags for every worker.");
ABSL_FLAG(std::string, server_binary, "",
          "Server binary; default: //server:server next to this launcher.");
ABSL_FLAG(std::string, worker_binary, "",
          "Worker binary; default: //worker:worker next to this launcher.");
ABSL_FLAG(int, base_port, 0,
          "0: servers pick free ports; else server i listens on base_port+i.");
ABSL_FLAG(absl::Duration, startup_timeout, absl::Seconds(60),
          "How long servers may take to start listening.");
ABSL_FLAG(absl::Duration, shutdown_timeout, absl::Seconds(30),
          "How long servers may take to exit after the workers finished.");
ABSL_FLAG(absl::Duration, kill_grace, absl::Seconds(5),
          "Time between the stop signal and SIGKILL.");

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

// Resolves a binary flag: the user's path, or the sibling build output.
absl::StatusOr<std::string> BinaryFromFlag(const LauncherLocation& location,
                                           const std::string& cwd,
                                           absl::string_view flag_name,
                                           const std::string& value,
                                           absl::string_view workspace_path,
                                           absl::string_view target) {
  if (value.empty()) {
    return FindSiblingBinary(location, workspace_path, target, flag_name);
  }
  std::string path = ResolveUserPath(value, cwd);
  if (absl::Status status = CheckExecutable(flag_name, path); !status.ok()) {
    return status;
  }
  return path;
}

// Flags that configure our worker binary, which a program given after "--"
// does not read.
constexpr const char* kWorkerBinaryFlags[] = {
    "model",  "seed",       "epochs",       "batch_size",   "data_dir",
    "device", "save_model", "worker_flags", "worker_binary"};

absl::Status CheckNoWorkerBinaryFlags() {
  for (const char* name : kWorkerBinaryFlags) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    // Set to something else than its default: a value that would be
    // silently ignored.
    if (flag != nullptr && flag->CurrentValue() != flag->DefaultValue()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name,
          " configures our worker binary; a program given after -- reads "
          "its own arguments (and PS_RANK, PS_SERVERS, ... from its "
          "environment)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LaunchConfig> ConfigFromFlags(const char* argv0,
                                             std::vector<std::string> program) {
  // Under `bazel run` the cwd is the runfiles tree; user paths are relative
  // to where the user typed the command.
  const std::string cwd = EnvOrEmpty("BUILD_WORKING_DIRECTORY");
  LaunchConfig config;
  config.num_servers = absl::GetFlag(FLAGS_num_servers);
  config.num_workers = absl::GetFlag(FLAGS_num_workers);
  config.model = absl::GetFlag(FLAGS_model);
  config.epochs = absl::GetFlag(FLAGS_epochs);
  config.batch_size = absl::GetFlag(FLAGS_batch_size);
  config.mode = absl::GetFlag(FLAGS_mode);
  config.staleness = absl::GetFlag(FLAGS_staleness);
  config.optimizer = absl::GetFlag(FLAGS_optimizer);
  config.learning_rate = absl::GetFlag(FLAGS_learning_rate);
  config.lr_schedule = absl::GetFlag(FLAGS_lr_schedule);
  config.checkpoint_dir =
      ResolveUserPath(absl::GetFlag(FLAGS_checkpoint_dir), cwd);
  config.seed = absl::GetFlag(FLAGS_seed);
  config.job_id = absl::GetFlag(FLAGS_job_id);
  if (config.job_id.empty()) {
    absl::BitGen gen;
    config.job_id = absl::StrFormat("launch-%d-%08x", getpid(),
                                    absl::Uniform<uint32_t>(gen));
  }
  config.data_dir = ResolveUserPath(absl::GetFlag(FLAGS_data_dir), cwd);
  config.device = absl::GetFlag(FLAGS_device);
  config.save_model = ResolveUserPath(absl::GetFlag(FLAGS_save_model), cwd);
  config.base_port = absl::GetFlag(FLAGS_base_port);
  config.startup_timeout = absl::GetFlag(FLAGS_startup_timeout);
  config.shutdown_timeout = absl::GetFlag(FLAGS_shutdown_timeout);
  config.kill_grace = absl::GetFlag(FLAGS_kill_grace);
  absl::StatusOr<AuthMode> auth = ParseAuthMode(absl::GetFlag(FLAGS_auth));
  if (!auth.ok()) return auth.status();
  const bool with_auth = *auth != AuthMode::kNone;
  absl::StatusOr<std::vector<std::string>> server_flags =
      ParseExtraFlags("server_flags", absl::GetFlag(FLAGS_server_flags),
                      ReservedServerFlags(with_auth));
  if (!server_flags.ok()) return server_flags.status();
  config.extra_server_flags = *std::move(server_flags);
  absl::StatusOr<std::vector<std::string>> worker_flags =
      ParseExtraFlags("worker_flags", absl::GetFlag(FLAGS_worker_flags),
                      ReservedWorkerFlags(with_auth));
  if (!worker_flags.ok()) return worker_flags.status();
  config.extra_worker_flags = *std::move(worker_flags);
  config.program = std::move(program);

  const LauncherLocation location{SelfExecutable(), argv0,
                                  EnvOrEmpty("RUNFILES_DIR")};
  absl::StatusOr<std::string> server = BinaryFromFlag(
      location, cwd, "server_binary", absl::GetFlag(FLAGS_server_binary),
      "server/server", "//server:server");
  if (!server.ok()) return server.status();
  config.server_binary = *server;
  if (!config.program.empty()) {
    if (absl::Status status = CheckNoWorkerBinaryFlags(); !status.ok()) {
      return status;
    }
    if (absl::Status status = ValidateLaunchConfig(config); !status.ok()) {
      return status;
    }
    return config;
  }
  absl::StatusOr<std::string> worker = BinaryFromFlag(
      location, cwd, "worker_binary", absl::GetFlag(FLAGS_worker_binary),
      "worker/worker", "//worker:worker");
  if (!worker.ok()) return worker.status();
  config.worker_binary = *worker;

  if (absl::Status status = ValidateLaunchConfig(config); !status.ok()) {
    return status;
  }
  struct stat info;
  if (stat(config.data_dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--data_dir=", config.data_dir, " is not a directory"));
  }
  return config;
}

// Turns SIGINT/SIGTERM/SIGHUP into RequestStop calls on a plain thread, so
// nothing runs inside a signal handler. The signals must be blocked in every
// thread (main blocks them before any thread starts).
class SignalForwarder {
 public:
  SignalForwarder(const sigset_t& signals, LocalCluster* cluster,
                  LineWriter* out)
      : thread_([this, signals, cluster, out] {
          const timespec poll = {0, 100 * 1000 * 1000};
          while (!done_.load()) {
            const int signal = sigtimedwait(&signals, nullptr, &poll);
            if (signal <= 0) continue;
            out->Write("[launch] ",
                       absl::StrCat("got signal ", signal,
                                    ": stopping the cluster (repeat to "
                                    "kill at once)"));
            cluster->RequestStop(signal);
          }
        }) {}
  ~SignalForwarder() {
    done_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Runs a parameter-server training job as local processes.\n"
      "  launch --num_servers=2 --num_workers=2 --mode=sync --epochs=10\n"
      "  launch --num_workers=2 -- PROGRAM [ARGS...]\n"
      "With a PROGRAM, each worker runs it with PS_RANK, PS_NUM_WORKERS, "
      "PS_LOCAL_RANK,\nPS_LOCAL_NUM_WORKERS, PS_NUM_SERVERS, PS_SERVERS and "
      "PS_JOB_ID (and torchrun's\nRANK, WORLD_SIZE, LOCAL_RANK, "
      "LOCAL_WORLD_SIZE) in its environment, with --auth also the paths\n"
      "PS_TLS_CA, PS_TLS_CERT, PS_TLS_KEY and PS_TOKEN_FILE; the servers are "
      "stopped\nonce every copy has exited 0.");
  // Everything after the first "--" is the worker program, untouched.
  int flag_count = argc;
  std::vector<std::string> program;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") {
      flag_count = i;
      program.assign(argv + i + 1, argv + argc);
      if (program.empty()) {
        std::fprintf(stderr, "launch: no program after --\n");
        return 2;
      }
      break;
    }
  }
  std::vector<char*> positional = absl::ParseCommandLine(flag_count, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr,
                 "launch: unexpected argument '%s' (a worker program goes "
                 "after --)\n",
                 positional[1]);
    return 2;
  }
  absl::StatusOr<LaunchConfig> config =
      ConfigFromFlags(argv[0], std::move(program));
  if (!config.ok()) {
    std::fprintf(stderr, "launch: %s\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }

  // Before any thread exists, so that every thread inherits the mask and
  // only the forwarder receives these signals. Children get a clean mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop_signals, s);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // A closed stdout (launch | head) must not kill us before the children.
  signal(SIGPIPE, SIG_IGN);

  LineWriter out(LineWriter::FileSink(stdout));
  // Made after the flags are checked; removed when Main returns, after
  // every process has stopped.
  std::unique_ptr<GeneratedAuth> auth;
  if (const AuthMode mode = *ParseAuthMode(absl::GetFlag(FLAGS_auth));
      mode != AuthMode::kNone) {
    absl::StatusOr<std::unique_ptr<GeneratedAuth>> made =
        GeneratedAuth::Create(mode);
    if (!made.ok()) {
      std::fprintf(stderr, "launch: %s\n",
                   std::string(made.status().message()).c_str());
      return 1;
    }
    auth = *std::move(made);
    config->auth = auth->files();
    out.Write("[launch] ",
              absl::StrCat(mode == AuthMode::kMtls ? "mutual TLS" : "TLS",
                           " with a job token on every call; this run's CA, "
                           "certificates and token are in ",
                           auth->dir()));
  }
  LocalCluster cluster(MakeClusterSpec(*config), &out);
  ClusterResult result;
  {
    SignalForwarder forwarder(stop_signals, &cluster, &out);
    result = cluster.Run();
  }
  for (const std::string& line : SummaryLines(result)) {
    out.Write("[launch] ", line);
  }
  return result.ExitCode();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) { return ps::Main(argc, argv); }
