#ifndef PS_TESTS_HOSTILE_PEER_H_
#define PS_TESTS_HOSTILE_PEER_H_

// A raw peer against the real server binary on 127.0.0.1: a client written
// against our proto, which can send what no worker of ours sends. Shared by
// the hostile-request and flood tests.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/parameter_client.h"
#include "common/model_spec.h"
#include "common/subprocess.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"

namespace ps::testing {

inline constexpr absl::Duration kPeerTimeout = absl::Seconds(60);
inline constexpr int kPeerWorkers = 3;  // Rank 2 never registers.
inline constexpr uint64_t kPeerIncarnation = 77;
inline constexpr uint64_t kPeerPlannedSteps = 100;
// Rank 1's batch: the most examples a push of it may carry, as it says when
// it registers.
inline constexpr uint32_t kPeerBatch = 32;

// "/ps.proto.ParameterServer/<name>".
std::string Method(absl::string_view name);
// "RESOURCE_EXHAUSTED", ...
std::string CodeName(const grpc::Status& status);

// What a push says besides its values (PushRequest's fields).
struct PushFields {
  int rank = 1;
  uint64_t incarnation = kPeerIncarnation;
  uint64_t step = 0;
  uint32_t num_examples = kPeerBatch;
  uint64_t epoch = 0;
  uint64_t examples_done = kPeerBatch;
  // Rank 0's initial values rather than a gradient.
  bool initial_values = false;
};

// VmRSS and the thread count of process `pid`, from /proc; 0 if they
// cannot be read.
size_t ResidentBytes(pid_t pid);
int ThreadCount(pid_t pid);
// "12.3 MiB".
std::string MiB(size_t bytes);

// One server shard (the real binary), rank 0 declared through the client
// library, rank 1 registered by hand with kPeerIncarnation (the raw peer
// speaks as it), rank 2 never registered.
class HostilePeerTest : public ::testing::Test {
 protected:
  explicit HostilePeerTest(ModelSpec model = MlpModelSpec({8, 4, 2}));

  // Starts the server in `mode` with `extra_flags`, declares, registers
  // rank 1 and keeps the weights in before_. A test failure if any step
  // fails.
  void StartServer(absl::string_view mode,
                   const std::vector<std::string>& extra_flags = {});
  // StartServer's parts: the server process and the channel to it, with no
  // model declared; then the declaration, rank 1's registration and
  // before_.
  void LaunchServer(absl::string_view mode,
                    const std::vector<std::string>& extra_flags = {});
  void DeclareAndRegister();
  // Rank `rank`'s Register as the raw peer sends it, declaring `model`.
  grpc::Status RawRegister(int rank, uint64_t incarnation,
                           const ModelSpec& model, uint32_t batch = kPeerBatch);
  // The server's Stats report.
  std::string Report();

  proto::RequestHeader Header(int rank, uint64_t incarnation) const;

  // The weights and version, through rank 0's client.
  struct Weights {
    TensorValues values;
    uint64_t version = 0;
  };
  absl::Status Snapshot(Weights* out);
  // Whether the weights still hold the bits of before_.
  bool WeightsUnchanged();
  // The server answers Stats and is still running.
  bool Alive();

  // Checks and prints one row of the table "class | request | status |
  // weights unchanged | server alive": `status` has one of `codes` and its
  // message contains `names`.
  void ExpectRefusedRow(absl::string_view kind, absl::string_view request,
                        const grpc::Status& status,
                        const std::vector<grpc::StatusCode>& codes,
                        absl::string_view names);

  // One push of `gradients` (one vector per tensor), each tensor one chunk.
  grpc::Status Push(const PushFields& fields, const TensorValues& gradients);
  // The push message carrying `values` as elements [offset, offset +
  // size) of `tensor`.
  grpc::ByteBuffer PushMessage(const PushFields& fields, size_t tensor,
                               absl::Span<const float> values,
                               uint64_t offset = 0) const;
  // `value` in every element of every tensor.
  TensorValues Gradients(float value) const;

  const ModelSpec model_;
  std::unique_ptr<Subprocess> server_;
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<proto::ParameterServer::Stub> stub_;
  std::unique_ptr<grpc::GenericStub> generic_;
  uint64_t fingerprint_ = 0;
  std::unique_ptr<ParameterClient> rank0_;
  Weights before_;
};

}  // namespace ps::testing

#endif  // PS_TESTS_HOSTILE_PEER_H_
