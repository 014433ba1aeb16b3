#include "update/update_log.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/temp_dir_testing.h"
#include "gtest/gtest.h"

namespace ps::update {
namespace {

std::vector<const LogEntry*> Pointers(const std::vector<LogEntry>& entries) {
  std::vector<const LogEntry*> out;
  for (const LogEntry& e : entries) out.push_back(&e);
  return out;
}

class UpdateLogTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = ps::testing::FreshTestDir("update_log"); }

  std::string WriteLog(uint64_t start,
                       const std::vector<std::string>& records) {
    std::vector<LogEntry> entries;
    for (const std::string& r : records) entries.push_back(MakeLogEntry(r));
    absl::StatusOr<std::unique_ptr<UpdateLogWriter>> writer =
        UpdateLogWriter::Create(dir_, 3, start, {}, /*fsync=*/false);
    EXPECT_TRUE(writer.ok()) << writer.status();
    for (const LogEntry& e : entries) EXPECT_TRUE((*writer)->Append({&e}).ok());
    return (*writer)->path();
  }

  std::string dir_;
};

TEST_F(UpdateLogTest, ReadsBackWhatWasAppended) {
  const std::string path = WriteLog(40, {"one", std::string(5000, 'x'), ""});
  EXPECT_EQ(path, dir_ + "/shard-3-40.wal");
  absl::StatusOr<UpdateLogContents> read = ReadUpdateLog(path, 3);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->start_version, 40u);
  EXPECT_EQ(read->records,
            (std::vector<std::string>{"one", std::string(5000, 'x'), ""}));
  EXPECT_EQ(read->torn_bytes, 0u);
  EXPECT_EQ(read->valid_bytes, std::filesystem::file_size(path));
}

TEST_F(UpdateLogTest, CreateRestatesInitialRecords) {
  std::vector<LogEntry> initial;
  initial.push_back(MakeLogEntry("a"));
  initial.push_back(MakeLogEntry("bb"));
  absl::StatusOr<std::unique_ptr<UpdateLogWriter>> writer =
      UpdateLogWriter::Create(dir_, 3, 7, Pointers(initial), true);
  ASSERT_TRUE(writer.ok());
  LogEntry more = MakeLogEntry("ccc");
  ASSERT_TRUE((*writer)->Append({&more}).ok());
  absl::StatusOr<UpdateLogContents> read = ReadUpdateLog((*writer)->path(), 3);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->records, (std::vector<std::string>{"a", "bb", "ccc"}));
}

TEST_F(UpdateLogTest, WritesAnEntrysPiecesAsOneRecord) {
  const std::string borrowed = "borrowed bytes";
  LogEntry entry;
  entry.AddOwned("head:");
  entry.pieces.push_back(borrowed);
  entry.AddOwned("");
  entry.AddOwned(":tail");
  SealLogEntry(entry);
  EXPECT_EQ(entry.crc, MakeLogEntry("head:borrowed bytes:tail").crc);
  // Moved, as entries are: the pieces stay valid.
  std::vector<LogEntry> moved;
  moved.push_back(std::move(entry));
  moved.push_back(MakeLogEntry("x"));
  absl::StatusOr<std::unique_ptr<UpdateLogWriter>> writer =
      UpdateLogWriter::Create(dir_, 3, 0, Pointers(moved), false);
  ASSERT_TRUE(writer.ok());
  absl::StatusOr<UpdateLogContents> read = ReadUpdateLog((*writer)->path(), 3);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->records,
            (std::vector<std::string>{"head:borrowed bytes:tail", "x"}));
}

TEST_F(UpdateLogTest, DropsARecordCutShortAtTheEnd) {
  const std::string path = WriteLog(0, {"first", "second record"});
  const uint64_t size = std::filesystem::file_size(path);
  for (uint64_t cut = 1; cut < 8 + 13; ++cut) {
    std::filesystem::copy_file(
        path, path + ".cut", std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(path + ".cut", size - cut);
    absl::StatusOr<UpdateLogContents> read = ReadUpdateLog(path + ".cut", 3);
    ASSERT_TRUE(read.ok()) << cut << ": " << read.status();
    EXPECT_EQ(read->records, std::vector<std::string>{"first"}) << cut;
    EXPECT_EQ(read->torn_bytes, 8 + 13 - cut);
  }
}

TEST_F(UpdateLogTest, DropsALastRecordThatFailsItsChecksum) {
  const std::string path = WriteLog(0, {"first", "second"});
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('X');
  }
  absl::StatusOr<UpdateLogContents> read = ReadUpdateLog(path, 3);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->records, std::vector<std::string>{"first"});
  EXPECT_GT(read->torn_bytes, 0u);
}

TEST_F(UpdateLogTest, RefusesACorruptRecordInTheMiddle) {
  const std::string path = WriteLog(0, {"first", "second", "third"});
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(24 + 8 + 2);  // Inside "first".
    f.put('X');
  }
  absl::StatusOr<UpdateLogContents> read = ReadUpdateLog(path, 3);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(read.status().message().find("record 1"), std::string::npos)
      << read.status();
}

TEST_F(UpdateLogTest, RefusesAnotherShardsLogAndABadHeader) {
  const std::string path = WriteLog(0, {"x"});
  EXPECT_EQ(ReadUpdateLog(path, 2).status().code(),
            absl::StatusCode::kDataLoss);
  std::filesystem::resize_file(path, 10);
  EXPECT_EQ(ReadUpdateLog(path, 3).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadUpdateLog(dir_ + "/none.wal", 3).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(UpdateLogTest, ReopenCutsTheTornTailAndAppends) {
  const std::string path = WriteLog(5, {"first", "second"});
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 2);
  absl::StatusOr<UpdateLogContents> read = ReadUpdateLog(path, 3);
  ASSERT_TRUE(read.ok());
  absl::StatusOr<std::unique_ptr<UpdateLogWriter>> writer =
      UpdateLogWriter::Reopen(path, read->valid_bytes, false);
  ASSERT_TRUE(writer.ok());
  LogEntry third = MakeLogEntry("third");
  ASSERT_TRUE((*writer)->Append({&third}).ok());
  read = ReadUpdateLog(path, 3);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->records, (std::vector<std::string>{"first", "third"}));
  EXPECT_EQ(read->torn_bytes, 0u);
}

TEST_F(UpdateLogTest, ReopenLeavesOtherNamesOfTheFileAsTheyWere) {
  const std::string path = WriteLog(5, {"first"});
  const std::string link = dir_ + "/kept-copy";
  std::filesystem::create_hard_link(path, link);
  const uintmax_t size = std::filesystem::file_size(link);
  absl::StatusOr<UpdateLogContents> read = ReadUpdateLog(path, 3);
  ASSERT_TRUE(read.ok());
  absl::StatusOr<std::unique_ptr<UpdateLogWriter>> writer =
      UpdateLogWriter::Reopen(path, read->valid_bytes, false);
  ASSERT_TRUE(writer.ok());
  LogEntry second = MakeLogEntry("second");
  ASSERT_TRUE((*writer)->Append({&second}).ok());
  EXPECT_EQ(std::filesystem::file_size(link), size);
  EXPECT_EQ(ReadUpdateLog(path, 3)->records,
            (std::vector<std::string>{"first", "second"}));
}

TEST_F(UpdateLogTest, FsyncedFilesHoldTheSameBytes) {
  std::vector<LogEntry> initial;
  initial.push_back(MakeLogEntry("a"));
  std::string plain;
  for (bool fsync : {false, true}) {
    SCOPED_TRACE(fsync ? "fsync" : "no fsync");
    const std::string dir = dir_ + (fsync ? "/synced" : "/plain");
    absl::StatusOr<std::unique_ptr<UpdateLogWriter>> writer =
        UpdateLogWriter::Create(dir, 3, 7, Pointers(initial), fsync);
    ASSERT_TRUE(writer.ok()) << writer.status();
    const LogEntry more = MakeLogEntry("bb");
    ASSERT_TRUE((*writer)->Append({&more}).ok());
    const std::string path = (*writer)->path();
    writer->reset();
    absl::StatusOr<UpdateLogContents> read = ReadUpdateLog(path, 3);
    ASSERT_TRUE(read.ok()) << read.status();
    absl::StatusOr<std::unique_ptr<UpdateLogWriter>> reopened =
        UpdateLogWriter::Reopen(path, read->valid_bytes, fsync);
    ASSERT_TRUE(reopened.ok()) << reopened.status();
    const LogEntry last = MakeLogEntry("ccc");
    ASSERT_TRUE((*reopened)->Append({&last}).ok());
    read = ReadUpdateLog(path, 3);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->records, (std::vector<std::string>{"a", "bb", "ccc"}));
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)),
                            std::istreambuf_iterator<char>());
    if (fsync) {
      EXPECT_EQ(bytes, plain);
    } else {
      plain = bytes;
    }
  }
}

TEST_F(UpdateLogTest, ListsOldestFirstAndPrunes) {
  WriteLog(200, {});
  WriteLog(0, {});
  WriteLog(1000, {});
  std::ofstream(dir_ + "/shard-4-10.wal") << "other shard";
  std::ofstream(dir_ + "/shard-3-9.wal.tmp") << "not finished";
  absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>> logs =
      ListUpdateLogs(dir_, 3);
  ASSERT_TRUE(logs.ok());
  ASSERT_EQ(logs->size(), 3u);
  EXPECT_EQ((*logs)[0].first, 0u);
  EXPECT_EQ((*logs)[1].first, 200u);
  EXPECT_EQ((*logs)[2].first, 1000u);
  ASSERT_TRUE(PruneUpdateLogs(dir_, 3, 1000).ok());
  logs = ListUpdateLogs(dir_, 3);
  ASSERT_EQ(logs->size(), 1u);
  EXPECT_EQ((*logs)[0].first, 1000u);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/shard-4-10.wal"));
  EXPECT_TRUE(ListUpdateLogs(dir_ + "/missing", 3)->empty());
}

}  // namespace
}  // namespace ps::update
