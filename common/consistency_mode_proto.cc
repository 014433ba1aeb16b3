#include "common/consistency_mode_proto.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps {

proto::Mode ConsistencyModeToProto(ConsistencyMode mode) {
  switch (mode) {
    case ConsistencyMode::kSync:
      return proto::MODE_SYNC;
    case ConsistencyMode::kSsp:
      return proto::MODE_SSP;
    case ConsistencyMode::kAsync:
      return proto::MODE_ASYNC;
  }
  return proto::MODE_UNSPECIFIED;
}

absl::StatusOr<ConsistencyMode> ConsistencyModeFromProto(proto::Mode mode) {
  switch (mode) {
    case proto::MODE_SYNC:
      return ConsistencyMode::kSync;
    case proto::MODE_SSP:
      return ConsistencyMode::kSsp;
    case proto::MODE_ASYNC:
      return ConsistencyMode::kAsync;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown consistency mode ", static_cast<int>(mode)));
  }
}

}  // namespace ps
