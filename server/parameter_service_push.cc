// ParameterService's push path: Push and the push half of PushPull, from
// the stream's bytes to UpdateCoordinator::Commit (server/parameter_service.h).

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/chunk_wire.h"
#include "common/grpc_status.h"
#include "server/chunk_encoding.h"
#include "server/parameter_service.h"
#include "server/push_message_proto.h"
#include "server/push_stager.h"
#include "spdlog/spdlog.h"

namespace ps::server {
namespace {

// Copies rank 0's values into the slices awaiting them; the first upload
// wins (a restarted rank 0 cannot change what other ranks may have pulled).
absl::StatusOr<uint64_t> TakeInitialValues(update::ShardStore& store,
                                           const StagedPush& values) {
  const bool taken =
      store.SetInitialValues([&](int slice, absl::Span<float> out) {
        values.gradients[slice].Read(0, out);
      });
  spdlog::info(taken ? "took rank 0's initial values"
                     : "rank 0's initial values were already taken; kept "
                       "the first ones");
  return 0;
}

}  // namespace

absl::StatusOr<uint64_t> ParameterService::ReceivePush(
    ByteStream& stream, PushCall call, proto::PushRequest* first) {
  const absl::Time start = absl::Now();
  uint64_t bytes = 0;
  absl::Duration commit;
  absl::StatusOr<uint64_t> version =
      StageAndCommit(stream, call, first, &bytes, &commit);
  stats_.RecordPush(version.status(), bytes, commit, absl::Now() - start);
  if (!version.ok()) {
    spdlog::warn("push refused: {}", version.status().ToString());
    return Prefixed("push refused", version.status());
  }
  return version;
}

absl::StatusOr<uint64_t> ParameterService::StageAndCommit(
    ByteStream& stream, PushCall call, proto::PushRequest* first,
    uint64_t* bytes, absl::Duration* commit) {
  absl::StatusOr<DeclaredShard*> shard = host_->Require("a push");
  if (!shard.ok()) return shard.status();
  update::ShardStore& store = *(*shard)->store;
  UpdateCoordinator& coordinator = *(*shard)->coordinator;
  // The whole stream is staged privately; the shard is touched only by
  // Commit, after the last message was validated.
  PushStager stager(&store, (*shard)->identity, options_.min_chunk_elements,
                    options_.refuse_non_finite);
  std::optional<RankCallLimiter::Slot> slot;
  grpc::ByteBuffer message;
  proto::PushRequest request;
  absl::Cord data;
  while (stream.Read(&message)) {
    if (absl::Status s =
            ParseChunkMessage(message, kPushRequestChunk, &request, &data);
        !s.ok()) {
      return s;
    }
    const bool first_message = stager.messages() == 0;
    if (first_message) {
      *first = request;
      first->clear_chunk();
      // Checked before the push is taken: a refused pull after it would
      // leave the worker without its weights for a step it cannot repeat.
      if (call == PushCall::kPushPull) {
        absl::StatusOr<std::vector<WireEncoding>> encodings =
            PullEncodings(store.partition().model(), request.pull_encodings());
        if (!encodings.ok()) return encodings.status();
      }
    }
    *bytes += data.size();
    // Compressed chunks become float32 here, before the stager: what is
    // staged, summed, logged and checkpointed never knows they were.
    if (request.has_chunk()) {
      if (absl::Status s = DecodePushedChunk(store.partition().model(),
                                             request.mutable_chunk(), &data);
          !s.ok()) {
        return absl::Status(
            s.code(), absl::StrCat("push message ", stager.messages(), ": ",
                                   s.message()));
      }
    }
    if (absl::Status s = stager.Add(PushMessageFromProto(request, data));
        !s.ok()) {
      return s;
    }
    // Counted once the header is known good (the stager checked it) and
    // comes from the process the rank registered, so that no other process
    // can take the rank's slots, or send rank 0's initial values.
    if (first_message) {
      if (absl::Status s = CheckCaller(coordinator, request.header());
          !s.ok()) {
        return s;
      }
      absl::StatusOr<RankCallLimiter::Slot> acquired =
          calls_.Acquire(request.header().worker_rank());
      if (!acquired.ok()) return acquired.status();
      slot.emplace(*std::move(acquired));
    }
  }
  absl::StatusOr<StagedPush> staged = stager.Finish();
  if (!staged.ok()) return staged.status();
  if (staged->initial_values) {
    if (call == PushCall::kPushPull) {
      return absl::InvalidArgumentError(
          "initial values are sent with Push, not PushPull");
    }
    return TakeInitialValues(store, *staged);
  }
  if (store.awaiting_initial_values()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank 0 has not sent the initial values of ",
                     store.FirstTensorAwaitingValues(), " yet"));
  }
  if (call == PushCall::kPushPull) {
    // The worker took the weights for clock `step` with its previous
    // PushPull instead of pulling them here: the shard hears of that clock
    // now, as it would have from the pull. So a shard restarted since then
    // learns that the rank has moved past a step whose push it lost (the
    // rank takes part in it with weight 0), and a sync push waits, as the
    // pull did, for its step to be the one collected.
    absl::StatusOr<uint64_t> clock_reached =
        AwaitRecordingBlockers(coordinator, staged->step, [&] {
          return coordinator.AwaitPull(
              staged->rank, staged->incarnation, staged->step,
              [&stream] { return stream.IsCancelled(); });
        });
    if (!clock_reached.ok()) return clock_reached.status();
  }
  const int rank = staged->rank;
  const uint64_t incarnation = staged->incarnation;
  const uint64_t step = staged->step;
  const absl::Time received = absl::Now();
  absl::StatusOr<uint64_t> version = coordinator.Commit(*std::move(staged));
  *commit = absl::Now() - received;
  if (!version.ok()) return version;
  // A sync push is logged only as its step's mean: it is acknowledged once
  // the step is applied and logged, so that no acknowledged push is lost
  // with a killed shard (a PushPull's pull would wait for that anyway).
  // That wait is for the ranks the pull of the next step would wait for.
  if (!coordinator.AcksAppliedSteps()) return version;
  return AwaitRecordingBlockers(coordinator, step + 1, [&] {
    return coordinator.AwaitStepApplied(
        rank, incarnation, step, [&stream] { return stream.IsCancelled(); });
  });
}

grpc::Status ParameterService::PushBytes(ByteStream& stream) {
  proto::PushRequest first;
  absl::StatusOr<uint64_t> version =
      ReceivePush(stream, PushCall::kPush, &first);
  if (!version.ok()) return ToGrpcStatus(version.status());
  proto::PushResponse response;
  response.set_version(*version);
  stream.Write(SerializeMessage(response));
  return grpc::Status::OK;
}

grpc::Status ParameterService::PushPullBytes(ByteStream& stream) {
  proto::PushRequest first;
  absl::StatusOr<uint64_t> pushed =
      ReceivePush(stream, PushCall::kPushPull, &first);
  if (!pushed.ok()) return ToGrpcStatus(pushed.status());
  // The worker has now done step `step`: what it pulls next is clock
  // step + 1, answered as a Pull of its own would be.
  proto::PullRequest pull;
  *pull.mutable_header() = first.header();
  pull.set_clock(first.step() + 1);
  pull.set_max_chunk_elements(first.max_pull_chunk_elements());
  *pull.mutable_tensor_encodings() = first.pull_encodings();
  return AnswerPull(pull, stream, absl::Now());
}

}  // namespace ps::server
