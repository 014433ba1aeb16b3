// ps::ParameterClient against fake shards (client/fake_cluster_testing.h).

#include "client/parameter_client.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/fake_cluster_testing.h"
#include "common/declaration_proto.h"
#include "common/partition.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"

namespace ps {
namespace {

using ::ps::client_testing::FakeCluster;
using ::ps::client_testing::FakeShard;
using ::ps::client_testing::FakeWeight;
using ::ps::client_testing::ReceivedChunk;
using ::ps::client_testing::ReceivedPush;
using ::testing::HasSubstr;

// Names with dots and slashes, a scalar, a rank-3 tensor, a tensor split
// across shards; "emb/table" and "scale" come from rank 0.
ModelSpec TestModel() {
  ModelSpec model;
  model.seed = 5;
  model.tensors.push_back(
      {"emb/table", DType::kFloat32, {400}, InitializerSpec::FromRank0()});
  model.tensors.push_back(
      {"scale", DType::kFloat32, {}, InitializerSpec::FromRank0()});
  model.tensors.push_back(
      {"dense.w", DType::kFloat32, {300}, InitializerSpec::Zeros()});
  model.tensors.push_back({"dense.b",
                           DType::kFloat32,
                           {3, 5, 7},
                           InitializerSpec::Constant(0.25),
                           /*weight_decay=*/false});
  return model;
}

ModelSpec ServerInitializedModel() {
  ModelSpec model = TestModel();
  model.tensors[0].initializer = InitializerSpec::Uniform(-1, 1);
  model.tensors[1].initializer = InitializerSpec::Zeros();
  return model;
}

TensorValues Filled(const ModelSpec& model, float offset) {
  TensorValues values(model.tensors.size());
  for (size_t t = 0; t < values.size(); ++t) {
    values[t].resize(model.tensors[t].num_elements());
    for (size_t e = 0; e < values[t].size(); ++e) {
      values[t][e] = offset + static_cast<float>(t * 10000 + e);
    }
  }
  return values;
}

void ExpectFakeWeights(const ModelSpec& model, const TensorValues& weights) {
  ASSERT_EQ(weights.size(), model.tensors.size());
  for (size_t t = 0; t < weights.size(); ++t) {
    ASSERT_EQ(weights[t].size(), model.tensors[t].num_elements()) << t;
    for (size_t e = 0; e < weights[t].size(); ++e) {
      ASSERT_EQ(weights[t][e], FakeWeight(t, e)) << t << "[" << e << "]";
    }
  }
}

std::unique_ptr<ParameterClient> ConnectOrDie(const ClientOptions& options) {
  absl::StatusOr<std::unique_ptr<ParameterClient>> client =
      ParameterClient::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

TEST(ParameterClientTest, DeclareRefusesAnInvalidModelBeforeSendingAnything) {
  FakeCluster cluster(2);
  std::unique_ptr<ParameterClient> client = ConnectOrDie(cluster.Options(0));
  ASSERT_NE(client, nullptr);
  ModelSpec bad = TestModel();
  bad.tensors[2].shape = {3, 0};
  absl::StatusOr<Registration> registration = client->Declare(bad, 10);
  EXPECT_EQ(registration.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(registration.status().message()),
              HasSubstr("dense.w"));
  ModelSpec repeated = TestModel();
  repeated.tensors[3].name = "scale";
  EXPECT_EQ(client->Declare(repeated, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (int s = 0; s < cluster.size(); ++s) {
    EXPECT_TRUE(cluster.shard(s).registers().empty()) << "shard " << s;
  }
  // A valid declaration still goes through.
  EXPECT_TRUE(client->Declare(TestModel(), 10).ok());
}

TEST(ParameterClientTest,
     DeclareSendsTheDeclarationAndFingerprintToEveryShard) {
  FakeCluster cluster(3);
  std::unique_ptr<ParameterClient> client = ConnectOrDie(cluster.Options(1));
  ASSERT_NE(client, nullptr);
  const ModelSpec model = TestModel();
  absl::StatusOr<Registration> registration = client->Declare(model, 123);
  ASSERT_TRUE(registration.ok()) << registration.status();
  EXPECT_EQ(registration->mode, ConsistencyMode::kSync);
  EXPECT_EQ(registration->num_workers, 2);

  proto::ModelDeclaration expected;
  ModelSpecToProto(model, &expected);
  const uint64_t fingerprint = Partition::Create(model, 3)->fingerprint();
  for (int s = 0; s < cluster.size(); ++s) {
    const std::vector<proto::RegisterRequest> registers =
        cluster.shard(s).registers();
    ASSERT_EQ(registers.size(), 1u) << "shard " << s;
    const proto::RegisterRequest& request = registers[0];
    EXPECT_EQ(request.declaration().SerializeAsString(),
              expected.SerializeAsString());
    EXPECT_EQ(request.header().protocol_version(),
              proto::PROTOCOL_VERSION_CURRENT);
    EXPECT_EQ(request.header().partition_fingerprint(), fingerprint);
    EXPECT_EQ(request.header().worker_rank(), 1);
    EXPECT_EQ(request.header().server_index(), s);
    EXPECT_EQ(request.header().job_id(), "test-job");
    EXPECT_NE(request.incarnation(), 0u);
    EXPECT_EQ(request.header().incarnation(), request.incarnation());
    EXPECT_EQ(request.planned_steps(), 123u);
  }
  EXPECT_EQ(client->model().tensors.size(), model.tensors.size());
  EXPECT_EQ(*client->TensorId("dense.b"), 3);
  EXPECT_EQ(client->TensorId("nope").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ParameterClientTest, DeclareWaitsForShardsThatAreNotReady) {
  FakeCluster cluster(2);
  cluster.shard(1).RefuseRegisters(3);
  std::unique_ptr<ParameterClient> client = ConnectOrDie(cluster.Options(1));
  ASSERT_NE(client, nullptr);
  absl::StatusOr<Registration> registration = client->Declare(TestModel(), 1);
  ASSERT_TRUE(registration.ok()) << registration.status();
  EXPECT_EQ(cluster.shard(1).registers().size(), 4u);
}

TEST(ParameterClientTest, DeclareGivesUpOnAShardNotReadyPastRetryTimeout) {
  FakeCluster cluster(2);
  cluster.shard(0).RefuseRegisters(1 << 20);
  ClientOptions options = cluster.Options(1);
  options.retry_timeout = absl::Milliseconds(100);
  std::unique_ptr<ParameterClient> client = ConnectOrDie(options);
  ASSERT_NE(client, nullptr);
  absl::Status status = client->Declare(TestModel(), 1).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()), HasSubstr("server 0"));
}

TEST(ParameterClientTest, DeclareResumesFromTheSmallestPointOverTheShards) {
  FakeCluster cluster(2);
  proto::RegisterResponse response;
  response.set_mode(proto::MODE_SSP);
  response.set_num_workers(2);
  response.set_next_step(9);
  response.set_epoch(1);
  response.set_examples_done(640);
  cluster.shard(0).SetResponse(response);
  response.set_next_step(8);
  response.set_examples_done(576);
  cluster.shard(1).SetResponse(response);
  std::unique_ptr<ParameterClient> client = ConnectOrDie(cluster.Options(0));
  ASSERT_NE(client, nullptr);
  absl::StatusOr<Registration> registration = client->Declare(TestModel(), 1);
  ASSERT_TRUE(registration.ok()) << registration.status();
  EXPECT_EQ(registration->mode, ConsistencyMode::kSsp);
  EXPECT_EQ(registration->next_step, 8u);
  EXPECT_EQ(registration->cursor.epoch, 1u);
  EXPECT_EQ(registration->cursor.examples_done, 576u);
}

TEST(ParameterClientTest, DeclareRefusesShardsThatDisagreeOrAnUnknownMode) {
  FakeCluster cluster(2);
  proto::RegisterResponse response;
  response.set_mode(proto::MODE_ASYNC);
  response.set_num_workers(2);
  cluster.shard(1).SetResponse(response);
  std::unique_ptr<ParameterClient> client = ConnectOrDie(cluster.Options(1));
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->Declare(TestModel(), 1).status().code(),
            absl::StatusCode::kFailedPrecondition);

  FakeCluster other(1);
  response.set_mode(static_cast<proto::Mode>(9));
  other.shard(0).SetResponse(response);
  client = ConnectOrDie(other.Options(1));
  ASSERT_NE(client, nullptr);
  absl::Status status = client->Declare(TestModel(), 1).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("unknown consistency mode 9"));
}

TEST(ParameterClientTest, CallsBeforeDeclareAndASecondDeclareFail) {
  FakeCluster cluster(1);
  std::unique_ptr<ParameterClient> client = ConnectOrDie(cluster.Options(0));
  ASSERT_NE(client, nullptr);
  TensorValues values;
  constexpr auto kPrecondition = absl::StatusCode::kFailedPrecondition;
  EXPECT_EQ(client->Pull(0, values).status().code(), kPrecondition);
  EXPECT_EQ(client->Broadcast(values).code(), kPrecondition);
  EXPECT_EQ(client->Barrier().code(), kPrecondition);
  EXPECT_EQ(client->Finish().code(), kPrecondition);
  EXPECT_EQ(client->StartStep({}, false)->Finish().code(), kPrecondition);
  EXPECT_TRUE(client->model().tensors.empty());
  ASSERT_TRUE(client->Declare(ServerInitializedModel(), 1).ok());
  EXPECT_EQ(client->Declare(ServerInitializedModel(), 1).status().code(),
            kPrecondition);
}

TEST(ParameterClientTest, BroadcastUploadsRank0ValuesOnlyToTheShardsHolding) {
  FakeCluster cluster(3);
  const ModelSpec model = TestModel();
  const Partition partition = *Partition::Create(model, 3);
  // What this test is about: a rank-0 tensor split across shards, and a
  // shard that holds none.
  ASSERT_GT(partition.SlicesOfTensor(0).size(), 1u);
  std::vector<uint64_t> expected_elements(3, 0);
  for (uint32_t t : {0u, 1u}) {
    for (const Slice& slice : partition.SlicesOfTensor(t)) {
      expected_elements[slice.server] += slice.num_elements;
    }
  }
  ASSERT_EQ(expected_elements[2], 0u);

  std::unique_ptr<ParameterClient> client = ConnectOrDie(cluster.Options(0));
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Declare(model, 1).ok());
  // Rank 0 may not step before its values are up.
  TensorValues weights;
  EXPECT_EQ(client->Pull(0, weights).status().code(),
            absl::StatusCode::kFailedPrecondition);

  TensorValues values = Filled(model, 0.5f);
  ASSERT_TRUE(client->Broadcast(values).ok());
  for (int s = 0; s < 3; ++s) {
    std::vector<ReceivedPush> pushes = cluster.shard(s).pushes();
    if (expected_elements[s] == 0) {
      EXPECT_TRUE(pushes.empty()) << "shard " << s;
      continue;
    }
    ASSERT_EQ(pushes.size(), 1u) << "shard " << s;
    const ReceivedPush& push = pushes[0];
    EXPECT_TRUE(push.completed);
    EXPECT_FALSE(push.pull_after);
    EXPECT_EQ(push.first.step(), 0u);
    EXPECT_EQ(push.first.base_version(), 0u);
    EXPECT_EQ(push.first.num_examples(), 0u);
    uint64_t elements = 0;
    TensorValues expected = Filled(model, 0.5f);
    for (const ReceivedChunk& chunk : push.chunks) {
      EXPECT_TRUE(chunk.tensor_id == 0 || chunk.tensor_id == 1);
      EXPECT_LE(chunk.values.size(), 50u);
      for (size_t i = 0; i < chunk.values.size(); ++i) {
        ASSERT_EQ(chunk.values[i], expected[chunk.tensor_id][chunk.offset + i]);
      }
      elements += chunk.values.size();
    }
    EXPECT_EQ(elements, expected_elements[s]) << "shard " << s;
  }
  // Every message of the stream says what it is.
  for (int s = 0; s < 3; ++s) {
    for (const ReceivedPush& push : cluster.shard(s).pushes()) {
      EXPECT_TRUE(push.all_initial_values);
    }
  }
  // Then the weights for step 0 come back from the shards, and the ranks
  // meet before anyone steps.
  ExpectFakeWeights(model, values);
  EXPECT_EQ(cluster.shard(0).barriers(), std::vector<uint64_t>{1});
  EXPECT_TRUE(client->Pull(0, weights).ok());
}

TEST(ParameterClientTest, BroadcastOnAnotherRankOnlyPulls) {
  FakeCluster cluster(2);
  std::unique_ptr<ParameterClient> client = ConnectOrDie(cluster.Options(1));
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Declare(TestModel(), 1).ok());
  TensorValues values;
  ASSERT_TRUE(client->Broadcast(values).ok());
  ExpectFakeWeights(TestModel(), values);
  for (int s = 0; s < 2; ++s) {
    EXPECT_TRUE(cluster.shard(s).pushes().empty());
    EXPECT_EQ(cluster.shard(s).pulls().size(), 1u);
  }
  // Broadcast's barrier counts as this rank's first.
  ASSERT_TRUE(client->Barrier().ok());
  EXPECT_EQ(cluster.shard(0).barriers(), (std::vector<uint64_t>{1, 2}));
}

TEST(ParameterClientTest, PullFillsEveryTensorFromTheShardsThatHoldIt) {
  FakeCluster cluster(3);
  const ModelSpec model = ServerInitializedModel();
  std::unique_ptr<ParameterClient> client = ConnectOrDie(cluster.Options(0));
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Declare(model, 1).ok());
  TensorValues weights;
  absl::StatusOr<uint64_t> version = client->Pull(4, weights);
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, FakeShard::kVersion);
  ExpectFakeWeights(model, weights);
  EXPECT_EQ(cluster.shard(2).pulls().at(0).clock(), 4u);
  EXPECT_FALSE(cluster.shard(2).pulls().at(0).after_others_finish());
  ASSERT_TRUE(client->PullFinal(5, weights).ok());
  EXPECT_TRUE(cluster.shard(0).pulls().at(1).after_others_finish());
}

TEST(ParameterClientTest, AStepStreamsItsGradientAndBringsBackTheWeights) {
  FakeCluster cluster(2);
  const ModelSpec model = ServerInitializedModel();
  std::unique_ptr<ParameterClient> client = ConnectOrDie(cluster.Options(0));
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Declare(model, 1).ok());
  const TensorValues gradients = Filled(model, -3.0f);
  StepInfo info;
  info.step = 6;
  info.base_version = 5;
  info.num_examples = 32;
  info.cursor = {2, 96};
  std::unique_ptr<StepPush> push = client->StartStep(info, true);
  // Last tensor first, as a backward pass makes them.
  for (int id = static_cast<int>(gradients.size()) - 1; id >= 0; --id) {
    ASSERT_TRUE(push->Send(id, gradients[id]).ok());
  }
  TensorValues weights;
  absl::StatusOr<uint64_t> version = push->FinishWithPull(weights);
  ASSERT_TRUE(version.ok()) << version.status();
  ExpectFakeWeights(model, weights);
  uint64_t elements = 0;
  for (int s = 0; s < 2; ++s) {
    std::vector<ReceivedPush> pushes = cluster.shard(s).pushes();
    ASSERT_EQ(pushes.size(), 1u);
    EXPECT_TRUE(pushes[0].pull_after);
    EXPECT_TRUE(pushes[0].completed);
    EXPECT_FALSE(pushes[0].first.initial_values());
    EXPECT_FALSE(pushes[0].all_initial_values);
    EXPECT_EQ(pushes[0].first.step(), 6u);
    EXPECT_EQ(pushes[0].first.base_version(), 5u);
    EXPECT_EQ(pushes[0].first.num_examples(), 32u);
    EXPECT_EQ(pushes[0].first.epoch(), 2u);
    EXPECT_EQ(pushes[0].first.examples_done(), 96u);
    EXPECT_EQ(pushes[0].first.max_pull_chunk_elements(), 50u);
    for (const ReceivedChunk& chunk : pushes[0].chunks) {
      for (size_t i = 0; i < chunk.values.size(); ++i) {
        ASSERT_EQ(chunk.values[i],
                  gradients[chunk.tensor_id][chunk.offset + i]);
      }
      elements += chunk.values.size();
    }
  }
  EXPECT_EQ(elements, model.total_elements());
  // The one-call Push, without weights back.
  ASSERT_TRUE(client->Push(info, gradients).ok());
  EXPECT_FALSE(cluster.shard(0).pushes().at(1).pull_after);
}

// A shard may announce a same-host endpoint that this client cannot reach
// (the shard runs on another host, or is gone): gRPC carries the step.
TEST(ParameterClientTest, AStepGoesThroughGrpcWhereTheSameHostEndpointFails) {
  FakeCluster cluster(2);
  for (int s = 0; s < cluster.size(); ++s) {
    proto::RegisterResponse response;
    response.set_mode(proto::MODE_SYNC);
    response.set_num_workers(2);
    response.mutable_local_endpoint()->set_socket_name(
        absl::StrCat("paramserver-nobody-listens-", s));
    response.mutable_local_endpoint()->set_secret("secret");
    cluster.shard(s).SetResponse(response);
  }
  const ModelSpec model = ServerInitializedModel();
  std::unique_ptr<ParameterClient> client = ConnectOrDie(cluster.Options(0));
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Declare(model, 1).ok());
  const TensorValues gradients = Filled(model, 1.0f);
  for (uint64_t step = 0; step < 2; ++step) {
    StepInfo info;
    info.step = step;
    info.num_examples = 32;
    info.cursor = {0, 32 * (step + 1)};
    std::unique_ptr<StepPush> push = client->StartStep(info, true);
    for (uint32_t id = 0; id < gradients.size(); ++id) {
      ASSERT_TRUE(push->Send(id, gradients[id]).ok());
    }
    TensorValues weights;
    absl::StatusOr<uint64_t> version = push->FinishWithPull(weights);
    ASSERT_TRUE(version.ok()) << version.status();
    ExpectFakeWeights(model, weights);
  }
  for (int s = 0; s < cluster.size(); ++s) {
    EXPECT_EQ(cluster.shard(s).pushes().size(), 2u);
  }
}

TEST(ParameterClientTest, StepPushRefusesBadSendsNamingTheTensor) {
  FakeCluster cluster(2);
  const ModelSpec model = ServerInitializedModel();
  std::unique_ptr<ParameterClient> client = ConnectOrDie(cluster.Options(0));
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Declare(model, 1).ok());
  const TensorValues gradients = Filled(model, 0);
  std::unique_ptr<StepPush> push = client->StartStep({}, false);
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(push->Send(-1, gradients[0]).code(), kInvalid);
  EXPECT_EQ(push->Send(4, gradients[0]).code(), kInvalid);
  absl::Status wrong_size = push->Send(1, gradients[0]);
  EXPECT_EQ(wrong_size.code(), kInvalid);
  EXPECT_THAT(std::string(wrong_size.message()), HasSubstr("scale"));
  ASSERT_TRUE(push->Send(1, gradients[1]).ok());
  absl::Status twice = push->Send(1, gradients[1]);
  EXPECT_EQ(twice.code(), kInvalid);
  EXPECT_THAT(std::string(twice.message()), HasSubstr("twice"));
  TensorValues weights;
  EXPECT_EQ(push->FinishWithPull(weights).status().code(),
            absl::StatusCode::kFailedPrecondition);
  for (int id : {0, 2, 3}) ASSERT_TRUE(push->Send(id, gradients[id]).ok());
  EXPECT_TRUE(push->Finish().ok());
  EXPECT_EQ(push->Finish().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ParameterClientTest, AStepWithATensorMissingIsCancelledNotApplied) {
  FakeCluster cluster(2);
  const ModelSpec model = ServerInitializedModel();
  std::unique_ptr<ParameterClient> client = ConnectOrDie(cluster.Options(0));
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Declare(model, 1).ok());
  const TensorValues gradients = Filled(model, 0);
  std::unique_ptr<StepPush> push = client->StartStep({}, true);
  for (int id : {0, 1, 3}) ASSERT_TRUE(push->Send(id, gradients[id]).ok());
  TensorValues weights;
  absl::Status status = push->FinishWithPull(weights).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("dense.w"));
  push.reset();
  // Both shards hold part of what was sent; each saw its call end.
  for (int s = 0; s < 2; ++s) {
    ASSERT_TRUE(cluster.shard(s).WaitForPushes(1, absl::Seconds(10)));
    for (const ReceivedPush& received : cluster.shard(s).pushes()) {
      EXPECT_FALSE(received.completed) << "shard " << s;
    }
  }
}

TEST(ParameterClientTest, BarrierGoesToShardZeroCountingGenerations) {
  FakeCluster cluster(3);
  std::unique_ptr<ParameterClient> client = ConnectOrDie(cluster.Options(1));
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Declare(TestModel(), 1).ok());
  ASSERT_TRUE(client->Barrier().ok());
  ASSERT_TRUE(client->Barrier().ok());
  EXPECT_EQ(cluster.shard(0).barriers(), (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(cluster.shard(1).barriers().empty());
  EXPECT_TRUE(cluster.shard(2).barriers().empty());
}

TEST(ParameterClientTest, FinishTellsEveryShard) {
  FakeCluster cluster(2);
  std::unique_ptr<ParameterClient> client = ConnectOrDie(cluster.Options(1));
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Declare(TestModel(), 1).ok());
  ASSERT_TRUE(client->Finish().ok());
  EXPECT_EQ(cluster.shard(0).dones(), 1);
  EXPECT_EQ(cluster.shard(1).dones(), 1);
}

TEST(ParameterClientTest, ConnectNamesAShardThatDoesNotAnswer) {
  FakeCluster cluster(1);
  ClientOptions options = cluster.Options(0);
  // Port 1 on loopback: nothing listens there.
  options.servers.push_back("127.0.0.1:1");
  options.connect_timeout = absl::Milliseconds(300);
  absl::Status status = ParameterClient::Connect(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()), HasSubstr("127.0.0.1:1"));
}

TEST(ParameterClientTest, ManyStepsSendExactlyTheirGradients) {
  FakeCluster cluster(2);
  ModelSpec model;
  model.tensors.push_back(
      {"linear.weight", DType::kFloat32, {4}, InitializerSpec::Zeros()});
  model.tensors.push_back(
      {"linear.bias", DType::kFloat32, {}, InitializerSpec::Zeros(), false});
  std::unique_ptr<ParameterClient> client = ConnectOrDie(cluster.Options(0));
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Declare(model, 1).ok());
  constexpr int kSteps = 3000;
  std::vector<float> weight_gradient(4);
  float bias_gradient = 0;
  TensorValues weights;
  for (int step = 0; step < kSteps; ++step) {
    for (int d = 0; d < 4; ++d) weight_gradient[d] = step * 10 + d;
    bias_gradient = step * 10 + 9;
    StepInfo info;
    info.step = step;
    std::unique_ptr<StepPush> push = client->StartStep(info, true);
    ASSERT_TRUE(push->Send(1, absl::MakeConstSpan(&bias_gradient, 1)).ok());
    ASSERT_TRUE(push->Send(0, weight_gradient).ok());
    ASSERT_TRUE(push->FinishWithPull(weights).ok());
  }
  for (int s = 0; s < 2; ++s) {
    std::vector<ReceivedPush> pushes = cluster.shard(s).pushes();
    ASSERT_EQ(pushes.size(), kSteps);
    for (const ReceivedPush& push : pushes) {
      const int step = push.first.step();
      for (const ReceivedChunk& chunk : push.chunks) {
        for (size_t i = 0; i < chunk.values.size(); ++i) {
          const float expected = chunk.tensor_id == 1
                                     ? step * 10 + 9
                                     : step * 10 + chunk.offset + i;
          ASSERT_EQ(chunk.values[i], expected)
              << "shard " << s << " step " << step << " tensor "
              << chunk.tensor_id;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ps
