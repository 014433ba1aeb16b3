#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

extern char** environ;

namespace ps {
namespace {

std::string ErrnoText(int error) {
  char buffer[256];
  // GNU strerror_r: thread-safe, returns the message (maybe not in buffer).
  return strerror_r(error, buffer, sizeof(buffer));
}

// Closes the descriptors it holds unless released; keeps Start()'s error
// paths from leaking them.
class FdCloser {
 public:
  explicit FdCloser(std::vector<int*> fds) : fds_(std::move(fds)) {}
  ~FdCloser() {
    for (int* fd : fds_) {
      if (*fd >= 0) close(*fd);
    }
  }
  void Release() { fds_.clear(); }

 private:
  std::vector<int*> fds_;
};

// posix_spawn's two attribute objects, destroyed on every return path.
struct SpawnAttributes {
  SpawnAttributes() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
  }
  ~SpawnAttributes() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
};

// This process's environment with `overrides` set on top, as "K=V" strings.
std::vector<std::string> ChildEnvironment(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> result;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    absl::string_view text(*entry);
    bool replaced = false;
    for (const auto& [key, value] : overrides) {
      if (text.size() > key.size() && text[key.size()] == '=' &&
          absl::StartsWith(text, key)) {
        replaced = true;
        break;
      }
    }
    if (!replaced) result.emplace_back(text);
  }
  for (const auto& [key, value] : overrides) {
    result.push_back(absl::StrCat(key, "=", value));
  }
  return result;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> result;
  result.reserve(strings.size() + 1);
  for (std::string& s : strings) result.push_back(s.data());
  result.push_back(nullptr);
  return result;
}

absl::Status ValidateOptions(const SubprocessOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return absl::InvalidArgumentError("subprocess: argv is empty");
  }
  for (const auto& [key, value] : options.env) {
    if (key.empty() || key.find('=') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "subprocess: bad environment variable name '", key, "'"));
    }
  }
  if (options.max_line_bytes == 0) {
    return absl::InvalidArgumentError("subprocess: max_line_bytes must be > 0");
  }
  return absl::OkStatus();
}

}  // namespace

std::string ExitStatus::ToString() const {
  if (!signaled_) return absl::StrCat("exited with code ", value_);
  const char* abbrev = sigabbrev_np(value_);
  if (abbrev == nullptr) return absl::StrCat("killed by signal ", value_);
  return absl::StrCat("killed by signal ", value_, " (SIG", abbrev, ")");
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    SubprocessOptions options) {
  if (absl::Status status = ValidateOptions(options); !status.ok()) {
    return status;
  }
  int output[2] = {-1, -1};
  int wake[2] = {-1, -1};
  FdCloser closer({&output[0], &output[1], &wake[0], &wake[1]});
  // O_CLOEXEC: a child started concurrently by another thread must not
  // inherit our pipe ends, or we would never see end of output.
  if (options.capture_output &&
      (pipe2(output, O_CLOEXEC) != 0 || pipe2(wake, O_CLOEXEC) != 0)) {
    return absl::InternalError(
        absl::StrCat("subprocess: cannot create a pipe: ", ErrnoText(errno)));
  }

  SpawnAttributes spawn;
  if (!options.inherit_stdin) {
    posix_spawn_file_actions_addopen(&spawn.actions, STDIN_FILENO, "/dev/null",
                                     O_RDONLY, 0);
  }
  if (options.capture_output) {
    posix_spawn_file_actions_adddup2(&spawn.actions, output[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&spawn.actions, output[1], STDERR_FILENO);
  }
  if (!options.working_dir.empty()) {
    posix_spawn_file_actions_addchdir_np(&spawn.actions,
                                         options.working_dir.c_str());
  }
  posix_spawnattr_setflags(&spawn.attr, POSIX_SPAWN_SETPGROUP |
                                            POSIX_SPAWN_SETSIGMASK |
                                            POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&spawn.attr, 0);
  sigset_t signals;
  sigemptyset(&signals);
  posix_spawnattr_setsigmask(&spawn.attr, &signals);
  // Ignored signals stay ignored across exec; give the child the defaults.
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD, SIGUSR1,
                SIGUSR2, SIGALRM}) {
    sigaddset(&signals, s);
  }
  posix_spawnattr_setsigdefault(&spawn.attr, &signals);

  std::vector<std::string> argv_strings = options.argv;
  std::vector<char*> argv = CStrings(argv_strings);
  std::vector<std::string> env_strings = ChildEnvironment(options.env);
  std::vector<char*> envp = CStrings(env_strings);
  const std::string& program = options.argv[0];
  const bool search_path = program.find('/') == std::string::npos;
  pid_t pid = -1;
  const int error = search_path
                        ? posix_spawnp(&pid, program.c_str(), &spawn.actions,
                                       &spawn.attr, argv.data(), envp.data())
                        : posix_spawn(&pid, program.c_str(), &spawn.actions,
                                      &spawn.attr, argv.data(), envp.data());
  if (error != 0) {
    std::string message =
        absl::StrCat("cannot start '", program, "': ", ErrnoText(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    if (error == EACCES) return absl::PermissionDeniedError(message);
    return absl::FailedPreconditionError(message);
  }
  close(output[1]);
  output[1] = -1;
  closer.Release();
  std::unique_ptr<Subprocess> process(
      new Subprocess(std::move(options), pid, output[0], wake[0], wake[1]));
  if (process->output_fd_ >= 0) {
    process->reader_ = std::thread([p = process.get()] { p->ReadOutput(); });
  }
  process->reaper_ = std::thread([p = process.get()] { p->WatchExit(); });
  return process;
}

Subprocess::Subprocess(SubprocessOptions options, pid_t pid, int output_fd,
                       int wake_read_fd, int wake_write_fd)
    : options_(std::move(options)),
      name_(options_.name.empty() ? options_.argv[0] : options_.name),
      pid_(pid),
      output_fd_(output_fd),
      wake_read_fd_(wake_read_fd),
      wake_write_fd_(wake_write_fd),
      output_closed_(output_fd < 0) {}

Subprocess::~Subprocess() {
  if (!TryWait().has_value()) Terminate(options_.kill_grace);
  // The child is an unreaped zombie, so its group id cannot have been reused:
  // kill whatever it left behind in its group.
  ::kill(-pid_, SIGKILL);
  reaper_.join();
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (reader_.joinable()) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&output_closed_),
                           options_.output_drain_timeout);
    }
    // A process that left the group may still hold the pipe: stop reading.
    while (write(wake_write_fd_, "x", 1) < 0 && errno == EINTR) {
    }
    reader_.join();
  }
  for (int fd : {output_fd_, wake_read_fd_, wake_write_fd_}) {
    if (fd >= 0) close(fd);
  }
}

absl::Status Subprocess::Kill(int signal) {
  if (::kill(-pid_, signal) == 0) return absl::OkStatus();
  const int error = errno;
  // No such group: posix_spawn always sets it, but be safe and reach the
  // child itself.
  if (error == ESRCH && ::kill(pid_, signal) == 0) return absl::OkStatus();
  if (error == ESRCH) return absl::OkStatus();  // Nothing left to signal.
  return absl::InternalError(absl::StrCat("cannot send signal ", signal, " to ",
                                          name_, " (pid ", pid_,
                                          "): ", ErrnoText(error)));
}

ExitStatus Subprocess::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](std::optional<ExitStatus>* s) { return s->has_value(); },
      &exit_status_));
  return *exit_status_;
}

std::optional<ExitStatus> Subprocess::WaitFor(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(
      absl::Condition(
          +[](std::optional<ExitStatus>* s) { return s->has_value(); },
          &exit_status_),
      timeout);
  return exit_status_;
}

ExitStatus Subprocess::Terminate(absl::Duration grace) {
  if (std::optional<ExitStatus> status = TryWait()) return *status;
  Kill(SIGTERM).IgnoreError();  // Failure shows up as a timeout below.
  if (std::optional<ExitStatus> status = WaitFor(grace)) return *status;
  Kill(SIGKILL).IgnoreError();
  return Wait();
}

void Subprocess::WatchExit() {
  siginfo_t info;
  ExitStatus status = ExitStatus::Exited(-1);
  while (true) {
    memset(&info, 0, sizeof(info));
    // WNOWAIT: leave the zombie for the destructor so the pid stays ours.
    if (waitid(P_PID, pid_, &info, WEXITED | WNOWAIT) == 0) {
      status = info.si_code == CLD_EXITED
                   ? ExitStatus::Exited(info.si_status)
                   : ExitStatus::Signaled(info.si_status);
      break;
    }
    // Only ECHILD is left (someone else reaped it, e.g. SIGCHLD ignored):
    // the status is lost, report "exited with code -1".
    if (errno != EINTR) break;
  }
  {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&output_closed_),
                         options_.output_drain_timeout);
    exit_status_ = status;
  }
  if (options_.exit_callback) options_.exit_callback(status);
}

void Subprocess::ReadOutput() {
  std::string pending;
  std::vector<char> buffer(64 * 1024);
  while (true) {
    pollfd fds[2] = {{output_fd_, POLLIN, 0}, {wake_read_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents != 0) break;  // The destructor gave up waiting.
    if (fds[0].revents == 0) continue;
    const ssize_t n = read(output_fd_, buffer.data(), buffer.size());
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;  // End of output (or an error we cannot fix).
    pending.append(buffer.data(), static_cast<size_t>(n));
    size_t start = 0;
    for (size_t end; (end = pending.find('\n', start)) != std::string::npos;
         start = end + 1) {
      AddLine(pending.substr(start, end - start));
    }
    pending.erase(0, start);
    while (pending.size() >= options_.max_line_bytes) {
      AddLine(pending.substr(0, options_.max_line_bytes));
      pending.erase(0, options_.max_line_bytes);
    }
  }
  if (!pending.empty()) AddLine(std::move(pending));
  absl::MutexLock lock(&mu_);
  output_closed_ = true;
}

void Subprocess::AddLine(std::string line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (options_.line_callback) options_.line_callback(line);
  absl::MutexLock lock(&mu_);
  lines_.push_back(std::move(line));
  while (lines_.size() > options_.max_kept_lines) lines_.pop_front();
}

std::vector<std::string> Subprocess::OutputLines() const {
  absl::MutexLock lock(&mu_);
  return std::vector<std::string>(lines_.begin(), lines_.end());
}

std::string Subprocess::LastLines(size_t n) const {
  absl::MutexLock lock(&mu_);
  const size_t first = lines_.size() > n ? lines_.size() - n : 0;
  return absl::StrJoin(lines_.begin() + first, lines_.end(), "\n");
}

bool Subprocess::HasLineContaining(absl::string_view substring) const {
  for (const std::string& line : lines_) {
    if (absl::StrContains(line, substring)) return true;
  }
  return false;
}

absl::StatusOr<std::string> Subprocess::WaitForOutputLine(
    absl::string_view substring, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto found_or_closed = [this,
                          substring]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return output_closed_ || HasLineContaining(substring);
  };
  mu_.AwaitWithTimeout(absl::Condition(&found_or_closed), timeout);
  for (const std::string& line : lines_) {
    if (absl::StrContains(line, substring)) return line;
  }
  if (output_closed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": output ended without a line containing '", substring, "'"));
  }
  return absl::DeadlineExceededError(
      absl::StrCat(name_, ": no line containing '", substring, "' within ",
                   absl::FormatDuration(timeout)));
}

absl::StatusOr<int> ParsePort(absl::string_view text) {
  absl::string_view stripped = absl::StripAsciiWhitespace(text);
  int port = 0;
  if (stripped.empty()) return absl::InvalidArgumentError("port file is empty");
  if (!absl::SimpleAtoi(stripped, &port) || port < 1 || port > 65535 ||
      !absl::ascii_isdigit(stripped[0])) {
    return absl::InvalidArgumentError(
        absl::StrCat("port file holds '", absl::CHexEscape(stripped),
                     "', not a port in [1, 65535]"));
  }
  return port;
}

absl::StatusOr<int> ReadPortFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("port file ", path, " does not exist yet"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open port file ", path, ": ", ErrnoText(error)));
  }
  // A port is at most 5 digits; read a little more to notice junk.
  char buffer[64];
  size_t size = 0;
  while (size < sizeof(buffer)) {
    const ssize_t n = read(fd, buffer + size, sizeof(buffer) - size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    size += static_cast<size_t>(n);
  }
  close(fd);
  if (size == sizeof(buffer)) {
    return absl::InvalidArgumentError(
        absl::StrCat("port file ", path, " is too long for a port"));
  }
  absl::StatusOr<int> port = ParsePort(absl::string_view(buffer, size));
  if (!port.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", port.status().message()));
  }
  return port;
}

absl::StatusOr<int> WaitForPortFile(const std::string& path,
                                    absl::Duration timeout, Subprocess* child) {
  const absl::Time deadline = absl::Now() + timeout;
  const absl::Duration poll_interval = absl::Milliseconds(10);
  while (true) {
    absl::StatusOr<int> port = ReadPortFile(path);
    if (!absl::IsNotFound(port.status())) return port;
    if (child != nullptr) {
      if (std::optional<ExitStatus> exit = child->TryWait()) {
        // It may have written the file just before exiting.
        port = ReadPortFile(path);
        if (!absl::IsNotFound(port.status())) return port;
        std::string output = child->LastLines(10);
        return absl::FailedPreconditionError(absl::StrCat(
            child->name(), " ", exit->ToString(), " before writing port file ",
            path,
            output.empty() ? "; no output"
                           : absl::StrCat("; last output:\n", output)));
      }
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no port file ", path, " after ", absl::FormatDuration(timeout)));
    }
    const absl::Duration wait = std::min(poll_interval, deadline - now);
    if (child != nullptr) {
      child->WaitFor(wait);
    } else {
      absl::SleepFor(wait);
    }
  }
}

}  // namespace ps
