#ifndef PS_SERVER_SHARD_REPORT_H_
#define PS_SERVER_SHARD_REPORT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps::server {

// A shard's requests of one kind, as server/server_stats.h counts them;
// times in microseconds.
struct RequestFigures {
  uint64_t ok = 0;
  uint64_t refused = 0;
  uint64_t latency_mean_us = 0;
  uint64_t latency_max_us = 0;
  // Pushes: the commit (taking part in the step, applying the update);
  // pulls: the wait for the consistency model.
  uint64_t part_mean_us = 0;

  bool operator==(const RequestFigures& other) const;
};

// What a shard reports at its exit for a program to read (the server's
// --report_file; tests, the launcher's run directory and the benchmarks
// read it rather than the server's log). The log's "final report" says the
// same for a person.
struct ShardReport {
  int server_index = 0;
  std::string mode;  // "sync", "ssp", "async".
  uint64_t version = 0;
  // Updates this process replayed from the update log after its restore;
  // unset when it did not restore a checkpoint with a log.
  std::optional<uint64_t> updates_replayed;
  // Updates applied before a restart that this shard no longer holds;
  // unset when not known (restored without an update log).
  std::optional<uint64_t> updates_lost = 0;
  // Pushes of batches already applied: acknowledged, not applied again.
  uint64_t replayed_pushes = 0;
  // Examples applied per epoch, summed over the ranks.
  std::map<uint64_t, uint64_t> examples_per_epoch;
  // Updates whose staleness was recorded, and the largest.
  uint64_t staleness_updates = 0;
  uint64_t staleness_max = 0;
  RequestFigures pushes;
  RequestFigures pulls;

  bool operator==(const ShardReport& other) const;
};

// The file's text: a first line "ps-shard-report 2", then one "key value"
// line per field ("updates_lost unknown" when unset; no
// "updates_replayed" line when unset; "examples_per_epoch 0=60000
// 1=60000"; "push_latency_mean_us 812", "pull_wait_mean_us 20460", ...).
std::string FormatShardReport(const ShardReport& report);
// InvalidArgument naming the line for anything FormatShardReport does not
// write (a missing or repeated key, a bad number, another format version).
absl::StatusOr<ShardReport> ParseShardReport(absl::string_view text);

// Writes `report` to `path` whole or not at all (a temporary file renamed
// over it). Internal naming the path on failure.
absl::Status WriteShardReport(const std::string& path,
                              const ShardReport& report);
// NotFound if `path` does not exist; ParseShardReport's errors.
absl::StatusOr<ShardReport> ReadShardReport(const std::string& path);

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_REPORT_H_
