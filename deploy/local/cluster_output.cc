#include "deploy/local/cluster_output.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ps {
namespace {

std::string Clock() {
  return absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::LocalTimeZone());
}

// Our binaries' pattern, "12:00:00.000 [worker 1] info: ...", names the
// process already.
bool NamesItself(const ProcessId& who, absl::string_view line) {
  const absl::string_view head = line.substr(0, 40);
  return absl::StrContains(head, absl::StrCat("[", who.Name(), "] "));
}

}  // namespace

std::string ProcessId::Name() const {
  return absl::StrCat(is_server ? "server " : "worker ", index);
}

LineSeverity SeverityOf(absl::string_view line) {
  // spdlog's "%l" after our pattern's "[role index] ".
  const size_t bracket = line.find("] ");
  if (bracket != absl::string_view::npos && bracket < 40) {
    const absl::string_view level = line.substr(bracket + 2, 10);
    if (absl::StartsWith(level, "warning:")) return LineSeverity::kWarning;
    if (absl::StartsWith(level, "error:") ||
        absl::StartsWith(level, "critical:")) {
      return LineSeverity::kError;
    }
    if (absl::StartsWith(level, "info:") || absl::StartsWith(level, "debug:") ||
        absl::StartsWith(level, "trace:")) {
      return LineSeverity::kInfo;
    }
  }
  for (absl::string_view marker : {"Traceback (most recent call last)",
                                   "Error:", "error:", "FATAL", "Fatal"}) {
    if (absl::StrContains(line, marker)) return LineSeverity::kError;
  }
  for (absl::string_view marker : {"Warning:", "warning:", "WARNING"}) {
    if (absl::StrContains(line, marker)) return LineSeverity::kWarning;
  }
  return LineSeverity::kInfo;
}

std::string ShortProgramName(absl::string_view path) {
  for (absl::string_view marker : {".runfiles/", "/bin/"}) {
    const size_t at = path.rfind(marker);
    if (at == absl::string_view::npos || !absl::StrContains(path, "bazel")) {
      continue;
    }
    absl::string_view rest = path.substr(at + marker.size());
    // Runfiles hold the workspace's name first.
    if (marker == absl::string_view(".runfiles/")) {
      const size_t slash = rest.find('/');
      if (slash != absl::string_view::npos) rest = rest.substr(slash + 1);
    }
    return std::string(rest);
  }
  return std::string(path);
}

void StreamedOutput::ProcessStarted(const ProcessId& who, int pid,
                                    const std::vector<std::string>& argv) {
  writer_->Write("[launch] ",
                 absl::StrCat("started ", who.Name(), " (pid ", pid, "): ",
                              argv.empty() ? "" : ShortProgramName(argv[0])));
}

void StreamedOutput::ProcessLine(const ProcessId& who, absl::string_view line) {
  writer_->Write(
      NamesItself(who, line) ? "" : absl::StrCat("[", who.Name(), "] "), line);
}

void StreamedOutput::LauncherLine(LaunchLevel level, absl::string_view text) {
  const char* mark = level == LaunchLevel::kWarning ? "warning: "
                     : level == LaunchLevel::kError ? "error: "
                                                    : "";
  writer_->Write("[launch] ", absl::StrCat(mark, text));
}

absl::StatusOr<std::unique_ptr<LogFiles>> LogFiles::Create(
    const std::string& dir, ClusterOutput* next) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", dir, ": ", ec.message()));
  }
  const std::string path = absl::StrCat(dir, "/launch.log");
  std::FILE* launch_log = std::fopen(path.c_str(), "a");
  if (launch_log == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<LogFiles>(new LogFiles(dir, launch_log, next));
}

LogFiles::~LogFiles() {
  absl::MutexLock lock(&mu_);
  for (auto& [name, file] : files_) {
    if (file != nullptr) std::fclose(file);
  }
  std::fclose(launch_log_);
}

std::FILE* LogFiles::FileFor(const ProcessId& who) {
  const std::string name = who.Name();
  auto it = files_.find(name);
  if (it != files_.end()) return it->second;
  std::string file_name = name;
  std::replace(file_name.begin(), file_name.end(), ' ', '-');
  const std::string path = absl::StrCat(dir_, "/", file_name, ".log");
  // nullptr (a full disk) is remembered: the terminal still gets the lines.
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (file == nullptr) {
    std::fprintf(launch_log_, "%s cannot write %s: %s\n", Clock().c_str(),
                 path.c_str(), std::strerror(errno));
  }
  files_[name] = file;
  return file;
}

void LogFiles::ProcessStarted(const ProcessId& who, int pid,
                              const std::vector<std::string>& argv) {
  {
    absl::MutexLock lock(&mu_);
    if (std::FILE* file = FileFor(who)) {
      std::fprintf(file, "%s [launch] started %s (pid %d): %s\n",
                   Clock().c_str(), who.Name().c_str(), pid,
                   absl::StrJoin(argv, " ").c_str());
      std::fflush(file);
    }
  }
  next_->ProcessStarted(who, pid, argv);
}

void LogFiles::ProcessLine(const ProcessId& who, absl::string_view line) {
  {
    absl::MutexLock lock(&mu_);
    if (std::FILE* file = FileFor(who)) {
      std::fwrite(line.data(), 1, line.size(), file);
      std::fputc('\n', file);
      std::fflush(file);
    }
  }
  next_->ProcessLine(who, line);
}

void LogFiles::LauncherLine(LaunchLevel level, absl::string_view text) {
  {
    absl::MutexLock lock(&mu_);
    std::fprintf(launch_log_, "%s %s%.*s\n", Clock().c_str(),
                 level == LaunchLevel::kWarning ? "warning: "
                 : level == LaunchLevel::kError ? "error: "
                                                : "",
                 static_cast<int>(text.size()), text.data());
    std::fflush(launch_log_);
  }
  next_->LauncherLine(level, text);
}

}  // namespace ps
