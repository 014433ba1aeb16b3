#ifndef PS_COMMON_RECORD_FILE_H_
#define PS_COMMON_RECORD_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {

// A file of checksummed records, the one container for everything the
// project writes to disk (saved models, checkpoints).
//
// Layout, all integers little-endian:
//   header:  magic "PSRF" | u32 format version | u32 kind length | kind bytes
//            | u32 crc32c of the header so far
//   records: u64 length | u32 crc32c of the payload | payload
//   trailer: u64 0xffffffffffffffff | u64 record count | u32 crc32c of both
// The trailer makes truncation at a record boundary detectable, and the
// `kind` ("model", "checkpoint") keeps one kind of file from being read as
// another.
//
// Writes are atomic: records go to PATH.tmp, which is fsynced and renamed
// over PATH (and the directory fsynced), so a crash leaves either the old
// file or the new one, never a mixture.
absl::Status WriteRecordFile(const std::string& path, absl::string_view kind,
                             const std::vector<std::string>& records);

// Reads and verifies a file written by WriteRecordFile: magic, version,
// kind, every checksum, the trailer's count. Any mismatch is DataLoss naming
// the file and what is wrong; a missing file is NotFound.
absl::StatusOr<std::vector<std::string>> ReadRecordFile(const std::string& path,
                                                        absl::string_view kind);

// Little-endian helpers for building and parsing record payloads.
void PutFixed32(std::string* dst, uint32_t value);
void PutFixed64(std::string* dst, uint64_t value);
// Reads from the front of `*input`, advancing it; false if too short.
bool GetFixed32(absl::string_view* input, uint32_t* value);
bool GetFixed64(absl::string_view* input, uint64_t* value);
// A u64 length followed by that many bytes.
void PutLengthPrefixed(std::string* dst, absl::string_view value);
bool GetLengthPrefixed(absl::string_view* input, absl::string_view* value);

}  // namespace ps

#endif  // PS_COMMON_RECORD_FILE_H_
