// OptimizerStateService's plain halves (Read, Write) on a shard running
// Adam: a written state reads back, every refusal leaves the state as it
// was, and a write is checkpointed before it is answered.

#include "server/optimizer_state_service.h"

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "common/temp_dir_testing.h"
#include "common/tensor_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/checkpointer.h"
#include "server/shard_host.h"
#include "server/update_coordinator.h"
#include "update/checkpoint.h"
#include "update/shard_store.h"

namespace ps::server {
namespace {

using ::testing::HasSubstr;

constexpr int kWorkers = 2;

ModelSpec Model() {
  ModelSpec model;
  model.seed = 3;
  TensorSpec w;
  w.name = "w";
  w.shape = {3, 4};
  w.initializer = InitializerSpec::Constant(0.5);
  TensorSpec b;
  b.name = "b";
  b.shape = {4};
  TensorSpec stats;
  stats.name = "stats";
  stats.shape = {2};
  stats.assigned = true;
  model.tensors = {w, b, stats};
  return model;
}

uint64_t Incarnation(int rank) { return 100 + rank; }

// A checkpoint directory that cannot be made: a path under a regular file.
std::string UnwritableDir() {
  const std::string file = ps::testing::UnusedTestPath("a_file");
  std::ofstream(file) << "x";
  return file + "/ckpt";
}

class OptimizerStateServiceTest : public ::testing::Test {
 protected:
  // A shard of one server running Adam (or `optimizer`), with both ranks
  // registered; checkpoints into `checkpoint_dir` unless empty.
  void Start(const std::string& checkpoint_dir = "",
             update::OptimizerConfig optimizer = OptimizerSpec::Adam(0.1f)) {
    partition_ = std::make_unique<Partition>(*Partition::Create(Model(), 1));
    auto shard = std::make_unique<DeclaredShard>();
    shard->store = *update::ShardStore::Create(*partition_, 0, optimizer);
    CoordinatorOptions options;
    options.num_workers = kWorkers;
    shard->coordinator =
        *UpdateCoordinator::Create(shard->store.get(), options);
    if (!checkpoint_dir.empty()) {
      CheckpointPolicy policy;
      policy.dir = checkpoint_dir;
      policy.every_updates = 0;
      policy.every = absl::ZeroDuration();
      UpdateCoordinator* coordinator = shard->coordinator.get();
      shard->checkpointer = std::make_unique<Checkpointer>(
          policy,
          [coordinator] { return coordinator->SnapshotForCheckpoint(); },
          [coordinator] { return coordinator->version(); }, 0);
    }
    shard->identity = {partition_->fingerprint(), 0, kWorkers, ""};
    store_ = shard->store.get();
    coordinator_ = shard->coordinator.get();
    host_ = std::make_unique<ShardHost>(
        [](const ModelSpec&) -> absl::StatusOr<std::unique_ptr<DeclaredShard>> {
          return absl::InternalError("not built here");
        },
        DeclarationLimits());
    host_->Install(std::move(shard));
    for (int rank = 0; rank < kWorkers; ++rank) {
      ASSERT_TRUE(coordinator_->Register(rank, Incarnation(rank), 0).ok());
    }
    service_ = std::make_unique<OptimizerStateService>(host_.get(), 5, 1000);
    // Two updates, so that every state vector holds something.
    for (int update = 1; update <= 2; ++update) {
      for (int i = 0; i < store_->num_slices(); ++i) {
        std::vector<float> gradient(store_->slices()[i].num_elements);
        for (size_t e = 0; e < gradient.size(); ++e) {
          gradient[e] = 0.25f * update + e;
        }
        ASSERT_TRUE(store_->ApplyGradient(i, gradient).ok());
      }
    }
  }

  void TearDown() override {
    if (coordinator_ != nullptr) coordinator_->Shutdown();
  }

  proto::RequestHeader Header(int rank) const {
    proto::RequestHeader h;
    h.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
    h.set_partition_fingerprint(partition_->fingerprint());
    h.set_worker_rank(rank);
    h.set_server_index(0);
    h.set_incarnation(Incarnation(rank));
    return h;
  }

  // The state as the shard holds it now.
  std::vector<update::SliceSnapshot> Held() const {
    std::vector<update::SliceSnapshot> slices;
    for (int i = 0; i < store_->num_slices(); ++i) {
      slices.push_back(store_->SnapshotOptimizerState(i));
    }
    return slices;
  }

  // A write of `slices` described by `header`, in chunks of 5 elements;
  // `first` may set at_version.
  absl::StatusOr<proto::WriteOptimizerStateResponse> Write(
      const proto::OptimizerStateHeader& header,
      const std::vector<update::SliceSnapshot>& slices, int rank = 0,
      std::optional<uint64_t> at_version = std::nullopt) {
    std::vector<proto::WriteOptimizerStateRequest> messages(1);
    *messages[0].mutable_header() = Header(rank);
    *messages[0].mutable_state() = header;
    if (at_version.has_value()) messages[0].set_at_version(*at_version);
    for (size_t i = 0; i < slices.size(); ++i) {
      for (size_t v = 0; v < slices[i].state.size(); ++v) {
        const std::vector<float>& values = slices[i].state[v].second;
        for (size_t b = 0; b < values.size(); b += 5) {
          proto::WriteOptimizerStateRequest m;
          proto::OptimizerStateChunk* c = m.mutable_chunk();
          c->set_slice(i);
          c->set_vector(v);
          c->set_offset(b);
          EncodeFloats(absl::MakeConstSpan(values).subspan(
                           b, std::min<size_t>(5, values.size() - b)),
                       c->mutable_data());
          messages.push_back(std::move(m));
        }
      }
    }
    return WriteMessages(std::move(messages));
  }

  absl::StatusOr<proto::WriteOptimizerStateResponse> WriteMessages(
      std::vector<proto::WriteOptimizerStateRequest> messages) {
    size_t next = 1;
    return service_->Write(
        messages[0],
        [&](proto::WriteOptimizerStateRequest* m) -> absl::StatusOr<bool> {
          if (next == messages.size()) return false;
          *m = messages[next++];
          return true;
        });
  }

  // The state read, and its header.
  proto::OptimizerStateHeader Read(std::vector<update::SliceSnapshot>* out) {
    absl::StatusOr<proto::OptimizerStateHeader> header =
        service_->Read(Header(1), out);
    EXPECT_TRUE(header.ok()) << header.status();
    return header.ok() ? *header : proto::OptimizerStateHeader();
  }

  // `slices` with every state value scaled and the counts moved on.
  static std::vector<update::SliceSnapshot> Changed(
      std::vector<update::SliceSnapshot> slices) {
    for (update::SliceSnapshot& s : slices) {
      s.update_count += 7;
      for (auto& [name, values] : s.state) {
        for (float& x : values) x = 3 * x + 1;
      }
    }
    return slices;
  }

  static void ExpectSame(const std::vector<update::SliceSnapshot>& a,
                         const std::vector<update::SliceSnapshot>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].update_count, b[i].update_count) << "slice " << i;
      EXPECT_EQ(a[i].state, b[i].state) << "slice " << i;
    }
  }

  std::unique_ptr<Partition> partition_;
  std::unique_ptr<ShardHost> host_;
  std::unique_ptr<OptimizerStateService> service_;
  update::ShardStore* store_ = nullptr;
  UpdateCoordinator* coordinator_ = nullptr;
};

TEST_F(OptimizerStateServiceTest, ReadsEverySliceWithItsVectors) {
  Start();
  std::vector<update::SliceSnapshot> read;
  const proto::OptimizerStateHeader header = Read(&read);
  EXPECT_EQ(header.format(), proto::OPTIMIZER_STATE_FORMAT_CURRENT);
  EXPECT_EQ(header.kind(), proto::OptimizerDeclaration::ADAM);
  EXPECT_EQ(header.version(), 0u);
  ASSERT_EQ(header.slices_size(), 3);
  EXPECT_EQ(header.slices(0).tensor(), "w");
  EXPECT_THAT(header.slices(0).shape(), ::testing::ElementsAre(3, 4));
  EXPECT_EQ(header.slices(0).num_elements(), 12u);
  EXPECT_EQ(header.slices(0).update_count(), 2u);
  EXPECT_THAT(header.slices(1).vectors(), ::testing::ElementsAre("m", "v"));
  // An assigned tensor (a buffer) keeps no state.
  EXPECT_EQ(header.slices(2).tensor(), "stats");
  EXPECT_EQ(header.slices(2).vectors_size(), 0);
  ExpectSame(read, Held());
  EXPECT_NE(read[0].state[0].second[3], 0.0f);
}

TEST_F(OptimizerStateServiceTest, AWrittenStateReadsBackAndKeepsTheWeights) {
  Start();
  std::vector<update::SliceSnapshot> read;
  const proto::OptimizerStateHeader header = Read(&read);
  const std::vector<float> weights = store_->ReadSlice(0);
  const std::vector<update::SliceSnapshot> written = Changed(read);
  proto::OptimizerStateHeader changed = header;
  for (int i = 0; i < changed.slices_size(); ++i) {
    changed.mutable_slices(i)->set_update_count(written[i].update_count);
  }
  absl::StatusOr<proto::WriteOptimizerStateResponse> response =
      Write(changed, written, 0, 0);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->version(), 0u);
  EXPECT_FALSE(response->durable());  // No checkpoints kept.
  std::vector<update::SliceSnapshot> again;
  EXPECT_EQ(Read(&again).slices(0).update_count(), 9u);
  ExpectSame(again, written);
  EXPECT_EQ(store_->ReadSlice(0), weights);
}

TEST_F(OptimizerStateServiceTest, AWriteIsCheckpointedBeforeItIsAnswered) {
  const std::string dir = ps::testing::FreshTestDir("ckpt");
  Start(dir);
  std::vector<update::SliceSnapshot> read;
  const proto::OptimizerStateHeader header = Read(&read);
  const std::vector<update::SliceSnapshot> written = Changed(read);
  proto::OptimizerStateHeader changed = header;
  for (int i = 0; i < changed.slices_size(); ++i) {
    changed.mutable_slices(i)->set_update_count(written[i].update_count);
  }
  absl::StatusOr<proto::WriteOptimizerStateResponse> response =
      Write(changed, written);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_TRUE(response->durable());
  absl::StatusOr<update::ShardCheckpoint> checkpoint = update::ReadCheckpoint(
      absl::StrCat(dir, "/", update::CheckpointFileName(0, 0)));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  ASSERT_EQ(checkpoint->slices.size(), written.size());
  for (size_t i = 0; i < written.size(); ++i) {
    EXPECT_EQ(checkpoint->slices[i].update_count, written[i].update_count);
    EXPECT_EQ(checkpoint->slices[i].state, written[i].state);
  }
}

TEST_F(OptimizerStateServiceTest, AFailedCheckpointFailsTheWrite) {
  Start(UnwritableDir());
  std::vector<update::SliceSnapshot> read;
  const proto::OptimizerStateHeader header = Read(&read);
  absl::StatusOr<proto::WriteOptimizerStateResponse> response =
      Write(header, read);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(response.status().message(), HasSubstr("write it again"));
}

// Each refused write leaves the state as it was.
class RefusedWriteTest : public OptimizerStateServiceTest {
 protected:
  void SetUp() override {
    Start();
    header_ = Read(&read_);
    written_ = Changed(read_);
  }

  void ExpectRefused(
      const absl::StatusOr<proto::WriteOptimizerStateResponse>& response,
      absl::StatusCode code, absl::string_view text) {
    EXPECT_EQ(response.status().code(), code) << response.status();
    EXPECT_THAT(response.status().message(), HasSubstr(text));
    ExpectSame(Held(), read_);
  }

  proto::OptimizerStateHeader header_;
  std::vector<update::SliceSnapshot> read_;
  std::vector<update::SliceSnapshot> written_;
};

TEST_F(RefusedWriteTest, RefusesAnotherOptimizerKind) {
  header_.set_kind(proto::OptimizerDeclaration::SGD);
  ExpectRefused(Write(header_, written_), absl::StatusCode::kFailedPrecondition,
                "optimizer state of sgd, but this shard runs adam");
}

TEST_F(RefusedWriteTest, RefusesAnotherFormat) {
  header_.set_format(proto::OPTIMIZER_STATE_FORMAT_UNSPECIFIED);
  ExpectRefused(Write(header_, written_), absl::StatusCode::kInvalidArgument,
                "format 0");
}

TEST_F(RefusedWriteTest, RefusesAnUnknownTensor) {
  header_.mutable_slices(1)->set_tensor("bias");
  ExpectRefused(Write(header_, written_), absl::StatusCode::kFailedPrecondition,
                "tensor \"bias\", which the declared model does not have");
}

TEST_F(RefusedWriteTest, RefusesAnotherShape) {
  header_.mutable_slices(0)->set_shape(1, 5);
  ExpectRefused(Write(header_, written_), absl::StatusCode::kFailedPrecondition,
                "of shape [3, 5], declared [3, 4]");
}

TEST_F(RefusedWriteTest, RefusesAnotherPartition) {
  header_.mutable_slices(0)->set_num_elements(6);
  ExpectRefused(Write(header_, written_), absl::StatusCode::kFailedPrecondition,
                "another partition");
}

TEST_F(RefusedWriteTest, RefusesMissingOrExtraSlices) {
  proto::OptimizerStateHeader fewer = header_;
  fewer.mutable_slices()->RemoveLast();
  ExpectRefused(Write(fewer, written_), absl::StatusCode::kFailedPrecondition,
                "optimizer state of 2 slices, this shard holds 3");
  *header_.add_slices() = header_.slices(2);
  ExpectRefused(Write(header_, written_), absl::StatusCode::kFailedPrecondition,
                "optimizer state of 4 slices, this shard holds 3");
}

TEST_F(RefusedWriteTest, RefusesOtherStateVectors) {
  header_.mutable_slices(0)->clear_vectors();
  header_.mutable_slices(0)->add_vectors("momentum");
  ExpectRefused(Write(header_, written_), absl::StatusCode::kFailedPrecondition,
                "holds [momentum], this shard's optimizer keeps [m, v]");
}

TEST_F(RefusedWriteTest, RefusesAWriteMissingElements) {
  written_[1].state[1].second.pop_back();
  ExpectRefused(Write(header_, written_), absl::StatusCode::kInvalidArgument,
                "\"b\" v: 3 of 4 elements came");
}

TEST_F(RefusedWriteTest, RefusesChunksOutOfOrderOrBeyondTheirVector) {
  written_[0].state[0].second.push_back(1.0f);  // 13 elements of 12.
  ExpectRefused(Write(header_, written_), absl::StatusCode::kInvalidArgument,
                "a chunk of elements [10, 13) where [10, ...) of 12");
  std::vector<proto::WriteOptimizerStateRequest> messages(2);
  *messages[0].mutable_header() = Header(0);
  *messages[0].mutable_state() = header_;
  messages[1].mutable_chunk()->set_offset(5);
  messages[1].mutable_chunk()->set_data(std::string(8, '\0'));
  ExpectRefused(WriteMessages(messages), absl::StatusCode::kInvalidArgument,
                "[5, 7) where [0, ...) of 12 comes next");
  messages[1].mutable_chunk()->set_slice(2);  // "stats": no vectors.
  ExpectRefused(WriteMessages(messages), absl::StatusCode::kInvalidArgument,
                "slice 2 vector 0, which the header lacks");
  messages[1].mutable_chunk()->set_slice(0);
  messages[1].mutable_chunk()->set_offset(0);
  messages[1].mutable_chunk()->set_data("abc");
  ExpectRefused(WriteMessages(messages), absl::StatusCode::kInvalidArgument,
                "3 bytes, not whole float32 values");
}

TEST_F(RefusedWriteTest, RefusesAWriteFromAnotherRank) {
  ExpectRefused(Write(header_, written_, /*rank=*/1),
                absl::StatusCode::kFailedPrecondition, "only rank 0");
}

TEST_F(RefusedWriteTest, RefusesAProcessThatIsNotRegistered) {
  ASSERT_TRUE(coordinator_->Register(0, 555, 0).ok());  // A restarted rank 0.
  ExpectRefused(Write(header_, written_), absl::StatusCode::kFailedPrecondition,
                "");
}

TEST_F(RefusedWriteTest, RefusesAnotherPartitionFingerprint) {
  std::vector<proto::WriteOptimizerStateRequest> messages(1);
  *messages[0].mutable_header() = Header(0);
  messages[0].mutable_header()->set_partition_fingerprint(
      partition_->fingerprint() + 1);
  *messages[0].mutable_state() = header_;
  ExpectRefused(WriteMessages(messages), absl::StatusCode::kInvalidArgument,
                "fingerprint");
}

TEST_F(RefusedWriteTest, RefusesAWriteForAnotherVersion) {
  ExpectRefused(Write(header_, written_, 0, /*at_version=*/1),
                absl::StatusCode::kAborted,
                "the write is for version 1, this shard is at version 0");
}

// Plain SGD keeps nothing; SGD with momentum one vector.
TEST_F(OptimizerStateServiceTest, MomentumRoundTripsAndAdamStateIsRefused) {
  Start("", OptimizerSpec::Sgd(0.1f, 0.9f));
  std::vector<update::SliceSnapshot> read;
  proto::OptimizerStateHeader header = Read(&read);
  EXPECT_EQ(header.kind(), proto::OptimizerDeclaration::SGD);
  EXPECT_THAT(header.slices(0).vectors(), ::testing::ElementsAre("momentum"));
  const std::vector<update::SliceSnapshot> written = Changed(read);
  for (int i = 0; i < header.slices_size(); ++i) {
    header.mutable_slices(i)->set_update_count(written[i].update_count);
  }
  ASSERT_TRUE(Write(header, written).ok());
  ExpectSame(Held(), written);
  header.set_kind(proto::OptimizerDeclaration::ADAM);
  EXPECT_EQ(Write(header, written).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ps::server
