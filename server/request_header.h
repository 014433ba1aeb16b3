#ifndef PS_SERVER_REQUEST_HEADER_H_
#define PS_SERVER_REQUEST_HEADER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace ps::server {

// Wire constants mirrored here so the plain classes need no protobuf;
// push_message_proto.cc static_asserts that they equal the proto enums.
inline constexpr uint32_t kProtocolVersionCurrent =
    2;                                   // PROTOCOL_VERSION_CURRENT
inline constexpr int kDTypeFloat32 = 1;  // DTYPE_FLOAT32

// The fields of a ps.proto.RequestHeader.
struct RequestHeaderFields {
  uint32_t protocol_version = 0;
  uint64_t partition_fingerprint = 0;
  int32_t worker_rank = 0;
  int32_t server_index = 0;
  // The caller's incarnation; 0 when not given.
  uint64_t incarnation = 0;
  std::string job_id;

  bool operator==(const RequestHeaderFields& o) const {
    return protocol_version == o.protocol_version &&
           partition_fingerprint == o.partition_fingerprint &&
           worker_rank == o.worker_rank && server_index == o.server_index &&
           incarnation == o.incarnation && job_id == o.job_id;
  }
  bool operator!=(const RequestHeaderFields& o) const { return !(*this == o); }
};

// What every request is checked against: who this shard is.
struct ShardIdentity {
  uint64_t partition_fingerprint = 0;
  int server_index = 0;
  int num_workers = 0;
  std::string job_id;
};

// FailedPrecondition for a request of another job; otherwise InvalidArgument
// naming the first field that does not match this shard: protocol version,
// partition fingerprint, server index, or a worker rank outside
// [0, num_workers).
absl::Status ValidateRequestHeader(const RequestHeaderFields& header,
                                   const ShardIdentity& shard);

}  // namespace ps::server

#endif  // PS_SERVER_REQUEST_HEADER_H_
