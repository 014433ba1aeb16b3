#ifndef PS_SERVER_SERVER_CONFIG_H_
#define PS_SERVER_SERVER_CONFIG_H_

// The server's configuration: its flags' values as given (ServerFlags) and
// what they mean once checked (ServerConfig).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/chunk_wire.h"
#include "common/model_spec.h"
#include "server/auth.h"
#include "server/checkpoint_choice.h"
#include "server/checkpointer.h"
#include "server/coordinator_options.h"
#include "server/hostname_index.h"
#include "update/optimizer.h"

namespace ps::server {

// Not a valid --server_index: tells "not given" apart from -1.
inline constexpr int kServerIndexUnset = -2;

// The server's flags, one field each, as given on the command line. The
// defaults are the flags' defaults: server_main.cc defines the flags with
// them. A plain value, so that tests need no flag registry.
struct ServerFlags {
  int server_index = kServerIndexUnset;
  int num_servers = 1;
  int num_workers = 1;
  int64_t max_model_bytes = 0;
  int max_tensors = 100000;
  std::string host = "127.0.0.1";
  int port = 0;
  std::string port_file;
  std::string report_file;
  std::string mode = "sync";
  int staleness = 0;
  // Unset: OptimizerConfig's default, and the flag counts as not given.
  std::optional<std::string> optimizer;
  std::optional<float> learning_rate;
  std::optional<float> momentum;
  std::optional<float> weight_decay;
  std::optional<float> beta1;
  std::optional<float> beta2;
  std::optional<float> epsilon;
  int max_message_mb = (kMaxChunkElements * sizeof(float) >> 20) + 1;
  std::string lr_schedule = "constant";
  float min_learning_rate = 0.0f;
  absl::Duration worker_timeout = absl::Seconds(10);
  std::string on_worker_failure = "elastic";
  absl::Duration rejoin_grace = absl::Seconds(60);
  absl::Duration slow_wait_log = absl::Seconds(5);
  std::string checkpoint_dir;
  int64_t checkpoint_every_steps = 200;
  int64_t checkpoint_every_seconds = 60;
  bool update_log = true;
  bool update_log_fsync = false;
  int64_t update_log_preallocate_mb = 64;
  int testonly_kill_in_checkpoint = 0;
  std::string cpus;
  int signal_exit_code = 0;
  std::string non_finite_gradients = "refuse";
  int max_threads = 0;
  int max_calls_per_rank = 8;
  absl::Duration stream_idle_timeout = absl::Seconds(120);
  bool local_transport = true;
  // Unset: 0 (a free port) without TLS, -1 (none) with it.
  std::optional<int> tcp_data_port;
  std::string job_id;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  std::string token_file;
  int health_port = -1;
  int metrics_port = 0;
  std::string metrics_host = "127.0.0.1";
  bool restore = false;
  bool extend = false;
};

// What the configuration takes from the machine rather than the flags.
struct MachineFacts {
  // Bounds the model for --max_model_bytes=0.
  uint64_t memory_bytes = uint64_t{1} << 30;
  // The shard index for --server_index=-1.
  std::function<absl::StatusOr<int>()> index_from_hostname =
      IndexFromThisHostname;

  // With this machine's memory (1 GiB if the system does not say).
  static MachineFacts OfThisMachine();
};

// Everything the server needs, validated from its flags.
struct ServerConfig {
  int server_index = 0;
  int num_servers = 1;
  DeclarationLimits limits;
  // host:port to listen on ([host]:port for an IPv6 literal).
  std::string address;
  std::string port_file;
  // The final report for programs (server/shard_report.h); empty: none.
  std::string report_file;
  CoordinatorOptions coordinator;
  // From the flags; a declared optimizer replaces it (ResolveOptimizer).
  update::OptimizerConfig optimizer;
  update::OptimizerFlagsGiven optimizer_given;
  int max_message_bytes = 0;
  std::optional<CheckpointPolicy> checkpoints;  // Unset: none.
  RestoreMode restore = RestoreMode::kNone;
  std::vector<int> cpus;  // Empty: any.
  std::string job_id;
  bool refuse_non_finite = true;
  int max_threads = 0;
  int max_calls_per_rank = 8;
  absl::Duration stream_idle_timeout;
  bool local_transport = true;
  // The frames over TCP to workers on other hosts, at this port (0: a free
  // one); -1: none. Never >= 0 with TLS or without local_transport.
  int tcp_data_port = 0;
  int signal_exit_code = 0;
  ServerAuth auth;
  int health_port = -1;  // -1: none.
  std::string metrics_host;
  int metrics_port = 0;  // 0: no metrics.
};

// Checks every flag and derives the configuration. A bad value gives
// InvalidArgument naming its flag ("--port must be in [0, 65535], got -1"),
// the first in the flags' order; --server_index=-1 on a machine whose
// hostname cannot be read gives what `machine.index_from_hostname` returns.
// Reads the TLS and token files the flags name.
absl::StatusOr<ServerConfig> MakeServerConfig(const ServerFlags& flags,
                                              const MachineFacts& machine);

}  // namespace ps::server

#endif  // PS_SERVER_SERVER_CONFIG_H_
