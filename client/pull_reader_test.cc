#include "client/pull_reader.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client/push_stream_testing.h"
#include "common/chunk_wire.h"
#include "common/tensor_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::client_internal {
namespace {

using ::ps::client_internal::testing::FakeWeight;
using ::ps::client_internal::testing::PullAnswer;
using ::ps::client_internal::testing::TestPartition;
using ::testing::HasSubstr;

// A chunk of tensor `t` [offset, +n) with `bytes` as its data.
grpc::ByteBuffer Chunk(const Partition& partition, uint32_t t, uint64_t offset,
                       uint64_t n, std::string bytes, uint64_t version = 3) {
  proto::PullResponse head;
  head.set_version(version);
  proto::TensorChunk chunk;
  chunk.set_tensor_id(t);
  chunk.set_dtype(proto::DTYPE_FLOAT32);
  const std::vector<int64_t>& shape = partition.model().tensors[t].shape;
  chunk.mutable_shape()->Assign(shape.begin(), shape.end());
  chunk.set_offset(offset);
  chunk.set_num_elements(n);
  return SerializeChunkMessage(head, chunk, kPullResponseChunk,
                               OwnedSlice(std::move(bytes)));
}

std::string Floats(uint64_t n, float value) {
  std::string bytes;
  EncodeFloats(std::vector<float>(n, value), &bytes);
  return bytes;
}

// Reads `messages` as server `server`'s answer.
absl::Status Read(const Partition& partition, int server,
                  const std::vector<grpc::ByteBuffer>& messages,
                  TensorValues& weights) {
  ShapeWeights(partition.model(), weights);
  PullReader reader(partition, server, weights);
  for (const grpc::ByteBuffer& m : messages) reader.Add(m);
  return reader.Finish();
}

TEST(ShapeWeightsTest, SizesEveryTensor) {
  const Partition partition = TestPartition();
  TensorValues weights(9, std::vector<float>(2));
  ShapeWeights(partition.model(), weights);
  ASSERT_EQ(weights.size(), 4u);
  EXPECT_EQ(weights[0].size(), 600u);
  EXPECT_EQ(weights[3].size(), 5u);
}

TEST(PullReaderTest, FillsTheShardsSlicesAndKeepsTheFirstVersion) {
  const Partition partition = TestPartition();
  for (int server = 0; server < 2; ++server) {
    std::vector<grpc::ByteBuffer> messages =
        PullAnswer(partition, server, 11, 7);
    TensorValues weights;
    ShapeWeights(partition.model(), weights);
    PullReader reader(partition, server, weights);
    EXPECT_FALSE(reader.version().has_value());
    for (const grpc::ByteBuffer& m : messages) reader.Add(m);
    ASSERT_TRUE(reader.Finish().ok()) << reader.Finish();
    EXPECT_EQ(reader.version(), 11u);
    for (const Slice& slice : partition.SlicesOfServer(server)) {
      for (uint64_t e = slice.offset; e < slice.offset + slice.num_elements;
           ++e) {
        ASSERT_EQ(weights[slice.tensor_id][e], FakeWeight(slice.tensor_id, e));
      }
    }
  }
}

TEST(PullReaderTest, RefusesAnAnswerThatEndsShort) {
  const Partition partition = TestPartition();
  std::vector<grpc::ByteBuffer> messages = PullAnswer(partition, 0, 1, 1000);
  messages.pop_back();
  TensorValues weights;
  const absl::Status status = Read(partition, 0, messages, weights);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()), HasSubstr("pull ended after"));
}

TEST(PullReaderTest, RefusesMoreChunksThanTheShardHolds) {
  const Partition partition = TestPartition();
  std::vector<grpc::ByteBuffer> messages = PullAnswer(partition, 1, 1, 1000);
  messages.push_back(messages.back());
  TensorValues weights;
  const absl::Status status = Read(partition, 1, messages, weights);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()), HasSubstr("more chunks"));
}

TEST(PullReaderTest, RefusesChunksOutOfOrderOrOutsideTheSlice) {
  const Partition partition = TestPartition();
  const Slice& first = partition.SlicesOfServer(0)[0];
  const uint32_t t = first.tensor_id;
  const uint64_t end = first.offset + first.num_elements;
  const std::vector<grpc::ByteBuffer> wrong[] = {
      // Skips an element.
      {Chunk(partition, t, first.offset + 1, 2, Floats(2, 1))},
      // Runs past the slice.
      {Chunk(partition, t, first.offset, first.num_elements + 1,
             Floats(first.num_elements + 1, 1))},
      // Empty.
      {Chunk(partition, t, first.offset, 0, "")},
      // Another tensor.
      {Chunk(partition, t + 1, first.offset, 1, Floats(1, 1))},
      // Twice the same elements.
      {Chunk(partition, t, first.offset, 1, Floats(1, 1)),
       Chunk(partition, t, first.offset, 1, Floats(1, 1))},
  };
  ASSERT_GT(end, first.offset + 2);
  for (const std::vector<grpc::ByteBuffer>& messages : wrong) {
    TensorValues weights;
    const absl::Status status = Read(partition, 0, messages, weights);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr("unexpected chunk"));
  }
}

TEST(PullReaderTest, RefusesAnotherShapeOrDtypeOrSize) {
  const Partition partition = TestPartition();
  const Slice& first = partition.SlicesOfServer(0)[0];
  proto::PullResponse head;
  proto::TensorChunk chunk;
  chunk.set_tensor_id(first.tensor_id);
  chunk.set_dtype(proto::DTYPE_FLOAT32);
  chunk.add_shape(1);  // Not the model's.
  chunk.set_offset(first.offset);
  chunk.set_num_elements(1);
  TensorValues weights;
  absl::Status status =
      Read(partition, 0,
           {SerializeChunkMessage(head, chunk, kPullResponseChunk,
                                  OwnedSlice(Floats(1, 1)))},
           weights);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()), HasSubstr("shape"));

  const std::vector<int64_t>& shape =
      partition.model().tensors[first.tensor_id].shape;
  chunk.mutable_shape()->Assign(shape.begin(), shape.end());
  chunk.set_dtype(static_cast<proto::DType>(7));
  status = Read(partition, 0,
                {SerializeChunkMessage(head, chunk, kPullResponseChunk,
                                       OwnedSlice(Floats(1, 1)))},
                weights);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);

  // Bytes for two elements in a chunk of one.
  status =
      Read(partition, 0,
           {Chunk(partition, first.tensor_id, first.offset, 1, Floats(2, 1))},
           weights);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

TEST(PullReaderTest, RefusesAMalformedMessageAndIgnoresWhatFollows) {
  const Partition partition = TestPartition();
  const std::string garbage = "\xff\xff\xff";
  grpc::Slice slice(garbage.data(), garbage.size());
  std::vector<grpc::ByteBuffer> messages = {grpc::ByteBuffer(&slice, 1)};
  for (grpc::ByteBuffer& m : PullAnswer(partition, 0, 1, 1000)) {
    messages.push_back(std::move(m));
  }
  TensorValues weights;
  ShapeWeights(partition.model(), weights);
  PullReader reader(partition, 0, weights);
  for (const grpc::ByteBuffer& m : messages) reader.Add(m);
  EXPECT_EQ(reader.Finish().code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(reader.version().has_value());
}

// A ClientStream that answers `messages`, then `status`.
class Answering final : public ClientStream {
 public:
  Answering(std::vector<grpc::ByteBuffer> messages, grpc::Status status)
      : messages_(std::move(messages)), status_(std::move(status)) {}
  bool Write(const grpc::ByteBuffer&) override { return true; }
  bool WriteLast(const grpc::ByteBuffer&) override { return true; }
  bool WritesDone() override { return true; }
  bool Read(grpc::ByteBuffer* message) override {
    if (read_ == messages_.size()) return false;
    *message = messages_[read_++];
    return true;
  }
  grpc::Status Finish() override { return status_; }
  size_t read() const { return read_; }

 private:
  std::vector<grpc::ByteBuffer> messages_;
  grpc::Status status_;
  size_t read_ = 0;
};

TEST(ReceiveWeightsTest, ReadsTheStreamToItsEndThenItsStatus) {
  const Partition partition = TestPartition();
  std::vector<grpc::ByteBuffer> messages = PullAnswer(partition, 1, 8, 1000);
  const size_t n = messages.size();
  TensorValues weights;
  ShapeWeights(partition.model(), weights);
  uint64_t version = 0;
  Answering ok(messages, grpc::Status::OK);
  EXPECT_TRUE(ReceiveWeights(ok, partition, 1, weights, &version).ok());
  EXPECT_EQ(version, 8u);

  // The call's failure comes first, though the chunks were bad too; the
  // stream is drained all the same.
  messages.push_back(messages.back());
  Answering failed(messages,
                   grpc::Status(grpc::StatusCode::ABORTED, "shard restarted"));
  EXPECT_EQ(ReceiveWeights(failed, partition, 1, weights, &version),
            absl::AbortedError("shard restarted"));
  EXPECT_EQ(failed.read(), n + 1);

  Answering too_many(messages, grpc::Status::OK);
  EXPECT_EQ(ReceiveWeights(too_many, partition, 1, weights, &version).code(),
            absl::StatusCode::kDataLoss);

  // No message: the version is left as it was.
  version = 99;
  Answering empty({}, grpc::Status::OK);
  EXPECT_EQ(ReceiveWeights(empty, partition, 1, weights, &version).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(version, 99u);
}

}  // namespace
}  // namespace ps::client_internal
