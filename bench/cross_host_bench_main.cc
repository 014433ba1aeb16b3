// Push+pull rounds across test hosts (tests/hosts/test_hosts.h), next to a
// raw TCP stream and a TCP request/response between the same hosts in the
// same run. Needs root. See bench/README.md, "Across test hosts".
//
// Shard i runs on host i, the worker (this process, its network namespace
// switched to the last host's) on host N; the TCP baselines' receiving end
// listens on host 0. Each row is measured --runs times, ours and the two
// baselines one after the other in each run so that load hits all alike;
// the medians of the figures and of the per-run ratios are printed.
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "bench/bench_flags.h"
#include "bench/bench_runner.h"
#include "bench/measure.h"
#include "bench/push_pull.h"
#include "common/cpu_affinity.h"
#include "common/malloc_tuning.h"
#include "tests/hosts/test_hosts.h"

ABSL_FLAG(std::string, sizes, "4K,1M,16M",
          "Model sizes in bytes of float32, K/M/G binary suffixes.");
ABSL_FLAG(std::string, servers, "1,2", "Shard counts; shard i runs on host i.");
ABSL_FLAG(std::string, rates_mbit, "0,10000,1000",
          "Link rates in Mbit/s, each link both ways; 0: unshaped.");
ABSL_FLAG(int, runs, 3, "Runs of each row; medians are printed.");
ABSL_FLAG(int, min_time_ms, 300, "Minimum time of each measurement.");
ABSL_FLAG(int, iperf3_seconds, 1,
          "Length of each run's iperf3 stream (the raw TCP stream baseline).");
ABSL_FLAG(int, chunk_kb, 1024,
          "Our stream chunk in KiB (ClientOptions.chunk_elements * 4).");
ABSL_FLAG(bool, split_cpus, true,
          "Worker on the first half of the CPUs, shards and the baselines' "
          "receiving ends on the other half; false: any CPU.");
ABSL_FLAG(bool, keep_freed_memory, true,
          "Keep freed memory in this process (the worker), as the worker "
          "binary and the Python module do; false: glibc's defaults.");
ABSL_FLAG(std::string, compression, "none",
          "Comma-separated wire compressions, each measured in every row's "
          "run: none, bf16, fp16, topk (--topk_ratio of the gradient).");
ABSL_FLAG(std::string, transports, "grpc,tcp",
          "Comma-separated routes, each measured in every row's run: grpc, "
          "or tcp (the same-host transport's frames over TCP, the shards' "
          "--tcp_data_port).");
ABSL_FLAG(bool, baselines, true,
          "Measure iperf3, the TCP stream and the TCP request/response beside "
          "ours; false: ours only (their columns print 0), e.g. under a "
          "profiler.");
ABSL_FLAG(bool, ours, true,
          "Measure our rounds; false: the baselines only (our columns print "
          "0), e.g. to profile them alone.");
ABSL_FLAG(bool, two_calls, true,
          "Also time a Push then a Pull call (the push and pull columns); "
          "false: only the PushPull rounds (those columns print 0).");
ABSL_FLAG(double, topk_ratio, 0.01, "The fraction of a top-k push sent.");
ABSL_FLAG(std::string, server_binary, "",
          "Path of //server:server; empty: found in this binary's runfiles.");

namespace ps::bench {
namespace {

constexpr int64_t kMbit = 1000 * 1000;

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "cross_host_bench: %s\n",
               std::string(status.message()).c_str());
  return 1;
}

// The 1-minute load average, printed beside every row.
std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string first;
  in >> first;
  return first;
}

// 0 where the baseline was not measured (--baselines=false).
double Ratio(double ours, double baseline) {
  return baseline > 0 ? ours / baseline : 0;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

// Moves the calling thread into a host's network namespace; threads it
// starts afterwards (gRPC's) are made there too. The destructor moves it
// back: TestHosts kills every process whose main thread is in one of its
// namespaces, so this must end before the hosts do.
class InHostNamespace {
 public:
  static absl::StatusOr<std::unique_ptr<InHostNamespace>> Enter(
      const std::string& name) {
    const int home = open("/proc/self/ns/net", O_RDONLY);
    if (home < 0) return absl::UnavailableError("open /proc/self/ns/net");
    std::unique_ptr<InHostNamespace> entered(new InHostNamespace(home));
    const int fd = open(absl::StrCat("/run/netns/", name).c_str(), O_RDONLY);
    if (fd < 0) return absl::UnavailableError(absl::StrCat("open ", name));
    const int rc = setns(fd, CLONE_NEWNET);
    close(fd);
    if (rc != 0) return absl::UnavailableError(absl::StrCat("setns ", name));
    return entered;
  }
  ~InHostNamespace() {
    if (setns(home_, CLONE_NEWNET) != 0) {
      std::fprintf(stderr, "cross_host_bench: cannot leave the host\n");
    }
    close(home_);
  }
  InHostNamespace(const InHostNamespace&) = delete;
  InHostNamespace& operator=(const InHostNamespace&) = delete;

 private:
  explicit InHostNamespace(int home) : home_(home) {}
  const int home_;
};

struct Figures {
  double ours_round_us = 0;
  double ours_gbps = 0;  // 2 x size a round.
  double ours_cpu = 0;   // ns per byte, worker + shards.
  double tcp_gbps = 0;   // size a round.
  double tcp_cpu = 0;    // ns per byte, both ends (this process).
  double rr_round_us = 0;
  // The same bytes as a Push then a Pull call: each direction alone.
  double push_gbps = 0;
  double pull_gbps = 0;
};

// A continuous stream from host `from` to host 0 for `seconds`: iperf3's
// receiver rate in GB/s. Its server must listen on host 0.
absl::StatusOr<double> Iperf3Gbps(const testing::TestHosts& hosts, int from,
                                  int seconds) {
  absl::StatusOr<std::string> output =
      hosts.Run(from,
                {"iperf3", "-c", hosts.address(0), "-t", absl::StrCat(seconds),
                 "-f", "m"},
                absl::Seconds(seconds + 60));
  if (!output.ok()) return output.status();
  for (absl::string_view line : absl::StrSplit(*output, '\n')) {
    if (!absl::StrContains(line, "receiver")) continue;
    std::vector<absl::string_view> words =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    for (size_t i = 1; i < words.size(); ++i) {
      double mbit = 0;
      if (words[i] == "Mbits/sec" && absl::SimpleAtod(words[i - 1], &mbit)) {
        return mbit * 1e6 / 8 / 1e9;
      }
    }
  }
  return absl::DataLossError(
      absl::StrCat("no receiver rate in iperf3's output:\n", *output));
}

absl::StatusOr<Figures> MeasureOnce(const testing::TestHosts& hosts,
                                    int peer_netns, const CpuSplit& cpus,
                                    const MeasureOptions& measure,
                                    PushPullOptions options) {
  Figures f;
  options.shard_hosts.clear();
  for (int i = 0; i < options.num_servers; ++i) {
    options.shard_hosts.push_back(hosts.address(i));
  }
  options.start_shard = [&hosts](int shard, SubprocessOptions sub) {
    return hosts.Start(shard, std::move(sub));
  };
  if (absl::GetFlag(FLAGS_ours)) {
    absl::StatusOr<PushPullResult> ours = MeasurePushPull(measure, options);
    if (!ours.ok()) return ours.status();
    const Measurement& m = ours->round_trip;
    f.ours_gbps = m.gbps();
    f.ours_cpu = m.cpu_ns_per_byte();
    f.ours_round_us = absl::ToDoubleMicroseconds(m.elapsed) / m.rounds;
    f.push_gbps = ours->push_gbps;
    f.pull_gbps = ours->pull_gbps;
    // For per-round counts under a profiler (bench/README.md, "Where a
    // frames round goes").
    std::fprintf(stderr, "ours: %d rounds in %.1f ms\n", m.rounds,
                 absl::ToDoubleMilliseconds(m.elapsed));
  }
  if (!absl::GetFlag(FLAGS_baselines)) return f;
  TcpPeer peer;
  peer.address = hosts.address(0);
  peer.netns_fd = peer_netns;
  absl::StatusOr<Measurement> tcp =
      MeasureTcpStream(measure, options.size_bytes, cpus.servers, peer);
  if (!tcp.ok()) return tcp.status();
  f.tcp_gbps = tcp->gbps();
  f.tcp_cpu = tcp->cpu_ns_per_byte();
  absl::StatusOr<Measurement> rr = MeasureTcpRequestResponse(
      measure, options.size_bytes, cpus.servers, peer);
  if (!rr.ok()) return rr.status();
  f.rr_round_us = absl::ToDoubleMicroseconds(rr->elapsed) / rr->rounds;
  std::fprintf(stderr, "TCP request/response: %d rounds in %.1f ms\n",
               rr->rounds, absl::ToDoubleMilliseconds(rr->elapsed));
  return f;
}

int Main(const char* argv0) {
  if (std::string why = testing::TestHosts::WhyUnavailable(); !why.empty()) {
    return Fail(absl::FailedPreconditionError(why));
  }
  absl::StatusOr<std::vector<uint64_t>> sizes =
      ParseSizes(absl::GetFlag(FLAGS_sizes));
  if (!sizes.ok()) return Fail(sizes.status());
  absl::StatusOr<std::vector<int>> servers =
      ParseServerCounts(absl::GetFlag(FLAGS_servers));
  if (!servers.ok()) return Fail(servers.status());
  std::vector<int64_t> rates;
  for (absl::string_view text :
       absl::StrSplit(absl::GetFlag(FLAGS_rates_mbit), ',')) {
    int64_t mbit = 0;
    if (!absl::SimpleAtoi(text, &mbit) || mbit < 0) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--rates_mbit: not a rate: '", text, "'")));
    }
    rates.push_back(mbit);
  }
  std::vector<std::pair<std::string, Compression>> compressions;
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_compression), ',')) {
    absl::StatusOr<Compression> c =
        Compression::FromName(name, absl::GetFlag(FLAGS_topk_ratio));
    if (!c.ok()) return Fail(c.status());
    compressions.emplace_back(std::string(name), *c);
  }
  const int runs = absl::GetFlag(FLAGS_runs);
  if (runs < 1 || runs > 100) {
    return Fail(absl::InvalidArgumentError("--runs must be in [1, 100]"));
  }
  PushPullOptions options;
  options.server_binary = absl::GetFlag(FLAGS_server_binary);
  if (options.server_binary.empty()) {
    options.server_binary = FindServerBinary(argv0);
  }
  options.chunk_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_chunk_kb))
                        << 10;
  std::vector<std::string> transports =
      absl::StrSplit(absl::GetFlag(FLAGS_transports), ',');
  for (const std::string& via : transports) {
    if (via != "grpc" && via != "tcp") {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--transports: not grpc or tcp: '", via, "'")));
    }
  }
  char dir_template[] = "/tmp/cross_host_bench.XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    return Fail(absl::UnavailableError("mkdtemp"));
  }
  options.work_dir = dir_template;
  const CpuSplit cpus =
      absl::GetFlag(FLAGS_split_cpus) ? SplitCpus(UsableCpus()) : CpuSplit{};
  options.server_cpus = cpus.servers;
  MeasureOptions measure;
  measure.trials = 1;
  measure.min_time = absl::Milliseconds(absl::GetFlag(FLAGS_min_time_ms));

  const int max_servers = *std::max_element(servers->begin(), servers->end());
  absl::StatusOr<std::unique_ptr<testing::TestHosts>> hosts =
      testing::TestHosts::Create(max_servers + 1, 0);
  if (!hosts.ok()) return Fail(hosts.status());
  // Kept open to the end; the process's exit closes it on an error.
  const int peer_netns =
      open(absl::StrCat("/run/netns/", (*hosts)->namespace_name(0)).c_str(),
           O_RDONLY);
  if (peer_netns < 0) return Fail(absl::UnavailableError("open host 0"));
  // Before any thread of gRPC's starts, so that all of them are made there.
  absl::StatusOr<std::unique_ptr<InHostNamespace>> in_host =
      InHostNamespace::Enter((*hosts)->namespace_name(max_servers));
  if (!in_host.ok()) return Fail(in_host.status());
  if (!cpus.worker.empty()) {
    if (absl::Status s = RestrictThreadToCpus(cpus.worker); !s.ok()) {
      return Fail(s);
    }
  }
  absl::StatusOr<std::unique_ptr<Subprocess>> listening =
      (*hosts)->StartIperf3Server(0, /*one_test=*/false);
  if (!listening.ok()) return Fail(listening.status());
  const int iperf3_seconds = absl::GetFlag(FLAGS_iperf3_seconds);
  const bool baselines = absl::GetFlag(FLAGS_baselines);
  std::printf(
      "worker on host %d, CPUs %s; shards and TCP peers CPUs %s; %d runs, "
      "medians; GB/s: ours 2 x size / round, TCP size / round, iperf3 a "
      "continuous stream\n",
      max_servers, FormatCpuList(cpus.worker).c_str(),
      FormatCpuList(cpus.servers).c_str(), runs);
  std::printf(
      "%-5s %-4s %-9s %-7s %-3s %9s %9s %9s %9s %9s %8s %8s %8s %7s %7s %6s "
      "%6s %6s\n",
      "wire", "via", "link", "size", "sh", "ours_us", "ours_GB/s", "iperf3",
      "TCP_GB/s", "TCPrr_us", "ours/ip3", "ours/TCP", "ours/rr", "cpu",
      "TCPcpu", "push", "pull", "load");
  for (int64_t mbit : rates) {
    for (int h = 0; h < (*hosts)->size(); ++h) {
      if (absl::Status s = (*hosts)->SetRate(h, mbit * kMbit); !s.ok()) {
        return Fail(s);
      }
    }
    const std::string link =
        mbit == 0 ? "unshaped" : absl::StrCat(mbit / 1000.0, "G");
    for (uint64_t size : *sizes) {
      for (int n : *servers) {
        for (const auto& [wire, compression] : compressions) {
          for (const std::string& via : transports) {
            options.compression = compression;
            // The shards' Unix socket is not reachable from the worker's
            // host: with it on, the client takes their TCP data port.
            options.local_transport = via == "tcp";
            options.size_bytes = size;
            options.num_servers = n;
            options.measure_two_calls = absl::GetFlag(FLAGS_two_calls);
            std::vector<double> us, gbps, iperf, tcp, rr, vs_iperf, vs_tcp,
                vs_rr, cpu, tcp_cpu, push, pull;
            for (int r = 0; r < runs; ++r) {
              absl::StatusOr<Figures> f =
                  MeasureOnce(**hosts, peer_netns, cpus, measure, options);
              if (!f.ok()) return Fail(f.status());
              absl::StatusOr<double> stream =
                  baselines ? Iperf3Gbps(**hosts, max_servers, iperf3_seconds)
                            : 0.0;
              if (!stream.ok()) return Fail(stream.status());
              us.push_back(f->ours_round_us);
              gbps.push_back(f->ours_gbps);
              iperf.push_back(*stream);
              tcp.push_back(f->tcp_gbps);
              rr.push_back(f->rr_round_us);
              vs_iperf.push_back(Ratio(f->ours_gbps, *stream));
              vs_tcp.push_back(Ratio(f->ours_gbps, f->tcp_gbps));
              vs_rr.push_back(Ratio(f->ours_round_us, f->rr_round_us));
              cpu.push_back(f->ours_cpu);
              tcp_cpu.push_back(f->tcp_cpu);
              push.push_back(f->push_gbps);
              pull.push_back(f->pull_gbps);
            }
            std::printf(
                // Significant digits, so that no positive figure prints as 0.
                "%-5s %-4s %-9s %-7s %-3d %9.0f %9.3g %9.3g %9.3g %9.0f %8.3g "
                "%8.3g %8.3g %7.3g %7.3g %6.3g %6.3g %6s\n",
                wire.c_str(), via.c_str(), link.c_str(),
                FormatSize(size).c_str(), n, Median(us), Median(gbps),
                Median(iperf), Median(tcp), Median(rr), Median(vs_iperf),
                Median(vs_tcp), Median(vs_rr), Median(cpu), Median(tcp_cpu),
                Median(push), Median(pull), LoadAverage().c_str());
            std::fflush(stdout);
          }
        }
      }
    }
  }
  close(peer_netns);
  rmdir(options.work_dir.c_str());
  return 0;
}

}  // namespace
}  // namespace ps::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // As the worker binary does: no page faults on every transfer's buffers.
  if (absl::GetFlag(FLAGS_keep_freed_memory)) ps::KeepFreedMemory();
  return ps::bench::Main(argv[0]);
}
