#include "deploy/local/multi_host_launch.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/cluster_address.h"
#include "common/local_socket.h"
#include "deploy/local/pipeline_mode.h"
#include "deploy/local/rendezvous_auth.h"
#include "deploy/local/run_flags.h"
#include "deploy/local/stage_links.h"
#include "update/checkpoint.h"

namespace ps {
namespace {

// The most one rendezvous call may take before it counts as unanswered.
constexpr absl::Duration kCallTimeout = absl::Seconds(5);
// How often host 0 looks whether every host has reported.
constexpr absl::Duration kStatusInterval = absl::Milliseconds(200);

// Paths are each host's own.
bool IsPerHostFlag(const std::string& name) {
  return name == "data_dir" || name == "save_model" || name == "checkpoint_dir";
}

// "; stage links over TCP: rank 1 listens at A, rank 2 reaches B".
std::string StageLinksText(const StageLinkPlan& links) {
  std::vector<std::string> parts;
  for (const auto& [rank, address] : links.listen) {
    parts.push_back(absl::StrCat("rank ", rank, " listens at ", address));
  }
  for (const auto& [rank, address] : links.previous) {
    parts.push_back(absl::StrCat("rank ", rank, " reaches ", address));
  }
  if (parts.empty()) return "";
  return absl::StrCat("; stage links over TCP: ", absl::StrJoin(parts, ", "));
}

std::string Range(absl::string_view what, int first, int count) {
  if (count == 0) return absl::StrCat("no ", what, "s");
  if (count == 1) return absl::StrCat(what, " ", first);
  return absl::StrCat(what, "s ", first, "-", first + count - 1);
}

}  // namespace

std::map<std::string, std::string> SharedJobSettings(
    const std::vector<std::pair<std::string, std::string>>& run_flags,
    const std::map<std::string, std::string>& multi_host_flags) {
  std::map<std::string, std::string> settings = multi_host_flags;
  for (const auto& [name, value] : run_flags) {
    if (!IsPerHostFlag(name)) settings[name] = value;
  }
  return settings;
}

absl::StatusOr<std::optional<HostSessionOptions>> HostOptionsFromSettings(
    const RunSettings& settings, const std::set<std::string>& given,
    LaunchKind kind, const std::vector<std::string>& program,
    const std::string& cwd, const LaunchConfig& config,
    absl::FunctionRef<const char*(const char*)> lookup) {
  auto given_int = [&](const char* name) {
    return given.count(name) ? std::optional<int>(settings.Get<int>(name))
                             : std::nullopt;
  };
  if (settings.Text("auth") == "none" && !settings.Text("auth_ca").empty()) {
    return absl::InvalidArgumentError(
        "--auth_ca needs --auth=tls or --auth=mtls");
  }
  absl::StatusOr<HostPlacement> placement =
      ResolveHostPlacement(given_int("num_hosts"), given_int("host_index"),
                           settings.Text("rendezvous"), lookup);
  if (!placement.ok()) return placement.status();
  const int server_hosts = settings.Get<int>("server_hosts");
  absl::StatusOr<std::vector<HostShare>> plan =
      PlanHosts(placement->num_hosts, config.num_workers, TotalServers(config),
                server_hosts);
  if (!plan.ok()) return plan.status();
  if (placement->num_hosts == 1) return std::nullopt;
  if (ServerGroups(config) > 1 && settings.Text("auth") != "none" &&
      AnyCrossHostLink(*plan, config.num_workers, config.pipeline_stages)) {
    // The links carry frames in clear (common/tcp_frames.h).
    return absl::InvalidArgumentError(absl::StrCat(
        "--auth with --pipeline_stages=", config.pipeline_stages,
        " on --num_hosts=", placement->num_hosts,
        ": a replica's stages would span hosts, and the links between them "
        "are not encrypted; give each host whole replicas (--num_workers a "
        "multiple of --num_hosts x --pipeline_stages) or run without --auth"));
  }
  for (const char* name : {"host_timeout", "rendezvous_timeout"}) {
    if (settings.Get<absl::Duration>(name) <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " must be positive"));
    }
  }
  // Each host signs its own certificates with the job's CA: nothing secret
  // travels between the launchers (the CA is copied by the user, over a
  // channel they trust).
  if (settings.Text("auth") != "none" && settings.Text("auth_ca").empty()) {
    return absl::InvalidArgumentError(
        "--auth with --num_hosts > 1 needs --auth_ca=DIR, the job's CA on "
        "every host: make it once with `launch --make_auth_ca=DIR` and copy "
        "DIR to each host (scp, a secret store)");
  }
  HostSessionOptions options;
  options.placement = *placement;
  options.advertise_address = settings.Text("advertise_address");
  if (!options.advertise_address.empty()) {
    if (absl::Status s = ValidateServerAddress(
            absl::StrCat(options.advertise_address, ":1"));
        !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--advertise_address must be a host name or address: ", s.message()));
    }
  } else {
    absl::StatusOr<std::string> found = AddressTowards(placement->rendezvous);
    if (!found.ok())
      return absl::InvalidArgumentError(found.status().message());
    options.advertise_address = *found;
  }
  std::map<std::string, std::string> shared;
  for (const char* name : {"server_hosts", "max_restarts", "host_timeout"}) {
    shared[name] = settings.Text(name);
  }
  shared["num_hosts"] = absl::StrCat(placement->num_hosts);
  shared["program"] = absl::StrJoin(program, " ");
  if (ServerGroups(config) > 1) {
    // Replica 0's stages send their weights to rank 0 to save, wherever
    // they run: all of them or none must be given a path (each its own).
    shared["save_model"] =
        settings.Text("save_model").empty() ? "" : "(a path on each host)";
  }
  // Every host goes on with its part of one run, or none does: the run's
  // job id (its checkpoints carry it) must be the same on every host.
  if (kind != LaunchKind::kStart) {
    shared[kind == LaunchKind::kResume ? "resume" : "extend"] = "on";
    shared["job_id"] = config.job_id;
  }
  options.settings = SharedJobSettings(CurrentRunFlags(settings, cwd), shared);
  options.server_hosts = server_hosts;
  options.host_timeout = settings.Get<absl::Duration>("host_timeout");
  options.rendezvous_timeout =
      settings.Get<absl::Duration>("rendezvous_timeout");
  return options;
}

absl::Status CheckResumedShards(const std::string& checkpoint_dir,
                                int num_servers, int first_server,
                                int host_servers) {
  std::vector<int> with;
  bool others = false;
  for (int shard = 0; shard < num_servers; ++shard) {
    absl::StatusOr<std::vector<std::string>> found =
        update::ListCheckpoints(checkpoint_dir, shard);
    if (!found.ok()) return found.status();
    const bool own =
        shard >= first_server && shard < first_server + host_servers;
    if (!found->empty()) with.push_back(shard);
    others = others || (!own && !found->empty());
  }
  // Its own shards may lack checkpoints (a run stopped before their first);
  // another host's shard here means the shards moved.
  if (!others) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      checkpoint_dir, " holds the checkpoints of ",
      with.size() == 1 ? "shard " : "shards ", absl::StrJoin(with, ","),
      " but the job now gives this host ",
      Range("shard", first_server, host_servers),
      ": each host resumes the shards it ran, so start every host with the "
      "--num_hosts, --host_index and --server_hosts the run started with"));
}

absl::Status CheckResumedHostShards(const LaunchConfig& config) {
  const int groups = ServerGroups(config);
  if (groups == 1) {
    return CheckResumedShards(config.checkpoint_dir, config.num_servers,
                              config.first_server, config.host_servers);
  }
  // Server s x num_servers + shard is shard `shard` of stage s's group,
  // which checkpoints in a folder of its own.
  const int n = config.num_servers;
  const int first = config.first_server;
  const int end = first + config.host_servers;
  for (int stage = 0; stage < groups; ++stage) {
    const int own_first = std::clamp(first - stage * n, 0, n);
    const int own_end = std::clamp(end - stage * n, 0, n);
    if (absl::Status s =
            CheckResumedShards(StageCheckpointDir(config.checkpoint_dir, stage),
                               n, own_first, own_end - own_first);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

GeneratedAuthOptions LaunchAuthOptions(
    const std::optional<HostSessionOptions>& host, const std::string& job_ca) {
  GeneratedAuthOptions auth;
  auth.job_ca = job_ca;
  if (!host.has_value()) return auth;
  auth.server_names = {host->advertise_address};
  if (host->placement.host_index == 0) {
    absl::StatusOr<std::pair<std::string, int>> split =
        SplitHostPort(host->placement.rendezvous);
    if (split.ok() && split->first != host->advertise_address) {
      auth.server_names.push_back(split->first);
    }
  }
  return auth;
}

HostSession::HostSession(HostSessionOptions options,
                         std::unique_ptr<RendezvousState> state,
                         std::unique_ptr<RendezvousServer> server,
                         std::shared_ptr<grpc::ChannelCredentials> credentials)
    : options_(std::move(options)),
      state_(std::move(state)),
      server_(std::move(server)),
      client_(options_.placement.rendezvous, std::move(credentials)) {}

HostSession::~HostSession() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (heartbeats_.joinable()) heartbeats_.join();
}

absl::StatusOr<std::unique_ptr<HostSession>> HostSession::Join(
    HostSessionOptions options, const LaunchConfig& config) {
  const HostPlacement& placement = options.placement;
  absl::StatusOr<std::vector<HostShare>> plan =
      PlanHosts(placement.num_hosts, config.num_workers, TotalServers(config),
                options.server_hosts);
  if (!plan.ok()) return plan.status();
  const int stages = ServerGroups(config);
  const bool stage_links =
      stages > 1 && AnyCrossHostLink(*plan, config.num_workers, stages);
  int stage_link_port = 0;
  if (stage_links && CrossHostListener((*plan)[placement.host_index],
                                       config.num_workers, stages) >= 0) {
    absl::StatusOr<int> port = ReserveStageLinkPort(options.advertise_address);
    if (!port.ok()) return port.status();
    stage_link_port = *port;
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      RendezvousChannelCredentials(options.auth);
  if (!credentials.ok()) return credentials.status();
  std::unique_ptr<RendezvousState> state;
  std::unique_ptr<RendezvousServer> server;
  if (placement.host_index == 0) {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
        server_credentials = RendezvousServerCredentials(options.auth);
    if (!server_credentials.ok()) return server_credentials.status();
    absl::StatusOr<std::pair<std::string, int>> split =
        SplitHostPort(placement.rendezvous);
    if (!split.ok()) return split.status();
    RendezvousOptions rendezvous;
    rendezvous.job_id = config.job_id;
    rendezvous.settings = options.settings;
    rendezvous.plan = *plan;
    rendezvous.host_timeout = options.host_timeout;
    if (stage_links) {
      absl::StatusOr<std::string> secret = NewLocalSecret();
      if (!secret.ok()) return secret.status();
      rendezvous.stage_link_secret = *std::move(secret);
    }
    state =
        std::make_unique<RendezvousState>(std::move(rendezvous), absl::Now());
    absl::StatusOr<std::unique_ptr<RendezvousServer>> started =
        RendezvousServer::Start(absl::StrCat("0.0.0.0:", split->second),
                                state.get(), *std::move(server_credentials));
    if (!started.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          started.status().message(),
          " (host 0 serves --rendezvous=", placement.rendezvous, ")"));
    }
    server = *std::move(started);
  }
  std::unique_ptr<HostSession> session(
      new HostSession(std::move(options), std::move(state), std::move(server),
                      *std::move(credentials)));
  HostJoin join;
  join.host_index = placement.host_index;
  join.num_hosts = placement.num_hosts;
  join.address = session->options_.advertise_address;
  join.settings = session->options_.settings;
  join.stage_link_port = stage_link_port;
  absl::StatusOr<JobPlan> joined = session->client_.Join(
      join, absl::Now() + session->options_.rendezvous_timeout);
  if (!joined.ok()) {
    // Never answered: most likely a wrong --rendezvous, which is
    // configuration.
    if (absl::IsDeadlineExceeded(joined.status()) &&
        absl::StrContains(joined.status().message(), "did not answer")) {
      return absl::InvalidArgumentError(joined.status().message());
    }
    return joined.status();
  }
  session->plan_ = *std::move(joined);
  if (stage_links) {
    absl::StatusOr<StageLinkPlan> links = PlanStageLinks(
        session->plan_.hosts, placement.host_index, config.num_workers, stages,
        session->plan_.stage_link_secret);
    if (!links.ok()) return links.status();
    session->stage_links_ = *std::move(links);
  }
  return session;
}

std::string HostSession::Name(int host) const {
  return HostName(host, plan_.hosts[host].address);
}

void HostSession::Apply(LaunchConfig* config) const {
  const HostShare& share = plan_.hosts[options_.placement.host_index];
  config->job_id = plan_.job_id;
  config->first_rank = share.first_rank;
  config->host_workers = share.num_workers;
  config->first_server = share.first_server;
  config->host_servers = share.num_servers;
  config->server_host = options_.advertise_address;
  config->stage_links = stage_links_;
}

void HostSession::Configure(ClusterSpec* spec, absl::Duration startup_timeout) {
  const int host = options_.placement.host_index;
  spec->exchange_servers = [this, host, startup_timeout](
                               const std::vector<std::string>& local,
                               const std::function<bool()>& stopped) {
    return client_.ExchangeServers(host, local, absl::Now() + startup_timeout,
                                   stopped);
  };
  // Servers exit once every worker of the job said it is done, on
  // whichever host; a failure elsewhere stops them through Abort.
  spec->shutdown_timeout = absl::InfiniteDuration();
}

std::string HostSession::Line() const {
  const int host = options_.placement.host_index;
  const HostShare& share = plan_.hosts[host];
  return absl::StrCat(
      Name(host), " of ", options_.placement.num_hosts, " (",
      options_.placement.source,
      "): ", Range("worker", share.first_rank, share.num_workers), ", ",
      Range("server", share.first_server, share.num_servers),
      "; rendezvous at ", options_.placement.rendezvous,
      host == 0 ? " (served here)" : "", "; job ", plan_.job_id,
      StageLinksText(stage_links_));
}

void HostSession::StartHeartbeats(std::function<void(std::string)> on_failure) {
  heartbeats_ = std::thread(
      [this, on_failure = std::move(on_failure)] { Beat(on_failure); });
}

void HostSession::Beat(std::function<void(std::string)> on_failure) {
  const int host = options_.placement.host_index;
  const absl::Duration interval =
      std::min(absl::Seconds(1), options_.host_timeout / 4);
  absl::Time answered = absl::Now();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_;
      };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), interval)) return;
    }
    absl::StatusOr<std::string> failure =
        client_.Heartbeat(host, std::min(kCallTimeout, options_.host_timeout));
    std::string why;
    if (failure.ok()) {
      answered = absl::Now();
      why = *failure;
    } else if (absl::Now() - answered > options_.host_timeout) {
      why = absl::StrCat(Name(0), ", the rendezvous at ",
                         options_.placement.rendezvous,
                         ", stopped answering for ",
                         absl::FormatDuration(options_.host_timeout),
                         " (--host_timeout): its launcher was killed, or its "
                         "host is cut off (",
                         failure.status().message(), ")");
    }
    if (why.empty()) continue;
    {
      absl::MutexLock lock(&mu_);
      told_failure_ = why;
    }
    on_failure(why);
    return;
  }
}

void HostSession::Finish(ClusterResult* result) {
  std::string told;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    told = told_failure_;
  }
  if (heartbeats_.joinable()) heartbeats_.join();
  const int host = options_.placement.host_index;
  // This host's own failure is named by host; another host's (which ended
  // this one) already is.
  if (!result->status.ok() && result->stop_signal == 0 &&
      result->status.message() != told) {
    result->status =
        absl::Status(result->status.code(),
                     absl::StrCat(Name(host), ": ", result->status.message()));
  }
  HostReport report;
  report.host_index = host;
  report.exit_code = result->ExitCode();
  if (report.exit_code != 0) {
    report.failure =
        result->status.ok() ? "failed" : std::string(result->status.message());
  }
  report.bad_configuration = result->bad_configuration;
  report.final_test_accuracy = result->final_test_accuracy;
  for (const ProcessOutcome& process : result->processes) {
    report.processes.push_back(absl::StrCat(
        process.name, ": ",
        process.exit.has_value() ? process.exit->ToString() : "never started",
        process.stopped_by_launcher ? " (stopped by the launcher)" : ""));
  }
  if (host != 0) {
    if (absl::Status s = client_.Report(report, kCallTimeout); !s.ok()) {
      result->notes.push_back(absl::StrCat(
          "could not report this host's outcome to the rendezvous at ",
          options_.placement.rendezvous, ": ", s.message()));
    }
    return;
  }
  // Host 0 reports to its own state and waits for everyone's.
  (void)state_->Report(report, absl::Now());
  std::vector<HostStatus> hosts;
  while (true) {
    hosts = state_->Status(absl::Now());
    if (std::all_of(hosts.begin(), hosts.end(),
                    [](const HostStatus& h) { return h.settled; })) {
      break;
    }
    absl::SleepFor(kStatusInterval);
  }
  for (const HostStatus& other : hosts) {
    if (other.host_index == 0) continue;
    const std::string name = Name(other.host_index);
    std::string failure;
    bool bad_configuration = false;
    if (!other.lost.empty()) {
      failure = absl::StrCat(name, ": ", other.lost);
      result->notes.push_back(failure);
    } else {
      const HostReport& theirs = *other.report;
      if (!theirs.failure.empty()) {
        // Their own message names the host already.
        failure = absl::StartsWith(theirs.failure, name)
                      ? theirs.failure
                      : absl::StrCat(name, ": ", theirs.failure);
        bad_configuration = theirs.bad_configuration;
      }
      if (!result->final_test_accuracy.has_value()) {
        result->final_test_accuracy = theirs.final_test_accuracy;
      }
      for (const std::string& line : theirs.processes) {
        result->notes.push_back(absl::StrCat(name, ": ", line));
      }
    }
    if (!failure.empty() && result->status.ok()) {
      result->status = absl::AbortedError(failure);
      result->bad_configuration = bad_configuration;
    }
  }
}

}  // namespace ps
