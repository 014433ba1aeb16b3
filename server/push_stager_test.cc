#include "server/push_stager.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/model_spec.h"
#include "common/partition.h"
#include "common/tensor_codec.h"
#include "gtest/gtest.h"

namespace ps::server {
namespace {

constexpr int kNumWorkers = 3;
constexpr int kServer = 1;

// One push message that owns its bytes and shape (ChunkView only views).
struct OwnedMessage {
  PushMessage message;
  std::vector<int64_t> shape;
  std::string data;

  PushMessage View() const {
    PushMessage m = message;
    m.chunk.shape = shape;
    m.chunk.data = data;
    return m;
  }
};

class PushStagerTest : public ::testing::Test {
 protected:
  PushStagerTest() {
    absl::StatusOr<Partition> p =
        Partition::Create(MlpModelSpec({20, 30, 5}), 2);
    EXPECT_TRUE(p.ok());
    update::OptimizerConfig config;
    store_ = *update::ShardStore::Create(*p, kServer, config);
    identity_ = {p->fingerprint(), kServer, kNumWorkers};
  }

  // Gradient value of an element: unique, so misplaced data shows.
  static float Value(uint32_t tensor, uint64_t element) {
    return static_cast<float>(tensor) * 1000.0f + static_cast<float>(element);
  }

  // A valid push from `rank`: every owned slice in chunks of `chunk`.
  std::vector<OwnedMessage> ValidPush(int rank, uint64_t chunk) const {
    std::vector<OwnedMessage> out;
    for (const Slice& s : store_->slices()) {
      for (uint64_t b = 0; b < s.num_elements; b += chunk) {
        const uint64_t n = std::min(chunk, s.num_elements - b);
        OwnedMessage m;
        m.message.header = {kProtocolVersionCurrent,
                            identity_.partition_fingerprint, rank, kServer};
        m.message.step = 4;
        m.message.base_version = 3;
        m.message.num_examples = 32;
        m.message.epoch = 1;
        m.message.examples_done = 160;
        m.message.has_chunk = true;
        m.message.chunk.tensor_id = s.tensor_id;
        m.message.chunk.dtype = kDTypeFloat32;
        m.message.chunk.offset = s.offset + b;
        m.message.chunk.num_elements = n;
        m.shape = store_->partition().model().tensors[s.tensor_id].shape;
        std::vector<float> values(n);
        for (uint64_t i = 0; i < n; ++i) {
          values[i] = Value(s.tensor_id, s.offset + b + i);
        }
        EncodeFloats(values, &m.data);
        out.push_back(std::move(m));
      }
    }
    return out;
  }

  // Feeds `messages`; returns the first error of Add or Finish.
  absl::StatusOr<StagedPush> Feed(const std::vector<OwnedMessage>& messages) {
    PushStager stager(store_.get(), identity_, min_chunk_elements_,
                      refuse_non_finite_);
    for (const OwnedMessage& m : messages) {
      absl::Status s = stager.Add(m.View());
      if (!s.ok()) {
        // A refused stream stays refused.
        EXPECT_EQ(stager.Finish().status(), s);
        return s;
      }
    }
    return stager.Finish();
  }

  void ExpectRefused(const std::vector<OwnedMessage>& messages,
                     absl::string_view expected_text) {
    absl::StatusOr<StagedPush> r = Feed(messages);
    ASSERT_FALSE(r.ok()) << "accepted; expected \"" << expected_text << "\"";
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(expected_text), std::string::npos)
        << r.status();
  }

  std::unique_ptr<update::ShardStore> store_;
  ShardIdentity identity_;
  uint64_t min_chunk_elements_ = 1;
  bool refuse_non_finite_ = true;
};

TEST_F(PushStagerTest, StagesACompletePushInAnyChunkOrder) {
  std::vector<OwnedMessage> push = ValidPush(2, 7);
  ASSERT_GT(push.size(), 3u);
  std::reverse(push.begin(), push.end());
  absl::StatusOr<StagedPush> staged = Feed(push);
  ASSERT_TRUE(staged.ok()) << staged.status();
  EXPECT_EQ(staged->rank, 2);
  EXPECT_EQ(staged->step, 4u);
  EXPECT_EQ(staged->base_version, 3u);
  EXPECT_EQ(staged->num_examples, 32u);
  EXPECT_EQ(staged->epoch, 1u);
  EXPECT_EQ(staged->examples_done, 160u);
  ASSERT_EQ(staged->gradients.size(), store_->slices().size());
  for (size_t i = 0; i < store_->slices().size(); ++i) {
    const Slice& s = store_->slices()[i];
    ASSERT_EQ(staged->gradients[i].num_elements(), s.num_elements);
    std::vector<float> values(s.num_elements);
    staged->gradients[i].Read(0, absl::MakeSpan(values));
    for (uint64_t e = 0; e < s.num_elements; ++e) {
      ASSERT_EQ(values[e], Value(s.tensor_id, s.offset + e));
    }
  }
}

TEST_F(PushStagerTest, AcceptsMessagesWithoutAChunk) {
  std::vector<OwnedMessage> push = ValidPush(0, 1000);
  OwnedMessage header_only = push[0];
  header_only.message.has_chunk = false;
  push.insert(push.begin(), header_only);
  EXPECT_TRUE(Feed(push).ok());
}

TEST_F(PushStagerTest, RejectsAnEmptyStream) {
  ExpectRefused({}, "no messages");
}

TEST_F(PushStagerTest, RejectsBadHeaders) {
  struct Case {
    std::function<void(RequestHeaderFields&)> mutate;
    const char* text;
  };
  const Case cases[] = {
      {[](RequestHeaderFields& h) { h.protocol_version = 1; },
       "protocol version 1 is not supported; this server speaks version 2"},
      {[](RequestHeaderFields& h) { h.partition_fingerprint ^= 1; },
       "partition fingerprint"},
      {[](RequestHeaderFields& h) { h.server_index = 0; },
       "request is for server 0 but this is server 1"},
      {[](RequestHeaderFields& h) { h.worker_rank = kNumWorkers; },
       "worker rank 3 is outside [0, 3)"},
      {[](RequestHeaderFields& h) { h.worker_rank = -1; }, "worker rank -1"},
  };
  for (const Case& c : cases) {
    for (size_t at : {size_t{0}, size_t{2}}) {
      std::vector<OwnedMessage> push = ValidPush(1, 10);
      c.mutate(push[at].message.header);
      ExpectRefused(push, c.text);
    }
  }
}

TEST_F(PushStagerTest, RejectsMetadataThatChangesWithinTheStream) {
  struct Case {
    std::function<void(PushMessage&)> mutate;
    const char* text;
  };
  const Case cases[] = {
      {[](PushMessage& m) { m.header.worker_rank = 2; },
       "worker_rank changed within the push stream from 1 to 2"},
      {[](PushMessage& m) { m.step = 5; }, "step changed"},
      {[](PushMessage& m) { m.base_version = 0; }, "base_version changed"},
      {[](PushMessage& m) { m.num_examples = 31; }, "num_examples changed"},
      {[](PushMessage& m) { m.epoch = 2; }, "epoch changed"},
      {[](PushMessage& m) { m.examples_done = 161; }, "examples_done changed"},
      {[](PushMessage& m) { m.header.incarnation = 9; },
       "request header changed"},
  };
  for (const Case& c : cases) {
    std::vector<OwnedMessage> push = ValidPush(1, 10);
    c.mutate(push.back().message);
    ExpectRefused(push, c.text);
  }
}

TEST_F(PushStagerTest, AcceptsZeroExamplesAndKeepsTheIncarnation) {
  // A rank's empty share of an epoch's last batch still takes part.
  std::vector<OwnedMessage> push = ValidPush(1, 10);
  for (OwnedMessage& m : push) {
    m.message.num_examples = 0;
    m.message.header.incarnation = 77;
  }
  absl::StatusOr<StagedPush> staged = Feed(push);
  ASSERT_TRUE(staged.ok()) << staged.status();
  EXPECT_EQ(staged->num_examples, 0u);
  EXPECT_EQ(staged->incarnation, 77u);
  EXPECT_EQ(staged->epoch, 1u);
  EXPECT_EQ(staged->examples_done, 160u);
}

TEST_F(PushStagerTest, RejectsProgressThatDoesNotCountTheBatch) {
  std::vector<OwnedMessage> push = ValidPush(1, 10);
  for (OwnedMessage& m : push) m.message.examples_done = 31;
  ExpectRefused(push, "examples_done 31 is below num_examples 32");
}

TEST_F(PushStagerTest, KeepsTheWorkersLearningRate) {
  std::vector<OwnedMessage> push = ValidPush(1, 10);
  absl::StatusOr<StagedPush> staged = Feed(push);
  ASSERT_TRUE(staged.ok()) << staged.status();
  EXPECT_FALSE(staged->learning_rate.has_value());
  // A scheduler may take it to 0 (a warm-up's first step).
  for (float lr : {0.25f, 0.0f}) {
    push[0].message.learning_rate = lr;
    staged = Feed(push);
    ASSERT_TRUE(staged.ok()) << staged.status();
    EXPECT_EQ(staged->learning_rate, lr);
  }
}

TEST_F(PushStagerTest, RejectsALearningRateThatIsNotFiniteAndNonNegative) {
  for (float lr : {-0.1f, NAN, INFINITY}) {
    std::vector<OwnedMessage> push = ValidPush(1, 10);
    push[0].message.learning_rate = lr;
    ExpectRefused(push, "is not finite and >= 0");
  }
}

TEST_F(PushStagerTest, RejectsChunksThatDoNotMatchTheModel) {
  std::vector<OwnedMessage> push = ValidPush(1, 10);
  push[1].message.chunk.tensor_id = 4;
  ExpectRefused(push, "tensor id 4 is not below the model's 4 tensors");

  push = ValidPush(1, 10);
  push[1].message.chunk.dtype = 0;
  ExpectRefused(push, "dtype 0");

  push = ValidPush(1, 10);
  push[1].shape.push_back(1);
  ExpectRefused(push, "has shape");

  push = ValidPush(1, 10);
  push[1].data.pop_back();
  ExpectRefused(push, "bytes, expected 40");

  push = ValidPush(1, 10);
  push[1].message.chunk.num_elements = 0;
  push[1].data.clear();
  ExpectRefused(push, "is empty");
}

TEST_F(PushStagerTest, RefusesChunksBelowTheMinimumButASlicesLast) {
  min_chunk_elements_ = 8;
  // Chunks of 8: every slice's last chunk holds what is left, maybe fewer.
  EXPECT_TRUE(Feed(ValidPush(1, 8)).ok());
  ExpectRefused(ValidPush(1, 3), "holds 3 elements; chunks hold at least 8");
}

TEST_F(PushStagerTest, RejectsChunksOutsideThisServersSlices) {
  // A slice of the other server, named as the spec asks.
  const Slice other = store_->partition().SlicesOfServer(0).front();
  std::vector<OwnedMessage> push = ValidPush(1, 10);
  push[0].message.chunk.tensor_id = other.tensor_id;
  push[0].message.chunk.offset = other.offset;
  push[0].shape = store_->partition().model().tensors[other.tensor_id].shape;
  ExpectRefused(push, absl::StrCat("tensor ", other.tensor_id, " chunk [",
                                   other.offset, ", ", other.offset + 10,
                                   ") is outside this server's slices"));

  // Running past the end of an owned slice.
  push = ValidPush(1, 10);
  OwnedMessage& last = push.back();
  last.message.chunk.num_elements += 1;
  last.data.append(4, '\0');
  ExpectRefused(push, "is outside this server's slices");

  // An offset so large that offset + n wraps around.
  push = ValidPush(1, 10);
  push[0].message.chunk.offset = UINT64_MAX - 2;
  ExpectRefused(push, "is outside this server's slices");
}

TEST_F(PushStagerTest, RejectsElementsSentTwice) {
  std::vector<OwnedMessage> push = ValidPush(1, 10);
  push.push_back(push[1]);
  ExpectRefused(push, "overlaps elements already sent");

  // Partial overlap with the previous chunk.
  push = ValidPush(1, 10);
  push[1].message.chunk.offset -= 1;
  ExpectRefused(push, "overlaps");
}

TEST_F(PushStagerTest, RefusesANonFiniteGradientNamingTensorAndElement) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<OwnedMessage> push = ValidPush(1, 10);
    // The last message's fourth element: every earlier one was fine.
    OwnedMessage& last = push.back();
    std::vector<float> values(last.message.chunk.num_elements);
    ASSERT_TRUE(DecodeFloats(last.data, absl::MakeSpan(values)).ok());
    ASSERT_GT(values.size(), 3u);
    values[3] = bad;
    EncodeFloats(values, &last.data);
    const TensorSpec& tensor =
        store_->partition().model().tensors[last.message.chunk.tensor_id];
    ExpectRefused(push, absl::StrCat("gradient of ", tensor.name, " (tensor ",
                                     last.message.chunk.tensor_id, ") element ",
                                     last.message.chunk.offset + 3, " is ", bad,
                                     ": non-finite gradients are refused"));
  }
}

TEST_F(PushStagerTest, LetsNonFiniteGradientsPassWhenTold) {
  refuse_non_finite_ = false;
  std::vector<OwnedMessage> push = ValidPush(1, 10);
  OwnedMessage& last = push.back();
  std::vector<float> values(last.message.chunk.num_elements, 1.0f);
  values[0] = std::numeric_limits<float>::quiet_NaN();
  EncodeFloats(values, &last.data);
  EXPECT_TRUE(Feed(push).ok());
}

TEST_F(PushStagerTest, RejectsAnIncompletePushNamingTheGap) {
  std::vector<OwnedMessage> push = ValidPush(1, 10);
  const uint64_t missing = push[1].message.chunk.offset;
  push.erase(push.begin() + 1);
  ExpectRefused(push, absl::StrCat("first missing element is ", missing));
}

// Feeds `messages` to `stager` with data cords over their own bytes, each
// counting into `released` when let go: how many copies the stager kept.
absl::Status FeedCounted(PushStager& stager,
                         const std::vector<OwnedMessage>& messages,
                         int* released) {
  for (const OwnedMessage& m : messages) {
    PushMessage view = m.View();
    view.chunk.data =
        absl::MakeCordFromExternal(m.data, [released] { ++*released; });
    if (absl::Status s = stager.Add(view); !s.ok()) return s;
  }
  return absl::OkStatus();
}

TEST_F(PushStagerTest, KeepsTheReceivedBytesUntilThePushIsDropped) {
  const std::vector<OwnedMessage> push = ValidPush(0, 9);
  int released = 0;
  std::optional<absl::StatusOr<StagedPush>> staged;
  {
    PushStager stager(store_.get(), identity_);
    ASSERT_TRUE(FeedCounted(stager, push, &released).ok());
    staged = stager.Finish();
  }
  ASSERT_TRUE(staged->ok()) << staged->status();
  EXPECT_EQ(released, 0);  // Never copied out: the push holds them.
  staged.reset();
  EXPECT_EQ(released, static_cast<int>(push.size()));
}

TEST_F(PushStagerTest, RefusedPushLetsGoOfTheReceivedBytesAtOnce) {
  std::vector<OwnedMessage> push = ValidPush(1, 10);
  push[2].message.step = 99;
  int released = 0;
  PushStager stager(store_.get(), identity_);
  EXPECT_FALSE(FeedCounted(stager, push, &released).ok());
  // Messages 0 and 1 were taken, then let go; 2 was refused.
  EXPECT_EQ(released, 3);
}

}  // namespace
}  // namespace ps::server
