#ifndef PS_COMMON_CONSISTENCY_MODE_PROTO_H_
#define PS_COMMON_CONSISTENCY_MODE_PROTO_H_

// The consistency mode on the wire (ps.proto.Mode).

#include "absl/status/statusor.h"
#include "common/consistency_mode.h"
#include "proto/parameter_server.pb.h"

namespace ps {

proto::Mode ConsistencyModeToProto(ConsistencyMode mode);

// InvalidArgument for MODE_UNSPECIFIED or a value this build does not know.
absl::StatusOr<ConsistencyMode> ConsistencyModeFromProto(proto::Mode mode);

}  // namespace ps

#endif  // PS_COMMON_CONSISTENCY_MODE_PROTO_H_
