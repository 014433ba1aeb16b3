// ParameterService with compressed chunks (ps.proto Encoding): decoded to
// float32 at the edge, encoded pulls, and bad encodings refused whole.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/cord.h"
#include "common/tensor_codec.h"
#include "common/wire_encoding.h"
#include "gtest/gtest.h"
#include "server/parameter_service_testing.h"

namespace ps::server::testing {
namespace {

// Rewrites every chunk of `push` in `encoding` (of its float32 values).
void Encode(std::vector<proto::PushRequest>& push, WireEncoding encoding) {
  for (proto::PushRequest& m : push) {
    proto::TensorChunk* c = m.mutable_chunk();
    std::vector<float> values(c->num_elements());
    ASSERT_TRUE(DecodeFloats(c->data(), absl::MakeSpan(values)).ok());
    std::string bytes;
    AppendEncoded(encoding, values, &bytes);
    c->set_data(bytes);
    c->set_encoding(static_cast<proto::Encoding>(encoding));
  }
}

// Pulls everything with every tensor in `encoding`; decodes as the shard
// says it encoded, checking it is `encoding`.
grpc::Status PullEncoded(ParameterServiceTest& test,
                         proto::ParameterServer::Stub& stub,
                         proto::PullRequest request, WireEncoding encoding,
                         size_t num_tensors, Weights* weights) {
  for (size_t t = 0; t < num_tensors; ++t) {
    request.add_tensor_encodings(static_cast<proto::Encoding>(encoding));
  }
  grpc::ClientContext context;
  auto reader = stub.Pull(&context, request);
  proto::PullResponse response;
  weights->clear();
  while (reader->Read(&response)) {
    const proto::TensorChunk& c = response.chunk();
    EXPECT_EQ(c.encoding(), static_cast<int>(encoding));
    std::vector<float> v(c.num_elements());
    EXPECT_TRUE(DecodeEncoded(encoding, absl::Cord(c.data()), absl::MakeSpan(v),
                              c.scale_exponent())
                    .ok());
    for (uint64_t i = 0; i < v.size(); ++i) {
      (*weights)[{c.tensor_id(), c.offset() + i}] = v[i];
    }
  }
  return reader->Finish();
}

class CompressionServiceTest : public ParameterServiceTest {
 protected:
  proto::PullRequest PullRequestFor(uint64_t clock) {
    proto::PullRequest request;
    *request.mutable_header() = Header(0);
    request.set_clock(clock);
    return request;
  }
  size_t num_tensors() const { return partition_->model().tensors.size(); }
};

TEST_F(CompressionServiceTest, SyncSumsDecodedPushesAndPullsEncoded) {
  Start(ConsistencyMode::kSync);
  const float third = 1.0f / 3;
  std::vector<proto::PushRequest> bf16 = ValidPush(0, 0, third);
  Encode(bf16, WireEncoding::kBfloat16);
  std::vector<proto::PushRequest> fp16 = ValidPush(1, 0, third);
  Encode(fp16, WireEncoding::kFloat16);
  uint64_t version = 0;
  ASSERT_TRUE(Push(bf16, &version).ok());
  ASSERT_TRUE(Push(fp16, &version).ok());
  EXPECT_EQ(version, 1u);
  // The servers' float32 weights: each rank's decoded gradient, summed.
  Weights weights;
  ASSERT_TRUE(Pull(1, 0, &weights, &version).ok());
  const float mean = (RoundTrip(WireEncoding::kBfloat16, third) +
                      RoundTrip(WireEncoding::kFloat16, third)) /
                     2;
  Weights expected = InitialWeights();
  for (auto& [key, w] : expected) {
    EXPECT_FLOAT_EQ(weights[key], w - mean);
    w = weights[key];
  }
  // Pulled as float16: the same weights, rounded on the way only.
  Weights pulled;
  ASSERT_TRUE(PullEncoded(*this, *stub_, PullRequestFor(1),
                          WireEncoding::kFloat16, num_tensors(), &pulled)
                  .ok());
  ASSERT_EQ(pulled.size(), expected.size());
  for (const auto& [key, w] : expected) {
    EXPECT_NEAR(pulled[key], w, std::ldexp(std::fabs(w), -11));
  }
}

TEST_F(CompressionServiceTest, TopKChunksAddOnlyTheirPairs) {
  Start(ConsistencyMode::kAsync);
  std::vector<proto::PushRequest> push = ValidPush(0, 0, 0.0f);
  // One element of the first chunk carries 2.0; the rest send nothing.
  std::vector<float> first(push[0].chunk().num_elements(), 0.0f);
  first[1] = 2.0f;
  EncodeFloats(first, push[0].mutable_chunk()->mutable_data());
  Encode(push, WireEncoding::kTopK);
  EXPECT_EQ(push[0].chunk().data().size(), 8u);
  EXPECT_EQ(push[1].chunk().data().size(), 0u);
  uint64_t version = 0;
  ASSERT_TRUE(Push(push, &version).ok());
  Weights weights;
  ASSERT_TRUE(Pull(1, 0, &weights, &version).ok());
  const std::pair<uint32_t, uint64_t> changed = {push[0].chunk().tensor_id(),
                                                 push[0].chunk().offset() + 1};
  for (const auto& [key, w] : InitialWeights()) {
    EXPECT_FLOAT_EQ(weights[key], key == changed ? w - 2.0f : w);
  }
}

TEST_F(CompressionServiceTest, BadEncodingsAreRefusedNamingTheTensor) {
  Start(ConsistencyMode::kAsync);
  const std::string name =
      partition_->model()
          .tensors[partition_->SlicesOfServer(kServer).back().tensor_id]
          .name;
  struct Case {
    std::function<void(proto::TensorChunk&)> mutate;
    const char* text;
  };
  auto pair = [](uint32_t index) {
    std::string p(8, '\0');
    for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(index >> (8 * i));
    return p;
  };
  const Case cases[] = {
      {[](proto::TensorChunk& c) { c.mutable_data()->append("x"); },
       "bfloat16 data of"},
      {[](proto::TensorChunk& c) {
         c.set_encoding(static_cast<proto::Encoding>(7));
       },
       "unknown encoding 7"},
      {[&](proto::TensorChunk& c) {
         c.set_encoding(proto::ENCODING_TOP_K);
         c.set_data(pair(static_cast<uint32_t>(c.num_elements())));
       },
       "not below the chunk's"},
      {[&](proto::TensorChunk& c) {
         c.set_encoding(proto::ENCODING_TOP_K);
         c.set_data(pair(0) + pair(0));
       },
       "strictly increase"},
  };
  for (const Case& c : cases) {
    std::vector<proto::PushRequest> push = ValidPush(0, 0, 1.0f);
    Encode(push, WireEncoding::kBfloat16);
    // The last message, after good ones that must not be applied either.
    c.mutate(*push.back().mutable_chunk());
    uint64_t version = 0;
    grpc::Status s = Push(push, &version);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.text;
    EXPECT_NE(s.error_message().find(c.text), std::string::npos)
        << s.error_message();
    EXPECT_NE(s.error_message().find(absl::StrCat("(", name, ")")),
              std::string::npos)
        << s.error_message();
    Weights weights;
    ASSERT_TRUE(Pull(0, 0, &weights, &version).ok());
    EXPECT_EQ(weights, InitialWeights()) << "a refused push changed weights";
  }
}

TEST_F(CompressionServiceTest, PullsRefuseTopKAndUnknownEncodings) {
  Start(ConsistencyMode::kAsync);
  Weights weights;
  grpc::Status top_k = PullEncoded(*this, *stub_, PullRequestFor(0),
                                   WireEncoding::kTopK, 1, &weights);
  EXPECT_EQ(top_k.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(top_k.error_message().find(partition_->model().tensors[0].name),
            std::string::npos)
      << top_k.error_message();
  proto::PullRequest unknown = PullRequestFor(0);
  unknown.add_tensor_encodings(static_cast<proto::Encoding>(5));
  uint64_t version = 0;
  grpc::Status s = SendPull(unknown, &weights, &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("unknown encoding 5"), std::string::npos);
}

TEST_F(CompressionServiceTest, PushPullWithABadPullEncodingAppliesNothing) {
  Start(ConsistencyMode::kAsync);
  std::vector<proto::PushRequest> push = ValidPush(0, 0, 1.0f);
  push.front().add_pull_encodings(proto::ENCODING_TOP_K);
  Weights weights;
  uint64_t version = 0;
  grpc::Status s = PushPull(push, 0, &weights, &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(Pull(0, 0, &weights, &version).ok());
  EXPECT_EQ(version, 0u);
  EXPECT_EQ(weights, InitialWeights());
}

}  // namespace
}  // namespace ps::server::testing
