#ifndef PS_COMMON_METRICS_HTTP_H_
#define PS_COMMON_METRICS_HTTP_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/gauge.h"
#include "prometheus/labels.h"
#include "prometheus/registry.h"

namespace ps {

// A process's Prometheus endpoint: GET http://HOST:PORT/metrics answers the
// text exposition of `registry()` and of every collectable added, read at
// each scrape. The HTTP server is prometheus-cpp's (civetweb), serving from
// threads of its own.
//
// Thread-safe. Owns the HTTP server; shares the registry and the
// collectables, which stay alive at least as long as the endpoint, so a
// scrape never reads a destroyed one. The server stops in the destructor,
// before anything it reads is released.
class MetricsEndpoint {
 public:
  // Listens on `host`:`port` (an IPv4 address; port 0 picks a free one).
  // Unavailable naming the address when it cannot listen there (the port
  // is taken, or the host is not this machine's).
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      absl::string_view host, int port);
  ~MetricsEndpoint();

  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // Where callers build their metric families.
  const std::shared_ptr<prometheus::Registry>& registry() const {
    return registry_;
  }
  // Also collects `collectable` at each scrape (e.g. one that reads state
  // other objects keep).
  void Add(std::shared_ptr<prometheus::Collectable> collectable);

  // The port listened on.
  int port() const { return port_; }
  // "http://HOST:PORT/metrics".
  std::string url() const;

 private:
  MetricsEndpoint(std::string host,
                  std::unique_ptr<prometheus::Exposer> exposer);

  const std::shared_ptr<prometheus::Registry> registry_;
  const std::string host_;
  absl::Mutex mu_;
  std::vector<std::shared_ptr<prometheus::Collectable>> added_
      ABSL_GUARDED_BY(mu_);
  // Declared last: destroyed first, so no scrape outlives what it reads.
  const std::unique_ptr<prometheus::Exposer> exposer_;
  const int port_;
};

// Checks the binaries' --metrics_host and --metrics_port flags: an IPv4
// address, and a port in [0, 65535] (0: no endpoint). InvalidArgument
// naming the flag otherwise.
absl::Status ValidateMetricsFlags(absl::string_view host, int port);

// A new family `name` in `registry` holding one series, `labels`: how a
// process declares most of its own metrics.
prometheus::Counter& AddCounter(prometheus::Registry& registry,
                                const std::string& name,
                                const std::string& help,
                                const prometheus::Labels& labels);
prometheus::Gauge& AddGauge(prometheus::Registry& registry,
                            const std::string& name, const std::string& help,
                            const prometheus::Labels& labels);

// The text exposition of `collectable`, as a scrape answers it (for tests
// and reports).
std::string SerializeMetrics(const prometheus::Collectable& collectable);

}  // namespace ps

#endif  // PS_COMMON_METRICS_HTTP_H_
