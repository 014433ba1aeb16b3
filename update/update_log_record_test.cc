#include "update/update_log_record.h"

#include <cstring>
#include <string>
#include <variant>
#include <vector>

#include "gtest/gtest.h"

namespace ps::update {
namespace {

LoggedPush SamplePush() {
  LoggedPush p;
  p.rank = 3;
  p.incarnation = 0x123456789a;
  p.step = 77;
  p.base_version = 75;
  p.num_examples = 64;
  p.epoch = 2;
  p.examples_done = 1280;
  p.learning_rate = 0.125f;
  p.gradients = {{1.5f, -2.0f, 1e-30f}, {}, {3.25f}};
  return p;
}

TEST(UpdateLogRecordTest, PushRoundTripsBitForBit) {
  const LoggedPush p = SamplePush();
  absl::StatusOr<LogRecord> back = DecodeLogRecord(EncodeLogRecord(p));
  ASSERT_TRUE(back.ok()) << back.status();
  const LoggedPush& q = std::get<LoggedPush>(*back);
  EXPECT_EQ(q.rank, p.rank);
  EXPECT_EQ(q.incarnation, p.incarnation);
  EXPECT_EQ(q.step, p.step);
  EXPECT_EQ(q.base_version, p.base_version);
  EXPECT_EQ(q.num_examples, p.num_examples);
  EXPECT_EQ(q.epoch, p.epoch);
  EXPECT_EQ(q.examples_done, p.examples_done);
  EXPECT_EQ(q.learning_rate, p.learning_rate);
  EXPECT_EQ(q.gradients, p.gradients);
}

TEST(UpdateLogRecordTest, PushWithoutExamplesCarriesNoGradient) {
  LoggedPush p = SamplePush();
  p.num_examples = 0;
  p.learning_rate.reset();
  absl::StatusOr<LogRecord> back = DecodeLogRecord(EncodeLogRecord(p));
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(std::get<LoggedPush>(*back).gradients.empty());
  EXPECT_FALSE(std::get<LoggedPush>(*back).learning_rate.has_value());
}

LoggedStepMean SampleStep() {
  LoggedStepMean s;
  s.step = 12;
  s.learning_rate = 0.25f;
  s.parts = {{0, 11, 32, 1, 64}, {2, 10, 0, 1, 96}, {5, 12, 16, 2, 16}};
  s.mean = {{1.5f, -0.0f, 3e-39f}, {}, {-7.0f, 0.1f}};
  return s;
}

TEST(UpdateLogRecordTest, StepMeanRoundTripsBitForBit) {
  const LoggedStepMean s = SampleStep();
  absl::StatusOr<LogRecord> back = DecodeLogRecord(EncodeLogRecord(s));
  ASSERT_TRUE(back.ok()) << back.status();
  const LoggedStepMean& t = std::get<LoggedStepMean>(*back);
  EXPECT_EQ(t.step, 12u);
  EXPECT_EQ(t.learning_rate, 0.25f);
  ASSERT_EQ(t.parts.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(t.parts[i].rank, s.parts[i].rank);
    EXPECT_EQ(t.parts[i].base_version, s.parts[i].base_version);
    EXPECT_EQ(t.parts[i].num_examples, s.parts[i].num_examples);
    EXPECT_EQ(t.parts[i].epoch, s.parts[i].epoch);
    EXPECT_EQ(t.parts[i].examples_done, s.parts[i].examples_done);
  }
  ASSERT_EQ(t.mean.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(t.mean[i].size(), s.mean[i].size());
    EXPECT_EQ(std::memcmp(t.mean[i].data(), s.mean[i].data(),
                          s.mean[i].size() * sizeof(float)),
              0)
        << "slice " << i;
  }
  // The entry written where the mean lies is the same bytes.
  const LogEntry entry = MakeStepMeanEntry(s);
  EXPECT_EQ(entry.Payload(), EncodeLogRecord(s));
  EXPECT_EQ(entry.size(), EncodeLogRecord(s).size());
}

// What a sync step costs in the log: its mean once, not every worker's
// push. Two workers' pushes of a 1000-element shard are each 4000 bytes of
// gradient; the step's record carries 4000 bytes of mean and a few bytes a
// part.
TEST(UpdateLogRecordTest, AStepRecordHoldsOneMeanWhateverTheWorkers) {
  LoggedStepMean s;
  s.parts = {{0, 1, 32, 0, 32}, {1, 1, 32, 0, 32}};
  s.mean = {std::vector<float>(600, 1.0f), std::vector<float>(400, 2.0f)};
  const size_t two = EncodeLogRecord(s).size();
  s.parts.push_back({2, 1, 32, 0, 32});
  s.parts.push_back({3, 1, 32, 0, 32});
  const size_t four = EncodeLogRecord(s).size();
  EXPECT_EQ(four - two, 2 * 32u);  // Two parts more, no gradient more.
  LoggedPush push = SamplePush();
  push.gradients = s.mean;
  const size_t one_push = EncodeLogRecord(push).size();
  // Two workers' step: about one push's bytes, where logging every push
  // wrote two.
  EXPECT_LT(two, one_push + 2 * 32);
  EXPECT_GT(2 * one_push, two + 3900);
}

TEST(UpdateLogRecordTest, SmallRecordsRoundTrip) {
  const LoggedApply a{9, 0.5f};
  const LoggedRegister r{1, 99, 1000, 128};
  absl::StatusOr<LogRecord> back = DecodeLogRecord(EncodeLogRecord(a));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(std::get<LoggedApply>(*back).version, 9u);
  EXPECT_EQ(std::get<LoggedApply>(*back).learning_rate, 0.5f);
  back = DecodeLogRecord(EncodeLogRecord(r));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(std::get<LoggedRegister>(*back).incarnation, 99u);
  EXPECT_EQ(std::get<LoggedRegister>(*back).planned_steps, 1000u);
  EXPECT_EQ(std::get<LoggedRegister>(*back).max_examples, 128u);
  back = DecodeLogRecord(EncodeLogRecord(LoggedDone{4}));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(std::get<LoggedDone>(*back).rank, 4);
}

TEST(UpdateLogRecordTest, RefusesEveryTruncationAndTrailingBytes) {
  for (const LogRecord& record :
       {LogRecord(SamplePush()), LogRecord(LoggedApply{1, 2.0f}),
        LogRecord(SampleStep()), LogRecord(LoggedRegister{0, 1, 2, 3}),
        LogRecord(LoggedDone{1})}) {
    const std::string bytes = EncodeLogRecord(record);
    for (size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_EQ(DecodeLogRecord(bytes.substr(0, n)).status().code(),
                absl::StatusCode::kDataLoss)
          << "type " << record.index() << " cut to " << n;
    }
    EXPECT_EQ(DecodeLogRecord(bytes + "x").status().code(),
              absl::StatusCode::kDataLoss);
  }
  EXPECT_EQ(DecodeLogRecord(std::string("\x09\0\0\0", 4)).status().code(),
            absl::StatusCode::kDataLoss);
  // Format 2's sync step record (type 3) is not read.
  EXPECT_EQ(DecodeLogRecord(std::string("\x03\0\0\0", 4)).status().code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace ps::update
