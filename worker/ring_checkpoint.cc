#include "worker/ring_checkpoint.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/record_file.h"

namespace ps::worker {
namespace {

// Tags of the three broadcasts; no bucket is in flight while they run.
constexpr uint32_t kCountTag = 1000;
constexpr uint32_t kSizesTag = 1001;
constexpr uint32_t kBytesTag = 1002;

}  // namespace

update::CheckpointIdentity RingIdentity(int num_workers) {
  update::CheckpointIdentity identity;
  identity.num_servers = 1;
  identity.server_index = 0;
  identity.mode = "allreduce";
  identity.num_workers = num_workers;
  return identity;
}

update::ShardCheckpoint TakeRingCheckpoint(
    const LocalExchange& local, absl::Span<const DataCursor> cursors) {
  update::ShardCheckpoint checkpoint;
  checkpoint.identity = RingIdentity(static_cast<int>(cursors.size()));
  checkpoint.model = local.model();
  checkpoint.partition_fingerprint = local.partition().fingerprint();
  checkpoint.version = local.version();
  checkpoint.planned_steps = local.planned_steps();
  for (const DataCursor& cursor : cursors) {
    update::RankRecord record;
    record.clock = local.version();
    record.progress = {cursor.epoch, cursor.examples_done};
    checkpoint.ranks.push_back(record);
    checkpoint.examples[cursor.epoch].push_back(cursor.examples_done);
  }
  checkpoint.slices = local.Snapshot();
  return checkpoint;
}

absl::StatusOr<Registration> RestoreRingCheckpoint(
    const update::ShardCheckpoint& checkpoint, int rank, LocalExchange& local) {
  const int num_workers = static_cast<int>(checkpoint.ranks.size());
  if (absl::Status s =
          update::CheckIdentity(RingIdentity(num_workers), checkpoint.identity);
      !s.ok()) {
    return s;
  }
  if (rank < 0 || rank >= num_workers) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the checkpoint is of ", num_workers, " workers, not of rank ", rank));
  }
  if (checkpoint.partition_fingerprint != local.partition().fingerprint()) {
    return absl::FailedPreconditionError(
        "the checkpoint holds another model than --model declares");
  }
  if (absl::Status s = local.Restore(checkpoint.slices, checkpoint.version);
      !s.ok()) {
    return s;
  }
  Registration registration;
  registration.mode = ConsistencyMode::kSync;
  registration.num_workers = num_workers;
  registration.next_step = checkpoint.ranks[rank].clock;
  registration.cursor = {checkpoint.ranks[rank].progress.epoch,
                         checkpoint.ranks[rank].progress.examples_done};
  return registration;
}

absl::StatusOr<std::optional<update::ShardCheckpoint>> ShareFromRank0(
    allreduce::GlooGroup& group,
    const std::optional<update::ShardCheckpoint>& checkpoint) {
  std::vector<std::string> records;
  if (group.rank() == 0 && checkpoint.has_value()) {
    records = update::EncodeCheckpoint(*checkpoint);
  }
  std::string count;
  PutFixed64(&count, records.size());
  if (absl::Status s = group.Broadcast(absl::MakeSpan(count), 0, kCountTag);
      !s.ok()) {
    return s;
  }
  absl::string_view count_view = count;
  uint64_t num_records = 0;
  GetFixed64(&count_view, &num_records);
  if (num_records == 0) return std::nullopt;

  std::string sizes;
  uint64_t total = 0;
  for (uint64_t i = 0; i < num_records; ++i) {
    const uint64_t size = group.rank() == 0 ? records[i].size() : 0;
    PutFixed64(&sizes, size);
  }
  if (absl::Status s = group.Broadcast(absl::MakeSpan(sizes), 0, kSizesTag);
      !s.ok()) {
    return s;
  }
  std::vector<uint64_t> record_sizes(num_records);
  absl::string_view sizes_view = sizes;
  for (uint64_t& size : record_sizes) {
    GetFixed64(&sizes_view, &size);
    total += size;
  }
  std::string bytes;
  if (group.rank() == 0) {
    for (const std::string& record : records) bytes += record;
  } else {
    bytes.resize(total);
  }
  if (absl::Status s = group.Broadcast(absl::MakeSpan(bytes), 0, kBytesTag);
      !s.ok()) {
    return s;
  }
  records.clear();
  uint64_t offset = 0;
  for (uint64_t size : record_sizes) {
    records.push_back(bytes.substr(offset, size));
    offset += size;
  }
  absl::StatusOr<update::ShardCheckpoint> decoded =
      update::DecodeCheckpoint(records);
  if (!decoded.ok()) return decoded.status();
  return *std::move(decoded);
}

}  // namespace ps::worker
