#include "deploy/local/run_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace ps {
namespace {

constexpr char kRecordFile[] = "run.txt";
constexpr char kLockFile[] = ".lock";
constexpr char kHeader[] =
    "# A launcher run (deploy/local/launch --resume reads it); not for "
    "editing.";

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

std::string NewRunName(absl::Time now) {
  absl::BitGen gen;
  return absl::StrCat(
      absl::FormatTime("%Y%m%d-%H%M%S", now, absl::LocalTimeZone()), "-",
      absl::StrFormat("%04x", absl::Uniform<uint32_t>(gen, 0, 1 << 16)));
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
    } else if (key == "flag") {
      const size_t eq = value.find('=');
      if (eq == absl::string_view::npos || eq == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", number, ": a flag without NAME=VALUE"));
      }
      record.flags.emplace_back(std::string(value.substr(0, eq)),
                                std::string(value.substr(eq + 1)));
    } else if (key == "program") {
      record.program.emplace_back(value);
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
