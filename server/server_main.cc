// The parameter-server shard binary. See --help; launchers pass the flags
// below and read --port_file to learn the bound port.
#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "server/hostname_index.h"
#include "server/optimizer.h"
#include "server/parameter_service.h"
#include "server/shard_store.h"
#include "server/update_coordinator.h"
#include "spdlog/spdlog.h"

// Not a valid index: tells "not given" apart from -1.
constexpr int kServerIndexUnset = -2;

ABSL_FLAG(int, server_index, kServerIndexUnset,
          "This shard's index, in [0, --num_servers); -1 takes it from the "
          "hostname's trailing -<ordinal> (a Kubernetes StatefulSet pod).");
ABSL_FLAG(int, num_servers, 1, "Number of parameter-server shards.");
ABSL_FLAG(int, num_workers, 1, "Number of workers (ranks 0..n-1).");
ABSL_FLAG(std::string, model, "784-256-128-10",
          "MLP layer sizes, input first, e.g. 784-256-128-10.");
ABSL_FLAG(std::string, host, "127.0.0.1", "Address to listen on.");
ABSL_FLAG(int, port, 0, "Port to listen on; 0 picks a free one.");
ABSL_FLAG(
    std::string, port_file, "",
    "If set, the bound port is written here (atomically) once listening.");
ABSL_FLAG(std::string, mode, "sync", "Consistency: sync, ssp or async.");
ABSL_FLAG(int, staleness, 0, "ssp only: how many clocks a worker may lead.");
ABSL_FLAG(std::string, optimizer, "adam", "adam or sgd.");
ABSL_FLAG(float, learning_rate, 0.001f, "Optimizer learning rate.");
ABSL_FLAG(float, momentum, 0.9f, "sgd momentum; 0 is plain SGD.");
ABSL_FLAG(float, weight_decay, 0.0f, "L2 penalty added to the gradient.");
ABSL_FLAG(float, beta1, 0.9f, "adam beta1.");
ABSL_FLAG(float, beta2, 0.999f, "adam beta2.");
ABSL_FLAG(float, epsilon, 1e-8f, "adam epsilon.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the weight initializer.");
ABSL_FLAG(int, max_message_mb, 64, "Largest gRPC message, in MiB.");

namespace ps::server {
namespace {

constexpr int kExitBadFlags = 2;
constexpr int kMaxServers = 4096;
constexpr int kMaxWorkers = 65536;
constexpr absl::Duration kShutdownGrace = absl::Seconds(5);

// Everything main needs, validated from the flags.
struct ServerConfig {
  int server_index = 0;
  int num_servers = 1;
  ModelSpec model;
  std::string address;
  std::string port_file;
  CoordinatorOptions coordinator;
  OptimizerConfig optimizer;
  uint64_t seed = 1;
  int max_message_bytes = 0;
};

absl::Status OutOfRange(absl::string_view flag, int64_t value, int64_t lo,
                        int64_t hi) {
  return absl::InvalidArgumentError(absl::StrCat(
      "--", flag, " must be in [", lo, ", ", hi, "], got ", value));
}

absl::StatusOr<ServerConfig> ConfigFromFlags() {
  ServerConfig c;
  c.num_servers = absl::GetFlag(FLAGS_num_servers);
  if (c.num_servers < 1 || c.num_servers > kMaxServers) {
    return OutOfRange("num_servers", c.num_servers, 1, kMaxServers);
  }
  c.server_index = absl::GetFlag(FLAGS_server_index);
  if (c.server_index == kServerIndexUnset) {
    return absl::InvalidArgumentError(
        "--server_index is required: 0-based, or -1 to take it from the "
        "hostname");
  }
  if (c.server_index == -1) {
    absl::StatusOr<int> from_hostname = IndexFromThisHostname();
    if (!from_hostname.ok()) return from_hostname.status();
    c.server_index = *from_hostname;
  }
  if (c.server_index < 0 || c.server_index >= c.num_servers) {
    return OutOfRange("server_index", c.server_index, 0, c.num_servers - 1);
  }
  const int num_workers = absl::GetFlag(FLAGS_num_workers);
  if (num_workers < 1 || num_workers > kMaxWorkers) {
    return OutOfRange("num_workers", num_workers, 1, kMaxWorkers);
  }
  absl::StatusOr<std::vector<int>> layers =
      ParseLayerSizes(absl::GetFlag(FLAGS_model));
  if (!layers.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model: ", layers.status().message()));
  }
  c.model = MlpModelSpec(*layers);

  const std::string host = absl::GetFlag(FLAGS_host);
  if (host.empty()) return absl::InvalidArgumentError("--host is empty");
  const int port = absl::GetFlag(FLAGS_port);
  if (port < 0 || port > 65535) return OutOfRange("port", port, 0, 65535);
  // An IPv6 literal needs brackets before the port.
  c.address = host.find(':') != std::string::npos
                  ? absl::StrCat("[", host, "]:", port)
                  : absl::StrCat(host, ":", port);
  c.port_file = absl::GetFlag(FLAGS_port_file);

  absl::StatusOr<ConsistencyMode> mode =
      ParseConsistencyMode(absl::GetFlag(FLAGS_mode));
  if (!mode.ok()) return mode.status();
  c.coordinator.mode = *mode;
  c.coordinator.num_workers = num_workers;
  c.coordinator.staleness = absl::GetFlag(FLAGS_staleness);
  if (c.coordinator.staleness < 0 || c.coordinator.staleness > 1000000) {
    return OutOfRange("staleness", c.coordinator.staleness, 0, 1000000);
  }
  if (c.coordinator.staleness != 0 && *mode != ConsistencyMode::kSsp) {
    return absl::InvalidArgumentError(
        absl::StrCat("--staleness=", c.coordinator.staleness,
                     " only applies to --mode=ssp, not --mode=",
                     ConsistencyModeName(*mode)));
  }

  absl::StatusOr<OptimizerKind> kind =
      ParseOptimizerKind(absl::GetFlag(FLAGS_optimizer));
  if (!kind.ok()) return kind.status();
  c.optimizer.kind = *kind;
  c.optimizer.learning_rate = absl::GetFlag(FLAGS_learning_rate);
  c.optimizer.momentum = absl::GetFlag(FLAGS_momentum);
  c.optimizer.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  c.optimizer.beta1 = absl::GetFlag(FLAGS_beta1);
  c.optimizer.beta2 = absl::GetFlag(FLAGS_beta2);
  c.optimizer.epsilon = absl::GetFlag(FLAGS_epsilon);
  if (absl::Status s = ValidateOptimizerConfig(c.optimizer); !s.ok()) return s;

  c.seed = absl::GetFlag(FLAGS_seed);
  const int mb = absl::GetFlag(FLAGS_max_message_mb);
  if (mb < 1 || mb > 2047) return OutOfRange("max_message_mb", mb, 1, 2047);
  c.max_message_bytes = mb << 20;
  return c;
}

// Checks that every flag on the command line exists and its value parses,
// so that such mistakes exit with kExitBadFlags like any other bad value
// (absl::ParseCommandLine would exit 1). Handles --name=value, --name value,
// --bool and --nobool.
absl::Status CheckFlagSyntax(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "-")) continue;  // Positional.
    absl::ConsumePrefix(&arg, "-");
    const size_t eq = arg.find('=');
    absl::string_view name = arg.substr(0, eq);
    // absl's own flags (--help, --flagfile, ...) are left to absl.
    for (absl::string_view builtin :
         {"help", "helpfull", "helpshort", "helppackage", "helpon", "helpmatch",
          "version", "only_check_args", "flagfile", "fromenv", "tryfromenv",
          "undefok"}) {
      if (name == builtin) name = "";
    }
    if (name.empty()) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && eq == absl::string_view::npos &&
        absl::StartsWith(name, "no")) {
      flag = absl::FindCommandLineFlag(name.substr(2));
      if (flag != nullptr && flag->IsOfType<bool>()) continue;
      flag = nullptr;
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    absl::string_view value;
    if (eq != absl::string_view::npos) {
      value = arg.substr(eq + 1);
    } else if (flag->IsOfType<bool>()) {
      continue;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " needs a value"));
    }
    // Parsing sets the flag; ParseCommandLine sets it again to the same.
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, "=", value, ": ", error));
    }
  }
  return absl::OkStatus();
}

// Writes `port` to `path` via `path.tmp` and rename, so a reader never sees
// a partial number.
absl::Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = absl::StrCat(path, ".tmp");
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "--port_file: cannot create ", tmp, ": ", std::strerror(errno)));
  }
  const std::string text = absl::StrCat(port, "\n");
  const bool written =
      std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !written) {
    return absl::UnavailableError(
        absl::StrCat("--port_file: cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("--port_file: cannot rename ",
                                               tmp, " to ", path, ": ",
                                               std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Why the server should stop, set once by the signal thread or the Done
// RPC; main waits on it. Thread-safe.
class ShutdownRequest {
 public:
  void Request(const std::string& reason) {
    absl::MutexLock lock(&mu_);
    if (reason_.empty()) reason_ = reason;
  }
  std::string Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](std::string* r) { return !r->empty(); }, &reason_));
    return reason_;
  }
  bool requested() {
    absl::MutexLock lock(&mu_);
    return !reason_.empty();
  }

 private:
  absl::Mutex mu_;
  std::string reason_ ABSL_GUARDED_BY(mu_);
};

// Turns SIGINT/SIGTERM into a ShutdownRequest without doing anything in a
// signal handler: the signals are blocked in every thread (the mask is set
// before any thread starts and inherited) and this thread takes them with
// sigtimedwait. Stops when the request is made, by a signal or otherwise.
class SignalWatcher {
 public:
  // Must run before any other thread is created.
  static void BlockShutdownSignals(sigset_t* set) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, set, nullptr);
  }

  explicit SignalWatcher(const sigset_t& set, ShutdownRequest* request)
      : thread_([set, request] {
          const timespec poll = {0, 200 * 1000 * 1000};
          while (!request->requested()) {
            const int sig = sigtimedwait(&set, nullptr, &poll);
            if (sig > 0)
              request->Request(
                  absl::StrCat("signal ", sig, " (", strsignal(sig), ")"));
          }
        }) {}
  ~SignalWatcher() { thread_.join(); }

 private:
  std::thread thread_;
};

int Run(const ServerConfig& config) {
  sigset_t signals;
  SignalWatcher::BlockShutdownSignals(&signals);
  absl::StatusOr<Partition> partition =
      Partition::Create(config.model, config.num_servers);
  if (!partition.ok()) {
    spdlog::error("{}", partition.status().ToString());
    return kExitBadFlags;
  }
  absl::StatusOr<std::unique_ptr<ShardStore>> store = ShardStore::Create(
      *partition, config.server_index, config.seed, config.optimizer);
  if (!store.ok()) {
    spdlog::error("{}", store.status().ToString());
    return kExitBadFlags;
  }
  absl::StatusOr<std::unique_ptr<UpdateCoordinator>> coordinator =
      UpdateCoordinator::Create(store->get(), config.coordinator);
  if (!coordinator.ok()) {
    spdlog::error("{}", coordinator.status().ToString());
    return kExitBadFlags;
  }

  ShutdownRequest shutdown;
  ServiceOptions service_options;
  // Leave room for the message's other fields.
  service_options.max_chunk_elements =
      static_cast<uint64_t>(config.max_message_bytes - (64 << 10)) / 4;
  ParameterService service(
      store->get(), coordinator->get(), service_options,
      [&shutdown] { shutdown.Request("every worker is done"); });

  SignalWatcher watcher(signals, &shutdown);

  int port = 0;
  absl::StatusOr<std::unique_ptr<grpc::Server>> server = StartGrpcServer(
      config.address, &service, config.max_message_bytes, &port);
  if (!server.ok()) {
    spdlog::error("{}", server.status().ToString());
    shutdown.Request("startup failed");
    return 1;
  }
  const uint64_t elements = (*store)->num_elements();
  spdlog::info(
      "listening on {} (port {}), mode {}{}, {} workers, optimizer {}, "
      "{} slices, {} elements ({:.2f} MiB) of {} servers",
      config.address, port,
      std::string(ConsistencyModeName(config.coordinator.mode)),
      config.coordinator.mode == ConsistencyMode::kSsp
          ? absl::StrCat(" staleness ", config.coordinator.staleness)
          : "",
      config.coordinator.num_workers,
      std::string(OptimizerKindName(config.optimizer.kind)),
      (*store)->num_slices(), elements,
      static_cast<double>(elements * sizeof(float)) / (1 << 20),
      config.num_servers);
  for (const Slice& s : (*store)->slices()) {
    spdlog::info("  slice {} [{}, {})",
                 partition->model().tensors[s.tensor_id].name, s.offset,
                 s.offset + s.num_elements);
  }
  if (!config.port_file.empty()) {
    if (absl::Status s = WritePortFile(config.port_file, port); !s.ok()) {
      spdlog::error("{}", s.ToString());
      shutdown.Request("port file failed");
      (*server)->Shutdown();
      return 1;
    }
  }

  const std::string reason = shutdown.Wait();
  spdlog::info("shutting down: {}", reason);
  // Wake waiting pulls first so that Shutdown need not wait out their polls.
  (*coordinator)->Shutdown();
  (*server)->Shutdown(absl::ToChronoTime(absl::Now() + kShutdownGrace));
  (*server)->Wait();
  spdlog::info("final report:\n{}", service.Report());
  return 0;
}

}  // namespace
}  // namespace ps::server

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "A parameter-server shard: holds its slices of the model, applies "
      "workers' gradients and serves weights over gRPC.\n"
      "  server --server_index=0 --num_servers=2 --num_workers=4 "
      "--model=784-256-128-10 --mode=sync --port_file=/tmp/ps0.port");
  if (absl::Status s = ps::server::CheckFlagSyntax(argc, argv); !s.ok()) {
    std::fprintf(stderr, "server: %s\n", std::string(s.message()).c_str());
    return ps::server::kExitBadFlags;
  }
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "server: unexpected argument \"%s\" (see --help)\n",
                 rest[1]);
    return ps::server::kExitBadFlags;
  }
  absl::StatusOr<ps::server::ServerConfig> config =
      ps::server::ConfigFromFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "server: %s\n",
                 std::string(config.status().message()).c_str());
    return ps::server::kExitBadFlags;
  }
  ps::InitLogging("server", config->server_index);
  return ps::server::Run(*config);
}
