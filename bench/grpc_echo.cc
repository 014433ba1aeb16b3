#include "bench/grpc_echo.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bench/bench_echo.grpc.pb.h"
#include "common/cpu_affinity.h"
#include "common/grpc_status.h"
#include "grpcpp/grpcpp.h"

namespace ps::bench {
namespace {

// The same limit the parameter server and client use.
constexpr int kMaxMessageBytes = 64 << 20;

// Keeps the last upload and streams it back on request.
//
// Thread-safe: the stored bytes are an immutable shared string swapped under
// `mu_`; no lock is held while a stream is read or written. The buffer of
// the upload before last is reused once no download holds it, so that the
// baseline does not pay for fresh pages every round (the best gRPC can do).
class EchoService final : public Echo::Service {
 public:
  grpc::Status Upload(grpc::ServerContext* /*context*/,
                      grpc::ServerReader<EchoChunk>* reader,
                      UploadReply* reply) override {
    std::shared_ptr<std::string> bytes;
    {
      absl::MutexLock lock(&mu_);
      // Copies are only made under mu_, so a count of one stays one.
      if (spare_ != nullptr && spare_.use_count() == 1) bytes.swap(spare_);
    }
    if (bytes == nullptr) bytes = std::make_shared<std::string>();
    bytes->clear();
    EchoChunk chunk;
    while (reader->Read(&chunk)) bytes->append(chunk.data());
    reply->set_bytes(bytes->size());
    absl::MutexLock lock(&mu_);
    spare_ = std::move(stored_);
    stored_ = std::move(bytes);
    return grpc::Status::OK;
  }

  grpc::Status Download(grpc::ServerContext* /*context*/,
                        const DownloadRequest* request,
                        grpc::ServerWriter<EchoChunk>* writer) override {
    if (request->chunk_bytes() == 0) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "chunk_bytes must be positive");
    }
    std::shared_ptr<const std::string> bytes;
    {
      absl::MutexLock lock(&mu_);
      bytes = stored_;
    }
    EchoChunk chunk;
    for (size_t pos = 0; pos < bytes->size(); pos += request->chunk_bytes()) {
      const size_t n =
          std::min<size_t>(request->chunk_bytes(), bytes->size() - pos);
      chunk.mutable_data()->assign(bytes->data() + pos, n);
      if (!writer->Write(chunk)) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
      }
    }
    return grpc::Status::OK;
  }

 private:
  absl::Mutex mu_;
  std::shared_ptr<std::string> stored_ ABSL_GUARDED_BY(mu_) =
      std::make_shared<std::string>();
  std::shared_ptr<std::string> spare_ ABSL_GUARDED_BY(mu_);
};

absl::Status Upload(Echo::Stub* stub, const std::vector<char>& src,
                    uint64_t chunk_bytes) {
  grpc::ClientContext context;
  UploadReply reply;
  std::unique_ptr<grpc::ClientWriter<EchoChunk>> writer =
      stub->Upload(&context, &reply);
  EchoChunk chunk;
  for (size_t pos = 0; pos < src.size(); pos += chunk_bytes) {
    const size_t n = std::min<size_t>(chunk_bytes, src.size() - pos);
    chunk.mutable_data()->assign(src.data() + pos, n);
    if (!writer->Write(chunk)) break;  // Finish says why.
  }
  writer->WritesDone();
  if (absl::Status s = FromGrpcStatus(writer->Finish()); !s.ok()) return s;
  if (reply.bytes() != src.size()) {
    return absl::DataLossError(absl::StrCat("echo server kept ", reply.bytes(),
                                            " of ", src.size(), " bytes"));
  }
  return absl::OkStatus();
}

absl::Status Download(Echo::Stub* stub, uint64_t chunk_bytes,
                      std::vector<char>& dst) {
  grpc::ClientContext context;
  DownloadRequest request;
  request.set_chunk_bytes(chunk_bytes);
  std::unique_ptr<grpc::ClientReader<EchoChunk>> reader =
      stub->Download(&context, request);
  EchoChunk chunk;
  size_t pos = 0;
  bool overflow = false;
  while (reader->Read(&chunk)) {
    if (chunk.data().size() > dst.size() - pos) {
      overflow = true;
      continue;  // Drain before Finish.
    }
    std::memcpy(dst.data() + pos, chunk.data().data(), chunk.data().size());
    pos += chunk.data().size();
  }
  if (absl::Status s = FromGrpcStatus(reader->Finish()); !s.ok()) return s;
  if (overflow || pos != dst.size()) {
    return absl::DataLossError(
        absl::StrCat("echo download returned ", overflow ? "more" : "fewer",
                     " bytes than the ", dst.size(), " uploaded"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Measurement> MeasureGrpcEcho(const MeasureOptions& options,
                                            uint64_t size, uint64_t chunk_bytes,
                                            absl::Span<const int> server_cpus) {
  if (size == 0) return absl::InvalidArgumentError("size must be positive");
  if (chunk_bytes == 0 || chunk_bytes > kMaxMessageBytes / 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("echo chunk must be in [1, ", kMaxMessageBytes / 2,
                     "] bytes, got ", chunk_bytes));
  }
  EchoService service;
  // Started on a thread of the server's CPUs: the threads gRPC starts to
  // serve it inherit them.
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  absl::Status placed;
  std::thread([&] {
    placed = server_cpus.empty() ? absl::OkStatus()
                                 : RestrictThreadToCpus(server_cpus);
    if (!placed.ok()) return;
    // A plain gRPC server with the parameter server's message limits.
    grpc::ServerBuilder builder;
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service);
    builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
    builder.SetMaxSendMessageSize(kMaxMessageBytes);
    server = builder.BuildAndStart();
  }).join();
  if (!placed.ok()) return placed;
  if (server == nullptr || port == 0) {
    return absl::UnavailableError("cannot start the echo server on 127.0.0.1");
  }

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                grpc::InsecureChannelCredentials(), args);
  std::unique_ptr<Echo::Stub> stub = Echo::NewStub(channel);

  const std::vector<char> src(size, 3);
  std::vector<char> dst(size);
  absl::StatusOr<Measurement> m = MeasureRounds(options, 2 * size, [&] {
    if (absl::Status s = Upload(stub.get(), src, chunk_bytes); !s.ok()) {
      return s;
    }
    return Download(stub.get(), chunk_bytes, dst);
  });
  server->Shutdown();
  server->Wait();
  return m;
}

}  // namespace ps::bench
