#include "common/metrics_http.h"

#include <arpa/inet.h>

#include <exception>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "prometheus/family.h"
#include "prometheus/text_serializer.h"

namespace ps {

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    absl::string_view host, int port) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port ", port, " is not in [0, 65535]"));
  }
  const std::string address = absl::StrCat(host, ":", port);
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(address);
  } catch (const std::exception&) {
    // civetweb says only that it could not bind.
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on ", address,
        " (the port is in use, or the host is not an IPv4 address of this "
        "machine)"));
  }
  return absl::WrapUnique(
      new MetricsEndpoint(std::string(host), std::move(exposer)));
}

MetricsEndpoint::MetricsEndpoint(std::string host,
                                 std::unique_ptr<prometheus::Exposer> exposer)
    : registry_(std::make_shared<prometheus::Registry>()),
      host_(std::move(host)),
      exposer_(std::move(exposer)),
      port_(exposer_->GetListeningPorts().at(0)) {
  exposer_->RegisterCollectable(registry_);
}

MetricsEndpoint::~MetricsEndpoint() = default;

void MetricsEndpoint::Add(
    std::shared_ptr<prometheus::Collectable> collectable) {
  exposer_->RegisterCollectable(collectable);
  absl::MutexLock lock(&mu_);
  added_.push_back(std::move(collectable));
}

std::string MetricsEndpoint::url() const {
  return absl::StrCat("http://", host_, ":", port_, "/metrics");
}

absl::Status ValidateMetricsFlags(absl::string_view host, int port) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_port must be in [0, 65535] (0: no metrics), got ", port));
  }
  in_addr parsed;
  if (inet_pton(AF_INET, std::string(host).c_str(), &parsed) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_host must be an IPv4 address (127.0.0.1, or 0.0.0.0 for "
        "every interface), got \"",
        host, "\""));
  }
  return absl::OkStatus();
}

prometheus::Counter& AddCounter(prometheus::Registry& registry,
                                const std::string& name,
                                const std::string& help,
                                const prometheus::Labels& labels) {
  return prometheus::BuildCounter()
      .Name(name)
      .Help(help)
      .Register(registry)
      .Add(labels);
}

prometheus::Gauge& AddGauge(prometheus::Registry& registry,
                            const std::string& name, const std::string& help,
                            const prometheus::Labels& labels) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add(
      labels);
}

std::string SerializeMetrics(const prometheus::Collectable& collectable) {
  return prometheus::TextSerializer().Serialize(collectable.Collect());
}

}  // namespace ps
