#include "common/record_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "common/unique_fd.h"

namespace ps {
namespace {

constexpr absl::string_view kMagic = "PSRF";
constexpr uint32_t kFormatVersion = 1;
constexpr uint64_t kTrailerMarker = ~uint64_t{0};
// No record we write comes close; a larger length is corruption.
constexpr uint64_t kMaxRecordBytes = uint64_t{1} << 34;

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::InternalError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", path);
    }
    data.remove_prefix(n);
  }
  return absl::OkStatus();
}

std::string Header(absl::string_view kind) {
  std::string header(kMagic);
  PutFixed32(&header, kFormatVersion);
  PutFixed32(&header, static_cast<uint32_t>(kind.size()));
  header.append(kind.data(), kind.size());
  PutFixed32(&header, crc32c::Value(header));
  return header;
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

void PutFixed32(std::string* dst, uint32_t value) {
  for (int i = 0; i < 4; ++i)
    dst->push_back(static_cast<char>(value >> (8 * i)));
}

void PutFixed64(std::string* dst, uint64_t value) {
  for (int i = 0; i < 8; ++i)
    dst->push_back(static_cast<char>(value >> (8 * i)));
}

bool GetFixed32(absl::string_view* input, uint32_t* value) {
  if (input->size() < 4) return false;
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= uint32_t{static_cast<uint8_t>((*input)[i])} << (8 * i);
  *value = v;
  input->remove_prefix(4);
  return true;
}

bool GetFixed64(absl::string_view* input, uint64_t* value) {
  if (input->size() < 8) return false;
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= uint64_t{static_cast<uint8_t>((*input)[i])} << (8 * i);
  *value = v;
  input->remove_prefix(8);
  return true;
}

void PutLengthPrefixed(std::string* dst, absl::string_view value) {
  PutFixed64(dst, value.size());
  dst->append(value.data(), value.size());
}

bool GetLengthPrefixed(absl::string_view* input, absl::string_view* value) {
  uint64_t length = 0;
  absl::string_view rest = *input;
  if (!GetFixed64(&rest, &length) || length > rest.size()) return false;
  *value = rest.substr(0, length);
  rest.remove_prefix(length);
  *input = rest;
  return true;
}

absl::Status WriteRecordFile(const std::string& path, absl::string_view kind,
                             const std::vector<std::string>& records) {
  const std::string tmp_path = path + ".tmp";
  UniqueFd fd(
      ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) return ErrnoError("cannot create", tmp_path);

  absl::Status status = WriteAll(fd.get(), Header(kind), tmp_path);
  for (size_t i = 0; status.ok() && i < records.size(); ++i) {
    std::string prefix;
    PutFixed64(&prefix, records[i].size());
    PutFixed32(&prefix, crc32c::Value(records[i]));
    status = WriteAll(fd.get(), prefix, tmp_path);
    if (status.ok()) status = WriteAll(fd.get(), records[i], tmp_path);
  }
  if (status.ok()) {
    std::string trailer;
    PutFixed64(&trailer, kTrailerMarker);
    PutFixed64(&trailer, records.size());
    PutFixed32(&trailer, crc32c::Value(trailer));
    status = WriteAll(fd.get(), trailer, tmp_path);
  }
  if (status.ok() && ::fsync(fd.get()) != 0) {
    status = ErrnoError("cannot fsync", tmp_path);
  }
  if (status.ok() && !fd.Close()) status = ErrnoError("cannot close", tmp_path);
  if (status.ok() && ::rename(tmp_path.c_str(), path.c_str()) != 0) {
    status = ErrnoError("cannot rename to", path);
  }
  if (!status.ok()) {
    ::unlink(tmp_path.c_str());
    return status;
  }
  // Make the rename itself durable.
  const std::string dir = DirectoryOf(path);
  UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0 || ::fsync(dir_fd.get()) != 0) {
    return ErrnoError("cannot fsync directory", dir);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ReadRecordFile(
    const std::string& path, absl::string_view kind) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::NotFoundError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  std::stringstream buffer;
  buffer << file.rdbuf();
  if (file.bad()) return ErrnoError("cannot read", path);
  const std::string contents = buffer.str();
  auto corrupt = [&](absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat(path, " is not a valid ", kind, " file: ", what));
  };

  absl::string_view input = contents;
  const std::string expected_header = Header(kind);
  if (input.substr(0, kMagic.size()) != kMagic) return corrupt("bad magic");
  absl::string_view after_magic = input.substr(kMagic.size());
  uint32_t version = 0;
  if (!GetFixed32(&after_magic, &version)) return corrupt("truncated header");
  if (version != kFormatVersion) {
    return corrupt(absl::StrCat("format version ", version, ", expected ",
                                kFormatVersion));
  }
  if (input.substr(0, expected_header.size()) != expected_header) {
    return corrupt(absl::StrCat("header does not name kind \"", kind,
                                "\" or its checksum is wrong"));
  }
  input.remove_prefix(expected_header.size());

  std::vector<std::string> records;
  while (true) {
    uint64_t length = 0;
    uint32_t crc = 0;
    absl::string_view before = input;
    if (!GetFixed64(&input, &length)) {
      return corrupt(absl::StrCat("truncated after record ", records.size()));
    }
    if (length == kTrailerMarker) {
      uint64_t count = 0;
      if (!GetFixed64(&input, &count) || !GetFixed32(&input, &crc)) {
        return corrupt("truncated trailer");
      }
      if (crc != crc32c::Value(before.substr(0, 16))) {
        return corrupt("trailer checksum mismatch");
      }
      if (count != records.size()) {
        return corrupt(absl::StrCat("trailer counts ", count,
                                    " records, found ", records.size()));
      }
      if (!input.empty()) return corrupt("trailing bytes after the trailer");
      return records;
    }
    if (!GetFixed32(&input, &crc)) return corrupt("truncated record header");
    if (length > kMaxRecordBytes || length > input.size()) {
      return corrupt(absl::StrCat("record ", records.size(), " claims ", length,
                                  " bytes, only ", input.size(), " remain"));
    }
    absl::string_view payload = input.substr(0, length);
    if (crc32c::Value(payload) != crc) {
      return corrupt(
          absl::StrCat("checksum mismatch in record ", records.size()));
    }
    records.emplace_back(payload);
    input.remove_prefix(length);
  }
}

}  // namespace ps
