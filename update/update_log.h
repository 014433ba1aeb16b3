#ifndef PS_UPDATE_UPDATE_LOG_H_
#define PS_UPDATE_UPDATE_LOG_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "update/log_preallocator.h"

namespace ps::update {

// A shard's write-ahead update log: the files that hold, in order, every
// update the shard acknowledged since a checkpoint, so that a restore
// replays them (update/update_log_record.h says what a record holds).
//
// One file per checkpoint: "shard-<index>-<version>.wal" holds what came
// after that shard's checkpoint of version <version>, in its directory.
// Layout, all integers little-endian:
//   header:  magic "PSUL" | u32 format version (3) | u32 server index
//            | u64 start version | u64 salt (random, per file written)
//            | u32 crc32c of the header so far
//   records: u32 length | u32 crc32c of the payload
//            | u32 crc32c of (salt, length, payload checksum) | payload
// A record is appended with one write() into the page cache, which outlives
// a killed process; with `fsync` each append is also made durable
// (fdatasync) before Append returns.
//
// Files are recycled: the newest file pruned becomes the shard's spare
// ("shard-<index>.wal.spare"), and the next file is written over it in
// place, which is much cheaper than growing a new file (bench/README.md).
// Its earlier bytes stay after the new records; the salt in each record's
// prefix tells them apart, so the log ends at the first offset that holds
// no whole record of the file. A new file's writer (not a recycled one's)
// given `preallocate_bytes` also keeps that many bytes past its records
// written with zeros, on a thread of its own (update/log_preallocator.h),
// so that a shard's first files too are written over rather than grown; the
// zeros are no record either, and a closed file is cut to its records.

// The format version this code writes. 3: a sync step is one record, its
// mean (update/update_log_record.h); 2 logged every sync push, and is read
// for ssp and async only.
inline constexpr uint32_t kUpdateLogFormat = 3;

// Bytes before each record's payload (its length and checksums).
inline constexpr uint64_t kLogRecordPrefixBytes = 12;

// A record's payload with its checksum, computed outside any lock so that
// appending costs only the write. The payload is `pieces` in order: bytes
// the entry owns (`owned`) or that `keep` keeps alive (a push's received
// buffers, written where they lie rather than copied first).
struct LogEntry {
  LogEntry() = default;
  // Moves keep the pieces valid (a deque's elements stay where they are);
  // a copy would not.
  LogEntry(LogEntry&&) = default;
  LogEntry& operator=(LogEntry&&) = default;
  LogEntry(const LogEntry&) = delete;
  LogEntry& operator=(const LogEntry&) = delete;

  std::deque<std::string> owned;  // A deque: its strings never move.
  std::vector<absl::string_view> pieces;
  std::shared_ptr<const void> keep;
  uint32_t crc = 0;

  // Appends a piece the entry owns.
  void AddOwned(std::string bytes);
  uint64_t size() const;
  // The payload as one string (tests, encoding a record whole).
  std::string Payload() const;
};
// An entry of one owned payload, its checksum computed.
LogEntry MakeLogEntry(std::string payload);
// Computes `entry`'s checksum over its pieces.
void SealLogEntry(LogEntry& entry);

// "shard-<index>-<version>.wal".
std::string UpdateLogFileName(int server_index, uint64_t start_version);
// "shard-<index>.wal.spare": a pruned file kept to be written over.
std::string SpareLogFileName(int server_index);

// Appends records to one log file. Not thread-safe: its owner serializes
// Append (UpdateCoordinator holds its lock around every append, so that
// records are in the order their updates took effect).
class UpdateLogWriter {
 public:
  // Creates `dir`/shard-<index>-<start_version>.wal holding `initial`
  // records (a shard starts its files empty; tests write logs whole)
  // atomically: written to the shard's spare file (if it has no other
  // name) or a temporary file, renamed over any file of that name, so a
  // crash leaves the old file or the complete new one.
  static absl::StatusOr<std::unique_ptr<UpdateLogWriter>> Create(
      const std::string& dir, int server_index, uint64_t start_version,
      absl::Span<const LogEntry* const> initial, bool fsync,
      uint64_t preallocate_bytes = 0);
  // Goes on with an existing log file after its first `valid_bytes` bytes
  // (what ReadUpdateLog found whole: a torn record is cut off). Those bytes
  // are written to a new file renamed over `path`, so that other names of
  // the old file (hard links) keep what they held.
  static absl::StatusOr<std::unique_ptr<UpdateLogWriter>> Reopen(
      const std::string& path, uint64_t valid_bytes, bool fsync,
      uint64_t preallocate_bytes = 0);
  ~UpdateLogWriter();

  // Closes the file, cutting off a recycled file's earlier bytes after the
  // records written (unless an append failed).
  UpdateLogWriter(const UpdateLogWriter&) = delete;
  UpdateLogWriter& operator=(const UpdateLogWriter&) = delete;

  // Appends `entries` with one write (a record is never split between two
  // calls). On error (Internal naming the file) the file may hold part of
  // them: the writer refuses every later append, and the torn tail is what
  // a reader drops.
  absl::Status Append(absl::Span<const LogEntry* const> entries);

  const std::string& path() const { return path_; }
  // Whether a thread keeps zeros written past the records.
  bool preallocates() const { return preallocator_ != nullptr; }

 private:
  UpdateLogWriter(std::string path, int fd, uint32_t salt_crc, bool fsync,
                  uint64_t preallocate_bytes);

  const std::string path_;
  const int fd_;
  const uint32_t salt_crc_;  // crc32c of the file's salt.
  const bool fsync_;
  absl::Status failed_;
  // Where the next record goes.
  uint64_t end_ = 0;
  // Null without preallocation; stopped before the file is cut and closed.
  std::unique_ptr<LogPreallocator> preallocator_;
};

// One log file as read back.
struct UpdateLogContents {
  uint32_t format = 0;  // The header's format version.
  uint64_t start_version = 0;
  std::vector<std::string> records;  // Payloads, in order.
  // Bytes up to the end of the last whole record.
  uint64_t valid_bytes = 0;
  // Bytes after it: a record cut off by the shard's death (never
  // acknowledged), and in a recycled file its earlier bytes.
  uint64_t tail_bytes = 0;
  // Of those, the bytes of a record of this file begun right after the
  // last whole one and cut off (its prefix whole).
  uint64_t torn_bytes = 0;
};

// Reads and verifies `path` as shard `server_index`'s log. NotFound;
// DataLoss naming the file for a bad header, another shard's file, or a
// damaged record with a whole record of the file anywhere after it
// (corruption, not an interrupted append: the tail is scanned byte by
// byte, which a restore pays once).
absl::StatusOr<UpdateLogContents> ReadUpdateLog(const std::string& path,
                                                int server_index);

// Shard `server_index`'s log files in `dir` as (start version, path),
// oldest first. A missing directory holds none.
absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>> ListUpdateLogs(
    const std::string& dir, int server_index);

// Deletes shard `server_index`'s log files in `dir` that start before
// `version` (no checkpoint kept needs them any more), keeping the newest of
// them as the spare when there is none and it has no other name.
absl::Status PruneUpdateLogs(const std::string& dir, int server_index,
                             uint64_t version);

// Deletes shard `server_index`'s spare file in `dir`, if any (a shard
// stopping leaves only the files a restore needs).
void RemoveSpareLog(const std::string& dir, int server_index);

}  // namespace ps::update

#endif  // PS_UPDATE_UPDATE_LOG_H_
