#ifndef PS_SERVER_COLLECTIVE_COMBINE_H_
#define PS_SERVER_COLLECTIVE_COMBINE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ps::server {

// The collectives the shards serve (ps.proto CollectiveRequest.Kind).
enum class CollectiveKind {
  kAllreduce,
  kAllgather,
  kBroadcast,
  kBroadcastBytes,
  kBarrier,
  kJoin,
};

enum class CollectiveOp { kNone, kSum, kAverage, kMin, kMax };

// What a call of one rank names: the operation (generation, name, sequence,
// part) and its contribution. Plain data, parsed from the wire by
// server/collective_service.cc.
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kAllreduce;
  CollectiveOp op = CollectiveOp::kNone;
  std::string name;
  uint64_t generation = 0;
  uint64_t sequence = 0;
  bool anonymous = false;
  int root_rank = 0;
  // Float32 values (else opaque bytes, for kBroadcastBytes).
  bool float32 = true;
  std::vector<int64_t> shape;
  uint32_t part = 0;
  uint32_t num_parts = 1;
  uint64_t offset = 0;
  uint64_t num_elements = 0;
  std::string data;
};

// The answer every rank of one operation gets.
struct CollectiveResult {
  std::string data;
  // kAllgather: each rank's first dimension, 0 for a rank that joined.
  std::vector<int64_t> first_dims;
  // kJoin: the last rank to join.
  int last_rank = -1;
};

// "allreduce", "allgather", ... as messages name a kind.
const char* KindName(CollectiveKind kind);
// "[2,3]".
std::string ShapeText(absl::Span<const int64_t> shape);

// What a call says about itself alone, for `num_ranks` ranks: InvalidArgument
// for a root outside [0, num_ranks), a piece outside its tensor, data whose
// size is not num_elements floats, an allgather of a scalar, an op missing
// or given where the kind takes none.
absl::Status CheckCall(const CollectiveCall& call, int num_ranks);

// Combines one operation's calls, `by_rank[r]` being rank r's (null for a
// rank that joined), in rank order, so that the result's bytes do not
// depend on arrival. FailedPrecondition naming the first rank whose call
// differs from the lowest present rank's (kind, op, dtype, shape, root,
// piece), or a broadcast whose root joined. Every present call passed
// CheckCall. kJoin is not combined here (CollectiveTable answers it).
absl::StatusOr<CollectiveResult> Combine(
    absl::Span<const CollectiveCall* const> by_rank);

// Whether `a` and `b` (calls of one name, possibly of different sequences)
// describe the same operation shape (kind, op, dtype, shape but for an
// allgather's first dimension, root): a name reused otherwise is refused.
// Empty if they agree, else the difference ("shape [3] then [4]").
std::string SpecDifference(const CollectiveCall& before,
                           const CollectiveCall& now);

}  // namespace ps::server

#endif  // PS_SERVER_COLLECTIVE_COMBINE_H_
