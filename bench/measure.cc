#include "bench/measure.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/cpu_affinity.h"

namespace ps::bench {
namespace {

absl::Status Errno(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// Owns a file descriptor; closes it on destruction.
class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& other) : fd_(other.fd_) { other.fd_ = -1; }
  UniqueFd& operator=(UniqueFd&& other) {
    if (this != &other) {
      Reset();
      fd_ = other.fd_;
      other.fd_ = -1;
    }
    return *this;
  }
  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

// A listening TCP socket on `peer`'s address, port 0, made in its network
// namespace: setns changes only the calling thread's, so a short-lived
// thread makes the socket there.
absl::Status ListenAt(const TcpPeer& peer, UniqueFd* listener) {
  if (peer.netns_fd < 0) {
    *listener = UniqueFd(socket(AF_INET, SOCK_STREAM, 0));
    return listener->get() < 0 ? Errno("socket") : absl::OkStatus();
  }
  absl::Status status;
  std::thread([&] {
    if (setns(peer.netns_fd, CLONE_NEWNET) != 0) {
      status = Errno("setns to the peer's network namespace");
      return;
    }
    *listener = UniqueFd(socket(AF_INET, SOCK_STREAM, 0));
    if (listener->get() < 0) status = Errno("socket");
  }).join();
  return status;
}

// A connected pair of TCP sockets, `reader` on `peer`'s side.
absl::Status ConnectPair(const TcpPeer& peer, UniqueFd* writer,
                         UniqueFd* reader) {
  UniqueFd listener;
  if (absl::Status s = ListenAt(peer, &listener); !s.ok()) return s;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (inet_pton(AF_INET, peer.address.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("not an IPv4 address: '", peer.address, "'"));
  }
  addr.sin_port = 0;
  if (bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
      0) {
    return Errno(absl::StrCat("bind ", peer.address, ":0"));
  }
  if (listen(listener.get(), 1) != 0) return Errno("listen");
  socklen_t len = sizeof(addr);
  if (getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) !=
      0) {
    return Errno("getsockname");
  }
  UniqueFd client(socket(AF_INET, SOCK_STREAM, 0));
  if (client.get() < 0) return Errno("socket");
  if (connect(client.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
      0) {
    return Errno(absl::StrCat("connect to ", peer.address));
  }
  UniqueFd server(accept(listener.get(), nullptr, nullptr));
  if (server.get() < 0) return Errno("accept");
  *writer = std::move(client);
  *reader = std::move(server);
  return absl::OkStatus();
}

// Reads the stream into a buffer of `size` bytes (wrapping) and counts what
// arrived, so that the writer can wait for the end of each round.
// Thread-safe: Start runs the reading thread; Await and Join are for the
// writer's thread.
class CountingReader {
 public:
  CountingReader(int fd, uint64_t size) : fd_(fd), buffer_(size) {}
  ~CountingReader() {
    if (thread_.joinable()) thread_.join();
  }

  // Reads on a thread of its own, restricted to `cpus` unless empty.
  void Start(std::vector<int> cpus) {
    thread_ = std::thread([this, cpus = std::move(cpus)] {
      if (!cpus.empty()) {
        if (absl::Status s = RestrictThreadToCpus(cpus); !s.ok()) {
          Stop(s);
          return;
        }
      }
      Run();
    });
  }

  // Waits until `total` bytes arrived or the reader stopped; the reader's
  // error, if any.
  absl::Status Await(uint64_t total) {
    absl::MutexLock lock(&mu_);
    auto done = [this, total]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return received_ >= total || stopped_;
    };
    mu_.Await(absl::Condition(&done));
    if (received_ >= total) return absl::OkStatus();
    return error_.ok() ? absl::DataLossError("TCP stream ended early") : error_;
  }

  void Join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    size_t pos = 0;
    while (true) {
      const size_t want = buffer_.size() - pos;
      const ssize_t n = read(fd_, buffer_.data() + pos, want);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        Stop(n < 0 ? Errno("read") : absl::OkStatus());
        return;
      }
      absl::MutexLock lock(&mu_);
      received_ += static_cast<uint64_t>(n);
      pos = (pos + static_cast<size_t>(n)) % buffer_.size();
    }
  }

  // Ends the reading, for `error` if not OK.
  void Stop(absl::Status error) {
    absl::MutexLock lock(&mu_);
    if (!error.ok()) {
      error_ = std::move(error);
      // Unblocks a writer waiting for buffer space.
      shutdown(fd_, SHUT_RDWR);
    }
    stopped_ = true;
  }

  const int fd_;
  std::vector<char> buffer_;  // Touched only by the reading thread.
  absl::Mutex mu_;
  uint64_t received_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

absl::Status WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    // MSG_NOSIGNAL: a closed peer is an error, not a SIGPIPE.
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("send");
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = read(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("read");
    if (n == 0) return absl::DataLossError("TCP stream ended early");
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Answers every `size` bytes it reads with `size` bytes, on a thread of its
// own, until the stream ends.
class EchoPeer {
 public:
  EchoPeer(int fd, uint64_t size, std::vector<int> cpus)
      : thread_([this, fd, size, cpus = std::move(cpus)] {
          status_ = Run(fd, size, cpus);
        }) {}
  // The peer's error, once the stream has ended.
  absl::Status Join() {
    thread_.join();
    return status_;
  }

 private:
  static absl::Status Run(int fd, uint64_t size, const std::vector<int>& cpus) {
    if (!cpus.empty()) {
      if (absl::Status s = RestrictThreadToCpus(cpus); !s.ok()) return s;
    }
    std::vector<char> buffer(size);
    while (true) {
      absl::Status s = ReadAll(fd, buffer.data(), size);
      if (absl::IsDataLoss(s)) return absl::OkStatus();  // The end.
      if (!s.ok()) return s;
      if (s = WriteAll(fd, buffer.data(), size); !s.ok()) return s;
    }
  }

  absl::Status status_;  // Written by the thread, read after Join.
  std::thread thread_;
};

}  // namespace

absl::Status ValidateMeasureOptions(const MeasureOptions& options) {
  if (options.warmup_rounds < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "warmup rounds must be >= 0, got ", options.warmup_rounds));
  }
  if (options.trials < 1 || options.trials > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("trials must be in [1, 1000], got ", options.trials));
  }
  if (options.min_rounds < 1 || options.min_rounds > options.max_rounds) {
    return absl::InvalidArgumentError(
        absl::StrCat("rounds must be in [1, ", options.max_rounds, "], got ",
                     options.min_rounds));
  }
  if (options.min_time < absl::ZeroDuration() ||
      options.min_time > absl::Minutes(10)) {
    return absl::InvalidArgumentError(
        absl::StrCat("minimum time must be in [0, 10m], got ",
                     absl::FormatDuration(options.min_time)));
  }
  return absl::OkStatus();
}

double Gbps(uint64_t bytes, absl::Duration elapsed) {
  const double seconds = absl::ToDoubleSeconds(elapsed);
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
}

double Measurement::gbps() const { return Gbps(bytes, elapsed); }

double Measurement::cpu_ns_per_byte() const {
  return bytes > 0 ? absl::ToDoubleNanoseconds(cpu) / static_cast<double>(bytes)
                   : 0.0;
}

absl::Duration ProcessCpuTime() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return absl::DurationFromTimeval(usage.ru_utime) +
         absl::DurationFromTimeval(usage.ru_stime);
}

absl::StatusOr<absl::Duration> OtherProcessCpuTime(int pid) {
  const std::string path = absl::StrCat("/proc/", pid, "/stat");
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  // The command name may hold spaces and parentheses: fields are counted
  // after its last ')'. utime and stime are fields 14 and 15.
  const size_t paren = text.rfind(')');
  if (text.empty() || paren == std::string::npos) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path));
  }
  std::istringstream fields(text.substr(paren + 1));
  std::string field;
  uint64_t utime = 0;
  uint64_t stime = 0;
  for (int i = 3; i <= 15 && (fields >> field); ++i) {
    if (i == 14 && !absl::SimpleAtoi(field, &utime)) break;
    if (i == 15 && !absl::SimpleAtoi(field, &stime)) break;
    if (i == 15) {
      const long ticks = sysconf(_SC_CLK_TCK);
      return absl::Seconds(static_cast<double>(utime + stime) /
                           static_cast<double>(ticks > 0 ? ticks : 100));
    }
  }
  return absl::DataLossError(absl::StrCat("cannot parse ", path));
}

absl::StatusOr<Measurement> MeasureRounds(
    const MeasureOptions& options, uint64_t bytes_per_round,
    absl::FunctionRef<absl::Status()> round) {
  return MeasureRounds(options, bytes_per_round, round, ProcessCpuTime);
}

absl::StatusOr<Measurement> MeasureRounds(
    const MeasureOptions& options, uint64_t bytes_per_round,
    absl::FunctionRef<absl::Status()> round, CpuClock cpu_clock) {
  if (absl::Status s = ValidateMeasureOptions(options); !s.ok()) return s;
  for (int i = 0; i < options.warmup_rounds; ++i) {
    if (absl::Status s = round(); !s.ok()) return s;
  }
  std::vector<Measurement> trials(options.trials);
  for (Measurement& m : trials) {
    const absl::Duration cpu_start = cpu_clock();
    const absl::Time start = absl::Now();
    while (m.rounds < options.max_rounds &&
           (m.rounds < options.min_rounds || m.elapsed < options.min_time)) {
      if (absl::Status s = round(); !s.ok()) return s;
      ++m.rounds;
      m.elapsed = absl::Now() - start;
    }
    m.cpu = cpu_clock() - cpu_start;
    m.bytes = bytes_per_round * static_cast<uint64_t>(m.rounds);
  }
  std::sort(trials.begin(), trials.end(),
            [](const Measurement& a, const Measurement& b) {
              return a.gbps() < b.gbps();
            });
  return trials[trials.size() / 2];
}

absl::StatusOr<Measurement> MeasureMemcpy(const MeasureOptions& options,
                                          uint64_t size) {
  std::vector<char> src(size, 1);
  std::vector<char> dst(size, 0);
  // Reading the copy keeps the compiler from dropping it.
  volatile char sink = 0;
  absl::StatusOr<Measurement> m = MeasureRounds(options, size, [&] {
    std::memcpy(dst.data(), src.data(), size);
    sink = dst[size / 2];
    ++src[0];
    return absl::OkStatus();
  });
  (void)sink;
  return m;
}

absl::StatusOr<Measurement> MeasureTcpStream(const MeasureOptions& options,
                                             uint64_t size,
                                             absl::Span<const int> reader_cpus,
                                             const TcpPeer& peer) {
  if (size == 0) return absl::InvalidArgumentError("size must be positive");
  UniqueFd writer;
  UniqueFd reader_fd;
  if (absl::Status s = ConnectPair(peer, &writer, &reader_fd); !s.ok()) {
    return s;
  }
  const std::vector<char> data(size, 7);
  CountingReader reader(reader_fd.get(), size);
  reader.Start(std::vector<int>(reader_cpus.begin(), reader_cpus.end()));
  uint64_t sent = 0;
  absl::StatusOr<Measurement> m = MeasureRounds(options, size, [&] {
    if (absl::Status s = WriteAll(writer.get(), data.data(), size); !s.ok()) {
      return s;
    }
    sent += size;
    return reader.Await(sent);
  });
  // End of stream stops the reader; join it before its socket closes.
  shutdown(writer.get(), SHUT_WR);
  reader.Join();
  return m;
}

absl::StatusOr<Measurement> MeasureTcpRequestResponse(
    const MeasureOptions& options, uint64_t size,
    absl::Span<const int> peer_cpus, const TcpPeer& peer) {
  if (size == 0) return absl::InvalidArgumentError("size must be positive");
  UniqueFd client;
  UniqueFd peer_fd;
  if (absl::Status s = ConnectPair(peer, &client, &peer_fd); !s.ok()) {
    return s;
  }
  // Small requests go out at once, as gRPC sends them.
  const int one = 1;
  setsockopt(client.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(peer_fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::vector<char> request(size, 7);
  std::vector<char> response(size);
  EchoPeer echo(peer_fd.get(), size,
                std::vector<int>(peer_cpus.begin(), peer_cpus.end()));
  absl::StatusOr<Measurement> m = MeasureRounds(options, 2 * size, [&] {
    if (absl::Status s = WriteAll(client.get(), request.data(), size);
        !s.ok()) {
      return s;
    }
    return ReadAll(client.get(), response.data(), size);
  });
  shutdown(client.get(), SHUT_WR);
  absl::Status peer_status = echo.Join();
  if (m.ok() && !peer_status.ok()) return peer_status;
  return m;
}

}  // namespace ps::bench
