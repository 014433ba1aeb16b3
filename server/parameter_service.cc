#include "server/parameter_service.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/chunk_wire.h"
#include "common/consistency_mode_proto.h"
#include "common/grpc_status.h"
#include "server/chunk_encoding.h"
#include "server/push_message_proto.h"
#include "server/register_handler.h"
#include "server/register_precheck.h"
#include "spdlog/spdlog.h"

namespace ps::server {
namespace {

// "/ps.proto.ParameterServer/Pull": how gRPC names a method on the wire.
std::string MethodPath(absl::string_view method) {
  return absl::StrCat("/", proto::ParameterServer::service_full_name(), "/",
                      method);
}

// Reads a unary call's one request, answers it with `handle`'s response.
// A request that does not parse is refused as INVALID_ARGUMENT naming its
// type, where gRPC's own parsing answers INTERNAL with no message.
template <typename Request, typename Response, typename Handle>
grpc::Status ServeUnary(ByteStream& stream, Handle handle) {
  grpc::ByteBuffer message;
  Request request;
  if (!stream.Read(&message)) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("the call carried no ", Request::descriptor()->name()));
  }
  if (absl::Status s = ParseMessage(message, &request); !s.ok()) {
    return ToGrpcStatus(s);  // InvalidArgument naming the message's type.
  }
  Response response;
  grpc::Status status = handle(request, &response);
  if (status.ok() && !stream.Write(SerializeMessage(response))) {
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "the client went away before the answer");
  }
  return status;
}

}  // namespace

ParameterService::ParameterService(ShardHost* host,
                                   const ServiceOptions& options)
    : host_(host),
      options_(options),
      stats_(options.metrics),
      calls_(options.num_workers, options.max_calls_per_rank),
      optimizer_states_(host, options.default_chunk_elements,
                        options.max_chunk_elements),
      streams_(options.max_threads, options.stream_idle_timeout) {
  optimizer_states_.AddTo(streams_);
  streams_.Handle(MethodPath("Pull"),
                  [this](ByteStream& stream) { return PullBytes(stream); });
  streams_.Handle(MethodPath("Push"),
                  [this](ByteStream& stream) { return PushBytes(stream); });
  streams_.Handle(MethodPath("PushPull"),
                  [this](ByteStream& stream) { return PushPullBytes(stream); });
  streams_.Handle(MethodPath("Register"),
                  [this](ByteStream& stream) { return RegisterBytes(stream); });
  streams_.Handle(MethodPath("Heartbeat"), [this](ByteStream& stream) {
    return ServeUnary<proto::HeartbeatRequest, proto::HeartbeatResponse>(
        stream, [this](const proto::HeartbeatRequest& request,
                       proto::HeartbeatResponse* response) {
          return Heartbeat(request, response);
        });
  });
  streams_.Handle(MethodPath("Done"), [this](ByteStream& stream) {
    return ServeUnary<proto::DoneRequest, proto::DoneResponse>(
        stream, [this](const proto::DoneRequest& request,
                       proto::DoneResponse* response) {
          return Done(request, response);
        });
  });
  streams_.Handle(MethodPath("Barrier"), [this](ByteStream& stream) {
    return ServeUnary<proto::BarrierRequest, proto::BarrierResponse>(
        stream, [this, &stream](const proto::BarrierRequest& request,
                                proto::BarrierResponse* /*response*/) {
          return Barrier(request, stream);
        });
  });
  streams_.Handle(MethodPath("Stats"), [this](ByteStream& stream) {
    return ServeUnary<proto::StatsRequest, proto::StatsResponse>(
        stream,
        [this](const proto::StatsRequest& /*request*/,
               proto::StatsResponse* response) { return Stats(response); });
  });
}

absl::Status ParameterService::CheckCaller(const UpdateCoordinator& coordinator,
                                           const proto::RequestHeader& header) {
  if (header.incarnation() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request of worker ", header.worker_rank(),
        " carries no incarnation; requests carry the one it registered with"));
  }
  return coordinator.CheckRegistered(header.worker_rank(),
                                     header.incarnation());
}

absl::Status ParameterService::Prefixed(absl::string_view what,
                                        const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

void ParameterService::AnnounceLocalEndpoint(std::string socket_name,
                                             std::string secret, int tcp_port) {
  local_endpoint_.set_socket_name(std::move(socket_name));
  local_endpoint_.set_secret(std::move(secret));
  local_endpoint_.set_tcp_port(tcp_port);
}

grpc::Status ParameterService::RegisterBytes(ByteStream& stream) {
  grpc::ByteBuffer message;
  if (!stream.Read(&message)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the call carried no RegisterRequest");
  }
  // Parsing costs many times the message: refused on what the bytes say
  // first, then parsed one at a time.
  if (absl::Status s = PrecheckRegister(
          message, host_->limits(),
          {0, options_.server_index, options_.num_workers, options_.job_id},
          host_->get() != nullptr);
      !s.ok()) {
    return ToGrpcStatus(Prefixed("register refused", s));
  }
  absl::MutexLock lock(&register_mu_);
  proto::RegisterRequest request;
  if (absl::Status s = ParseMessage(message, &request); !s.ok()) {
    return ToGrpcStatus(s);
  }
  message.Clear();
  proto::RegisterResponse response;
  if (absl::Status s = ServeRegister(
          request,
          {0, options_.server_index, options_.num_workers, options_.job_id},
          *host_, &response);
      !s.ok()) {
    return ToGrpcStatus(Prefixed("register refused", s));
  }
  stats_.RecordRegistration(request.header().worker_rank(),
                            request.incarnation());
  if (!local_endpoint_.socket_name().empty()) {
    *response.mutable_local_endpoint() = local_endpoint_;
  }
  if (!stream.Write(SerializeMessage(response))) {
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "the client went away before the answer");
  }
  return grpc::Status::OK;
}

absl::StatusOr<DeclaredShard*> ParameterService::Admit(
    const proto::RequestHeader& header, absl::string_view what) const {
  absl::StatusOr<DeclaredShard*> shard = host_->Require(what);
  if (!shard.ok()) return shard.status();
  if (absl::Status s = ValidateRequestHeader(RequestHeaderFromProto(header),
                                             (*shard)->identity);
      !s.ok()) {
    return s;
  }
  return shard;
}

absl::StatusOr<uint64_t> ParameterService::AwaitRecordingBlockers(
    const UpdateCoordinator& coordinator, uint64_t step,
    absl::FunctionRef<absl::StatusOr<uint64_t>()> wait) {
  const std::vector<int> blocking = stats_.exports_metrics()
                                        ? coordinator.RanksBlocking(step)
                                        : std::vector<int>();
  const absl::Time start = absl::Now();
  absl::StatusOr<uint64_t> version = wait();
  stats_.RecordWaitFor(blocking, absl::Now() - start);
  return version;
}

absl::StatusOr<uint64_t> ParameterService::ServePull(
    const proto::PullRequest& request, ByteStream& stream, absl::Duration* wait,
    uint64_t* bytes) {
  absl::StatusOr<DeclaredShard*> shard = Admit(request.header(), "a pull");
  if (!shard.ok()) return shard.status();
  const update::ShardStore& store = *(*shard)->store;
  UpdateCoordinator& coordinator = *(*shard)->coordinator;
  if (store.awaiting_initial_values()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank 0 has not sent the initial values of ",
                     store.FirstTensorAwaitingValues(), " yet"));
  }
  // Only the registered process takes one of the rank's slots.
  if (absl::Status s = CheckCaller(coordinator, request.header()); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::vector<WireEncoding>> encodings =
      PullEncodings(store.partition().model(), request.tensor_encodings());
  if (!encodings.ok()) return encodings.status();
  absl::StatusOr<RankCallLimiter::Slot> slot =
      calls_.Acquire(request.header().worker_rank());
  if (!slot.ok()) return slot.status();
  if (request.max_chunk_elements() != 0 &&
      request.max_chunk_elements() < options_.min_chunk_elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_chunk_elements ", request.max_chunk_elements(),
        " is below this server's minimum of ", options_.min_chunk_elements));
  }
  const uint64_t chunk_elements =
      request.max_chunk_elements() == 0
          ? options_.default_chunk_elements
          : std::min(request.max_chunk_elements(), options_.max_chunk_elements);
  const absl::Time start = absl::Now();
  auto cancelled = [&stream] { return stream.IsCancelled(); };
  absl::StatusOr<uint64_t> version =
      AwaitRecordingBlockers(coordinator, request.clock(), [&] {
        return coordinator.AwaitPull(request.header().worker_rank(),
                                     request.header().incarnation(),
                                     request.clock(), cancelled);
      });
  if (version.ok() && request.after_others_finish()) {
    version = coordinator.AwaitOthersFinished(request.header().worker_rank(),
                                              request.header().incarnation(),
                                              cancelled);
  }
  *wait = absl::Now() - start;
  if (!version.ok()) return version.status();

  proto::PullResponse response;  // All but the chunk.
  response.set_version(*version);
  proto::TensorChunk chunk;  // All but the data.
  chunk.set_dtype(proto::DTYPE_FLOAT32);
  for (int i = 0; i < store.num_slices(); ++i) {
    const Slice& slice = store.slices()[i];
    const TensorSpec& spec = store.partition().model().tensors[slice.tensor_id];
    chunk.set_tensor_id(slice.tensor_id);
    chunk.mutable_shape()->Assign(spec.shape.begin(), spec.shape.end());
    const WireEncoding encoding = (*encodings)[slice.tensor_id];
    // One version of the whole slice, sent from its memory without a copy
    // and without holding any lock.
    const update::VersionedWeights::Version weights = store.ShareWeights(i);
    for (uint64_t begin = 0; begin < slice.num_elements;
         begin += chunk_elements) {
      const uint64_t n = std::min(chunk_elements, slice.num_elements - begin);
      chunk.set_offset(slice.offset + begin);
      chunk.set_num_elements(n);
      const absl::Span<const float> values =
          absl::MakeConstSpan(*weights).subspan(begin, n);
      grpc::Slice data = PulledChunkData(encoding, weights, values, &chunk);
      *bytes += data.size();
      const grpc::ByteBuffer message = SerializeChunkMessage(
          response, chunk, kPullResponseChunk, std::move(data));
      if (!stream.Write(message)) {
        return absl::CancelledError("pull stream closed by the client");
      }
    }
  }
  return *version;
}

grpc::Status ParameterService::PullBytes(ByteStream& stream) {
  const absl::Time start = absl::Now();
  grpc::ByteBuffer message;
  proto::PullRequest request;
  if (!stream.Read(&message)) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        "pull refused: the call carried no PullRequest"));
  }
  if (absl::Status s = ParseMessage(message, &request); !s.ok()) {
    return ToGrpcStatus(Prefixed("pull refused", s));
  }
  return AnswerPull(request, stream, start);
}

grpc::Status ParameterService::AnswerPull(const proto::PullRequest& request,
                                          ByteStream& stream,
                                          absl::Time start) {
  absl::Duration wait;
  uint64_t bytes = 0;
  absl::StatusOr<uint64_t> version = ServePull(request, stream, &wait, &bytes);
  stats_.RecordPull(version.status(), bytes, wait, absl::Now() - start);
  if (!version.ok()) {
    spdlog::warn("pull for clock {} from worker {} failed: {}", request.clock(),
                 request.header().worker_rank(), version.status().ToString());
    return ToGrpcStatus(Prefixed("pull failed", version.status()));
  }
  return grpc::Status::OK;
}

grpc::Status ParameterService::Heartbeat(const proto::HeartbeatRequest& request,
                                         proto::HeartbeatResponse* response) {
  absl::StatusOr<DeclaredShard*> shard = Admit(request.header(), "a heartbeat");
  if (!shard.ok()) {
    return ToGrpcStatus(Prefixed("heartbeat refused", shard.status()));
  }
  UpdateCoordinator& coordinator = *(*shard)->coordinator;
  // The request's own field, else the header's (the same when both set).
  const uint64_t incarnation = request.incarnation() != 0
                                   ? request.incarnation()
                                   : request.header().incarnation();
  // A heartbeat keeps a rank alive, and steps wait for live ranks: only the
  // process that registered may send it.
  if (absl::Status s = coordinator.CheckRegistered(
          request.header().worker_rank(), incarnation);
      !s.ok()) {
    return ToGrpcStatus(Prefixed("heartbeat refused", s));
  }
  absl::StatusOr<uint64_t> version = coordinator.Heartbeat(
      request.header().worker_rank(), incarnation, request.clock());
  if (!version.ok()) {
    return ToGrpcStatus(Prefixed("heartbeat refused", version.status()));
  }
  response->set_version(*version);
  if (!local_endpoint_.socket_name().empty()) {
    *response->mutable_local_endpoint() = local_endpoint_;
  }
  return grpc::Status::OK;
}

grpc::Status ParameterService::Done(const proto::DoneRequest& request,
                                    proto::DoneResponse* /*response*/) {
  absl::StatusOr<DeclaredShard*> shard = Admit(request.header(), "done");
  if (!shard.ok()) {
    return ToGrpcStatus(Prefixed("done refused", shard.status()));
  }
  UpdateCoordinator& coordinator = *(*shard)->coordinator;
  const int rank = request.header().worker_rank();
  // Done ends a rank's part for good, and the job once every rank said it:
  // only the process that registered may say it.
  if (absl::Status s =
          coordinator.CheckRegistered(rank, request.header().incarnation());
      !s.ok()) {
    spdlog::warn("done refused: {}", s.ToString());
    return ToGrpcStatus(Prefixed("done refused", s));
  }
  const bool finished = coordinator.MarkDone(rank);
  spdlog::info("worker {} is done{}", rank,
               finished ? "; every worker is done" : "");
  return grpc::Status::OK;
}

grpc::Status ParameterService::Barrier(const proto::BarrierRequest& request,
                                       ByteStream& stream) {
  absl::StatusOr<DeclaredShard*> shard = Admit(request.header(), "a barrier");
  if (!shard.ok()) {
    return ToGrpcStatus(Prefixed("barrier refused", shard.status()));
  }
  absl::Status reached = (*shard)->coordinator->AwaitBarrier(
      request.header().worker_rank(), request.header().incarnation(),
      request.generation(), [&stream] { return stream.IsCancelled(); });
  if (!reached.ok()) {
    return ToGrpcStatus(Prefixed("barrier failed", reached));
  }
  return grpc::Status::OK;
}

grpc::Status ParameterService::Stats(proto::StatsResponse* response) {
  if (const DeclaredShard* shard = host_->get(); shard != nullptr) {
    response->set_version(shard->coordinator->version());
  }
  response->set_report(Report());
  return grpc::Status::OK;
}

std::string ParameterService::Report() const {
  const DeclaredShard* shard = host_->get();
  if (shard == nullptr) {
    return absl::StrCat("server ", options_.server_index,
                        ": no model declared\n", stats_.ToString());
  }
  const UpdateCoordinator& coordinator = *shard->coordinator;
  return absl::StrCat("server ", options_.server_index, " mode ",
                      ConsistencyModeName(coordinator.options().mode),
                      " version ", coordinator.version(), "\n",
                      stats_.ToString(), "\n", coordinator.Report());
}

std::optional<ShardReport> ParameterService::ReportFields() const {
  const DeclaredShard* shard = host_->get();
  if (shard == nullptr) return std::nullopt;
  ShardReport report = shard->coordinator->ReportFields();
  report.pushes = stats_.push_figures();
  report.pulls = stats_.pull_figures();
  return report;
}

}  // namespace ps::server
