#include "server/request_header.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/peer_text.h"

namespace ps::server {

absl::Status ValidateRequestHeader(const RequestHeaderFields& header,
                                   const ShardIdentity& shard) {
  if (header.protocol_version != kProtocolVersionCurrent) {
    return absl::InvalidArgumentError(
        absl::StrCat("protocol version ", header.protocol_version,
                     " is not supported; this server speaks version ",
                     kProtocolVersionCurrent,
                     ": run workers and servers of the same release"));
  }
  if (header.job_id != shard.job_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("the request is of job \"", PeerText(header.job_id),
                     "\" but this server is of job \"", shard.job_id,
                     "\": two jobs use the same server addresses"));
  }
  if (header.partition_fingerprint != shard.partition_fingerprint) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "partition fingerprint %016x differs from this server's %016x: worker "
        "and server disagree on the model or the number of servers",
        header.partition_fingerprint, shard.partition_fingerprint));
  }
  if (header.server_index != shard.server_index) {
    return absl::InvalidArgumentError(
        absl::StrCat("request is for server ", header.server_index,
                     " but this is server ", shard.server_index));
  }
  if (header.worker_rank < 0 || header.worker_rank >= shard.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker rank ", header.worker_rank, " is outside [0, ",
                     shard.num_workers, ")"));
  }
  return absl::OkStatus();
}

}  // namespace ps::server
