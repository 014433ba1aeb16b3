#include "deploy/local/run_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace ps {
namespace {

constexpr char kRecordFile[] = "run.txt";
constexpr char kLockFile[] = ".lock";
constexpr char kHeader[] =
    "# A launcher run (deploy/local/launch --resume and --extend read it); "
    "not for editing.\n"
    "# flag: how the run was started. segment: each launch (start, resume, "
    "extend), the\n# flags it changed (segment_flag) and how it ended "
    "(segment_end).";

bool KnownSegmentKind(absl::string_view kind) {
  return kind == "start" || kind == "resume" || kind == "extend";
}

void SetFlag(std::vector<std::pair<std::string, std::string>>& flags,
             const std::string& name, const std::string& value) {
  for (auto& [n, v] : flags) {
    if (n == name) {
      v = value;
      return;
    }
  }
  flags.emplace_back(name, value);
}

absl::StatusOr<int> Lock(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kLockFile);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("the run in ", dir,
                     " is in use by another launcher (it holds ", path, ")"));
  }
  return fd;
}

}  // namespace

std::string ServerReportFile(absl::string_view run_dir, int server_index) {
  return absl::StrCat(run_dir, "/logs/server-", server_index, ".report");
}

std::string NewRunName(absl::Time now) {
  absl::BitGen gen;
  return absl::StrCat(
      absl::FormatTime("%Y%m%d-%H%M%S", now, absl::LocalTimeZone()), "-",
      absl::StrFormat("%04x", absl::Uniform<uint32_t>(gen, 0, 1 << 16)));
}

std::string SegmentTime(absl::Time now) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", now, absl::LocalTimeZone());
}

std::vector<std::pair<std::string, std::string>> CurrentFlags(
    const RunRecord& record) {
  std::vector<std::pair<std::string, std::string>> flags = record.flags;
  for (const RunSegment& segment : record.segments) {
    for (const auto& [name, value] : segment.flags) {
      SetFlag(flags, name, value);
    }
  }
  return flags;
}

bool WasExtended(const RunRecord& record) {
  return std::any_of(
      record.segments.begin(), record.segments.end(),
      [](const RunSegment& segment) { return segment.kind == "extend"; });
}

absl::StatusOr<std::unique_ptr<RunDirectory>> RunDirectory::Create(
    const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) &&
      !std::filesystem::is_empty(path, ec)) {
    const bool is_run =
        std::filesystem::exists(absl::StrCat(path, "/", kRecordFile), ec);
    return absl::AlreadyExistsError(absl::StrCat(
        path,
        is_run ? " holds a run already: resume it with --resume="
               : " exists and is not empty: choose another --run_dir",
        is_run ? path : "", is_run ? ", or give another --run_dir" : ""));
  }
  std::filesystem::create_directories(path, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create the run directory ", path, ": ", ec.message()));
  }
  absl::StatusOr<int> fd = Lock(path);
  if (!fd.ok()) return fd.status();
  return std::unique_ptr<RunDirectory>(new RunDirectory(path, *fd));
}

absl::StatusOr<std::unique_ptr<RunDirectory>> RunDirectory::Open(
    const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(absl::StrCat(path, "/", kRecordFile), ec)) {
    return absl::NotFoundError(
        absl::StrCat(path, " holds no run (no ", kRecordFile, ")"));
  }
  absl::StatusOr<int> fd = Lock(path);
  if (!fd.ok()) return fd.status();
  return std::unique_ptr<RunDirectory>(new RunDirectory(path, *fd));
}

RunDirectory::~RunDirectory() { close(lock_fd_); }

std::string RunDirectory::File(absl::string_view name) const {
  return absl::StrCat(path_, "/", name);
}

absl::StatusOr<RunRecord> RunDirectory::Read() const {
  const std::string path = File(kRecordFile);
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path));
  }
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<RunRecord> record = ParseRunRecord(text.str());
  if (!record.ok()) {
    return absl::DataLossError(
        absl::StrCat(path, ": ", record.status().message()));
  }
  return record;
}

absl::Status RunDirectory::Write(const RunRecord& record) const {
  const std::string path = File(kRecordFile);
  const std::string tmp = absl::StrCat(path, ".tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << FormatRunRecord(record);
    out.flush();
    if (!out) {
      return absl::FailedPreconditionError(absl::StrCat("cannot write ", tmp));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot rename ", tmp, " to ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> KeepCheckpoints(const std::string& checkpoint_dir,
                                    const std::string& name) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(checkpoint_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string file = it->path().filename().string();
    // Not the servers' write probes and temporary files.
    if (it->is_regular_file() && !absl::StartsWith(file, ".")) {
      files.push_back(it->path());
    }
  }
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot list ", checkpoint_dir, ": ", ec.message()));
  }
  if (files.empty()) {
    return absl::NotFoundError(
        absl::StrCat(checkpoint_dir, " holds no checkpoint"));
  }
  const fs::path kept = fs::path(checkpoint_dir) / name;
  const fs::path partial = fs::path(checkpoint_dir) / ("." + name + ".partial");
  fs::remove_all(partial, ec);
  fs::create_directory(partial, ec);
  for (const fs::path& file : files) {
    if (ec) break;
    const fs::path copy = partial / file.filename();
    fs::create_hard_link(file, copy, ec);
    if (ec) {
      ec.clear();
      fs::copy_file(file, copy, ec);
    }
  }
  if (!ec) {
    fs::remove_all(kept, ec);
    if (!ec) fs::rename(partial, kept, ec);
  }
  if (ec) {
    std::error_code ignored;
    fs::remove_all(partial, ignored);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot keep the checkpoints of ", checkpoint_dir, " in ",
                     kept.string(), ": ", ec.message()));
  }
  return static_cast<int>(files.size());
}

std::string FormatRunRecord(const RunRecord& record) {
  std::string text = absl::StrCat(kHeader, "\n");
  absl::StrAppend(&text, "job_id ", record.job_id, "\n");
  absl::StrAppend(&text, "state ", record.state, "\n");
  if (!record.outcome.empty()) {
    absl::StrAppend(&text, "outcome ", record.outcome, "\n");
  }
  for (const auto& [name, value] : record.flags) {
    absl::StrAppend(&text, "flag ", name, "=", value, "\n");
  }
  for (const std::string& arg : record.program) {
    absl::StrAppend(&text, "program ", arg, "\n");
  }
  for (size_t i = 0; i < record.segments.size(); ++i) {
    const RunSegment& segment = record.segments[i];
    absl::StrAppend(&text, "segment ", i + 1, " ", segment.kind, " ",
                    segment.started, "\n");
    for (const auto& [name, value] : segment.flags) {
      absl::StrAppend(&text, "segment_flag ", name, "=", value, "\n");
    }
    if (!segment.end.empty()) {
      absl::StrAppend(&text, "segment_end ", segment.end, "\n");
    }
  }
  return text;
}

absl::StatusOr<RunRecord> ParseRunRecord(absl::string_view text) {
  RunRecord record;
  record.state.clear();
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    if (line.empty() || absl::StartsWith(line, "#")) continue;
    const size_t space = line.find(' ');
    const absl::string_view key = line.substr(0, space);
    const absl::string_view value =
        space == absl::string_view::npos ? "" : line.substr(space + 1);
    if (key == "job_id") {
      record.job_id = std::string(value);
    } else if (key == "state") {
      record.state = std::string(value);
    } else if (key == "outcome") {
      record.outcome = std::string(value);
    } else if (key == "flag" || key == "segment_flag") {
      const size_t eq = value.find('=');
      if (eq == absl::string_view::npos || eq == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", number, ": a flag without NAME=VALUE"));
      }
      if (key == "segment_flag" && record.segments.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", number, ": segment_flag before a segment"));
      }
      (key == "flag" ? record.flags : record.segments.back().flags)
          .emplace_back(std::string(value.substr(0, eq)),
                        std::string(value.substr(eq + 1)));
    } else if (key == "program") {
      record.program.emplace_back(value);
    } else if (key == "segment") {
      // "N KIND DATE TIME", numbered from 1 in order.
      std::vector<absl::string_view> parts =
          absl::StrSplit(value, absl::MaxSplits(' ', 2));
      int n = 0;
      if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &n) ||
          n != static_cast<int>(record.segments.size()) + 1 ||
          !KnownSegmentKind(parts[1])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", number, ": not a segment ", record.segments.size() + 1,
            " (start, resume or extend) and time"));
      }
      RunSegment segment;
      segment.kind = std::string(parts[1]);
      segment.started = std::string(parts[2]);
      record.segments.push_back(std::move(segment));
    } else if (key == "segment_end") {
      if (record.segments.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", number, ": segment_end before a segment"));
      }
      record.segments.back().end = std::string(value);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", number, ": unknown key '", key, "'"));
    }
  }
  if (record.state.empty()) {
    return absl::InvalidArgumentError("no state line");
  }
  return record;
}

}  // namespace ps
