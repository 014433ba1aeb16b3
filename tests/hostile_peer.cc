#include "tests/hostile_peer.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/byte_stream_call.h"
#include "common/chunk_wire.h"
#include "common/declaration_proto.h"
#include "common/partition.h"
#include "gmock/gmock.h"
#include "tests/cluster_runner.h"

namespace ps::testing {

using ::testing::HasSubstr;

std::string Method(absl::string_view name) {
  return absl::StrCat("/", proto::ParameterServer::service_full_name(), "/",
                      name);
}

std::string CodeName(const grpc::Status& status) {
  return absl::StatusCodeToString(
      static_cast<absl::StatusCode>(status.error_code()));
}

HostilePeerTest::HostilePeerTest(ModelSpec model) : model_(std::move(model)) {}

size_t ResidentBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string field;
  while (status >> field) {
    if (field == "VmRSS:") {
      size_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

int ThreadCount(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string field;
  while (status >> field) {
    if (field == "Threads:") {
      int threads = 0;
      status >> threads;
      return threads;
    }
  }
  return 0;
}

std::string MiB(size_t bytes) {
  constexpr size_t kTenthMiB = (size_t{1} << 20) / 10;
  return absl::StrCat(static_cast<double>(bytes / kTenthMiB) / 10, " MiB");
}

void HostilePeerTest::StartServer(absl::string_view mode,
                                  const std::vector<std::string>& extra_flags) {
  LaunchServer(mode, extra_flags);
  if (::testing::Test::HasFatalFailure()) return;
  DeclareAndRegister();
}

void HostilePeerTest::LaunchServer(
    absl::string_view mode, const std::vector<std::string>& extra_flags) {
  const std::string port_file =
      TempPath(absl::StrCat("hostile-", mode, ".port"));
  std::filesystem::remove(port_file);
  SubprocessOptions options;
  options.argv = {RunfilePath("server/server"),
                  "--server_index=0",
                  "--num_servers=1",
                  absl::StrCat("--num_workers=", kPeerWorkers),
                  absl::StrCat("--mode=", mode),
                  "--optimizer=sgd",
                  "--momentum=0",
                  "--learning_rate=0.1",
                  "--worker_timeout=600s",
                  "--port=0",
                  absl::StrCat("--port_file=", port_file)};
  options.argv.insert(options.argv.end(), extra_flags.begin(),
                      extra_flags.end());
  absl::StatusOr<std::unique_ptr<Subprocess>> started =
      Subprocess::Start(std::move(options));
  ASSERT_TRUE(started.ok()) << started.status();
  server_ = *std::move(started);
  absl::StatusOr<int> port =
      WaitForPortFile(port_file, kPeerTimeout, server_.get());
  ASSERT_TRUE(port.ok()) << port.status();
  address_ = absl::StrCat("127.0.0.1:", *port);

  channel_ = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
  stub_ = proto::ParameterServer::NewStub(channel_);
  generic_ = std::make_unique<grpc::GenericStub>(channel_);
  fingerprint_ = Partition::Create(model_, 1)->fingerprint();
}

void HostilePeerTest::DeclareAndRegister() {
  ClientOptions client_options;
  client_options.servers = {address_};
  client_options.rank = 0;
  client_options.retry_timeout = absl::Seconds(10);
  absl::StatusOr<std::unique_ptr<ParameterClient>> client =
      ParameterClient::Connect(client_options);
  ASSERT_TRUE(client.ok()) << client.status();
  rank0_ = *std::move(client);
  ASSERT_TRUE(rank0_->Declare(model_, kPeerPlannedSteps).ok());
  const grpc::Status registered = RawRegister(1, kPeerIncarnation, model_);
  ASSERT_TRUE(registered.ok()) << registered.error_message();
  ASSERT_TRUE(Snapshot(&before_).ok());
}

grpc::Status HostilePeerTest::RawRegister(int rank, uint64_t incarnation,
                                          const ModelSpec& model,
                                          uint32_t batch) {
  proto::RegisterRequest request;
  *request.mutable_header() = Header(rank, incarnation);
  request.mutable_header()->set_partition_fingerprint(
      Partition::Create(model, 1)->fingerprint());
  ModelSpecToProto(model, request.mutable_declaration());
  request.set_incarnation(incarnation);
  request.set_planned_steps(kPeerPlannedSteps);
  request.set_max_examples_per_push(batch);
  proto::RegisterResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kPeerTimeout));
  return stub_->Register(&context, request, &response);
}

std::string HostilePeerTest::Report() {
  proto::StatsRequest request;
  proto::StatsResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kPeerTimeout));
  if (!stub_->Stats(&context, request, &response).ok()) return "";
  return response.report();
}

proto::RequestHeader HostilePeerTest::Header(int rank,
                                             uint64_t incarnation) const {
  proto::RequestHeader header;
  header.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  header.set_partition_fingerprint(fingerprint_);
  header.set_worker_rank(rank);
  header.set_server_index(0);
  header.set_incarnation(incarnation);
  return header;
}

absl::Status HostilePeerTest::Snapshot(Weights* out) {
  absl::StatusOr<uint64_t> version = rank0_->Pull(0, out->values);
  if (!version.ok()) return version.status();
  out->version = *version;
  return absl::OkStatus();
}

bool HostilePeerTest::WeightsUnchanged() {
  Weights now;
  if (!Snapshot(&now).ok() || now.version != before_.version) return false;
  for (size_t t = 0; t < now.values.size(); ++t) {
    if (now.values[t].size() != before_.values[t].size() ||
        std::memcmp(now.values[t].data(), before_.values[t].data(),
                    now.values[t].size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

bool HostilePeerTest::Alive() {
  proto::StatsRequest request;
  proto::StatsResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kPeerTimeout));
  return !server_->TryWait().has_value() &&
         stub_->Stats(&context, request, &response).ok();
}

void HostilePeerTest::ExpectRefusedRow(
    absl::string_view kind, absl::string_view request,
    const grpc::Status& status, const std::vector<grpc::StatusCode>& codes,
    absl::string_view names) {
  const bool unchanged = WeightsUnchanged();
  const bool alive = Alive();
  std::printf("| %s | %s | %s: %s | %s | %s |\n", std::string(kind).c_str(),
              std::string(request).c_str(), CodeName(status).c_str(),
              status.error_message().c_str(), unchanged ? "yes" : "NO",
              alive ? "yes" : "NO");
  std::fflush(stdout);
  EXPECT_THAT(codes, ::testing::Contains(status.error_code()))
      << request << ": " << CodeName(status) << " " << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr(std::string(names))) << request;
  EXPECT_TRUE(unchanged) << request << " changed the weights";
  EXPECT_TRUE(alive) << request << " stopped the server";
}

grpc::Status HostilePeerTest::Push(const PushFields& fields,
                                   const TensorValues& gradients) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kPeerTimeout));
  ByteStreamCall call(generic_.get(), Method("Push"), &context);
  for (size_t t = 0; t < gradients.size(); ++t) {
    const grpc::ByteBuffer message = PushMessage(fields, t, gradients[t]);
    const bool last = t + 1 == gradients.size();
    if (!(last ? call.WriteLast(message) : call.Write(message))) break;
  }
  grpc::ByteBuffer response;
  call.Read(&response);
  return call.Finish();
}

grpc::ByteBuffer HostilePeerTest::PushMessage(const PushFields& fields,
                                              size_t tensor,
                                              absl::Span<const float> values,
                                              uint64_t offset) const {
  proto::PushRequest message;
  *message.mutable_header() = Header(fields.rank, fields.incarnation);
  message.set_step(fields.step);
  message.set_num_examples(fields.num_examples);
  message.set_epoch(fields.epoch);
  message.set_examples_done(fields.examples_done);
  message.set_initial_values(fields.initial_values);
  proto::TensorChunk chunk;
  chunk.set_tensor_id(tensor);
  chunk.set_dtype(proto::DTYPE_FLOAT32);
  for (int64_t d : model_.tensors[tensor].shape) chunk.add_shape(d);
  chunk.set_offset(offset);
  chunk.set_num_elements(values.size());
  return SerializeChunkMessage(
      message, chunk, kPushRequestChunk,
      OwnedSlice(std::string(reinterpret_cast<const char*>(values.data()),
                             values.size() * sizeof(float))));
}

TensorValues HostilePeerTest::Gradients(float value) const {
  TensorValues gradients;
  for (const TensorSpec& tensor : model_.tensors) {
    gradients.emplace_back(tensor.num_elements(), value);
  }
  return gradients;
}

}  // namespace ps::testing
