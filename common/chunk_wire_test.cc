#include "common/chunk_wire.h"

#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/tensor_codec.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.pb.h"

namespace ps {
namespace {

std::vector<float> Ramp(int n) {
  std::vector<float> values(n);
  for (int i = 0; i < n; ++i) values[i] = 0.25f * i - 3.0f;
  return values;
}

// A push message as the generated classes would send it, data included.
proto::PushRequest FullPush(const std::vector<float>& values) {
  proto::PushRequest request;
  request.mutable_header()->set_protocol_version(1);
  request.mutable_header()->set_worker_rank(3);
  request.set_step(42);
  request.set_num_examples(64);
  proto::TensorChunk* chunk = request.mutable_chunk();
  chunk->set_tensor_id(7);
  chunk->set_dtype(proto::DTYPE_FLOAT32);
  chunk->add_shape(10);
  chunk->add_shape(30);
  chunk->set_offset(12);
  chunk->set_num_elements(values.size());
  EncodeFloats(values, chunk->mutable_data());
  return request;
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return bytes;
}

// `bytes` cut into slices of `piece` bytes, as a network read might.
grpc::ByteBuffer Sliced(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t i = 0; i < bytes.size(); i += piece) {
    slices.emplace_back(bytes.data() + i, std::min(piece, bytes.size() - i));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

TEST(ChunkWireTest, SerializesTheSameBytesAsProtobuf) {
  const std::vector<float> values = Ramp(300);
  const proto::PushRequest full = FullPush(values);
  proto::PushRequest message = full;
  proto::TensorChunk chunk = message.chunk();
  chunk.clear_data();
  message.clear_chunk();
  SliceLender lender;
  grpc::ByteBuffer buffer = SerializeChunkMessage(
      message, chunk, kPushRequestChunk, lender.LendFloats(values));
  EXPECT_EQ(Flatten(buffer), full.SerializeAsString());
}

TEST(ChunkWireTest, ParsesAcrossSliceBoundariesWithoutTheDataInTheMessage) {
  const std::vector<float> values = Ramp(1000);
  const proto::PushRequest full = FullPush(values);
  for (size_t piece : {1, 3, 7, 64, 4096, 1 << 20}) {
    SCOPED_TRACE(piece);
    proto::PushRequest parsed;
    absl::Cord data;
    ASSERT_TRUE(ParseChunkMessage(Sliced(full.SerializeAsString(), piece),
                                  kPushRequestChunk, &parsed, &data)
                    .ok());
    EXPECT_TRUE(parsed.chunk().data().empty());
    proto::PushRequest expected = full;
    expected.mutable_chunk()->clear_data();
    EXPECT_EQ(parsed.SerializeAsString(), expected.SerializeAsString());
    std::vector<float> decoded(values.size());
    ASSERT_TRUE(DecodeFloats(data, absl::MakeSpan(decoded)).ok());
    EXPECT_EQ(decoded, values);
  }
}

// gRPC keeps a small slice's bytes inside the slice object itself, which
// the parser's copies of the slices do not outlive: the data must not point
// there. The memory of those copies is reused here before the data is read.
TEST(ChunkWireTest, DataOutlivesTheSlicesItWasParsedFrom) {
  const std::vector<float> values = Ramp(1000);
  const std::string bytes = FullPush(values).SerializeAsString();
  for (size_t piece : {1, 7, 13, 20}) {
    SCOPED_TRACE(piece);
    proto::PushRequest parsed;
    absl::Cord data;
    {
      const grpc::ByteBuffer buffer = Sliced(bytes, piece);
      ASSERT_TRUE(
          ParseChunkMessage(buffer, kPushRequestChunk, &parsed, &data).ok());
    }
    for (int i = 0; i < 4; ++i) {
      const std::string garbage(piece, static_cast<char>(0xff));
      std::vector<grpc::Slice> scribble(bytes.size() / piece + 1,
                                        grpc::Slice(garbage));
      std::vector<grpc::Slice> copy = scribble;
    }
    std::vector<float> decoded(values.size());
    ASSERT_TRUE(DecodeFloats(data, absl::MakeSpan(decoded)).ok());
    EXPECT_EQ(decoded, values);
  }
}

TEST(ChunkWireTest, RoundTripsThroughItsOwnSerializer) {
  const std::vector<float> values = Ramp(5);
  proto::PushRequest message;
  message.set_step(9);
  proto::TensorChunk chunk;
  chunk.set_offset(4);
  SliceLender lender;
  grpc::ByteBuffer buffer = SerializeChunkMessage(
      message, chunk, kPushRequestChunk, lender.LendFloats(values));
  proto::PushRequest parsed;
  absl::Cord data;
  ASSERT_TRUE(
      ParseChunkMessage(buffer, kPushRequestChunk, &parsed, &data).ok());
  EXPECT_EQ(parsed.step(), 9u);
  EXPECT_EQ(parsed.chunk().offset(), 4u);
  std::string encoded;
  EncodeFloats(values, &encoded);
  EXPECT_EQ(std::string(data), encoded);
}

TEST(ChunkWireTest, MergesFieldsInAnyOrderAsProtobufDoes) {
  // Data first, metadata later, the chunk in two occurrences: protobuf
  // merges concatenated messages, and so must we.
  proto::PushRequest data_only;
  data_only.mutable_chunk()->set_data("old!");
  proto::PushRequest data_again;
  data_again.mutable_chunk()->set_data("abcdefgh");
  proto::PushRequest metadata;
  metadata.set_step(5);
  metadata.mutable_chunk()->set_tensor_id(2);
  const std::string bytes = data_only.SerializeAsString() +
                            metadata.SerializeAsString() +
                            data_again.SerializeAsString();
  proto::PushRequest expected;
  ASSERT_TRUE(expected.ParseFromString(bytes));

  proto::PushRequest parsed;
  absl::Cord data;
  ASSERT_TRUE(
      ParseChunkMessage(Sliced(bytes, 5), kPushRequestChunk, &parsed, &data)
          .ok());
  EXPECT_EQ(parsed.step(), 5u);
  EXPECT_EQ(parsed.chunk().tensor_id(), 2u);
  EXPECT_EQ(std::string(data), expected.chunk().data());
}

TEST(ChunkWireTest, MessageWithoutChunkHasNoData) {
  proto::PushRequest message;
  message.set_step(3);
  proto::PushRequest parsed;
  absl::Cord data("stale");
  ASSERT_TRUE(ParseChunkMessage(Sliced(message.SerializeAsString(), 2),
                                kPushRequestChunk, &parsed, &data)
                  .ok());
  EXPECT_FALSE(parsed.has_chunk());
  EXPECT_TRUE(data.empty());
}

TEST(ChunkWireTest, RejectsEveryTruncationInsideTheChunk) {
  const std::string bytes = FullPush(Ramp(20)).SerializeAsString();
  // The chunk is the last field: every cut inside it leaves a chunk whose
  // length prefix promises more than there is.
  proto::PushRequest without_chunk = FullPush(Ramp(20));
  without_chunk.clear_chunk();
  const size_t chunk_start = without_chunk.ByteSizeLong();
  for (size_t cut = chunk_start + 1; cut < bytes.size(); ++cut) {
    SCOPED_TRACE(cut);
    proto::PushRequest parsed;
    absl::Cord data;
    const absl::Status status = ParseChunkMessage(
        Sliced(bytes.substr(0, cut), 3), kPushRequestChunk, &parsed, &data);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("malformed ps.proto.PushRequest"),
              absl::string_view::npos)
        << status;
  }
}

TEST(ChunkWireTest, RejectsGarbage) {
  for (const std::string& bytes :
       {std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11),
        std::string("\x3a\x05\x32\x10xxx", 7),  // data longer than its chunk
        std::string("\x3a\x02\x00\x00", 4),     // tag 0 inside the chunk
        std::string("\x08", 1)}) {              // varint cut short
    proto::PushRequest parsed;
    absl::Cord data;
    EXPECT_EQ(
        ParseChunkMessage(Sliced(bytes, 1), kPushRequestChunk, &parsed, &data)
            .code(),
        absl::StatusCode::kInvalidArgument);
  }
}

TEST(ChunkWireTest, RefusesALengthAbove32BitsAsProtobufDoes) {
  // Chunk (field 7) of length 2 + 2^32, whose low 32 bits would read as 2,
  // then a valid two-byte chunk (tensor_id 7).
  const std::string bytes("\x3a\x82\x80\x80\x80\x10\x08\x07", 8);
  proto::PushRequest parsed;
  EXPECT_FALSE(parsed.ParseFromString(bytes));
  absl::Cord data;
  EXPECT_EQ(
      ParseChunkMessage(Sliced(bytes, 3), kPushRequestChunk, &parsed, &data)
          .code(),
      absl::StatusCode::kInvalidArgument);
  // The same with the length written as its plain varint is fine.
  const std::string plain("\x3a\x02\x08\x07", 4);
  ASSERT_TRUE(
      ParseChunkMessage(Sliced(plain, 3), kPushRequestChunk, &parsed, &data)
          .ok());
  EXPECT_EQ(parsed.chunk().tensor_id(), 7u);
}

TEST(ChunkWireTest, RefusesATagLongerThan5BytesAsProtobufDoes) {
  // CodedInputStream reads a tag of up to 10 bytes and keeps its low 32
  // bits; protobuf's parser refuses one above 5 bytes (found by
  // fuzz/chunk_wire_fuzzer). Each padded to 6 bytes: the chunk's tag (0x3a),
  // tensor_id's inside the chunk (0x08), step's (0x10).
  for (const std::string& bytes :
       {std::string("\xba\x80\x80\x80\x80\x00\x02\x08\x07", 9),
        std::string("\x3a\x07\x88\x80\x80\x80\x80\x00\x07", 9),
        std::string("\x90\x80\x80\x80\x80\x00\x05", 7)}) {
    proto::PushRequest parsed;
    EXPECT_FALSE(parsed.ParseFromString(bytes));
    absl::Cord data;
    EXPECT_EQ(
        ParseChunkMessage(Sliced(bytes, 2), kPushRequestChunk, &parsed, &data)
            .code(),
        absl::StatusCode::kInvalidArgument);
  }
  // Padded to 5 bytes, the chunk's tag is read by both.
  const std::string five("\xba\x80\x80\x80\x00\x02\x08\x07", 8);
  proto::PushRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(five));
  absl::Cord data;
  ASSERT_TRUE(
      ParseChunkMessage(Sliced(five, 2), kPushRequestChunk, &parsed, &data)
          .ok());
  EXPECT_EQ(parsed.chunk().tensor_id(), 7u);
}

TEST(ChunkWireTest, LeavesTheOtherFieldsToProtobufAsReceived) {
  // Fields but the chunk's data used to be re-encoded (WireFormatLite's
  // SkipField), which kept the low 32 bits of a length and read long tags
  // inside a group: the result parsed where the bytes received do not
  // (found by fuzz/chunk_wire_fuzzer).
  for (const std::string& bytes : {
           // The header (field 1) of length 2 + 2^32.
           std::string("\x0a\x82\x80\x80\x80\x10\x08\x02", 8),
           // The same inside the chunk: its shape (field 3).
           std::string("\x3a\x08\x1a\x82\x80\x80\x80\x10\x08\x02", 10),
           // A group (field 1) holding a 6-byte tag.
           std::string("\x0b\x88\x80\x80\x80\x80\x00\x01\x0c", 9),
       }) {
    proto::PushRequest parsed;
    EXPECT_FALSE(parsed.ParseFromString(bytes));
    absl::Cord data;
    EXPECT_EQ(
        ParseChunkMessage(Sliced(bytes, 3), kPushRequestChunk, &parsed, &data)
            .code(),
        absl::StatusCode::kInvalidArgument);
  }
  // An unknown group protobuf reads is kept as it came.
  const std::string group("\x5b\x08\x01\x5c\x3a\x02\x08\x07", 8);
  proto::PushRequest reference;
  ASSERT_TRUE(reference.ParseFromString(group));
  proto::PushRequest parsed;
  absl::Cord data;
  ASSERT_TRUE(
      ParseChunkMessage(Sliced(group, 3), kPushRequestChunk, &parsed, &data)
          .ok());
  EXPECT_EQ(parsed.SerializeAsString(), reference.SerializeAsString());
  EXPECT_EQ(parsed.chunk().tensor_id(), 7u);
}

TEST(ChunkWireTest, PlainMessagesRoundTrip) {
  proto::PullRequest request;
  request.set_clock(77);
  request.mutable_header()->set_worker_rank(2);
  proto::PullRequest parsed;
  ASSERT_TRUE(ParseMessage(SerializeMessage(request), &parsed).ok());
  EXPECT_EQ(parsed.SerializeAsString(), request.SerializeAsString());
  ASSERT_TRUE(
      ParseMessage(Sliced(request.SerializeAsString(), 1), &parsed).ok());
  EXPECT_EQ(parsed.clock(), 77u);
  EXPECT_EQ(ParseMessage(Sliced("\x10\xff", 1), &parsed).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ChunkWireTest, OwnedSliceKeepsTheBytes) {
  std::string bytes(1000, 'x');
  bytes[999] = 'y';
  grpc::Slice slice = OwnedSlice(std::move(bytes));
  ASSERT_EQ(slice.size(), 1000u);
  EXPECT_EQ(slice.begin()[999], 'y');
}

TEST(SliceLenderTest, LentSlicePointsAtTheMemory) {
  const std::vector<float> values = Ramp(8);
  SliceLender lender;
  grpc::Slice slice = lender.LendFloats(values);
  if (!kFloatEncodingIsMemoryImage) GTEST_SKIP() << "big-endian: copied";
  EXPECT_EQ(static_cast<const void*>(slice.begin()), values.data());
  EXPECT_EQ(slice.size(), values.size() * sizeof(float));
}

TEST(SliceLenderTest, AwaitReturnedWaitsForEveryReference) {
  const std::vector<float> values = Ramp(8);
  SliceLender lender;
  std::optional<grpc::ByteBuffer> buffer;
  {
    grpc::Slice slices[] = {lender.LendFloats(values),
                            lender.LendFloats(values)};
    buffer.emplace(slices, 2);
  }
  absl::Notification returned;
  std::thread waiter([&] {
    lender.AwaitReturned();
    returned.Notify();
  });
  EXPECT_FALSE(returned.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  grpc::ByteBuffer copy = *buffer;  // Shares the slices.
  buffer.reset();
  EXPECT_FALSE(returned.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  copy.Clear();
  returned.WaitForNotification();
  waiter.join();
}

}  // namespace
}  // namespace ps
