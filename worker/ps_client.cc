#include "worker/ps_client.h"

#include <algorithm>
#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/byte_stream_call.h"
#include "common/chunk_wire.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/tensor_codec.h"
#include "grpcpp/grpcpp.h"

namespace ps::worker {
namespace {

constexpr int kMaxMessageBytes = 64 << 20;

std::string MethodName(absl::string_view method) {
  return absl::StrCat("/", proto::ParameterServer::service_full_name(), "/",
                      method);
}

// Runs fn(server) for every server at once and returns the first failure in
// server order. The calling thread serves the last server itself: a thread
// start costs ~0.15 ms here, as much as a small pull's whole exchange.
template <typename Fn>
absl::Status ForEachServer(int num_servers, Fn fn) {
  std::vector<absl::Status> results(num_servers);
  std::vector<std::thread> threads;
  threads.reserve(num_servers);
  for (int s = 0; s + 1 < num_servers; ++s) {
    threads.emplace_back([&, s] { results[s] = fn(s); });
  }
  if (num_servers > 0) results.back() = fn(num_servers - 1);
  for (std::thread& t : threads) t.join();
  for (const absl::Status& status : results) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace

ParameterClient::ParameterClient(std::vector<std::string> addresses,
                                 const Partition* partition,
                                 const ClientOptions& options)
    : addresses_(std::move(addresses)),
      partition_(partition),
      options_(options) {}

absl::StatusOr<std::unique_ptr<ParameterClient>> ParameterClient::Connect(
    const std::vector<std::string>& addresses, const Partition* partition,
    const ClientOptions& options) {
  if (static_cast<int>(addresses.size()) != partition->num_servers()) {
    return absl::InvalidArgumentError(absl::StrCat("got ", addresses.size(),
                                                   " server addresses but the "
                                                   "partition is for ",
                                                   partition->num_servers(),
                                                   " servers"));
  }
  if (options.chunk_elements == 0) {
    return absl::InvalidArgumentError("chunk_elements must be positive");
  }
  auto client =
      absl::WrapUnique(new ParameterClient(addresses, partition, options));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  const auto deadline = std::chrono::system_clock::now() +
                        absl::ToChronoMilliseconds(options.connect_timeout);
  for (const std::string& address : addresses) {
    auto channel = grpc::CreateCustomChannel(
        address, grpc::InsecureChannelCredentials(), args);
    if (!channel->WaitForConnected(deadline)) {
      return absl::UnavailableError(
          absl::StrCat("parameter server ", address,
                       " did not accept a "
                       "connection within ",
                       absl::FormatDuration(options.connect_timeout)));
    }
    client->stubs_.push_back(proto::ParameterServer::NewStub(channel));
    client->byte_stubs_.push_back(std::make_unique<grpc::GenericStub>(channel));
  }
  return client;
}

proto::RequestHeader ParameterClient::Header(int server) const {
  proto::RequestHeader header;
  header.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  header.set_partition_fingerprint(partition_->fingerprint());
  header.set_worker_rank(options_.rank);
  header.set_server_index(server);
  header.set_incarnation(incarnation_.load());
  header.set_job_id(options_.job_id);
  return header;
}

absl::Status ParameterClient::Annotate(int server,
                                       const absl::Status& status) const {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("server ", server, " (", addresses_[server],
                                   "): ", status.message()));
}

ParameterClient::~ParameterClient() {
  {
    absl::MutexLock lock(&heartbeat_mu_);
    stopping_ = true;
  }
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

absl::Status ParameterClient::CallWithRetry(
    int server, absl::string_view what,
    const std::function<absl::Status()>& attempt) {
  const absl::Time deadline = absl::Now() + options_.retry_timeout;
  absl::Duration backoff = options_.initial_backoff;
  while (true) {
    absl::Status status = attempt();
    if (status.code() != absl::StatusCode::kUnavailable) {
      return Annotate(server, status);
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

void ParameterClient::StartHeartbeats(uint64_t incarnation) {
  if (heartbeat_thread_.joinable()) return;
  heartbeat_thread_ =
      std::thread([this, incarnation] { SendHeartbeats(incarnation); });
}

void ParameterClient::SendHeartbeats(uint64_t incarnation) {
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(heartbeat_mu_) {
    return stopping_;
  };
  while (true) {
    {
      absl::MutexLock lock(&heartbeat_mu_);
      if (heartbeat_mu_.AwaitWithTimeout(absl::Condition(&stopping),
                                         options_.heartbeat_period)) {
        return;
      }
    }
    for (int s = 0; s < num_servers(); ++s) {
      proto::HeartbeatRequest request;
      *request.mutable_header() = Header(s);
      request.set_incarnation(incarnation);
      proto::HeartbeatResponse response;
      grpc::ClientContext context;
      context.set_deadline(
          std::chrono::system_clock::now() +
          absl::ToChronoMilliseconds(options_.heartbeat_period));
      grpc::Status status = stubs_[s]->Heartbeat(&context, request, &response);
      if (!status.ok()) {
        spdlog::debug("heartbeat to server {} failed: {}", s,
                      status.error_message());
      }
    }
  }
}

absl::StatusOr<RegisterInfo> ParameterClient::Register(uint64_t incarnation,
                                                       uint64_t planned_steps) {
  incarnation_.store(incarnation);
  std::vector<proto::RegisterResponse> responses(num_servers());
  absl::Status status = ForEachServer(num_servers(), [&](int s) {
    proto::RegisterRequest request;
    *request.mutable_header() = Header(s);
    request.set_num_tensors(partition_->num_tensors());
    request.set_incarnation(incarnation);
    request.set_planned_steps(planned_steps);
    return CallWithRetry(s, "register", [&] {
      grpc::ClientContext context;
      return FromGrpcStatus(
          stubs_[s]->Register(&context, request, &responses[s]));
    });
  });
  if (!status.ok()) return status;
  for (int s = 1; s < num_servers(); ++s) {
    if (responses[s].mode() != responses[0].mode() ||
        responses[s].num_workers() != responses[0].num_workers()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "servers disagree: server 0 runs mode ", responses[0].mode(),
          " with ", responses[0].num_workers(), " workers, server ", s,
          " runs mode ", responses[s].mode(), " with ",
          responses[s].num_workers()));
    }
  }
  RegisterInfo info;
  info.mode = responses[0].mode();
  info.num_workers = responses[0].num_workers();
  info.version = responses[0].version();
  info.next_step = responses[0].next_step();
  info.epoch = responses[0].epoch();
  info.examples_done = responses[0].examples_done();
  for (const proto::RegisterResponse& r : responses) {
    info.version = std::min<uint64_t>(info.version, r.version());
    info.next_step = std::min<uint64_t>(info.next_step, r.next_step());
    if (std::make_pair(r.epoch(), r.examples_done()) <
        std::make_pair(info.epoch, info.examples_done)) {
      info.epoch = r.epoch();
      info.examples_done = r.examples_done();
    }
  }
  return info;
}

void ParameterClient::ShapeWeights(
    std::vector<std::vector<float>>& weights) const {
  const ModelSpec& model = partition_->model();
  weights.resize(model.tensors.size());
  for (size_t t = 0; t < model.tensors.size(); ++t) {
    weights[t].resize(model.tensors[t].num_elements());
  }
}

absl::StatusOr<uint64_t> ParameterClient::Pull(
    uint64_t clock, std::vector<std::vector<float>>& weights) {
  return PullFromAll(clock, /*after_others_finish=*/false, weights);
}

absl::StatusOr<uint64_t> ParameterClient::PullFinal(
    uint64_t clock, std::vector<std::vector<float>>& weights) {
  return PullFromAll(clock, /*after_others_finish=*/true, weights);
}

absl::StatusOr<uint64_t> ParameterClient::PullFromAll(
    uint64_t clock, bool after_others_finish,
    std::vector<std::vector<float>>& weights) {
  ShapeWeights(weights);
  std::vector<uint64_t> versions(num_servers(), 0);
  absl::Status status = ForEachServer(num_servers(), [&](int s) {
    return CallWithRetry(s, "pull", [&] {
      return PullFromServer(s, clock, after_others_finish, weights,
                            &versions[s]);
    });
  });
  if (!status.ok()) return status;
  return *std::min_element(versions.begin(), versions.end());
}

absl::Status ParameterClient::PullFromServer(
    int server, uint64_t clock, bool after_others_finish,
    std::vector<std::vector<float>>& weights, uint64_t* version) {
  proto::PullRequest request;
  *request.mutable_header() = Header(server);
  request.set_clock(clock);
  request.set_max_chunk_elements(options_.chunk_elements);
  request.set_after_others_finish(after_others_finish);

  grpc::ClientContext context;
  ByteStreamCall call(byte_stubs_[server].get(), MethodName("Pull"), &context);
  call.WriteLast(SerializeMessage(request));
  return ReceiveWeights(server, call, weights, version);
}

absl::Status ParameterClient::ReceiveWeights(
    int server, ByteStreamCall& call, std::vector<std::vector<float>>& weights,
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

absl::Status ParameterClient::Push(
    const PushMetadata& metadata,
    const std::vector<std::vector<float>>& gradients) {
  std::unique_ptr<PushSession> session = StartPush(metadata);
  for (uint32_t t = 0; t < gradients.size(); ++t) {
    absl::Status status = session->Send(t, gradients[t]);
    if (!status.ok()) return status;
  }
  return session->Finish();
}

absl::Status ParameterClient::Done() {
  return ForEachServer(num_servers(), [&](int s) {
    proto::DoneRequest request;
    *request.mutable_header() = Header(s);
    proto::DoneResponse response;
    return CallWithRetry(s, "done", [&] {
      grpc::ClientContext context;
      return FromGrpcStatus(stubs_[s]->Done(&context, request, &response));
    });
  });
}

std::unique_ptr<PushSession> ParameterClient::StartPush(
    const PushMetadata& metadata) {
  return absl::WrapUnique(
      new PushSession(this, metadata, /*pull_after_push=*/false));
}

std::unique_ptr<PushSession> ParameterClient::StartPushPull(
    const PushMetadata& metadata) {
  return absl::WrapUnique(
      new PushSession(this, metadata, /*pull_after_push=*/true));
}

// The stream to one shard: a queue of slices to send, drained by a thread
// of its own that owns the gRPC writer. With `pull_after_push` the call is
// a PushPull, whose answer the thread decodes into the vectors given to
// Close.
class PushSession::ShardStream {
 public:
  ShardStream(ParameterClient* client, int server, const PushMetadata& metadata,
              bool pull_after_push)
      : client_(client), server_(server), pull_after_push_(pull_after_push) {
    prototype_.mutable_header()->CopyFrom(client->Header(server));
    prototype_.set_step(metadata.step);
    prototype_.set_base_version(metadata.base_version);
    prototype_.set_num_examples(metadata.num_examples);
    prototype_.set_epoch(metadata.epoch);
    prototype_.set_examples_done(metadata.examples_done);
    if (pull_after_push) {
      prototype_.set_max_pull_chunk_elements(client->options_.chunk_elements);
    }
    thread_ = std::thread([this] { status_ = Run(); });
  }

  ~ShardStream() {
    Close(nullptr);
    if (thread_.joinable()) thread_.join();
  }

  void Enqueue(const Slice& slice, const float* tensor_data) {
    absl::MutexLock lock(&mu_);
    queue_.push_back({slice, tensor_data});
  }

  // No more slices. `weights` (shaped by ShapeWeights) receives a PushPull's
  // answer; null abandons it.
  void Close(std::vector<std::vector<float>>* weights) {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    weights_ = weights;
  }

  absl::Status Join(std::vector<std::vector<float>>* weights) {
    Close(weights);
    thread_.join();
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
  // was unreachable) resends every item from the start. Returns once gRPC
  // has let go of the gradient memory.
  absl::Status Run() {
    std::vector<Item> items;
    absl::Status status = client_->CallWithRetry(
        server_, pull_after_push_ ? "push and pull" : "push",
        [&] { return Attempt(items); });
    lender_.AwaitReturned();
    return status;
  }

  absl::Status Attempt(std::vector<Item>& items) {
    grpc::ClientContext context;
    ByteStreamCall call(client_->byte_stubs_[server_].get(),
                        MethodName(pull_after_push_ ? "PushPull" : "Push"),
                        &context);
    bool broken = false;
    for (const Item& item : items) {
      if (!broken) broken = !Write(item, call);
    }
    while (true) {
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
      items.push_back(item);
      if (!broken) broken = !Write(item, call);
    }
    if (pull_after_push_) {
      std::vector<std::vector<float>>* weights = nullptr;
      {
        absl::MutexLock lock(&mu_);
        weights = weights_;
      }
      if (weights == nullptr) {
        return absl::CancelledError("push and pull abandoned");
      }
      if (!broken) call.WritesDone();
      // A broken stream shows in the call's status, which this returns.
      return client_->ReceiveWeights(server_, call, *weights, &pulled_version_);
    }
    // The one response is the shard's acknowledgement; its version is not
    // needed here.
    grpc::ByteBuffer response;
    const bool answered = !broken && call.WritesDone() && call.Read(&response);
    absl::Status status = FromGrpcStatus(call.Finish());
    if (status.ok() && !answered) {
      return absl::InternalError("push stream ended without an answer");
    }
    return status;
  }

  // Writes one slice as chunks that point at the gradient memory; false
  // once the stream is broken.
  bool Write(const Item& item, ByteStreamCall& call) {
    const Slice& slice = item.slice;
    const std::vector<int64_t>& shape =
        client_->partition_->model().tensors[slice.tensor_id].shape;
    const uint64_t chunk_elements = client_->options_.chunk_elements;
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

  ParameterClient* const client_;
  const int server_;
  const bool pull_after_push_;
  // Every field but the chunk, the same in each message.
  proto::PushRequest prototype_;
  SliceLender lender_;
  absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::vector<float>>* weights_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Written by the thread, read after joining it.
  absl::Status status_;
  uint64_t pulled_version_ = 0;
  std::thread thread_;
};

PushSession::PushSession(ParameterClient* client, const PushMetadata& metadata,
                         bool pull_after_push)
    : client_(client), pull_after_push_(pull_after_push) {
  for (int s = 0; s < client->num_servers(); ++s) {
    streams_.push_back(
        std::make_unique<ShardStream>(client, s, metadata, pull_after_push));
  }
}

PushSession::~PushSession() = default;

absl::Status PushSession::Send(uint32_t tensor_id,
                               absl::Span<const float> gradient) {
  const ModelSpec& model = client_->partition_->model();
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
  for (const Slice& slice : client_->partition_->SlicesOfTensor(tensor_id)) {
    streams_[slice.server]->Enqueue(slice, gradient.data());
  }
  return absl::OkStatus();
}

absl::Status PushSession::Finish() {
  if (pull_after_push_) {
    return absl::FailedPreconditionError(
        "a session from StartPushPull ends with FinishWithPull");
  }
  return JoinStreams(nullptr);
}

absl::StatusOr<uint64_t> PushSession::FinishWithPull(
    std::vector<std::vector<float>>& weights) {
  if (!pull_after_push_) {
    return absl::FailedPreconditionError(
        "a session from StartPush pulls nothing; it ends with Finish");
  }
  client_->ShapeWeights(weights);
  std::vector<uint64_t> versions(streams_.size(), 0);
  absl::Status status = JoinStreams(&weights, &versions);
  if (!status.ok()) return status;
  return *std::min_element(versions.begin(), versions.end());
}

absl::Status PushSession::JoinStreams(std::vector<std::vector<float>>* weights,
                                      std::vector<uint64_t>* pulled_versions) {
  if (streams_.empty()) {
    return absl::FailedPreconditionError("push session already finished");
  }
  absl::Status first_error;
  for (size_t s = 0; s < streams_.size(); ++s) {
    absl::Status status = streams_[s]->Join(weights);
    if (first_error.ok()) first_error = status;
    if (pulled_versions != nullptr) {
      (*pulled_versions)[s] = streams_[s]->pulled_version();
    }
  }
  streams_.clear();
  return first_error;
}

}  // namespace ps::worker
