#ifndef PS_CLIENT_COLLECTIVES_H_
#define PS_CLIENT_COLLECTIVES_H_

// Collectives among the job's workers, served by the parameter servers
// (Horovod's allreduce, allgather, broadcast, barrier and join), beside
// training in any mode and with or without a declared model. Nothing here
// exposes gRPC or protobuf.
//
//   auto collectives = *ps::Collectives::Connect(options);
//   std::vector<float> mean(1);
//   collectives->Allreduce("val_loss", ps::ReduceOp::kAverage, {},
//                          {loss}, absl::MakeSpan(mean));
//
// Every rank of the job must make each collective call (a rank that ran out
// of data calls Join instead). A call is matched across ranks by its name
// and by how many calls of that name the rank made before (so calls of one
// name must come in the same order on every rank): the name plays the part
// of Horovod's `name=`. An empty name stands for the kind's default
// ("allreduce.noname", ...), whose shape may change from call to call; a
// given name must keep its kind, op and shape, or the call fails.
//
// The servers combine the ranks' contributions in rank order, so that every
// rank gets the same bytes, run after run. Tensors of more than
// kSplitElements elements are cut into pieces spread over the servers (as
// common/partition.h splits model tensors), each combined by its server.
//
// Errors, on every rank of the operation: FailedPrecondition naming the
// rank and the difference when the ranks' calls disagree (shape, op, root,
// kind) or a name is reused for another shape; InvalidArgument naming the
// rank for a call no rank could match (an unknown root rank, values of the
// wrong size). A rank that restarts and repeats calls it made before gets
// the results the others got (the servers keep the latest), not a second
// contribution.
//
// Thread-safe: calls may overlap (each blocks its thread until every rank
// made the call); calls of one name are numbered in the order they start.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "client/parameter_client.h"

namespace ps {

enum class ReduceOp {
  kSum,
  // The sum divided by the number of ranks (a rank that joined adds zeros).
  kAverage,
  kMin,
  kMax,
};

// What an allgather returns: every rank's rows, in rank order.
struct GatheredTensor {
  std::vector<float> values;
  // Each rank's first dimension (0 for a rank that joined).
  std::vector<int64_t> first_dims;
};

// A collective started by a Collectives::Start* call, running on a thread
// of its own so that the caller overlaps it with other work. Destroying it
// waits for the collective to end.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  // Whether Wait would return at once.
  virtual bool Done() = 0;
  // Waits for the collective; its status (once: a second Wait returns the
  // same).
  virtual absl::Status Wait() = 0;
};

class Collectives {
 public:
  // Tensors with more elements than this are spread over the servers.
  static constexpr uint64_t kSplitElements = 64 * 1024;

  // Connects to every server of `options.servers` as rank `options.rank`
  // (waiting up to connect_timeout, with the authentication the options
  // ask for). Unavailable naming a server that did not answer.
  static absl::StatusOr<std::unique_ptr<Collectives>> Connect(
      const ClientOptions& options);

  ~Collectives();
  Collectives(const Collectives&) = delete;
  Collectives& operator=(const Collectives&) = delete;

  // `output` (as many elements as `input`, may be the same memory) gets
  // the ranks' `input`s combined by `op`. `shape`: the tensor's, empty for a
  // scalar; its elements must be input.size().
  absl::Status Allreduce(absl::string_view name, ReduceOp op,
                         absl::Span<const int64_t> shape,
                         absl::Span<const float> input,
                         absl::Span<float> output);

  // Allreduce on a thread of its own: numbered now (calls of one name keep
  // the order in which they start), so several may be in flight. The spans
  // must stay valid, `input` unchanged, until Wait returns.
  std::unique_ptr<PendingCollective> StartAllreduce(
      absl::string_view name, ReduceOp op, absl::Span<const int64_t> shape,
      absl::Span<const float> input, absl::Span<float> output);

  // Every rank's `input` (of `shape`, at least one dimension; the first may
  // differ between ranks), concatenated along the first dimension in rank
  // order. Sent whole to one server.
  absl::StatusOr<GatheredTensor> Allgather(absl::string_view name,
                                           absl::Span<const int64_t> shape,
                                           absl::Span<const float> input);

  // Allgather on a thread of its own, as StartAllreduce; `gathered` (not
  // owned) is filled before Wait returns OK.
  std::unique_ptr<PendingCollective> StartAllgather(
      absl::string_view name, absl::Span<const int64_t> shape,
      absl::Span<const float> input, GatheredTensor* gathered);

  // Overwrites `values` (of `shape`) with root_rank's on every rank.
  absl::Status Broadcast(absl::string_view name, int root_rank,
                         absl::Span<const int64_t> shape,
                         absl::Span<float> values);
  // Broadcast on a thread of its own, as StartAllreduce.
  std::unique_ptr<PendingCollective> StartBroadcast(
      absl::string_view name, int root_rank, absl::Span<const int64_t> shape,
      absl::Span<float> values);

  // root_rank's `bytes`, on every rank (the others' `bytes` are not read).
  absl::StatusOr<std::string> BroadcastBytes(absl::string_view name,
                                             int root_rank,
                                             absl::string_view bytes);

  // Returns once every rank that has not joined called Barrier as often.
  absl::Status Barrier();

  // For a rank out of data: until every rank joined, the other ranks'
  // collectives go on without this one (ReduceOp says how it counts).
  // Returns the last rank to join. Counts of names start again after it.
  absl::StatusOr<int> Join();

  int rank() const;

 private:
  class Impl;
  class Prepared;
  explicit Collectives(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ps

#endif  // PS_CLIENT_COLLECTIVES_H_
