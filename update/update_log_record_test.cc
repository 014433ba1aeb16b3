#include "update/update_log_record.h"

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

TEST(UpdateLogRecordTest, SmallRecordsRoundTrip) {
  const LoggedApply a{9, 0.5f};
  const LoggedStep s{12, std::nullopt, {0, 2, 5}};
  const LoggedRegister r{1, 99, 1000, 128};
  absl::StatusOr<LogRecord> back = DecodeLogRecord(EncodeLogRecord(a));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(std::get<LoggedApply>(*back).version, 9u);
  EXPECT_EQ(std::get<LoggedApply>(*back).learning_rate, 0.5f);
  back = DecodeLogRecord(EncodeLogRecord(s));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(std::get<LoggedStep>(*back).step, 12u);
  EXPECT_FALSE(std::get<LoggedStep>(*back).learning_rate.has_value());
  EXPECT_EQ(std::get<LoggedStep>(*back).ranks, (std::vector<int>{0, 2, 5}));
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
        LogRecord(LoggedStep{1, 1.0f, {0, 1}}),
        LogRecord(LoggedRegister{0, 1, 2, 3}), LogRecord(LoggedDone{1})}) {
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
}

}  // namespace
}  // namespace ps::update
