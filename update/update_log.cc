#include "update/update_log.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/crc32c.h"
#include "common/record_file.h"

namespace ps::update {
namespace {

constexpr absl::string_view kMagic = "PSUL";
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderBytes = 4 + 4 + 4 + 8 + 4;

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat("update log: ", what, " ", path, ": ",
                                          std::strerror(errno)));
}

std::string Header(int server_index, uint64_t start_version) {
  std::string header(kMagic);
  PutFixed32(&header, kFormatVersion);
  PutFixed32(&header, static_cast<uint32_t>(server_index));
  PutFixed64(&header, start_version);
  PutFixed32(&header, crc32c::Value(header));
  return header;
}

std::string Prefix(const LogEntry& entry) {
  std::string prefix;
  PutFixed32(&prefix, static_cast<uint32_t>(entry.size()));
  PutFixed32(&prefix, entry.crc);
  return prefix;
}

// Writes every buffer of `parts` with as few writev calls as the kernel
// allows.
absl::Status WriteParts(int fd, std::vector<iovec> parts,
                        const std::string& path) {
  size_t first = 0;
  while (first < parts.size()) {
    const int count = static_cast<int>(
        std::min<size_t>(parts.size() - first, static_cast<size_t>(IOV_MAX)));
    const ssize_t n = ::writev(fd, &parts[first], count);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", path);
    }
    size_t left = static_cast<size_t>(n);
    while (first < parts.size() && left >= parts[first].iov_len) {
      left -= parts[first].iov_len;
      ++first;
    }
    if (left > 0) {
      parts[first].iov_base = static_cast<char*>(parts[first].iov_base) + left;
      parts[first].iov_len -= left;
    }
  }
  return absl::OkStatus();
}

absl::Status WriteEntries(int fd, absl::Span<const LogEntry* const> entries,
                          const std::string& path) {
  std::vector<std::string> prefixes;
  prefixes.reserve(entries.size());
  std::vector<iovec> parts;
  for (const LogEntry* entry : entries) {
    prefixes.push_back(Prefix(*entry));
    parts.push_back({prefixes.back().data(), prefixes.back().size()});
    for (absl::string_view piece : entry->pieces) {
      if (!piece.empty()) {
        parts.push_back({const_cast<char*>(piece.data()), piece.size()});
      }
    }
  }
  return WriteParts(fd, std::move(parts), path);
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open directory", dir);
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok ? absl::OkStatus() : ErrnoError("cannot fsync directory", dir);
}

std::optional<uint64_t> LogVersion(absl::string_view name, int server_index) {
  if (!absl::ConsumePrefix(&name, absl::StrCat("shard-", server_index, "-")) ||
      !absl::ConsumeSuffix(&name, ".wal")) {
    return std::nullopt;
  }
  uint64_t version = 0;
  if (name.empty() || !absl::SimpleAtoi(name, &version)) return std::nullopt;
  return version;
}

}  // namespace

void LogEntry::AddOwned(std::string bytes) {
  owned.push_back(std::move(bytes));
  pieces.push_back(owned.back());
}

uint64_t LogEntry::size() const {
  uint64_t n = 0;
  for (absl::string_view piece : pieces) n += piece.size();
  return n;
}

std::string LogEntry::Payload() const {
  std::string out;
  out.reserve(size());
  for (absl::string_view piece : pieces) out.append(piece.data(), piece.size());
  return out;
}

LogEntry MakeLogEntry(std::string payload) {
  LogEntry entry;
  entry.AddOwned(std::move(payload));
  SealLogEntry(entry);
  return entry;
}

void SealLogEntry(LogEntry& entry) {
  uint32_t crc = 0;
  for (absl::string_view piece : entry.pieces) crc = crc32c::Extend(crc, piece);
  entry.crc = crc;
}

std::string UpdateLogFileName(int server_index, uint64_t start_version) {
  return absl::StrCat("shard-", server_index, "-", start_version, ".wal");
}

absl::StatusOr<std::unique_ptr<UpdateLogWriter>> UpdateLogWriter::Create(
    const std::string& dir, int server_index, uint64_t start_version,
    absl::Span<const LogEntry* const> initial, bool fsync) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("update log: cannot create ", dir, ": ", ec.message()));
  }
  const std::string path =
      absl::StrCat(dir, "/", UpdateLogFileName(server_index, start_version));
  const std::string tmp = path + ".tmp";
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  const std::string header = Header(server_index, start_version);
  absl::Status s =
      WriteParts(fd, {{const_cast<char*>(header.data()), header.size()}}, tmp);
  if (s.ok()) s = WriteEntries(fd, initial, tmp);
  if (s.ok() && fsync && ::fdatasync(fd) != 0) {
    s = ErrnoError("cannot fsync", tmp);
  }
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = ErrnoError("cannot rename to", path);
  }
  if (s.ok() && fsync) s = SyncDirectory(dir);
  if (!s.ok()) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  // The descriptor now names `path`; appends go on through it.
  return std::unique_ptr<UpdateLogWriter>(new UpdateLogWriter(path, fd, fsync));
}

absl::StatusOr<std::unique_ptr<UpdateLogWriter>> UpdateLogWriter::Reopen(
    const std::string& path, uint64_t valid_bytes, bool fsync) {
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) return ErrnoError("cannot open", path);
    bytes.resize(valid_bytes);
    if (!in.read(bytes.data(), static_cast<std::streamsize>(valid_bytes))) {
      return ErrnoError("cannot read", path);
    }
  }
  // Written anew and renamed over it rather than appended to in place: the
  // file may have other names (a launcher's copy of the checkpoints made
  // with hard links), which must keep what they hold.
  const std::string tmp = path + ".tmp";
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  absl::Status s = WriteParts(fd, {{bytes.data(), bytes.size()}}, tmp);
  if (s.ok() && fsync && ::fdatasync(fd) != 0) {
    s = ErrnoError("cannot fsync", tmp);
  }
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = ErrnoError("cannot rename to", path);
  }
  if (s.ok() && fsync) {
    s = SyncDirectory(std::filesystem::path(path).parent_path().string());
  }
  if (!s.ok()) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  return std::unique_ptr<UpdateLogWriter>(new UpdateLogWriter(path, fd, fsync));
}

UpdateLogWriter::~UpdateLogWriter() { ::close(fd_); }

absl::Status UpdateLogWriter::Append(
    absl::Span<const LogEntry* const> entries) {
  if (!failed_.ok()) return failed_;
  absl::Status s = WriteEntries(fd_, entries, path_);
  if (s.ok() && fsync_ && ::fdatasync(fd_) != 0) {
    s = ErrnoError("cannot fsync", path_);
  }
  failed_ = s;
  return s;
}

absl::StatusOr<UpdateLogContents> ReadUpdateLog(const std::string& path,
                                                int server_index) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::NotFoundError(absl::StrCat("update log: cannot open ", path,
                                            ": ", std::strerror(errno)));
  }
  std::stringstream buffer;
  buffer << file.rdbuf();
  if (file.bad()) return ErrnoError("cannot read", path);
  const std::string bytes = buffer.str();
  auto corrupt = [&path](absl::string_view what) {
    return absl::DataLossError(absl::StrCat("update log ", path, ": ", what));
  };
  absl::string_view in(bytes);
  if (in.size() < kHeaderBytes || in.substr(0, 4) != kMagic) {
    return corrupt("not an update log (bad magic or short header)");
  }
  const uint32_t header_crc = crc32c::Value(in.substr(0, kHeaderBytes - 4));
  in.remove_prefix(4);
  uint32_t format = 0, index = 0, crc = 0;
  UpdateLogContents contents;
  GetFixed32(&in, &format);
  GetFixed32(&in, &index);
  GetFixed64(&in, &contents.start_version);
  GetFixed32(&in, &crc);
  if (crc != header_crc) return corrupt("header checksum mismatch");
  if (format != kFormatVersion) {
    return corrupt(
        absl::StrCat("format version ", format, ", expected ", kFormatVersion));
  }
  if (index != static_cast<uint32_t>(server_index)) {
    return corrupt(
        absl::StrCat("written by shard ", index, ", not ", server_index));
  }
  contents.valid_bytes = kHeaderBytes;
  while (!in.empty()) {
    absl::string_view record = in;
    uint32_t length = 0, record_crc = 0;
    if (!GetFixed32(&record, &length) || !GetFixed32(&record, &record_crc) ||
        record.size() < length) {
      break;  // Cut short: torn.
    }
    const absl::string_view payload = record.substr(0, length);
    if (crc32c::Value(payload) != record_crc) {
      if (record.size() == length) break;  // The last record: torn.
      return corrupt(absl::StrCat("record ", contents.records.size() + 1,
                                  " at byte ", contents.valid_bytes,
                                  " fails its checksum, with ",
                                  record.size() - length, " bytes after it"));
    }
    contents.records.emplace_back(payload);
    in.remove_prefix(kLogRecordPrefixBytes + length);
    contents.valid_bytes += kLogRecordPrefixBytes + length;
  }
  contents.torn_bytes = bytes.size() - contents.valid_bytes;
  return contents;
}

absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>> ListUpdateLogs(
    const std::string& dir, int server_index) {
  namespace fs = std::filesystem;
  std::vector<std::pair<uint64_t, std::string>> found;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return found;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::optional<uint64_t> version =
        LogVersion(it->path().filename().string(), server_index);
    if (version.has_value()) found.emplace_back(*version, it->path().string());
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("update log: cannot list ", dir, ": ", ec.message()));
  }
  std::sort(found.begin(), found.end());
  return found;
}

absl::Status PruneUpdateLogs(const std::string& dir, int server_index,
                             uint64_t version) {
  absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>> logs =
      ListUpdateLogs(dir, server_index);
  if (!logs.ok()) return logs.status();
  for (const auto& [start, path] : *logs) {
    if (start >= version) break;
    std::error_code ec;
    // A file we cannot delete only costs disk space.
    std::filesystem::remove(path, ec);
  }
  return absl::OkStatus();
}

}  // namespace ps::update
