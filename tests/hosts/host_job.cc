#include "tests/hosts/host_job.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "kernels/device.h"
#include "tests/cluster_runner.h"
#include "worker/idx_reader.h"
#include "worker/nn/model_description.h"
#include "worker/predict.h"

namespace ps::testing {
namespace {

constexpr char kDataDir[] = "/usr/share/datasets/fashion-mnist";
// Bounds a scrape of a live endpoint; only a hung one takes long.
constexpr absl::Duration kScrapeTimeout = absl::Seconds(30);
constexpr absl::Duration kPollInterval = absl::Milliseconds(100);
// Between scrapes of a job's shards while its workers run: often enough
// that a short job is read several times.
constexpr absl::Duration kWatchInterval = absl::Milliseconds(20);

// A directory of its own for each job of a test process.
std::string NewJobDir() {
  for (int i = 0;; ++i) {
    const std::string dir = TempPath(absl::StrCat("host-job-", i));
    if (std::filesystem::create_directories(dir)) return dir;
  }
}

}  // namespace

HostJob::HostJob(const TestHosts* hosts, std::vector<int> server_hosts,
                 int num_workers, std::string dir)
    : hosts_(hosts),
      server_hosts_(std::move(server_hosts)),
      num_workers_(num_workers),
      dir_(std::move(dir)),
      workers_(num_workers) {}

HostJob::~HostJob() = default;

absl::StatusOr<std::unique_ptr<HostJob>> HostJob::Start(
    const TestHosts* hosts, std::vector<int> server_hosts, int num_workers,
    std::vector<std::string> server_flags, absl::Duration timeout) {
  for (int host : server_hosts) {
    if (host < 0 || host >= hosts->size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("no host ", host, " of ", hosts->size()));
    }
  }
  std::unique_ptr<HostJob> job(
      new HostJob(hosts, std::move(server_hosts), num_workers, NewJobDir()));
  for (int index = 0; index < static_cast<int>(job->server_hosts_.size());
       ++index) {
    if (absl::Status s = job->StartServer(index, server_flags, timeout);
        !s.ok()) {
      return s;
    }
  }
  return job;
}

absl::Status HostJob::StartServer(int index, std::vector<std::string> flags,
                                  absl::Duration timeout) {
  const int host = server_hosts_[index];
  const std::string port_file = absl::StrCat(dir_, "/server-", index, ".port");
  std::vector<std::string> argv = {
      RunfilePath("server/server"),
      absl::StrCat("--server_index=", index),
      absl::StrCat("--num_servers=", server_hosts_.size()),
      absl::StrCat("--num_workers=", num_workers_),
      absl::StrCat("--host=", hosts_->address(host)),
      "--port=0",
      absl::StrCat("--port_file=", port_file),
      absl::StrCat("--checkpoint_dir=", CheckpointDir(index)),
      absl::StrCat("--metrics_port=", kServerMetricsPort),
  };
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<std::unique_ptr<Subprocess>> server = hosts_->Start(
      host, TestProcessOptions(absl::StrCat("server ", index), argv));
  if (!server.ok()) return server.status();
  server_processes_.push_back(*std::move(server));
  absl::StatusOr<int> port =
      WaitForPortFile(port_file, timeout, server_processes_.back().get());
  if (!port.ok()) return port.status();
  servers_.push_back(absl::StrCat(hosts_->address(host), ":", *port));
  return absl::OkStatus();
}

std::string HostJob::CheckpointDir(int index) const {
  return absl::StrCat(dir_, "/checkpoints-", index);
}

absl::Status HostJob::StartOn(int rank, int host, SubprocessOptions options) {
  if (rank < 0 || rank >= num_workers_) {
    return absl::InvalidArgumentError(
        absl::StrCat("no rank ", rank, " of ", num_workers_, " workers"));
  }
  if (workers_[rank] != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank, " was started already"));
  }
  absl::StatusOr<std::unique_ptr<Subprocess>> worker =
      hosts_->Start(host, std::move(options));
  if (!worker.ok()) return worker.status();
  workers_[rank] = *std::move(worker);
  return absl::OkStatus();
}

absl::Status HostJob::StartWorker(int rank, int host,
                                  std::vector<std::string> worker_flags) {
  std::vector<std::string> argv = {
      RunfilePath("worker/worker"),
      absl::StrCat("--rank=", rank),
      absl::StrCat("--num_workers=", num_workers_),
      absl::StrCat("--servers=", absl::StrJoin(servers_, ",")),
      absl::StrCat("--metrics_port=", kWorkerMetricsPort + rank),
      "--device=cpu",
  };
  argv.insert(argv.end(), worker_flags.begin(), worker_flags.end());
  return StartOn(rank, host,
                 TestProcessOptions(absl::StrCat("worker ", rank), argv));
}

absl::Status HostJob::StartProgram(int rank, int host,
                                   std::vector<std::string> argv) {
  SubprocessOptions options =
      TestProcessOptions(absl::StrCat("worker ", rank), std::move(argv));
  options.env = {{"PS_SERVERS", absl::StrJoin(servers_, ",")},
                 {"PS_NUM_SERVERS", absl::StrCat(servers_.size())},
                 {"PS_RANK", absl::StrCat(rank)},
                 {"PS_NUM_WORKERS", absl::StrCat(num_workers_)},
                 {"PS_LOCAL_RANK", "0"},
                 {"PS_LOCAL_NUM_WORKERS", "1"}};
  return StartOn(rank, host, std::move(options));
}

Subprocess* HostJob::worker(int rank) { return workers_.at(rank).get(); }

absl::Status HostJob::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<Subprocess*> processes;
  for (const std::unique_ptr<Subprocess>& w : workers_) {
    if (w != nullptr) processes.push_back(w.get());
  }
  for (const std::unique_ptr<Subprocess>& s : server_processes_) {
    processes.push_back(s.get());
  }
  for (Subprocess* process : processes) {
    const std::optional<ExitStatus> exit = process->WaitFor(
        std::max(deadline - absl::Now(), absl::ZeroDuration()));
    if (!exit.has_value()) {
      return absl::DeadlineExceededError(absl::StrCat(
          process->name(), " still runs after ", absl::FormatDuration(timeout),
          ": ", process->LastLines(20)));
    }
    if (!exit->success()) {
      return absl::InternalError(absl::StrCat(process->name(), " ",
                                              exit->ToString(), ": ",
                                              process->LastLines(20)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> HostJob::ServerMetrics(int index) const {
  return hosts_->HttpGet(server_hosts_.at(index), kServerMetricsPort,
                         "/metrics", kScrapeTimeout);
}

absl::StatusOr<double> HostJob::ServerMetric(
    int index, absl::string_view name,
    const std::vector<std::pair<std::string, std::string>>& labels) const {
  absl::StatusOr<std::string> text = ServerMetrics(index);
  if (!text.ok()) return text.status();
  std::optional<double> value = MetricValue(*text, name, labels);
  if (!value.has_value()) {
    return absl::NotFoundError(
        absl::StrCat("shard ", index, " exports no ", name, " yet"));
  }
  return *value;
}

absl::Status HostJob::WatchServersWhileWorkersRun(MetricPeaks* peaks,
                                                  absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const Subprocess* running = nullptr;
    for (const std::unique_ptr<Subprocess>& w : workers_) {
      if (w != nullptr && !w->TryWait().has_value()) {
        running = w.get();
        break;
      }
    }
    if (running == nullptr) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(running->name(), " still runs after ",
                       absl::FormatDuration(timeout)));
    }
    for (int index = 0; index < num_servers(); ++index) {
      absl::StatusOr<std::string> text = ServerMetrics(index);
      if (text.ok()) peaks->Add(index, *text);
    }
    absl::SleepFor(kWatchInterval);
  }
}

absl::StatusOr<update::ShardCheckpoint> HostJob::LastCheckpoint(
    int index) const {
  absl::StatusOr<std::vector<std::string>> paths =
      update::ListCheckpoints(CheckpointDir(index), index);
  if (!paths.ok()) return paths.status();
  if (paths->empty()) {
    return absl::NotFoundError(
        absl::StrCat("shard ", index, " wrote no checkpoint"));
  }
  return update::ReadCheckpoint(paths->front());
}

std::optional<double> MetricValue(
    absl::string_view text, absl::string_view name,
    const std::vector<std::pair<std::string, std::string>>& labels) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    // NAME{LABELS} VALUE, or NAME VALUE.
    if (!absl::StartsWith(line, name)) continue;
    absl::string_view rest = line.substr(name.size());
    absl::string_view label_text;
    if (absl::StartsWith(rest, "{")) {
      const size_t close = rest.find('}');
      if (close == absl::string_view::npos) continue;
      label_text = rest.substr(0, close + 1);
      rest = rest.substr(close + 1);
    }
    if (!absl::StartsWith(rest, " ")) continue;  // A longer name.
    bool matches = true;
    for (const auto& [key, value] : labels) {
      matches =
          matches &&
          absl::StrContains(label_text, absl::StrCat(key, "=\"", value, "\""));
    }
    double v = 0;
    if (matches && absl::SimpleAtod(absl::StripAsciiWhitespace(rest), &v)) {
      return v;
    }
  }
  return std::nullopt;
}

MetricPeaks::MetricPeaks(std::vector<std::string> names)
    : names_(std::move(names)) {}

void MetricPeaks::Add(int index, absl::string_view text) {
  for (const std::string& name : names_) {
    const std::optional<double> value = MetricValue(text, name);
    if (!value.has_value()) continue;
    const auto [it, added] = peaks_.try_emplace({name, index}, *value);
    if (!added) it->second = std::max(it->second, *value);
  }
}

std::optional<double> MetricPeaks::Peak(absl::string_view name,
                                        int index) const {
  const auto it = peaks_.find(std::make_pair(std::string(name), index));
  if (it == peaks_.end()) return std::nullopt;
  return it->second;
}

absl::Status AwaitValue(absl::string_view what,
                        const std::function<absl::StatusOr<double>()>& read,
                        const std::function<bool(double)>& holds,
                        absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<double> last = absl::UnknownError("never read");
  while (true) {
    last = read();
    if (last.ok() && holds(*last)) return absl::OkStatus();
    if (absl::Now() >= deadline) break;
    absl::SleepFor(kPollInterval);
  }
  return absl::DeadlineExceededError(absl::StrCat(
      what, " not reached within ", absl::FormatDuration(timeout),
      "; last: ", last.ok() ? absl::StrCat(*last) : last.status().ToString()));
}

absl::StatusOr<double> TestAccuracy(const std::string& model_file,
                                    const std::string& model_flag) {
  absl::StatusOr<worker::nn::ModelDescription> description =
      worker::nn::ModelDescription::FromFlag(model_flag);
  if (!description.ok()) return description.status();
  absl::StatusOr<worker::LabeledImages> data =
      worker::LoadFashionMnist(kDataDir, worker::Split::kTest);
  if (!data.ok()) return data.status();
  absl::StatusOr<std::unique_ptr<kernels::Backend>> backend =
      kernels::CreateBackend("cpu");
  if (!backend.ok()) return backend.status();
  absl::StatusOr<std::unique_ptr<worker::nn::Model>> model =
      worker::LoadTrainedModel(*description, model_file, 1000, backend->get());
  if (!model.ok()) return model.status();
  return worker::Accuracy(**model, *data);
}

std::string CompareWeights(const update::ShardCheckpoint& a,
                           const update::ShardCheckpoint& b) {
  if (a.slices.size() != b.slices.size()) {
    return absl::StrCat(a.slices.size(), " slices against ", b.slices.size());
  }
  for (size_t i = 0; i < a.slices.size(); ++i) {
    const update::SliceSnapshot& x = a.slices[i];
    const update::SliceSnapshot& y = b.slices[i];
    if (x.weights.size() != y.weights.size()) {
      return absl::StrCat("slice ", i, ": ", x.weights.size(),
                          " weights against ", y.weights.size());
    }
    for (size_t j = 0; j < x.weights.size(); ++j) {
      // Bit for bit: the same float, not merely an equal one.
      if (std::memcmp(&x.weights[j], &y.weights[j], sizeof(float)) != 0) {
        return absl::StrCat("slice ", i, " weight ", j, ": ", x.weights[j],
                            " against ", y.weights[j]);
      }
    }
    if (x.state != y.state) {
      return absl::StrCat("slice ", i, ": the optimizer state differs");
    }
  }
  return "";
}

}  // namespace ps::testing
