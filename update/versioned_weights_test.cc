#include "update/versioned_weights.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace ps::update {
namespace {

TEST(VersionedWeightsTest, WritesInPlaceWhileNothingIsShared) {
  VersionedWeights weights({1, 2, 3});
  const float* before = weights.values().data();
  absl::Span<float> out = weights.Writable();
  out[0] = 7;
  EXPECT_FALSE(weights.last_write_copied());
  EXPECT_EQ(out.data(), before);
  // A version taken and dropped again leaves nothing to protect.
  weights.Share().reset();
  EXPECT_EQ(weights.Writable().data(), before);
  EXPECT_FALSE(weights.last_write_copied());
  EXPECT_EQ(weights.values(), (std::vector<float>{7, 2, 3}));
}

TEST(VersionedWeightsTest, ASharedVersionNeverChanges) {
  VersionedWeights weights({1, 2, 3});
  const VersionedWeights::Version pulled = weights.Share();
  absl::Span<float> out = weights.Writable();
  EXPECT_TRUE(weights.last_write_copied());
  EXPECT_EQ(std::vector<float>(out.begin(), out.end()),
            (std::vector<float>{1, 2, 3}));  // The copy starts from it.
  out[1] = 9;
  EXPECT_EQ(*pulled, (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(weights.values(), (std::vector<float>{1, 9, 3}));

  weights.Assign(std::vector<float>{4, 5, 6});  // Not shared: in place.
  EXPECT_FALSE(weights.last_write_copied());
  const VersionedWeights::Version again = weights.Share();
  weights.Assign(std::vector<float>{0, 0, 0});
  EXPECT_TRUE(weights.last_write_copied());
  EXPECT_EQ(*again, (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(*pulled, (std::vector<float>{1, 2, 3}));
}

TEST(VersionedWeightsTest, AReleasedVersionsBufferIsReused) {
  VersionedWeights weights(std::vector<float>(1000, 1.0f));
  VersionedWeights::Version pulled = weights.Share();
  const float* old_buffer = pulled->data();
  weights.Writable()[0] = 2;  // Copies; `pulled` keeps the old buffer.
  pulled.reset();             // Back to the pool.
  pulled = weights.Share();
  weights.Writable()[0] = 3;  // Copies into the pooled buffer.
  EXPECT_TRUE(weights.last_write_copied());
  EXPECT_EQ(weights.values().data(), old_buffer);
  EXPECT_EQ(weights.values()[0], 3);
  EXPECT_EQ(weights.values()[999], 1);
  EXPECT_EQ((*pulled)[0], 2);
}

TEST(VersionedWeightsTest, AVersionOutlivesItsWeights) {
  VersionedWeights::Version pulled;
  {
    VersionedWeights weights({5, 6});
    pulled = weights.Share();
    weights.Writable()[0] = 0;
  }
  EXPECT_EQ(*pulled, (std::vector<float>{5, 6}));
  pulled.reset();  // Returns the buffer to a pool only the deleter holds.
}

}  // namespace
}  // namespace ps::update
