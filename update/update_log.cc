#include "update/update_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/crc32c.h"
#include "common/record_file.h"

namespace ps::update {
namespace {

constexpr absl::string_view kMagic = "PSUL";
// Format 2 is still read: its ssp and async records are format 3's (a sync
// shard refuses it: UpdateCoordinator::ReplayLog).
constexpr uint32_t kFormatVersion = kUpdateLogFormat;
constexpr uint32_t kOldestFormatRead = 2;
constexpr size_t kHeaderBytes = 4 + 4 + 4 + 8 + 8 + 4;
constexpr size_t kSaltOffset = 4 + 4 + 4 + 8;

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat("update log: ", what, " ", path, ": ",
                                          std::strerror(errno)));
}

std::string Header(int server_index, uint64_t start_version, uint64_t salt) {
  std::string header(kMagic);
  PutFixed32(&header, kFormatVersion);
  PutFixed32(&header, static_cast<uint32_t>(server_index));
  PutFixed64(&header, start_version);
  PutFixed64(&header, salt);
  PutFixed32(&header, crc32c::Value(header));
  return header;
}

// The check that ties a record's prefix to its file: the crc32c of the
// file's salt, then the record's length and payload checksum.
uint32_t PrefixCheck(uint32_t salt_crc, uint32_t length, uint32_t crc) {
  std::string fields;
  PutFixed32(&fields, length);
  PutFixed32(&fields, crc);
  return crc32c::Extend(salt_crc, fields);
}

uint32_t SaltCrc(uint64_t salt) {
  std::string bytes;
  PutFixed64(&bytes, salt);
  return crc32c::Value(bytes);
}

std::string Prefix(const LogEntry& entry, uint32_t salt_crc) {
  std::string prefix;
  const uint32_t length = static_cast<uint32_t>(entry.size());
  PutFixed32(&prefix, length);
  PutFixed32(&prefix, entry.crc);
  PutFixed32(&prefix, PrefixCheck(salt_crc, length, entry.crc));
  return prefix;
}

// A whole record of the file whose salt gives `salt_crc` at the start of
// `in`: its payload, or nullopt. The prefix is checked first, straight from
// the bytes (a reader scans every offset of a file's tail with it).
std::optional<absl::string_view> WholeRecord(absl::string_view in,
                                             uint32_t salt_crc) {
  if (in.size() < kLogRecordPrefixBytes) return std::nullopt;
  absl::string_view fields = in.substr(0, 8);
  absl::string_view rest = in.substr(8);
  uint32_t check = 0, length = 0, crc = 0;
  GetFixed32(&rest, &check);
  if (crc32c::Extend(salt_crc, fields) != check) return std::nullopt;
  GetFixed32(&fields, &length);
  GetFixed32(&fields, &crc);
  if (rest.size() < length) return std::nullopt;
  const absl::string_view payload = rest.substr(0, length);
  if (crc32c::Value(payload) != crc) return std::nullopt;
  return payload;
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
                          uint32_t salt_crc, const std::string& path) {
  std::vector<std::string> prefixes;
  prefixes.reserve(entries.size());
  std::vector<iovec> parts;
  for (const LogEntry* entry : entries) {
    prefixes.push_back(Prefix(*entry, salt_crc));
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

std::string SpareLogFileName(int server_index) {
  return absl::StrCat("shard-", server_index, ".wal.spare");
}

namespace {

// Opens `dir`'s spare log file of shard `server_index` for writing in
// place, or returns -1: there is none, or it has another name too (a
// launcher's hard-linked copy), and is deleted.
int OpenSpare(const std::string& spare) {
  const int fd = ::open(spare.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_nlink != 1 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    ::unlink(spare.c_str());
    return -1;
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<UpdateLogWriter>> UpdateLogWriter::Create(
    const std::string& dir, int server_index, uint64_t start_version,
    absl::Span<const LogEntry* const> initial, bool fsync,
    uint64_t preallocate_bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("update log: cannot create ", dir, ": ", ec.message()));
  }
  const std::string path =
      absl::StrCat(dir, "/", UpdateLogFileName(server_index, start_version));
  // Written under another name, then renamed: a crash leaves the old file
  // or the complete new one. The spare (a pruned file) is overwritten in
  // place: its blocks are allocated already, which makes writing it several
  // times cheaper than growing a new file (bench/README.md); its old bytes
  // after the new records belong to another salt, so no reader takes them.
  std::string tmp = absl::StrCat(dir, "/", SpareLogFileName(server_index));
  int fd = OpenSpare(tmp);
  // A recycled file is not preallocated: the thread's zeros past its end
  // would be cut off at its close and written again in the next one
  // (bench/README.md).
  if (fd >= 0) preallocate_bytes = 0;
  if (fd < 0) {
    tmp = path + ".tmp";
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoError("cannot create", tmp);
  }
  absl::BitGen random;
  const uint64_t salt = absl::Uniform<uint64_t>(random);
  const std::string header = Header(server_index, start_version, salt);
  absl::Status s =
      WriteParts(fd, {{const_cast<char*>(header.data()), header.size()}}, tmp);
  if (s.ok()) s = WriteEntries(fd, initial, SaltCrc(salt), tmp);
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
  return std::unique_ptr<UpdateLogWriter>(
      new UpdateLogWriter(path, fd, SaltCrc(salt), fsync, preallocate_bytes));
}

absl::StatusOr<std::unique_ptr<UpdateLogWriter>> UpdateLogWriter::Reopen(
    const std::string& path, uint64_t valid_bytes, bool fsync,
    uint64_t preallocate_bytes) {
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) return ErrnoError("cannot open", path);
    bytes.resize(valid_bytes);
    if (!in.read(bytes.data(), static_cast<std::streamsize>(valid_bytes))) {
      return ErrnoError("cannot read", path);
    }
  }
  absl::string_view salt_bytes =
      absl::string_view(bytes).substr(std::min(bytes.size(), kSaltOffset));
  uint64_t salt = 0;
  if (!GetFixed64(&salt_bytes, &salt)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "update log: ", path, ": ", valid_bytes, " bytes hold no header"));
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
  return std::unique_ptr<UpdateLogWriter>(
      new UpdateLogWriter(path, fd, SaltCrc(salt), fsync, preallocate_bytes));
}

UpdateLogWriter::UpdateLogWriter(std::string path, int fd, uint32_t salt_crc,
                                 bool fsync, uint64_t preallocate_bytes)
    : path_(std::move(path)), fd_(fd), salt_crc_(salt_crc), fsync_(fsync) {
  const off_t at = ::lseek(fd_, 0, SEEK_CUR);
  end_ = at > 0 ? static_cast<uint64_t>(at) : 0;
  if (preallocate_bytes > 0) {
    // A recycled file has blocks past its records already.
    struct stat st;
    const uint64_t size =
        ::fstat(fd_, &st) == 0 ? std::max<uint64_t>(end_, st.st_size) : end_;
    preallocator_ =
        std::make_unique<LogPreallocator>(fd_, size, preallocate_bytes);
    preallocator_->Reserve(end_);
  }
}

UpdateLogWriter::~UpdateLogWriter() {
  preallocator_.reset();
  // A recycled file's earlier bytes after the records are cut off, so that
  // the file kept holds no more than its own (disk use as without
  // recycling).
  const off_t end = ::lseek(fd_, 0, SEEK_CUR);
  if (failed_.ok() && end > 0) (void)::ftruncate(fd_, end);
  ::close(fd_);
}

absl::Status UpdateLogWriter::Append(
    absl::Span<const LogEntry* const> entries) {
  if (!failed_.ok()) return failed_;
  uint64_t bytes = 0;
  for (const LogEntry* entry : entries) {
    bytes += kLogRecordPrefixBytes + entry->size();
  }
  if (preallocator_ != nullptr) preallocator_->Reserve(end_ + bytes);
  absl::Status s = WriteEntries(fd_, entries, salt_crc_, path_);
  if (s.ok() && fsync_ && ::fdatasync(fd_) != 0) {
    s = ErrnoError("cannot fsync", path_);
  }
  end_ += bytes;
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
  uint64_t salt = 0;
  GetFixed64(&in, &salt);
  GetFixed32(&in, &crc);
  if (crc != header_crc) return corrupt("header checksum mismatch");
  if (format < kOldestFormatRead || format > kFormatVersion) {
    return corrupt(absl::StrCat("format version ", format, ", expected ",
                                kOldestFormatRead, " to ", kFormatVersion));
  }
  contents.format = format;
  if (index != static_cast<uint32_t>(server_index)) {
    return corrupt(
        absl::StrCat("written by shard ", index, ", not ", server_index));
  }
  const uint32_t salt_crc = SaltCrc(salt);
  contents.valid_bytes = kHeaderBytes;
  for (;;) {
    std::optional<absl::string_view> payload = WholeRecord(in, salt_crc);
    if (!payload.has_value()) break;
    contents.records.emplace_back(*payload);
    in.remove_prefix(kLogRecordPrefixBytes + payload->size());
    contents.valid_bytes += kLogRecordPrefixBytes + payload->size();
  }
  contents.tail_bytes = in.size();
  if (in.empty()) return contents;
  // The log ends here. A record begun here (its prefix whole and of this
  // file) was cut off by the shard's death.
  uint32_t length = 0, record_crc = 0, check = 0;
  absl::string_view prefix = in;
  if (GetFixed32(&prefix, &length) && GetFixed32(&prefix, &record_crc) &&
      GetFixed32(&prefix, &check) &&
      check == PrefixCheck(salt_crc, length, record_crc)) {
    contents.torn_bytes =
        std::min<uint64_t>(in.size(), uint64_t{kLogRecordPrefixBytes} + length);
  }
  // Whatever else follows is a recycled file's earlier bytes (another
  // salt); a whole record of this file after it means the one here was
  // damaged, not cut off: the records after it would be skipped.
  // A prefix of 12 zero bytes is no record's (unless this salt makes it
  // one): runs of zeros (a preallocated file's) are skipped, not scanned.
  const bool zeros_are_records = PrefixCheck(salt_crc, 0, 0) == 0;
  for (size_t at = 1; at + kLogRecordPrefixBytes <= in.size(); ++at) {
    if (!zeros_are_records && in[at] == '\0') {
      const size_t nonzero = in.find_first_not_of('\0', at);
      if (nonzero == absl::string_view::npos) break;
      if (nonzero >= at + kLogRecordPrefixBytes) {
        at = nonzero - kLogRecordPrefixBytes + 1;
      }
    }
    if (WholeRecord(in.substr(at), salt_crc).has_value()) {
      return corrupt(absl::StrCat(
          "record ", contents.records.size() + 1, " at byte ",
          contents.valid_bytes, " is damaged, and a record of this file at ",
          "byte ", contents.valid_bytes + at, " follows it"));
    }
  }
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

void RemoveSpareLog(const std::string& dir, int server_index) {
  std::error_code ec;
  std::filesystem::remove(
      absl::StrCat(dir, "/", SpareLogFileName(server_index)), ec);
}

absl::Status PruneUpdateLogs(const std::string& dir, int server_index,
                             uint64_t version) {
  absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>> logs =
      ListUpdateLogs(dir, server_index);
  if (!logs.ok()) return logs.status();
  const std::string spare =
      absl::StrCat(dir, "/", SpareLogFileName(server_index));
  std::error_code ec;
  bool keep_one = !std::filesystem::exists(spare, ec);
  // Newest first: the newest file pruned is kept as the spare, the size of
  // the next one most likely.
  for (auto it = logs->rbegin(); it != logs->rend(); ++it) {
    const auto& [start, path] = *it;
    if (start >= version) continue;
    struct stat st;
    if (keep_one && ::stat(path.c_str(), &st) == 0 && st.st_nlink == 1 &&
        ::rename(path.c_str(), spare.c_str()) == 0) {
      keep_one = false;
      continue;
    }
    // A file we cannot delete only costs disk space.
    std::filesystem::remove(path, ec);
  }
  return absl::OkStatus();
}

}  // namespace ps::update
