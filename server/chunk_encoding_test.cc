#include "server/chunk_encoding.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/cord.h"
#include "common/tensor_codec.h"
#include "common/wire_encoding.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::server {
namespace {

using ::testing::HasSubstr;

ModelSpec TwoTensors() {
  ModelSpec model;
  model.tensors.push_back({"w", DType::kFloat32, {2, 3}});
  model.tensors.push_back({"b", DType::kFloat32, {3}});
  return model;
}

proto::TensorChunk Chunk(uint32_t id, uint64_t offset, uint64_t n,
                         proto::Encoding encoding) {
  proto::TensorChunk chunk;
  chunk.set_tensor_id(id);
  chunk.set_dtype(proto::DTYPE_FLOAT32);
  chunk.set_offset(offset);
  chunk.set_num_elements(n);
  chunk.set_encoding(encoding);
  return chunk;
}

std::vector<float> Floats(const absl::Cord& data, size_t n) {
  std::vector<float> out(n);
  EXPECT_TRUE(DecodeFloats(data, absl::MakeSpan(out)).ok());
  return out;
}

TEST(ChunkEncodingTest, DecodesBfloat16ToFloat32) {
  const std::vector<float> values = {1.0f, -2.5f, 1.0f / 3};
  std::string bytes;
  AppendEncoded(WireEncoding::kBfloat16, values, &bytes);
  proto::TensorChunk chunk = Chunk(0, 3, 3, proto::ENCODING_BFLOAT16);
  absl::Cord data(bytes);
  ASSERT_TRUE(DecodePushedChunk(TwoTensors(), &chunk, &data).ok());
  EXPECT_EQ(chunk.encoding(), proto::ENCODING_FLOAT32);
  EXPECT_EQ(Floats(data, 3),
            (std::vector<float>{1.0f, -2.5f,
                                RoundTrip(WireEncoding::kBfloat16, 1.0f / 3)}));
}

TEST(ChunkEncodingTest, DecodesTopKWithZerosElsewhere) {
  std::string bytes;
  AppendEncoded(WireEncoding::kTopK, std::vector<float>{0, 0, 7.0f}, &bytes);
  proto::TensorChunk chunk = Chunk(1, 0, 3, proto::ENCODING_TOP_K);
  absl::Cord data(bytes);
  ASSERT_TRUE(DecodePushedChunk(TwoTensors(), &chunk, &data).ok());
  EXPECT_EQ(Floats(data, 3), (std::vector<float>{0, 0, 7.0f}));
}

TEST(ChunkEncodingTest, LeavesFloat32Alone) {
  proto::TensorChunk chunk = Chunk(0, 0, 2, proto::ENCODING_FLOAT32);
  absl::Cord data("not checked here");
  ASSERT_TRUE(DecodePushedChunk(TwoTensors(), &chunk, &data).ok());
  EXPECT_EQ(std::string(data), "not checked here");
}

TEST(ChunkEncodingTest, RefusesWrongLengthNamingTheTensor) {
  proto::TensorChunk chunk = Chunk(1, 0, 3, proto::ENCODING_FLOAT16);
  absl::Cord data(std::string(5, '\0'));
  absl::Status s = DecodePushedChunk(TwoTensors(), &chunk, &data);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 1 (b)"));
  EXPECT_EQ(chunk.encoding(), proto::ENCODING_FLOAT16);  // Unchanged.
  EXPECT_EQ(data.size(), 5u);
}

TEST(ChunkEncodingTest, RefusesUnknownEncodingNamingTheTensor) {
  proto::TensorChunk chunk = Chunk(0, 0, 1, static_cast<proto::Encoding>(42));
  absl::Cord data(std::string(2, '\0'));
  absl::Status s = DecodePushedChunk(TwoTensors(), &chunk, &data);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 0 (w)"));
  EXPECT_THAT(s.message(), HasSubstr("unknown encoding 42"));
}

TEST(ChunkEncodingTest, RefusesARangeOutsideTheTensorBeforeAllocating) {
  proto::TensorChunk chunk =
      Chunk(1, 1, uint64_t{1} << 40, proto::ENCODING_TOP_K);
  absl::Cord data;
  absl::Status s = DecodePushedChunk(TwoTensors(), &chunk, &data);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("not inside the tensor's 3 elements"));
  proto::TensorChunk unknown = Chunk(5, 0, 1, proto::ENCODING_BFLOAT16);
  EXPECT_THAT(DecodePushedChunk(TwoTensors(), &unknown, &data).message(),
              HasSubstr("tensor id 5"));
}

TEST(ChunkEncodingTest, RefusesTopKIndexOutOfRangeNamingTheTensor) {
  // One pair whose index (3) is past the chunk's 3 elements.
  std::string bytes(8, '\0');
  bytes[0] = 3;
  proto::TensorChunk chunk = Chunk(1, 0, 3, proto::ENCODING_TOP_K);
  absl::Cord data(bytes);
  absl::Status s = DecodePushedChunk(TwoTensors(), &chunk, &data);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 1 (b)"));
  EXPECT_THAT(s.message(), HasSubstr("index 3"));
}

TEST(ChunkEncodingTest, PulledChunkDataSaysItsEncodingAndScale) {
  auto weights = std::make_shared<std::vector<float>>(
      std::vector<float>{1e-7f, 2.0f, -3e-7f});
  proto::TensorChunk chunk;
  grpc::Slice half = PulledChunkData(WireEncoding::kFloat16, weights,
                                     absl::MakeConstSpan(*weights), &chunk);
  EXPECT_EQ(chunk.encoding(), proto::ENCODING_FLOAT16);
  EXPECT_EQ(chunk.scale_exponent(), Float16ScaleExponent(*weights));
  EXPECT_EQ(half.size(), 6u);
  grpc::Slice full = PulledChunkData(WireEncoding::kFloat32, weights,
                                     absl::MakeConstSpan(*weights), &chunk);
  EXPECT_EQ(chunk.encoding(), proto::ENCODING_FLOAT32);
  EXPECT_EQ(chunk.scale_exponent(), 0);
  ASSERT_EQ(full.size(), 12u);
  // Float32 is the weights' own memory (on a little-endian host).
  if (kFloatEncodingIsMemoryImage) {
    EXPECT_EQ(static_cast<const void*>(full.begin()),
              static_cast<const void*>(weights->data()));
  }
}

TEST(ChunkEncodingTest, PullEncodingsDefaultToFloat32) {
  google::protobuf::RepeatedField<int> requested;
  requested.Add(proto::ENCODING_FLOAT16);
  absl::StatusOr<std::vector<WireEncoding>> e =
      PullEncodings(TwoTensors(), requested);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, (std::vector<WireEncoding>{WireEncoding::kFloat16,
                                           WireEncoding::kFloat32}));
}

TEST(ChunkEncodingTest, PullEncodingsRefuseTopKUnknownAndTooMany) {
  google::protobuf::RepeatedField<int> top_k;
  top_k.Add(proto::ENCODING_FLOAT32);
  top_k.Add(proto::ENCODING_TOP_K);
  EXPECT_THAT(PullEncodings(TwoTensors(), top_k).status().message(),
              HasSubstr("tensor 1 (b)"));
  google::protobuf::RepeatedField<int> unknown;
  unknown.Add(17);
  EXPECT_THAT(PullEncodings(TwoTensors(), unknown).status().message(),
              HasSubstr("unknown encoding 17"));
  google::protobuf::RepeatedField<int> many;
  for (int i = 0; i < 3; ++i) many.Add(0);
  EXPECT_EQ(PullEncodings(TwoTensors(), many).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps::server
