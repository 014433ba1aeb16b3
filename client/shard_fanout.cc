#include "client/shard_fanout.h"

#include <algorithm>
#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/channel_auth.h"
#include "common/byte_stream_call.h"
#include "common/chunk_wire.h"
#include "common/consistency_mode_proto.h"
#include "common/declaration_proto.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/tensor_codec.h"
#include "grpcpp/grpcpp.h"
#include "proto/health.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace ps::client_internal {
namespace {

constexpr int kMaxMessageBytes = 64 << 20;
// While connecting: how often the last connection error is logged, and how
// long the call that finds it out may take.
constexpr absl::Duration kConnectReportPeriod = absl::Seconds(10);
constexpr absl::Duration kConnectionErrorTimeout = absl::Seconds(1);

std::string MethodName(absl::string_view method) {
  return absl::StrCat("/", proto::ParameterServer::service_full_name(), "/",
                      method);
}

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

// Why `channel` is not connected, as gRPC says it ("failed to connect to
// all addresses; last error: ..."): a call that does not wait for the
// connection fails with it. Empty if the call went through after all.
std::string LastConnectionError(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::ClientContext context;
  context.set_wait_for_ready(false);
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoMilliseconds(kConnectionErrorTimeout));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = grpc::health::v1::Health::NewStub(channel)->Check(
      &context, request, &response);
  return status.ok() ? "" : status.error_message();
}

// Waits until `channel` to `address` is connected or `deadline` passes,
// logging the last connection error every kConnectReportPeriod meanwhile:
// a misconfigured TLS would otherwise look like a server not up yet for
// the whole connect_timeout.
absl::Status WaitConnected(const ClientOptions& options,
                           const std::string& address,
                           const std::shared_ptr<grpc::Channel>& channel,
                           absl::Time start, absl::Time deadline) {
  absl::Time report = absl::Now() + kConnectReportPeriod;
  while (!channel->WaitForConnected(
      absl::ToChronoTime(std::min(deadline, report)))) {
    const std::string error = LastConnectionError(channel);
    const std::string hint = ConnectionHint(options, error);
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "parameter server ", address, " did not accept a connection within ",
          absl::FormatDuration(options.connect_timeout), ": ",
          error.empty() ? "it did not stay connected" : error, hint));
    }
    if (error.empty()) continue;  // Connected meanwhile.
    spdlog::warn(
        "parameter server {} not connected after {}, still trying: "
        "{}{}",
        address,
        absl::FormatDuration(
            absl::Trunc(absl::Now() - start, absl::Seconds(1))),
        error, hint);
    report = absl::Now() + kConnectReportPeriod;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> ConnectChannels(
    const ClientOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(options);
  if (!credentials.ok()) return credentials.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  if (!options.tls_server_name.empty()) {
    args.SetSslTargetNameOverride(options.tls_server_name);
  }
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options.connect_timeout;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (const std::string& address : options.servers) {
    auto channel = grpc::CreateCustomChannel(address, *credentials, args);
    if (absl::Status s =
            WaitConnected(options, address, channel, start, deadline);
        !s.ok()) {
      return s;
    }
    channels.push_back(std::move(channel));
  }
  return channels;
}

ShardFanout::ShardFanout(std::vector<std::string> addresses,
                         const Partition* partition,
                         const ClientOptions& options)
    : addresses_(std::move(addresses)),
      partition_(partition),
      options_(options),
      local_channels_(addresses_.size()),
      unreachable_local_(addresses_.size()) {}

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
  auto fanout = absl::WrapUnique(
      new ShardFanout(std::move(addresses), partition, options));
  for (const std::shared_ptr<grpc::Channel>& channel : channels) {
    fanout->stubs_.push_back(proto::ParameterServer::NewStub(channel));
    fanout->byte_stubs_.push_back(std::make_unique<grpc::GenericStub>(channel));
  }
  return fanout;
}

proto::RequestHeader ShardFanout::Header(int server) const {
  proto::RequestHeader header;
  header.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  header.set_partition_fingerprint(partition_->fingerprint());
  header.set_worker_rank(options_.rank);
  header.set_server_index(server);
  header.set_incarnation(incarnation_.load());
  header.set_job_id(options_.job_id);
  return header;
}

absl::Status ShardFanout::Annotate(int server,
                                   const absl::Status& status) const {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("server ", server, " (", addresses_[server],
                                   "): ", status.message()));
}

absl::Status ShardFanout::CallWithRetry(
    int server, absl::string_view what,
    const std::function<absl::Status()>& attempt) {
  absl::Time deadline = absl::InfiniteFuture();
  absl::Duration backoff = options_.initial_backoff;
  while (true) {
    absl::Status status = attempt();
    if (status.code() != absl::StatusCode::kUnavailable) {
      return Annotate(server, status);
    }
    if (deadline == absl::InfiniteFuture()) {
      deadline = absl::Now() + options_.retry_timeout;
    }
    if (absl::Now() + backoff > deadline) {
      return Annotate(server, absl::UnavailableError(absl::StrCat(
                                  what, " still failing after ",
                                  absl::FormatDuration(options_.retry_timeout),
                                  ": ", status.message())));
    }
    spdlog::warn("server {} ({}) unavailable for {}, retrying in {}: {}",
                 server, addresses_[server], what,
                 absl::FormatDuration(backoff), status.message());
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

absl::StatusOr<Registration> ShardFanout::Register(
    uint64_t incarnation, uint64_t planned_steps,
    uint32_t max_examples_per_push) {
  incarnation_.store(incarnation);
  proto::ModelDeclaration declaration;
  ModelSpecToProto(partition_->model(), &declaration);
  std::vector<proto::RegisterResponse> responses(num_servers());
  absl::Status status = ForEachServer(threads_, num_servers(), [&](int s) {
    proto::RegisterRequest request;
    *request.mutable_header() = Header(s);
    *request.mutable_declaration() = declaration;
    request.set_incarnation(incarnation);
    request.set_planned_steps(planned_steps);
    request.set_max_examples_per_push(max_examples_per_push);
    // Other ranks are answered UNAVAILABLE until rank 0 has declared (and
    // uploaded its initial values): the retry is the wait.
    return CallWithRetry(s, "register", [&] {
      grpc::ClientContext context;
      return FromGrpcStatus(
          stubs_[s]->Register(&context, request, &responses[s]));
    });
  });
  if (!status.ok()) return status;
  for (int s = 0; s < num_servers(); ++s) {
    LearnLocalEndpoint(s, responses[s].local_endpoint());
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
  std::vector<bool> servers(num_servers(), false);
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
    for (const Slice& slice : partition_->SlicesOfTensor(t)) {
      servers[slice.server] = true;
    }
  }
  if (tensors.empty()) return absl::OkStatus();
  PushSession session(this, StepInfo(), PushSession::Kind::kInitialValues,
                      servers);
  for (uint32_t t : tensors) {
    // On error the session's destructor cancels what it sent.
    if (absl::Status s = session.Send(t, values[t]); !s.ok()) return s;
  }
  return session.Finish();
}

absl::Status ShardFanout::Barrier(uint64_t generation) {
  proto::BarrierRequest request;
  *request.mutable_header() = Header(0);
  request.set_generation(generation);
  proto::BarrierResponse response;
  return CallWithRetry(0, "barrier", [&] {
    grpc::ClientContext context;
    return FromGrpcStatus(stubs_[0]->Barrier(&context, request, &response));
  });
}

void ShardFanout::ShapeWeights(TensorValues& weights) const {
  const ModelSpec& model = partition_->model();
  weights.resize(model.tensors.size());
  for (size_t t = 0; t < model.tensors.size(); ++t) {
    weights[t].resize(model.tensors[t].num_elements());
  }
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
  ShapeWeights(weights);
  std::vector<uint64_t> versions(num_servers(), 0);
  absl::Status status = ForEachServer(threads_, num_servers(), [&](int s) {
    return CallWithRetry(s, "pull", [&] {
      return PullFromServer(s, clock, after_others_finish, weights,
                            &versions[s]);
    });
  });
  if (!status.ok()) return status;
  RaiseClock(clock);
  return *std::min_element(versions.begin(), versions.end());
}

absl::Status ShardFanout::PullFromServer(int server, uint64_t clock,
                                         bool after_others_finish,
                                         TensorValues& weights,
                                         uint64_t* version) {
  proto::PullRequest request;
  *request.mutable_header() = Header(server);
  request.set_clock(clock);
  request.set_max_chunk_elements(options_.chunk_elements);
  request.set_after_others_finish(after_others_finish);

  std::unique_ptr<ClientStream> call = OpenStream(server, "Pull");
  call->WriteLast(SerializeMessage(request));
  return ReceiveWeights(server, *call, weights, version);
}

std::shared_ptr<LocalChannel> ShardFanout::LocalChannelOf(int server) const {
  absl::MutexLock lock(&local_mu_);
  return local_channels_[server];
}

void ShardFanout::LearnLocalEndpoint(int server,
                                     const proto::LocalEndpoint& endpoint) {
  if (!options_.local_transport || endpoint.socket_name().empty()) return;
  absl::MutexLock lock(&local_mu_);
  const std::shared_ptr<LocalChannel>& current = local_channels_[server];
  if ((current != nullptr && current->socket_name() == endpoint.socket_name() &&
       current->secret() == endpoint.secret()) ||
      unreachable_local_[server] == endpoint.socket_name()) {
    return;
  }
  local_channels_[server] = std::make_shared<LocalChannel>(
      endpoint.socket_name(), endpoint.secret(), kMaxMessageBytes);
  spdlog::debug("server {} ({}) announced a same-host endpoint", server,
                addresses_[server]);
}

std::unique_ptr<ClientStream> ShardFanout::OpenStream(
    int server, absl::string_view method) {
  const std::string path = MethodName(method);
  if (std::shared_ptr<LocalChannel> channel = LocalChannelOf(server)) {
    absl::StatusOr<std::unique_ptr<LocalCall>> call = channel->StartCall(path);
    if (call.ok()) return *std::move(call);
    {
      absl::MutexLock lock(&local_mu_);
      if (local_channels_[server] == channel) {
        local_channels_[server] = nullptr;
        unreachable_local_[server] = channel->socket_name();
      }
    }
    // A shard on another host, under another user, or gone: gRPC reaches
    // it all the same.
    spdlog::info(
        "server {} ({}): not over its same-host endpoint ({}); "
        "through gRPC",
        server, addresses_[server], call.status().ToString());
  }
  return std::make_unique<ByteStreamCall>(byte_stubs_[server].get(), path);
}

absl::Status ShardFanout::ReceiveWeights(int server, ClientStream& call,
                                         TensorValues& weights,
                                         uint64_t* version) {
  const ModelSpec& model = partition_->model();
  const std::vector<Slice>& slices = partition_->SlicesOfServer(server);
  // Chunks must arrive slice by slice, in order, each continuing where the
  // previous one ended: then exact coverage is a matter of counting.
  size_t slice_index = 0;
  uint64_t next_offset = slices.empty() ? 0 : slices[0].offset;
  absl::Status error;
  grpc::ByteBuffer message;
  proto::PullResponse response;
  absl::Cord data;  // The chunk's bytes, left in the received slices.
  bool first = true;
  while (call.Read(&message)) {
    if (!error.ok()) continue;  // Drain the stream before Finish().
    if (absl::Status s =
            ParseChunkMessage(message, kPullResponseChunk, &response, &data);
        !s.ok()) {
      error = absl::DataLossError(s.message());
      continue;
    }
    if (first) {
      *version = response.version();
      first = false;
    }
    const proto::TensorChunk& chunk = response.chunk();
    if (slice_index == slices.size()) {
      error = absl::DataLossError("server sent more chunks than it holds");
      continue;
    }
    const Slice& slice = slices[slice_index];
    const uint64_t slice_end = slice.offset + slice.num_elements;
    if (chunk.tensor_id() != slice.tensor_id || chunk.offset() != next_offset ||
        chunk.num_elements() == 0 ||
        chunk.num_elements() > slice_end - next_offset ||
        chunk.dtype() != proto::DTYPE_FLOAT32) {
      error = absl::DataLossError(absl::StrCat(
          "unexpected chunk: tensor ", chunk.tensor_id(), " [", chunk.offset(),
          ", +", chunk.num_elements(), "); expected tensor ", slice.tensor_id,
          " from element ", next_offset));
      continue;
    }
    const std::vector<int64_t>& shape = model.tensors[slice.tensor_id].shape;
    if (!std::equal(shape.begin(), shape.end(), chunk.shape().begin(),
                    chunk.shape().end())) {
      error = absl::DataLossError(
          absl::StrCat("chunk of tensor ", slice.tensor_id,
                       " has a shape other than the model's"));
      continue;
    }
    absl::Span<float> dst = absl::MakeSpan(weights[slice.tensor_id])
                                .subspan(chunk.offset(), chunk.num_elements());
    error = DecodeFloats(data, dst);
    next_offset += chunk.num_elements();
    if (next_offset == slice_end && ++slice_index < slices.size()) {
      next_offset = slices[slice_index].offset;
    }
  }
  absl::Status rpc_status = FromGrpcStatus(call.Finish());
  if (!rpc_status.ok()) return rpc_status;
  if (!error.ok()) return error;
  if (slice_index != slices.size()) {
    return absl::DataLossError(absl::StrCat("pull ended after ", slice_index,
                                            " of ", slices.size(), " slices"));
  }
  return absl::OkStatus();
}

absl::Status ShardFanout::Push(const StepInfo& info,
                               const TensorValues& gradients) {
  std::unique_ptr<PushSession> session = StartPush(info);
  for (uint32_t t = 0; t < gradients.size(); ++t) {
    absl::Status status = session->Send(t, gradients[t]);
    if (!status.ok()) return status;
  }
  return session->Finish();
}

absl::Status ShardFanout::Done() {
  return ForEachServer(threads_, num_servers(), [&](int s) {
    proto::DoneRequest request;
    *request.mutable_header() = Header(s);
    proto::DoneResponse response;
    return CallWithRetry(s, "done", [&] {
      grpc::ClientContext context;
      return FromGrpcStatus(stubs_[s]->Done(&context, request, &response));
    });
  });
}

ShardFanout::~ShardFanout() {
  {
    absl::MutexLock lock(&heartbeat_mu_);
    stopping_ = true;
  }
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

void ShardFanout::RaiseClock(uint64_t clock) {
  uint64_t seen = clock_.load();
  while (seen < clock && !clock_.compare_exchange_weak(seen, clock)) {
  }
}

void ShardFanout::StartHeartbeats(absl::Duration period) {
  heartbeat_thread_ = std::thread([this, period] { SendHeartbeats(period); });
}

void ShardFanout::SendHeartbeats(absl::Duration period) {
  auto stopping = [this]() ABSL_SHARED_LOCKS_REQUIRED(heartbeat_mu_) {
    return stopping_;
  };
  absl::Time last_warning = absl::InfinitePast();
  absl::MutexLock lock(&heartbeat_mu_);
  while (!heartbeat_mu_.AwaitWithTimeout(absl::Condition(&stopping), period)) {
    heartbeat_mu_.Unlock();
    for (int s = 0; s < num_servers(); ++s) {
      proto::HeartbeatRequest request;
      *request.mutable_header() = Header(s);
      request.set_incarnation(incarnation_.load());
      request.set_clock(clock_.load());
      proto::HeartbeatResponse response;
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + period));
      const absl::Status status =
          FromGrpcStatus(stubs_[s]->Heartbeat(&context, request, &response));
      if (status.ok()) LearnLocalEndpoint(s, response.local_endpoint());
      // A shard that is down or restarting fails every beat: once in a
      // while is enough to say so.
      if (!status.ok() && absl::Now() - last_warning > absl::Seconds(10)) {
        last_warning = absl::Now();
        spdlog::warn("heartbeat: {}", Annotate(s, status).ToString());
      }
    }
    heartbeat_mu_.Lock();
  }
}

std::unique_ptr<PushSession> ShardFanout::StartPush(const StepInfo& info) {
  return absl::WrapUnique(
      new PushSession(this, info, PushSession::Kind::kPush));
}

std::unique_ptr<PushSession> ShardFanout::StartPushPull(const StepInfo& info) {
  return absl::WrapUnique(
      new PushSession(this, info, PushSession::Kind::kPushPull));
}

// The stream to one shard. Over gRPC, a thread of its own drains a queue
// of slices into the call, so that Send never waits for the network; over
// the same-host transport, whose writes only hand bytes to the kernel, the
// caller's thread writes each slice as it is queued and reads the answer
// in Join: no hand-off between threads. A PushPull's answer is decoded
// into the vectors given to Close.
class PushSession::ShardStream {
 public:
  ShardStream(ShardFanout* fanout, int server, const StepInfo& info, Kind kind)
      : fanout_(fanout),
        server_(server),
        kind_(kind),
        inline_(fanout->LocalChannelOf(server) != nullptr) {
    prototype_.mutable_header()->CopyFrom(fanout->Header(server));
    prototype_.set_step(info.step);
    prototype_.set_base_version(info.base_version);
    prototype_.set_num_examples(info.num_examples);
    prototype_.set_epoch(info.cursor.epoch);
    prototype_.set_examples_done(info.cursor.examples_done);
    if (info.learning_rate.has_value()) {
      prototype_.set_learning_rate(*info.learning_rate);
    }
    if (kind == Kind::kPushPull) {
      prototype_.set_max_pull_chunk_elements(fanout->options_.chunk_elements);
    }
    if (kind == Kind::kInitialValues) prototype_.set_initial_values(true);
    if (inline_) return;
    fanout->threads_.Run([this] {
      status_ = Run();
      ended_.Notify();
    });
  }

  ~ShardStream() {
    Close(nullptr, /*abandon=*/true);
    if (inline_) {
      first_call_.reset();  // Cancels it: the shard applies nothing.
      lender_.AwaitReturned();
    } else {
      ended_.WaitForNotification();
    }
  }

  void Enqueue(const Slice& slice, const float* tensor_data) {
    if (inline_) {
      // The first attempt streams as slices come; Join retries if needed.
      items_.push_back({slice, tensor_data});
      if (first_call_ == nullptr) first_call_ = OpenCall();
      if (!first_call_broken_) {
        first_call_broken_ = !Write(items_.back(), *first_call_);
      }
      return;
    }
    absl::MutexLock lock(&mu_);
    queue_.push_back({slice, tensor_data});
  }

  // No more slices. `weights` (shaped by ShapeWeights) receives a PushPull's
  // answer. With `abandon` the call is cancelled: the shard applies nothing.
  // Inline, the shard learns here that the push is complete, so closing
  // every shard's stream before joining any lets them work at once.
  void Close(TensorValues* weights, bool abandon) {
    {
      absl::MutexLock lock(&mu_);
      if (closed_) return;
      closed_ = true;
      abandoned_ = abandon;
      weights_ = weights;
    }
    if (inline_ && !abandon && first_call_ != nullptr && !first_call_broken_) {
      first_call_broken_ = !first_call_->WritesDone();
    }
  }

  absl::Status Join(TensorValues* weights) {
    Close(weights, /*abandon=*/false);
    if (inline_) return Run();
    ended_.WaitForNotification();
    return status_;
  }

  // The version the shard pulled at; after a successful Join of a PushPull.
  uint64_t pulled_version() const { return pulled_version_; }

 private:
  struct Item {
    Slice slice;
    const float* tensor_data;
  };

  // The first attempt streams items as they are queued; a retry (the shard
  // was unreachable) resends every item from the start. Returns once the
  // transport has let go of the gradient memory.
  absl::Status Run() {
    const char* what = kind_ == Kind::kPushPull        ? "push and pull"
                       : kind_ == Kind::kInitialValues ? "initial values"
                                                       : "push";
    absl::Status status =
        fanout_->CallWithRetry(server_, what, [&] { return Attempt(); });
    lender_.AwaitReturned();
    return status;
  }

  std::unique_ptr<ClientStream> OpenCall() {
    return fanout_->OpenStream(server_,
                               kind_ == Kind::kPushPull ? "PushPull" : "Push");
  }

  absl::Status Attempt() {
    // Inline, the first attempt's call has every item written already.
    std::unique_ptr<ClientStream> call = std::move(first_call_);
    bool broken = first_call_broken_;
    if (call == nullptr) {
      call = OpenCall();
      broken = false;
      for (const Item& item : items_) {
        if (!broken) broken = !Write(item, *call);
      }
    }
    while (!inline_) {
      Item item;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](ShardStream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
              return s->closed_ || !s->queue_.empty();
            },
            this));
        if (queue_.empty()) break;  // Closed and drained.
        item = queue_.front();
        queue_.pop_front();
      }
      items_.push_back(item);
      if (!broken) broken = !Write(item, *call);
    }
    TensorValues* weights = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (abandoned_) {
        // Without WritesDone, the call is cancelled as it is destroyed.
        return absl::CancelledError("push abandoned");
      }
      weights = weights_;
    }
    if (kind_ == Kind::kPushPull) {
      if (!broken) call->WritesDone();
      // A broken stream shows in the call's status, which this returns.
      return fanout_->ReceiveWeights(server_, *call, *weights,
                                     &pulled_version_);
    }
    // The one response is the shard's acknowledgement; its version is not
    // needed here.
    grpc::ByteBuffer response;
    const bool answered =
        !broken && call->WritesDone() && call->Read(&response);
    absl::Status status = FromGrpcStatus(call->Finish());
    if (status.ok() && !answered) {
      return absl::InternalError("push stream ended without an answer");
    }
    return status;
  }

  // Writes one slice as chunks that point at the gradient memory; false
  // once the stream is broken.
  bool Write(const Item& item, ClientStream& call) {
    const Slice& slice = item.slice;
    const std::vector<int64_t>& shape =
        fanout_->partition_->model().tensors[slice.tensor_id].shape;
    const uint64_t chunk_elements = fanout_->options_.chunk_elements;
    proto::TensorChunk chunk;
    chunk.set_tensor_id(slice.tensor_id);
    chunk.set_dtype(proto::DTYPE_FLOAT32);
    chunk.mutable_shape()->Assign(shape.begin(), shape.end());
    for (uint64_t done = 0; done < slice.num_elements; done += chunk_elements) {
      const uint64_t n = std::min(chunk_elements, slice.num_elements - done);
      chunk.set_offset(slice.offset + done);
      chunk.set_num_elements(n);
      const absl::Span<const float> values =
          absl::MakeConstSpan(item.tensor_data + slice.offset + done, n);
      if (!call.Write(SerializeChunkMessage(prototype_, chunk,
                                            kPushRequestChunk,
                                            lender_.LendFloats(values)))) {
        return false;
      }
    }
    return true;
  }

  ShardFanout* const fanout_;
  const int server_;
  const Kind kind_;
  // Driven from the caller's thread: the shard is reached over the
  // same-host transport.
  const bool inline_;
  // Every field but the chunk, the same in each message.
  proto::PushRequest prototype_;
  SliceLender lender_;
  // Every item queued so far, for a retry. Touched by the stream's thread
  // only (or, inline, the caller's).
  std::vector<Item> items_;
  // Inline: the first attempt's call, written as items are queued.
  std::unique_ptr<ClientStream> first_call_;
  bool first_call_broken_ = false;
  absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;
  TensorValues* weights_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Written by the thread, read after joining it.
  absl::Status status_;
  uint64_t pulled_version_ = 0;
  // Notified once Run returned on a thread of the fanout's cache.
  absl::Notification ended_;
};

PushSession::PushSession(ShardFanout* fanout, const StepInfo& info, Kind kind,
                         const std::vector<bool>& servers)
    : fanout_(fanout), kind_(kind), step_(info.step) {
  for (int s = 0; s < fanout->num_servers(); ++s) {
    streams_.push_back(
        servers.empty() || servers[s]
            ? std::make_unique<ShardStream>(fanout, s, info, kind)
            : nullptr);
  }
}

PushSession::~PushSession() = default;

absl::Status PushSession::Send(uint32_t tensor_id,
                               absl::Span<const float> gradient) {
  if (finished_) {
    return absl::FailedPreconditionError("push session already finished");
  }
  const ModelSpec& model = fanout_->partition_->model();
  if (tensor_id >= model.tensors.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient for tensor ", tensor_id, ": the model has only ",
                     model.tensors.size(), " tensors"));
  }
  const TensorSpec& spec = model.tensors[tensor_id];
  if (gradient.size() != static_cast<size_t>(spec.num_elements())) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient for ", spec.name, " has ", gradient.size(),
                     " elements, expected ", spec.num_elements()));
  }
  if (kind_ == Kind::kInitialValues &&
      spec.initializer.kind != InitializerSpec::Kind::kFromRank0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "initial values for ", spec.name, ", which is not declared FromRank0"));
  }
  const std::vector<Slice>& slices =
      fanout_->partition_->SlicesOfTensor(tensor_id);
  for (const Slice& slice : slices) {
    if (streams_[slice.server] == nullptr) {
      return absl::InternalError(absl::StrCat(
          "no stream to server ", slice.server, " for ", spec.name));
    }
  }
  for (const Slice& slice : slices) {
    streams_[slice.server]->Enqueue(slice, gradient.data());
  }
  return absl::OkStatus();
}

absl::Status PushSession::Finish() {
  if (kind_ == Kind::kPushPull) {
    return absl::FailedPreconditionError(
        "a session from StartPushPull ends with FinishWithPull");
  }
  return JoinStreams(nullptr);
}

absl::StatusOr<uint64_t> PushSession::FinishWithPull(TensorValues& weights) {
  if (kind_ != Kind::kPushPull) {
    return absl::FailedPreconditionError(
        "a session from StartPush pulls nothing; it ends with Finish");
  }
  fanout_->ShapeWeights(weights);
  std::vector<uint64_t> versions(streams_.size(), 0);
  absl::Status status = JoinStreams(&weights, &versions);
  if (!status.ok()) return status;
  fanout_->RaiseClock(step_ + 1);
  return *std::min_element(versions.begin(), versions.end());
}

absl::Status PushSession::JoinStreams(TensorValues* weights,
                                      std::vector<uint64_t>* pulled_versions) {
  if (finished_) {
    return absl::FailedPreconditionError("push session already finished");
  }
  finished_ = true;
  // Every stream ends its push before any is waited for: a shard's answer
  // may wait (sync) for other ranks, whose pushes to the next shards may
  // wait for this rank's. Closed one after another, a rank whose push one
  // shard refused left the others' steps waiting on the next shard.
  for (const std::unique_ptr<ShardStream>& stream : streams_) {
    if (stream != nullptr) stream->Close(weights, /*abandon=*/false);
  }
  absl::Status first_error;
  for (size_t s = 0; s < streams_.size(); ++s) {
    if (streams_[s] == nullptr) continue;
    absl::Status status = streams_[s]->Join(weights);
    if (first_error.ok()) first_error = status;
    if (pulled_versions != nullptr) {
      (*pulled_versions)[s] = streams_[s]->pulled_version();
    }
  }
  streams_.clear();
  return first_error;
}

}  // namespace ps::client_internal
