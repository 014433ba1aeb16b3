#ifndef PS_SERVER_PUSH_STAGER_H_
#define PS_SERVER_PUSH_STAGER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/types/span.h"
#include "server/request_header.h"
#include "server/slice_gradient.h"
#include "update/shard_store.h"

namespace ps::server {

// A ps.proto.TensorChunk; `data` shares the received bytes (a cord over
// the network buffers), which stay there until the update reads them.
struct ChunkView {
  uint32_t tensor_id = 0;
  int dtype = 0;
  absl::Span<const int64_t> shape;
  uint64_t offset = 0;
  uint64_t num_elements = 0;
  absl::Cord data;
};

// One ps.proto.PushRequest message. A message may carry no chunk (a shard
// that owns no elements still needs the header and step).
struct PushMessage {
  RequestHeaderFields header;
  uint64_t step = 0;
  uint64_t base_version = 0;
  uint32_t num_examples = 0;
  uint64_t epoch = 0;
  uint64_t examples_done = 0;
  // The learning rate the worker wants the gradient applied at; unset: the
  // shard's schedule.
  std::optional<float> learning_rate;
  // Rank 0's initial values of the kFromRank0 tensors, not a gradient.
  bool initial_values = false;
  bool has_chunk = false;
  ChunkView chunk;
};

// A complete, validated push: one gradient value for every element the
// shard owns. `gradients[i]` belongs to ShardStore slice i.
struct StagedPush {
  int rank = 0;
  // Of the pushing process; 0 when the worker did not say.
  uint64_t incarnation = 0;
  uint64_t step = 0;
  uint64_t base_version = 0;
  uint32_t num_examples = 0;
  uint64_t epoch = 0;
  uint64_t examples_done = 0;
  std::optional<float> learning_rate;  // As PushMessage's.
  // The values of the kFromRank0 slices (the others' entries are empty).
  bool initial_values = false;
  std::vector<SliceGradient> gradients;
};

// Receives one push stream, holding it privately, and validates every
// message, so that a push is all-or-nothing: Finish() yields a StagedPush
// only if the stream covered every owned element exactly once with
// consistent metadata; otherwise the push is refused and nothing reaches the
// shard. No shard lock is held while a stream is received.
//
// Checks, each failing with InvalidArgument naming what is wrong: the header
// (ValidateRequestHeader); header, step, base_version, num_examples, epoch
// and examples_done equal in every message; examples_done >= num_examples
// (the progress after the batch counts it); a learning rate, if any,
// finite and >= 0 (taken from the first message); tensor id, dtype and shape
// match the model; the chunk's range lies inside one owned slice and holds at
// least the minimum of elements unless it ends the slice; data holds exactly
// num_elements float32 values, none of them NaN or infinite (unless told to
// let them pass); no element is sent twice. A push of initial values
// (PushMessage::initial_values) comes from rank 0 with step, base_version and
// num_examples 0, covers exactly the slices of kFromRank0 tensors, and its
// values are always checked to be finite.
//
// The chunks' bytes are kept as received, in the network buffers; a
// refused push lets go of them at once, an accepted one passes them on in
// the StagedPush.
//
// Not thread-safe: one stager per stream, used by the thread reading it. The
// store must outlive the stager. After the first error every later call
// returns that error.
class PushStager {
 public:
  // Chunks must hold at least `min_chunk_elements`, but for the one that
  // ends a slice. With `refuse_non_finite` false, NaN and infinite values
  // pass (the update then leaves their elements as they were).
  PushStager(const update::ShardStore* store, const ShardIdentity& identity,
             uint64_t min_chunk_elements = 1, bool refuse_non_finite = true);

  PushStager(const PushStager&) = delete;
  PushStager& operator=(const PushStager&) = delete;

  absl::Status Add(const PushMessage& message);
  absl::StatusOr<StagedPush> Finish();

  int messages() const { return messages_; }

 private:
  absl::Status AddChunk(const ChunkView& chunk);
  absl::Status CheckSameMetadata(const PushMessage& message) const;
  // Of a first message.
  static absl::Status CheckProgress(const PushMessage& message);
  static absl::Status CheckInitialValuesMetadata(const PushMessage& message);

  const update::ShardStore* const store_;
  const ShardIdentity identity_;
  const uint64_t min_chunk_elements_;
  const bool refuse_non_finite_;
  int messages_ = 0;
  absl::Status error_;
  PushMessage first_;  // Metadata of the first message; chunk unused.
  // Sized at the first message; empty once handed on or refused.
  std::vector<SliceGradient> gradients_;
  // Per slice: element ranges received so far (begin -> end, relative to
  // the slice start, disjoint) and how many elements they hold.
  std::vector<std::map<uint64_t, uint64_t>> covered_;
  std::vector<uint64_t> covered_elements_;
};

}  // namespace ps::server

#endif  // PS_SERVER_PUSH_STAGER_H_
