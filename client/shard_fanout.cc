#include "client/shard_fanout.h"

#include <algorithm>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "client/inline_push_stream.h"
#include "client/pull_reader.h"
#include "client/retry.h"
#include "client/sharded_step_push.h"
#include "client/threaded_push_stream.h"
#include "common/chunk_wire.h"
#include "common/consistency_mode_proto.h"
#include "common/declaration_proto.h"
#include "common/grpc_status.h"
#include "grpcpp/client_context.h"

namespace ps::client_internal {
namespace {

// Runs fn(server) for every server at once, on `threads` and the calling
// thread (which serves the last server), and returns the first failure in
// server order.
template <typename Fn>
absl::Status ForEachServer(ThreadCache& threads, int num_servers, Fn fn) {
  std::vector<absl::Status> results(num_servers);
  absl::BlockingCounter others(num_servers > 0 ? num_servers - 1 : 0);
  for (int s = 0; s + 1 < num_servers; ++s) {
    threads.Run([&, s] {
      results[s] = fn(s);
      others.DecrementCount();
    });
  }
  if (num_servers > 0) results.back() = fn(num_servers - 1);
  others.Wait();
  for (const absl::Status& status : results) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

std::vector<ShardChannel*> Borrowed(
    const std::vector<std::unique_ptr<ShardChannel>>& shards) {
  std::vector<ShardChannel*> out;
  for (const std::unique_ptr<ShardChannel>& shard : shards) {
    out.push_back(shard.get());
  }
  return out;
}

}  // namespace

ShardFanout::ShardFanout(std::vector<std::unique_ptr<ShardChannel>> shards,
                         const Partition* partition, uint64_t chunk_elements,
                         const Compression& compression)
    : shards_(std::move(shards)),
      partition_(partition),
      chunk_elements_(chunk_elements),
      compression_(&partition->model(), compression),
      heartbeats_(Borrowed(shards_)) {}

absl::StatusOr<std::unique_ptr<ShardFanout>> ShardFanout::Create(
    std::vector<std::string> addresses,
    std::vector<std::shared_ptr<grpc::Channel>> channels,
    const Partition* partition, const ClientOptions& options) {
  if (addresses.size() != channels.size() ||
      static_cast<int>(addresses.size()) != partition->num_servers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("got ", addresses.size(), " server addresses and ",
                     channels.size(), " channels but the partition is for ",
                     partition->num_servers(), " servers"));
  }
  if (options.chunk_elements == 0) {
    return absl::InvalidArgumentError("chunk_elements must be positive");
  }
  if (absl::Status s =
          ValidateCompression(options.compression, "ClientOptions.compression");
      !s.ok()) {
    return s;
  }
  std::vector<std::unique_ptr<ShardChannel>> shards;
  for (size_t s = 0; s < channels.size(); ++s) {
    shards.push_back(std::make_unique<ShardChannel>(
        static_cast<int>(s), std::move(addresses[s]), channels[s],
        partition->fingerprint(), options));
  }
  return absl::WrapUnique(new ShardFanout(std::move(shards), partition,
                                          options.chunk_elements,
                                          options.compression));
}

ShardFanout::~ShardFanout() = default;

absl::StatusOr<Registration> ShardFanout::Register(
    uint64_t incarnation, uint64_t planned_steps,
    uint32_t max_examples_per_push) {
  for (const std::unique_ptr<ShardChannel>& shard : shards_) {
    shard->set_incarnation(incarnation);
  }
  proto::ModelDeclaration declaration;
  ModelSpecToProto(partition_->model(), &declaration);
  std::vector<proto::RegisterResponse> responses(num_servers());
  absl::Status status = ForEachServer(threads_, num_servers(), [&](int s) {
    ShardChannel& shard = *shards_[s];
    proto::RegisterRequest request;
    *request.mutable_header() = shard.Header();
    *request.mutable_declaration() = declaration;
    request.set_incarnation(incarnation);
    request.set_planned_steps(planned_steps);
    request.set_max_examples_per_push(max_examples_per_push);
    // Other ranks are answered UNAVAILABLE until rank 0 has declared (and
    // uploaded its initial values): the retry is the wait.
    return shard.CallWithRetry("register", [&] {
      grpc::ClientContext context;
      return FromGrpcStatus(
          shard.stub().Register(&context, request, &responses[s]));
    });
  });
  if (!status.ok()) return status;
  for (int s = 0; s < num_servers(); ++s) {
    shards_[s]->LearnLocalEndpoint(responses[s].local_endpoint());
  }
  for (int s = 1; s < num_servers(); ++s) {
    if (responses[s].mode() != responses[0].mode() ||
        responses[s].num_workers() != responses[0].num_workers()) {
      return absl::FailedPreconditionError(
          absl::StrCat("servers disagree: server 0 runs mode ",
                       proto::Mode_Name(responses[0].mode()), " with ",
                       responses[0].num_workers(), " workers, server ", s,
                       " runs mode ", proto::Mode_Name(responses[s].mode()),
                       " with ", responses[s].num_workers()));
    }
  }
  absl::StatusOr<ConsistencyMode> mode =
      ConsistencyModeFromProto(responses[0].mode());
  if (!mode.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the servers answered: ", mode.status().message(),
                     "; this client does not know it"));
  }
  Registration registration;
  registration.mode = *mode;
  registration.num_workers = responses[0].num_workers();
  registration.next_step = responses[0].next_step();
  registration.cursor = {responses[0].epoch(), responses[0].examples_done()};
  for (const proto::RegisterResponse& r : responses) {
    registration.next_step =
        std::min<uint64_t>(registration.next_step, r.next_step());
    DataCursor& cursor = registration.cursor;
    if (std::make_pair(r.epoch(), r.examples_done()) <
        std::make_pair(cursor.epoch, cursor.examples_done)) {
      cursor = {r.epoch(), r.examples_done()};
    }
  }
  return registration;
}

absl::Status ShardFanout::UploadInitialValues(const TensorValues& values) {
  const ModelSpec& model = partition_->model();
  std::vector<uint32_t> tensors;
  for (uint32_t t = 0; t < model.tensors.size(); ++t) {
    if (model.tensors[t].initializer.kind !=
        InitializerSpec::Kind::kFromRank0) {
      continue;
    }
    if (t >= values.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("initial values: none given for tensor ", t, " \"",
                       model.tensors[t].name, "\""));
    }
    tensors.push_back(t);
  }
  if (tensors.empty()) return absl::OkStatus();
  std::unique_ptr<StepPush> push =
      StartPush(StepInfo(), PushKind::kInitialValues);
  for (uint32_t t : tensors) {
    // On error the push's destructor cancels what it sent.
    if (absl::Status s = push->Send(t, values[t]); !s.ok()) return s;
  }
  return push->Finish();
}

absl::Status ShardFanout::Barrier(uint64_t generation) {
  ShardChannel& shard = *shards_[0];
  proto::BarrierRequest request;
  *request.mutable_header() = shard.Header();
  request.set_generation(generation);
  proto::BarrierResponse response;
  return shard.CallWithRetry("barrier", [&] {
    grpc::ClientContext context;
    return FromGrpcStatus(shard.stub().Barrier(&context, request, &response));
  });
}

absl::StatusOr<uint64_t> ShardFanout::Pull(uint64_t clock,
                                           TensorValues& weights) {
  return PullFromAll(clock, /*after_others_finish=*/false, weights);
}

absl::StatusOr<uint64_t> ShardFanout::PullFinal(uint64_t clock,
                                                TensorValues& weights) {
  return PullFromAll(clock, /*after_others_finish=*/true, weights);
}

absl::StatusOr<uint64_t> ShardFanout::PullFromAll(uint64_t clock,
                                                  bool after_others_finish,
                                                  TensorValues& weights) {
  ShapeWeights(partition_->model(), weights);
  const std::vector<WireEncoding> encodings = PullEncodings();
  std::vector<uint64_t> versions(num_servers(), 0);
  absl::Status status = ForEachServer(threads_, num_servers(), [&](int s) {
    return shards_[s]->CallWithRetry("pull", [&] {
      return DroppedByShardIsUnavailable(
          PullFromShard(*shards_[s], clock, after_others_finish, encodings,
                        weights, &versions[s]));
    });
  });
  if (!status.ok()) return status;
  heartbeats_.RaiseClock(clock);
  return *std::min_element(versions.begin(), versions.end());
}

absl::Status ShardFanout::PullFromShard(
    ShardChannel& shard, uint64_t clock, bool after_others_finish,
    absl::Span<const WireEncoding> encodings, TensorValues& weights,
    uint64_t* version) {
  proto::PullRequest request;
  *request.mutable_header() = shard.Header();
  request.set_clock(clock);
  request.set_max_chunk_elements(chunk_elements_);
  request.set_after_others_finish(after_others_finish);
  AddPullEncodings(encodings, request.mutable_tensor_encodings());
  std::unique_ptr<ClientStream> call = shard.OpenStream("Pull");
  call->WriteLast(SerializeMessage(request));
  return ReceiveWeights(*call, *partition_, shard.index(), weights, version,
                        encodings);
}

std::vector<WireEncoding> ShardFanout::PullEncodings() const {
  std::vector<WireEncoding> encodings;
  for (const Compression& choice : compression_.Choices()) {
    encodings.push_back(PullEncoding(choice));
  }
  return encodings;
}

bool ShardFanout::OwnThreadForFrames(const ShardChannel& shard,
                                     int server) const {
  return num_servers() > 1 && shard.UsesTcpFrames() &&
         partition_->ElementsOnServer(server) * sizeof(float) >=
             kOwnThreadFramesBytes;
}

std::unique_ptr<StepPush> ShardFanout::StartStep(const StepInfo& info,
                                                 bool pull_after) {
  return StartPush(info,
                   pull_after ? PushKind::kStepPullAfter : PushKind::kStep);
}

std::unique_ptr<StepPush> ShardFanout::StartPush(const StepInfo& info,
                                                 PushKind kind) {
  // One reading of the choices for the whole push and its pull.
  std::vector<Compression> choices = compression_.Choices();
  std::vector<WireEncoding> pull_encodings;
  for (const Compression& choice : choices) {
    pull_encodings.push_back(PullEncoding(choice));
  }
  auto open_stream = [&](int s) -> std::unique_ptr<PushStream> {
    ShardChannel& shard = *shards_[s];
    const PushStreamSpec spec = {&shard,
                                 partition_,
                                 s,
                                 info,
                                 kind,
                                 chunk_elements_,
                                 kind == PushKind::kStepPullAfter
                                     ? pull_encodings
                                     : std::vector<WireEncoding>()};
    if (shard.HasLocalChannel() && !OwnThreadForFrames(shard, s)) {
      return std::make_unique<InlinePushStream>(spec);
    }
    return std::make_unique<ThreadedPushStream>(spec, threads_);
  };
  return std::make_unique<ShardedStepPush>(
      partition_, kind, info.step, open_stream,
      [this](uint64_t clock) { heartbeats_.RaiseClock(clock); }, &compression_,
      std::move(choices));
}

absl::Status ShardFanout::Done() {
  return ForEachServer(threads_, num_servers(), [&](int s) {
    ShardChannel& shard = *shards_[s];
    proto::DoneRequest request;
    *request.mutable_header() = shard.Header();
    proto::DoneResponse response;
    return shard.CallWithRetry("done", [&] {
      grpc::ClientContext context;
      return FromGrpcStatus(shard.stub().Done(&context, request, &response));
    });
  });
}

void ShardFanout::StartHeartbeats(absl::Duration period) {
  heartbeats_.Start(period);
}

}  // namespace ps::client_internal
