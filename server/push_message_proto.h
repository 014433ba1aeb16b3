#ifndef PS_SERVER_PUSH_MESSAGE_PROTO_H_
#define PS_SERVER_PUSH_MESSAGE_PROTO_H_

// Parsed requests as the plain types the shard's classes take, so that they
// need no protobuf.

#include "absl/strings/cord.h"
#include "proto/parameter_server.pb.h"
#include "server/push_stager.h"
#include "server/request_header.h"

namespace ps::server {

RequestHeaderFields RequestHeaderFromProto(const proto::RequestHeader& header);

// `data` is the chunk's bytes as received (common/chunk_wire.h leaves them
// out of the message). The message keeps the chunk's shape by reference:
// `request` must outlive the result.
PushMessage PushMessageFromProto(const proto::PushRequest& request,
                                 const absl::Cord& data);

}  // namespace ps::server

#endif  // PS_SERVER_PUSH_MESSAGE_PROTO_H_
