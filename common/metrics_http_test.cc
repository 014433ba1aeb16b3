#include "common/metrics_http.h"

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/http_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"

namespace ps {

// Static TLS beyond the 100 KiB stack civetweb gives its threads, as
// cuBLAS brings into the worker binary: every endpoint here starts despite
// it (common/thread_stack_shim.cc). Not in the anonymous namespace, so that
// it stays in the binary.
thread_local char large_static_tls[256 << 10];

namespace {

using ::testing::HasSubstr;

// A gauge whose value is read at each scrape.
class ReadAtScrape : public prometheus::Collectable {
 public:
  explicit ReadAtScrape(const int* value) : value_(value) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    prometheus::MetricFamily family;
    family.name = "test_read_at_scrape";
    family.help = "A value read when scraped.";
    family.type = prometheus::MetricType::Gauge;
    family.metric.emplace_back().gauge.value = *value_;
    return {family};
  }

 private:
  const int* value_;
};

TEST(MetricsEndpointTest, ServesTheRegistryOverHttp) {
  large_static_tls[0] = 1;
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint =
      MetricsEndpoint::Start("127.0.0.1", 0);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  ASSERT_GT((*endpoint)->port(), 0);
  EXPECT_EQ((*endpoint)->url(),
            absl::StrCat("http://127.0.0.1:", (*endpoint)->port(), "/metrics"));
  prometheus::Counter& counter = prometheus::BuildCounter()
                                     .Name("test_events_total")
                                     .Help("Events.")
                                     .Register(*(*endpoint)->registry())
                                     .Add({{"shard", "3"}});
  counter.Increment(2);

  absl::StatusOr<std::string> body =
      testing::HttpGet((*endpoint)->port(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_THAT(*body, HasSubstr("# TYPE test_events_total counter"));
  EXPECT_THAT(*body, HasSubstr("test_events_total{shard=\"3\"} 2"));

  counter.Increment();
  body = testing::HttpGet((*endpoint)->port(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_THAT(*body, HasSubstr("test_events_total{shard=\"3\"} 3"));

  body = testing::HttpGet((*endpoint)->port(), "/secrets");
  EXPECT_EQ(body.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(body.status().message()), HasSubstr("404"));
}

TEST(MetricsEndpointTest, ReadsAddedCollectablesAtEachScrape) {
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint =
      MetricsEndpoint::Start("127.0.0.1", 0);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  int value = 5;
  (*endpoint)->Add(std::make_shared<ReadAtScrape>(&value));
  absl::StatusOr<std::string> body =
      testing::HttpGet((*endpoint)->port(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_THAT(*body, HasSubstr("test_read_at_scrape 5"));
  value = 7;
  body = testing::HttpGet((*endpoint)->port(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_THAT(*body, HasSubstr("test_read_at_scrape 7"));
}

TEST(MetricsEndpointTest, RefusesAPortInUseNamingIt) {
  absl::StatusOr<testing::HeldPort> held = testing::HeldPort::Listen();
  ASSERT_TRUE(held.ok()) << held.status();
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint =
      MetricsEndpoint::Start("127.0.0.1", held->port());
  EXPECT_EQ(endpoint.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(endpoint.status().message()),
              HasSubstr(absl::StrCat("cannot serve metrics on 127.0.0.1:",
                                     held->port())));
}

TEST(MetricsEndpointTest, RefusesAPortOutOfRange) {
  for (int port : {-1, 65536}) {
    EXPECT_EQ(MetricsEndpoint::Start("127.0.0.1", port).status().code(),
              absl::StatusCode::kInvalidArgument)
        << port;
  }
}

TEST(ValidateMetricsFlagsTest, NamesTheBadFlag) {
  EXPECT_TRUE(ValidateMetricsFlags("127.0.0.1", 0).ok());
  EXPECT_TRUE(ValidateMetricsFlags("0.0.0.0", 9100).ok());
  for (const auto& [host, port, flag] :
       std::vector<std::tuple<std::string, int, std::string>>{
           {"127.0.0.1", -1, "--metrics_port"},
           {"127.0.0.1", 65536, "--metrics_port"},
           {"", 9100, "--metrics_host"},
           {"localhost", 9100, "--metrics_host"},
           {"::1", 9100, "--metrics_host"}}) {
    const absl::Status s = ValidateMetricsFlags(host, port);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << host << port;
    EXPECT_THAT(std::string(s.message()), HasSubstr(flag));
  }
}

TEST(MetricsEndpointTest, StopsListeningWhenDestroyed) {
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint =
      MetricsEndpoint::Start("127.0.0.1", 0);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  endpoint->reset();
  EXPECT_EQ(testing::HttpGet(port, "/metrics").status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ps
