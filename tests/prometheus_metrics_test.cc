// Debian's real Prometheus server scrapes a running job's /metrics
// endpoints (one server, two workers), and the series are checked through
// Prometheus's own HTTP API (issue 21).

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/http_testing.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "tests/process_cluster.h"

namespace ps {
namespace {

using ::ps::testing::HttpGet;
using ::ps::testing::ProcessCluster;

// Installed by scripts/install_deps.sh (Debian's `prometheus`, 2.42).
constexpr char kPrometheus[] = "/usr/bin/prometheus";
// Generous: on a loaded 2-core machine Prometheus takes seconds to start,
// and a series needs a scrape or two (every second) to arrive.
constexpr absl::Duration kDeadline = absl::Seconds(120);

std::string UrlEncode(absl::string_view text) {
  std::string out;
  for (char c : text) {
    if (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' ||
        c == '.' || c == '-') {
      out.push_back(c);
    } else {
      absl::StrAppendFormat(&out, "%%%02X", static_cast<unsigned char>(c));
    }
  }
  return out;
}

// The sample values of an instant-vector answer of /api/v1/query:
// ...{"metric":{...},"value":[1700000000.123,"42"]}...
std::vector<double> SampleValues(const std::string& json) {
  std::vector<double> values;
  const std::string key = "\"value\":[";
  for (size_t at = json.find(key); at != std::string::npos;
       at = json.find(key, at + 1)) {
    const size_t open = json.find(",\"", at);
    const size_t close = json.find('"', open + 2);
    if (open == std::string::npos || close == std::string::npos) break;
    const std::string text = json.substr(open + 2, close - open - 2);
    double v = 0;
    if (text == "NaN") {
      v = std::nan("");
    } else if (text == "+Inf" || text == "-Inf") {
      v = text[0] == '+' ? INFINITY : -INFINITY;
    } else if (!absl::SimpleAtod(text, &v)) {
      continue;
    }
    values.push_back(v);
  }
  return values;
}

// A check of one PromQL query's answer; empty when it holds, else why not.
struct Check {
  std::string query;
  std::function<std::string(const std::vector<double>&)> holds;
};

// The query must give exactly one sample, and `ok` must accept it.
Check One(std::string query, std::string what, std::function<bool(double)> ok) {
  return {std::move(query),
          [what = std::move(what), ok = std::move(ok)](
              const std::vector<double>& values) -> std::string {
            if (values.size() != 1) {
              return absl::StrCat(values.size(), " samples, want 1");
            }
            if (!ok(values[0])) {
              return absl::StrCat("value ", values[0], " is not ", what);
            }
            return "";
          }};
}

class PrometheusMetricsTest : public ::testing::Test {
 protected:
  // Starts Prometheus scraping `targets` (host:port) every second.
  void StartPrometheus(const std::vector<std::string>& server_targets,
                       const std::vector<std::string>& worker_targets) {
    const std::string dir = testing::TempPath("prometheus");
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const std::string config = absl::StrCat(dir, "/prometheus.yml");
    auto list = [](const std::vector<std::string>& targets) {
      std::string out;
      for (const std::string& t : targets) {
        absl::StrAppend(&out, out.empty() ? "" : ", ", "'", t, "'");
      }
      return out;
    };
    std::ofstream(config) << "global:\n"
                             "  scrape_interval: 1s\n"
                             "  scrape_timeout: 1s\n"
                             "  evaluation_interval: 1s\n"
                             "scrape_configs:\n"
                             "  - job_name: ps\n"
                             "    static_configs:\n"
                             "      - targets: ["
                          << list(server_targets)
                          << "]\n"
                             "        labels: {role: server}\n"
                             "      - targets: ["
                          << list(worker_targets)
                          << "]\n"
                             "        labels: {role: worker}\n";
    absl::StatusOr<int> port = testing::UnusedLoopbackPort();
    ASSERT_TRUE(port.ok()) << port.status();
    prometheus_port_ = *port;
    SubprocessOptions options;
    options.name = "prometheus";
    options.argv = {kPrometheus, absl::StrCat("--config.file=", config),
                    absl::StrCat("--storage.tsdb.path=", dir, "/data"),
                    absl::StrCat("--web.listen-address=127.0.0.1:", *port),
                    "--log.level=warn"};
    options.line_callback = [](absl::string_view line) {
      std::fprintf(stderr, "[prometheus] %.*s\n", static_cast<int>(line.size()),
                   line.data());
    };
    absl::StatusOr<std::unique_ptr<Subprocess>> started =
        Subprocess::Start(std::move(options));
    ASSERT_TRUE(started.ok()) << started.status();
    prometheus_ = *std::move(started);
  }

  // Asks Prometheus until every check holds; fails naming the checks that
  // still did not at the deadline.
  void AwaitChecks(const std::vector<Check>& checks) {
    std::vector<std::string> failing;
    const absl::Time start = absl::Now();
    const absl::Time deadline = start + kDeadline;
    do {
      if (std::optional<ExitStatus> exited = prometheus_->TryWait()) {
        FAIL() << "prometheus " << exited->ToString() << ":\n"
               << prometheus_->LastLines(20);
      }
      failing.clear();
      for (const Check& check : checks) {
        absl::StatusOr<std::string> answer = HttpGet(
            prometheus_port_,
            absl::StrCat("/api/v1/query?query=", UrlEncode(check.query)));
        std::string why;
        if (!answer.ok()) {
          why = answer.status().ToString();
        } else if (answer->find("\"status\":\"success\"") ==
                   std::string::npos) {
          why = *answer;
        } else {
          why = check.holds(SampleValues(*answer));
        }
        if (!why.empty())
          failing.push_back(absl::StrCat(check.query, ": ", why));
      }
      if (failing.empty()) {
        std::fprintf(stderr, "every check held after %s\n",
                     absl::FormatDuration(absl::Now() - start).c_str());
        return;
      }
      absl::SleepFor(absl::Milliseconds(500));
    } while (absl::Now() < deadline);
    for (const std::string& f : failing) ADD_FAILURE() << f;
  }

  int prometheus_port_ = 0;
  std::unique_ptr<Subprocess> prometheus_;
};

TEST_F(PrometheusMetricsTest, ARealPrometheusScrapesTheServerAndTheWorkers) {
  ASSERT_TRUE(std::filesystem::exists(kPrometheus))
      << kPrometheus
      << " is missing: Debian's prometheus package runs this test; "
         "scripts/install_deps.sh installs it";
  std::vector<int> ports;  // The server's, then each worker's.
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<int> port = testing::UnusedLoopbackPort();
    ASSERT_TRUE(port.ok()) << port.status();
    ports.push_back(*port);
  }

  LaunchConfig config = testing::SmallJob();
  config.num_servers = 1;
  config.num_workers = 2;
  config.model = "784-32-10";
  // Far more steps than the test waits for: the job is stopped once the
  // checks hold.
  config.epochs = 100;
  config.extra_worker_flags = {"--log_every=200"};
  ProcessCluster cluster(config);
  ASSERT_TRUE(
      cluster.StartServer(0, {absl::StrCat("--metrics_port=", ports[0])}).ok());
  // Worker 0 sleeps each step (its waiting phase), so that worker 1's pulls
  // wait for it.
  ASSERT_TRUE(cluster
                  .StartWorker(0, {absl::StrCat("--metrics_port=", ports[1]),
                                   "--slowdown_ms=10"})
                  .ok());
  ASSERT_TRUE(
      cluster.StartWorker(1, {absl::StrCat("--metrics_port=", ports[2])}).ok());
  for (int rank : {0, 1}) {
    ASSERT_TRUE(
        cluster.AwaitWorkerLine(rank, "serving metrics on", kDeadline).ok())
        << absl::StrJoin(cluster.WorkerLines(rank), "\n");
  }

  StartPrometheus({absl::StrCat("127.0.0.1:", ports[0])},
                  {absl::StrCat("127.0.0.1:", ports[1]),
                   absl::StrCat("127.0.0.1:", ports[2])});
  auto positive = [](double v) { return v > 0; };
  auto zero = [](double v) { return v == 0; };
  const std::string server = "{job=\"ps\",role=\"server\",shard=\"0\"}";
  const std::string worker = "{job=\"ps\",role=\"worker\",rank=\"0\"}";
  AwaitChecks({
      One("sum(up{job=\"ps\"})", "3 (every target up)",
          [](double v) { return v == 3; }),
      One(absl::StrCat("ps_server_push_total", server), "> 0", positive),
      One(absl::StrCat("ps_server_pull_total", server), "> 0", positive),
      One(absl::StrCat("ps_server_push_bytes_total", server), "> 0", positive),
      One(absl::StrCat("ps_server_pull_bytes_total", server), "> 0", positive),
      // Timed as they are counted: a scrape may fall between the two.
      One(absl::StrCat("ps_server_push_total", server, " - on() ",
                       "ps_server_push_duration_seconds_count", server),
          "0 or 1 (pushes counted but not yet timed)",
          [](double v) { return v == 0 || v == 1; }),
      One(absl::StrCat("ps_server_pull_wait_seconds_sum", server), "> 0",
          positive),
      One("ps_server_wait_for_rank_seconds_total{job=\"ps\",rank=\"0\"}",
          "> 0 (worker 1 waited for the slowed worker 0)", positive),
      One(absl::StrCat("ps_server_version", server), "> 0", positive),
      // sync: every update is of the version its gradient was computed on.
      One(absl::StrCat("ps_server_staleness_updates_count", server), "> 0",
          positive),
      One(absl::StrCat(
              "ps_server_staleness_updates_count", server, " - on() ",
              "ps_server_staleness_updates_bucket{job=\"ps\",le=\"0\"}"),
          "0 (sync updates are never stale)", zero),
      One(absl::StrCat("sum(ps_server_refused_total", server, ")"),
          "0 (nothing refused)", zero),
      One(absl::StrCat("ps_worker_steps_total", worker), "> 0", positive),
      One(absl::StrCat("ps_worker_examples_total", worker), "> 0", positive),
      One(absl::StrCat("ps_worker_loss", worker), "finite and in (0, 10)",
          [](double v) { return std::isfinite(v) && v > 0 && v < 10; }),
      One(absl::StrCat("ps_worker_examples_per_second", worker), "> 0",
          positive),
      One(absl::StrCat("ps_worker_step_phase_seconds_total{job=\"ps\",rank="
                       "\"0\",phase=\"compute\"}"),
          "> 0", positive),
      One(absl::StrCat("ps_worker_step_phase_seconds_total{job=\"ps\",rank="
                       "\"0\",phase=\"communication\"}"),
          "> 0", positive),
      // --slowdown_ms=10 per step.
      One(absl::StrCat("ps_worker_step_phase_seconds_total{job=\"ps\",rank="
                       "\"0\",phase=\"waiting\"} - on() (0.010 * "
                       "ps_worker_steps_total",
                       worker, ")"),
          ">= 0", [](double v) { return v >= 0; }),
      // Up to 32 a step (an epoch's last share may be smaller), and a
      // scrape may fall between counting a step's examples and the step.
      One(absl::StrCat("ps_worker_examples_total", worker, " - on() (32 * (",
                       "ps_worker_steps_total", worker, " + 1))"),
          "<= 0 (at most 32 examples a step)", [](double v) { return v <= 0; }),
      One("ps_worker_steps_total{job=\"ps\",rank=\"1\"}", "> 0", positive),
  });
  // The job was never meant to finish: still training when stopped.
  for (int rank : {0, 1}) {
    EXPECT_FALSE(cluster.WaitWorker(rank, absl::ZeroDuration()).has_value());
  }
}

}  // namespace
}  // namespace ps
