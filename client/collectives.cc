#include "client/collectives.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/connect.h"
#include "client/retry.h"
#include "common/fingerprint.h"
#include "common/grpc_status.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "grpcpp/grpcpp.h"
#include "proto/parameter_server.grpc.pb.h"

namespace ps {
namespace {

using client_internal::ConnectChannels;
using client_internal::RetryPolicy;
using client_internal::RetryWhileUnavailable;

// The most elements one call carries (1 MiB), and how many calls to one
// server a collective keeps in flight: a large tensor's pieces then
// overlap their serializing, transfer and combining.
constexpr uint64_t kMaxPieceElements = uint64_t{1} << 18;
constexpr int kLanesPerServer = 4;

// Elements [offset, offset + num_elements) of a tensor, combined by
// `server`.
struct Piece {
  int server = 0;
  uint64_t offset = 0;
  uint64_t num_elements = 0;
};

int ServerOfName(absl::string_view name, int num_servers) {
  return static_cast<int>(Fingerprint().Add(name).value() %
                          static_cast<uint64_t>(num_servers));
}

// Cuts [offset, offset + n) into pieces of at most kMaxPieceElements.
void AddPieces(int server, uint64_t offset, uint64_t n,
               std::vector<Piece>* pieces) {
  do {
    const uint64_t take = std::min(n, kMaxPieceElements);
    pieces->push_back({server, offset, take});
    offset += take;
    n -= take;
  } while (n > 0);
}

// Where each piece of a tensor of `n` elements goes: small tensors whole to
// the server the name picks, large ones as the model partition would
// spread a tensor of that size.
absl::StatusOr<std::vector<Piece>> PiecesOf(uint64_t n, int num_servers,
                                            absl::string_view name) {
  std::vector<Piece> pieces;
  if (n <= Collectives::kSplitElements || num_servers == 1) {
    AddPieces(ServerOfName(name, num_servers), 0, n, &pieces);
    return pieces;
  }
  ModelSpec model;
  model.tensors.push_back(
      {"collective", DType::kFloat32, {static_cast<int64_t>(n)}});
  absl::StatusOr<Partition> partition = Partition::Create(model, num_servers);
  if (!partition.ok()) return partition.status();
  for (const Slice& slice : partition->SlicesOfTensor(0)) {
    AddPieces(slice.server, slice.offset, slice.num_elements, &pieces);
  }
  return pieces;
}

proto::CollectiveRequest::ReduceOp ProtoOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return proto::CollectiveRequest::SUM;
    case ReduceOp::kAverage:
      return proto::CollectiveRequest::AVERAGE;
    case ReduceOp::kMin:
      return proto::CollectiveRequest::MIN;
    case ReduceOp::kMax:
      return proto::CollectiveRequest::MAX;
  }
  return proto::CollectiveRequest::REDUCE_OP_UNSPECIFIED;
}

absl::StatusOr<uint64_t> ElementsOf(absl::Span<const int64_t> shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension ", d, " in a collective's shape"));
    }
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

std::string Bytes(absl::Span<const float> values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(float));
}

}  // namespace

class Collectives::Impl {
 public:
  Impl(const ClientOptions& options,
       const std::vector<std::shared_ptr<grpc::Channel>>& channels)
      : options_(options), retry_(RetryPolicy::FromOptions(options)) {
    for (const auto& channel : channels) {
      stubs_.push_back(proto::Collectives::NewStub(channel));
    }
  }

  int rank() const { return options_.rank; }
  int num_servers() const { return static_cast<int>(stubs_.size()); }

  // A request of `kind` named `name` (or the kind's default), numbered.
  proto::CollectiveRequest Start(proto::CollectiveRequest::Kind kind,
                                 absl::string_view name,
                                 absl::string_view default_name) {
    proto::CollectiveRequest request;
    proto::RequestHeader& header = *request.mutable_header();
    header.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
    header.set_worker_rank(options_.rank);
    header.set_job_id(options_.job_id);
    request.set_kind(kind);
    request.set_anonymous(name.empty());
    request.set_name(std::string(name.empty() ? default_name : name));
    request.set_num_parts(1);
    absl::MutexLock lock(&mu_);
    request.set_generation(generation_);
    request.set_sequence(++sequences_[request.name()]);
    return request;
  }

  // Sends `request` to `server`, retrying while it is unreachable.
  absl::StatusOr<proto::CollectiveResponse> Call(
      int server, proto::CollectiveRequest& request) {
    request.mutable_header()->set_server_index(server);
    proto::CollectiveResponse response;
    const std::string who =
        absl::StrCat("server ", server, " (", options_.servers[server], ")");
    absl::Status s = RetryWhileUnavailable(
        retry_, who, absl::StrCat("collective '", request.name(), "'"), [&] {
          grpc::ClientContext context;
          return FromGrpcStatus(
              stubs_[server]->Collective(&context, request, &response));
        });
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat(who, ": ", s.message()));
    }
    return response;
  }

  // Runs `request` over the pieces of a tensor of `n` elements: the
  // piece's part of `input` goes out (none if empty), the answer lands in
  // `output`. Up to kLanesPerServer threads per server, each sending its
  // share of the server's pieces in order (the same on every rank, so no
  // two ranks wait on each other's later pieces).
  absl::Status RunPieces(const proto::CollectiveRequest& request, uint64_t n,
                         absl::Span<const float> input,
                         absl::Span<float> output) {
    absl::StatusOr<std::vector<Piece>> pieces =
        PiecesOf(n, num_servers(), request.name());
    if (!pieces.ok()) return pieces.status();
    const uint32_t num_parts = static_cast<uint32_t>(pieces->size());
    std::vector<absl::Status> statuses(num_parts);
    // Piece p goes to lane lanes[p] of its server.
    std::vector<int> lanes(num_parts);
    std::vector<int> per_server(num_servers(), 0);
    for (uint32_t p = 0; p < num_parts; ++p) {
      const int server = (*pieces)[p].server;
      lanes[p] =
          server * kLanesPerServer + per_server[server]++ % kLanesPerServer;
    }
    auto run_lane = [&](int lane) {
      for (uint32_t p = 0; p < num_parts; ++p) {
        const Piece& piece = (*pieces)[p];
        if (lanes[p] != lane) continue;
        const int server = piece.server;
        proto::CollectiveRequest one = request;
        one.set_part(p);
        one.set_num_parts(num_parts);
        one.set_offset(piece.offset);
        one.set_num_elements(piece.num_elements);
        if (!input.empty()) {
          one.set_data(Bytes(input.subspan(piece.offset, piece.num_elements)));
        }
        absl::StatusOr<proto::CollectiveResponse> answer = Call(server, one);
        if (!answer.ok()) {
          statuses[p] = answer.status();
          return;  // The later pieces would fail alike.
        }
        if (answer->data().size() != piece.num_elements * sizeof(float)) {
          statuses[p] = absl::DataLossError(absl::StrCat(
              "server ", server, " answered ", answer->data().size(),
              " bytes for ", piece.num_elements, " elements"));
          return;
        }
        std::memcpy(output.data() + piece.offset, answer->data().data(),
                    answer->data().size());
      }
    };
    std::vector<int> used = lanes;
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    if (used.size() == 1) {
      run_lane(used[0]);
    } else {
      std::vector<std::thread> threads;
      for (int lane : used) threads.emplace_back(run_lane, lane);
      for (auto& t : threads) t.join();
    }
    for (const absl::Status& s : statuses) {
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // The next join's generation starts: names count from 1 again.
  void NextGeneration(uint64_t joined) {
    absl::MutexLock lock(&mu_);
    if (generation_ == joined) {
      ++generation_;
      sequences_.clear();
    }
  }

 private:
  const ClientOptions options_;
  const RetryPolicy retry_;
  std::vector<std::unique_ptr<proto::Collectives::Stub>> stubs_;

  absl::Mutex mu_;
  // Joins completed.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  // Calls of each name this generation.
  absl::flat_hash_map<std::string, uint64_t> sequences_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<Collectives>> Collectives::Connect(
    const ClientOptions& options) {
  if (options.servers.empty()) {
    return absl::InvalidArgumentError("no servers to connect to");
  }
  absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> channels =
      ConnectChannels(options);
  if (!channels.ok()) return channels.status();
  return std::unique_ptr<Collectives>(
      new Collectives(std::make_unique<Impl>(options, *channels)));
}

Collectives::Collectives(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Collectives::~Collectives() = default;

int Collectives::rank() const { return impl_->rank(); }

namespace {

// A collective already over (refused before it started).
class FinishedCollective final : public PendingCollective {
 public:
  explicit FinishedCollective(absl::Status status)
      : status_(std::move(status)) {}
  bool Done() override { return true; }
  absl::Status Wait() override { return status_; }

 private:
  const absl::Status status_;
};

class ThreadCollective final : public PendingCollective {
 public:
  explicit ThreadCollective(std::function<absl::Status()> run)
      : thread_([this, run = std::move(run)] {
          absl::Status status = run();
          absl::MutexLock lock(&mu_);
          status_ = std::move(status);
          done_ = true;
        }) {}
  ~ThreadCollective() override { thread_.join(); }
  bool Done() override {
    absl::MutexLock lock(&mu_);
    return done_;
  }
  absl::Status Wait() override {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
    return status_;
  }

 private:
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  // Last: started once the fields above exist.
  std::thread thread_;
};

// Runs a prepared collective now, or on a thread.
absl::Status RunNow(absl::StatusOr<std::function<absl::Status()>> run) {
  return run.ok() ? (*run)() : run.status();
}
std::unique_ptr<PendingCollective> RunLater(
    absl::StatusOr<std::function<absl::Status()>> run) {
  if (!run.ok()) return std::make_unique<FinishedCollective>(run.status());
  return std::make_unique<ThreadCollective>(*std::move(run));
}

}  // namespace

// Each collective in two halves: the checks and numbering, on the
// caller's thread (so calls of a name are numbered in the order they
// start), and the calls to the servers, returned to run now or later.
class Collectives::Prepared {
 public:
  static absl::StatusOr<std::function<absl::Status()>> Allreduce(
      Impl& impl, absl::string_view name, ReduceOp op,
      absl::Span<const int64_t> shape, absl::Span<const float> input,
      absl::Span<float> output) {
    absl::StatusOr<uint64_t> n = ElementsOf(shape);
    if (!n.ok()) return n.status();
    if (input.size() != *n || output.size() != *n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "allreduce '", name, "': ", input.size(), " input and ",
          output.size(), " output elements for ", *n, " in the shape"));
    }
    proto::CollectiveRequest request = impl.Start(
        proto::CollectiveRequest::ALLREDUCE, name, "allreduce.noname");
    request.set_op(ProtoOp(op));
    request.set_dtype(proto::DTYPE_FLOAT32);
    for (int64_t d : shape) request.add_shape(d);
    // In place is fine: each piece reads and writes its own elements only.
    return [&impl, request = std::move(request), n = *n, input, output] {
      return impl.RunPieces(request, n, input, output);
    };
  }

  static absl::StatusOr<std::function<absl::Status()>> Allgather(
      Impl& impl, absl::string_view name, absl::Span<const int64_t> shape,
      absl::Span<const float> input, GatheredTensor* gathered) {
    absl::StatusOr<uint64_t> n = ElementsOf(shape);
    if (!n.ok()) return n.status();
    if (shape.empty() || input.size() != *n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "allgather '", name, "': ", input.size(), " elements for a shape of ",
          shape.size(), " dimensions and ", *n,
          " elements (at least one dimension)"));
    }
    proto::CollectiveRequest request = impl.Start(
        proto::CollectiveRequest::ALLGATHER, name, "allgather.noname");
    request.set_dtype(proto::DTYPE_FLOAT32);
    for (int64_t d : shape) request.add_shape(d);
    request.set_num_elements(*n);
    request.set_data(Bytes(input));
    return [&impl, request = std::move(request), gathered]() mutable {
      absl::StatusOr<proto::CollectiveResponse> answer =
          impl.Call(ServerOfName(request.name(), impl.num_servers()), request);
      if (!answer.ok()) return answer.status();
      gathered->first_dims.assign(answer->first_dims().begin(),
                                  answer->first_dims().end());
      gathered->values.resize(answer->data().size() / sizeof(float));
      std::memcpy(gathered->values.data(), answer->data().data(),
                  gathered->values.size() * sizeof(float));
      return absl::OkStatus();
    };
  }

  static absl::StatusOr<std::function<absl::Status()>> Broadcast(
      Impl& impl, absl::string_view name, int root_rank,
      absl::Span<const int64_t> shape, absl::Span<float> values) {
    absl::StatusOr<uint64_t> n = ElementsOf(shape);
    if (!n.ok()) return n.status();
    if (values.size() != *n) {
      return absl::InvalidArgumentError(
          absl::StrCat("broadcast '", name, "': ", values.size(),
                       " elements for ", *n, " in the shape"));
    }
    proto::CollectiveRequest request = impl.Start(
        proto::CollectiveRequest::BROADCAST, name, "broadcast.noname");
    request.set_dtype(proto::DTYPE_FLOAT32);
    request.set_root_rank(root_rank);
    for (int64_t d : shape) request.add_shape(d);
    const absl::Span<const float> input = root_rank == impl.rank()
                                              ? absl::Span<const float>(values)
                                              : absl::Span<const float>();
    return [&impl, request = std::move(request), n = *n, input, values] {
      return impl.RunPieces(request, n, input, values);
    };
  }
};

absl::Status Collectives::Allreduce(absl::string_view name, ReduceOp op,
                                    absl::Span<const int64_t> shape,
                                    absl::Span<const float> input,
                                    absl::Span<float> output) {
  return RunNow(Prepared::Allreduce(*impl_, name, op, shape, input, output));
}

std::unique_ptr<PendingCollective> Collectives::StartAllreduce(
    absl::string_view name, ReduceOp op, absl::Span<const int64_t> shape,
    absl::Span<const float> input, absl::Span<float> output) {
  return RunLater(Prepared::Allreduce(*impl_, name, op, shape, input, output));
}

absl::StatusOr<GatheredTensor> Collectives::Allgather(
    absl::string_view name, absl::Span<const int64_t> shape,
    absl::Span<const float> input) {
  GatheredTensor gathered;
  absl::Status s =
      RunNow(Prepared::Allgather(*impl_, name, shape, input, &gathered));
  if (!s.ok()) return s;
  return gathered;
}

std::unique_ptr<PendingCollective> Collectives::StartAllgather(
    absl::string_view name, absl::Span<const int64_t> shape,
    absl::Span<const float> input, GatheredTensor* gathered) {
  return RunLater(Prepared::Allgather(*impl_, name, shape, input, gathered));
}

absl::Status Collectives::Broadcast(absl::string_view name, int root_rank,
                                    absl::Span<const int64_t> shape,
                                    absl::Span<float> values) {
  return RunNow(Prepared::Broadcast(*impl_, name, root_rank, shape, values));
}

std::unique_ptr<PendingCollective> Collectives::StartBroadcast(
    absl::string_view name, int root_rank, absl::Span<const int64_t> shape,
    absl::Span<float> values) {
  return RunLater(Prepared::Broadcast(*impl_, name, root_rank, shape, values));
}

absl::StatusOr<std::string> Collectives::BroadcastBytes(
    absl::string_view name, int root_rank, absl::string_view bytes) {
  proto::CollectiveRequest request =
      impl_->Start(proto::CollectiveRequest::BROADCAST_BYTES, name,
                   "broadcast_bytes.noname");
  request.set_root_rank(root_rank);
  if (root_rank == rank()) request.set_data(std::string(bytes));
  absl::StatusOr<proto::CollectiveResponse> answer =
      impl_->Call(ServerOfName(request.name(), impl_->num_servers()), request);
  if (!answer.ok()) return answer.status();
  return std::move(*answer->mutable_data());
}

absl::Status Collectives::Barrier() {
  proto::CollectiveRequest request =
      impl_->Start(proto::CollectiveRequest::BARRIER, "", "barrier");
  return impl_->Call(0, request).status();
}

absl::StatusOr<int> Collectives::Join() {
  proto::CollectiveRequest request =
      impl_->Start(proto::CollectiveRequest::JOIN, "", "join");
  const uint64_t generation = request.generation();
  // Every server must know this rank joined: each waits for it.
  const int n = impl_->num_servers();
  std::vector<absl::StatusOr<proto::CollectiveResponse>> answers(
      n, absl::UnknownError("not sent"));
  std::vector<std::thread> threads;
  for (int s = 0; s < n; ++s) {
    threads.emplace_back([&, s] {
      proto::CollectiveRequest one = request;
      answers[s] = impl_->Call(s, one);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& answer : answers) {
    if (!answer.ok()) return answer.status();
  }
  impl_->NextGeneration(generation);
  return answers[0]->last_rank();
}

}  // namespace ps
