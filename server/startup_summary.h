#ifndef PS_SERVER_STARTUP_SUMMARY_H_
#define PS_SERVER_STARTUP_SUMMARY_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "server/server_config.h"

namespace ps::server {

// What the server serves once it listens, besides its configuration.
struct ServingFacts {
  int port = 0;
  int health_port = 0;  // 0: health checks on `port` only.
  bool local_transport = false;
  // Slices of a restored model the shard holds; nullopt: it waits for rank
  // 0's declaration.
  std::optional<size_t> restored_slices;
};

// The lines the server logs once it listens, so that one look at the log
// says how it runs: where it listens, its shard, mode, workers, optimizer,
// CPUs, job and model; how it is reached; how it treats dead workers, its
// learning rate and its checkpoints.
std::vector<std::string> StartupSummary(const ServerConfig& config,
                                        const ServingFacts& facts);

}  // namespace ps::server

#endif  // PS_SERVER_STARTUP_SUMMARY_H_
