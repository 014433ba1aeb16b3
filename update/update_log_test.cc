#include "update/update_log.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
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

ino_t Inode(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_ino;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

// `file` with its salt and the checksums over it zeroed.
std::string WithoutSalt(std::string file) {
  constexpr size_t kHeader = 32;
  if (file.size() < kHeader) return file;
  std::fill(file.begin() + 20, file.begin() + kHeader, '\0');
  for (size_t at = kHeader; at + kLogRecordPrefixBytes <= file.size();) {
    const uint32_t length =
        static_cast<uint8_t>(file[at]) |
        static_cast<uint8_t>(file[at + 1]) << 8 |
        static_cast<uint8_t>(file[at + 2]) << 16 |
        static_cast<uint32_t>(static_cast<uint8_t>(file[at + 3])) << 24;
    std::fill(file.begin() + at + 8, file.begin() + at + 12, '\0');
    at += kLogRecordPrefixBytes + length;
  }
  return file;
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
  const uint64_t record = kLogRecordPrefixBytes + 13;
  for (uint64_t cut = 1; cut < record; ++cut) {
    std::filesystem::copy_file(
        path, path + ".cut", std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(path + ".cut", size - cut);
    absl::StatusOr<UpdateLogContents> read = ReadUpdateLog(path + ".cut", 3);
    ASSERT_TRUE(read.ok()) << cut << ": " << read.status();
    EXPECT_EQ(read->records, std::vector<std::string>{"first"}) << cut;
    EXPECT_EQ(read->tail_bytes, record - cut);
    // With its prefix whole, the record is known to be one cut off.
    EXPECT_EQ(read->torn_bytes, cut <= 13 ? record - cut : 0) << cut;
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
    f.seekp(32 + kLogRecordPrefixBytes + 2);  // Inside "first".
    f.put('X');
  }
  absl::StatusOr<UpdateLogContents> read = ReadUpdateLog(path, 3);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(read.status().message().find("record 1"), std::string::npos)
      << read.status();
}

TEST_F(UpdateLogTest, RefusesADamagedPrefixInTheMiddle) {
  const std::string path = WriteLog(0, {"first", "second", "third"});
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(32 + kLogRecordPrefixBytes + 5 + 1);  // The length of "second".
    f.put('\x7f');
  }
  absl::StatusOr<UpdateLogContents> read = ReadUpdateLog(path, 3);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(read.status().message().find("record 2"), std::string::npos)
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
      // The same bytes but for the salt (random per file) and what it
      // checks: the header's salt and checksum, each record's prefix check.
      EXPECT_EQ(WithoutSalt(bytes), WithoutSalt(plain));
    } else {
      plain = bytes;
    }
  }
}

// The file pruned is written over by the next one: the same inode, none of
// its earlier records read back, and an append cut off in it is dropped.
TEST_F(UpdateLogTest, RecyclesThePrunedFileInPlace) {
  const std::string old_path =
      WriteLog(0, {std::string(3000, 'a'), std::string(3000, 'b'), "c"});
  const ino_t old_inode = Inode(old_path);
  WriteLog(10, {"x"});
  ASSERT_TRUE(PruneUpdateLogs(dir_, 3, 10).ok());
  EXPECT_FALSE(std::filesystem::exists(old_path));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/" + SpareLogFileName(3)));
  // Kept open: closing it cuts the earlier bytes off.
  std::vector<LogEntry> entries;
  entries.push_back(MakeLogEntry("new"));
  entries.push_back(MakeLogEntry("records"));
  absl::StatusOr<std::unique_ptr<UpdateLogWriter>> open_writer =
      UpdateLogWriter::Create(dir_, 3, 20, Pointers(entries), false);
  ASSERT_TRUE(open_writer.ok()) << open_writer.status();
  const std::string path = (*open_writer)->path();
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/" + SpareLogFileName(3)));
  EXPECT_EQ(Inode(path), old_inode);
  absl::StatusOr<UpdateLogContents> read = ReadUpdateLog(path, 3);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->start_version, 20u);
  EXPECT_EQ(read->records, (std::vector<std::string>{"new", "records"}));
  EXPECT_GT(read->tail_bytes, 3000u);
  EXPECT_EQ(read->torn_bytes, 0u);
  // The last record's payload damaged, with the earlier bytes after it:
  // an append cut off, not corruption.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(read->valid_bytes) - 1);
    f.put('X');
  }
  read = ReadUpdateLog(path, 3);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->records, std::vector<std::string>{"new"});
  EXPECT_EQ(read->torn_bytes, kLogRecordPrefixBytes + 7);
  // Reopened (the shard died), it is cut there and goes on.
  open_writer->reset();
  absl::StatusOr<std::unique_ptr<UpdateLogWriter>> writer =
      UpdateLogWriter::Reopen(path, read->valid_bytes, false);
  ASSERT_TRUE(writer.ok()) << writer.status();
  LogEntry more = MakeLogEntry("more");
  ASSERT_TRUE((*writer)->Append({&more}).ok());
  read = ReadUpdateLog(path, 3);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->records, (std::vector<std::string>{"new", "more"}));
  EXPECT_EQ(read->tail_bytes, 0u);
}

TEST_F(UpdateLogTest, ClosingARecycledFileCutsItsEarlierBytes) {
  WriteLog(0, {std::string(5000, 'a')});
  WriteLog(10, {});
  ASSERT_TRUE(PruneUpdateLogs(dir_, 3, 10).ok());
  const std::string path = WriteLog(20, {"short"});  // Closed on return.
  absl::StatusOr<UpdateLogContents> read = ReadUpdateLog(path, 3);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->records, std::vector<std::string>{"short"});
  EXPECT_EQ(read->tail_bytes, 0u);
  EXPECT_EQ(std::filesystem::file_size(path), read->valid_bytes);
  // A stopping shard leaves no spare.
  WriteLog(30, {});
  ASSERT_TRUE(PruneUpdateLogs(dir_, 3, 30).ok());
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/" + SpareLogFileName(3)));
  RemoveSpareLog(dir_, 3);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/" + SpareLogFileName(3)));
}

// A preallocating writer's file, read while it is open (as after a kill):
// the zeros past the records are no record and no damage; closed, the file
// is cut to its records.
TEST_F(UpdateLogTest, PreallocatedZerosAreNeitherRecordsNorDamage) {
  const LogEntry first = MakeLogEntry("first");
  const LogEntry second = MakeLogEntry(std::string(3000, 's'));
  std::string path;
  {
    absl::StatusOr<std::unique_ptr<UpdateLogWriter>> writer =
        UpdateLogWriter::Create(dir_, 3, 0, {}, /*fsync=*/false,
                                /*preallocate_bytes=*/1 << 20);
    ASSERT_TRUE(writer.ok()) << writer.status();
    path = (*writer)->path();
    ASSERT_TRUE((*writer)->Append({&first}).ok());
    ASSERT_TRUE((*writer)->Append({&second}).ok());
    absl::StatusOr<UpdateLogContents> read = ReadUpdateLog(path, 3);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->records,
              (std::vector<std::string>{"first", std::string(3000, 's')}));
    EXPECT_EQ(read->torn_bytes, 0u);
    EXPECT_EQ(read->valid_bytes + read->tail_bytes,
              std::filesystem::file_size(path));
  }
  absl::StatusOr<UpdateLogContents> read = ReadUpdateLog(path, 3);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->records.size(), 2u);
  EXPECT_EQ(std::filesystem::file_size(path), read->valid_bytes);
}

// Only new files are preallocated: a recycled one has its blocks.
TEST_F(UpdateLogTest, PreallocatesNewFilesOnly) {
  const LogEntry entry = MakeLogEntry("x");
  {
    absl::StatusOr<std::unique_ptr<UpdateLogWriter>> writer =
        UpdateLogWriter::Create(dir_, 3, 0, {}, false, 1 << 20);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->Append({&entry}).ok());
    EXPECT_TRUE((*writer)->preallocates());
    // The thread fills the first MiB past the record: 1 MiB at least, soon.
    while (std::filesystem::file_size((*writer)->path()) < (1u << 20)) {
      std::this_thread::yield();
    }
  }
  WriteLog(10, {std::string(5000, 'a')});
  ASSERT_TRUE(PruneUpdateLogs(dir_, 3, 10).ok());  // The first is the spare.
  const uint64_t spare =
      std::filesystem::file_size(dir_ + "/" + SpareLogFileName(3));
  absl::StatusOr<std::unique_ptr<UpdateLogWriter>> writer =
      UpdateLogWriter::Create(dir_, 3, 20, {}, false, 1 << 20);
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_FALSE((*writer)->preallocates());
  ASSERT_TRUE((*writer)->Append({&entry}).ok());
  EXPECT_EQ(std::filesystem::file_size((*writer)->path()), spare);
}

// Zeros between a damaged record and a whole one after it hide nothing.
TEST_F(UpdateLogTest, RefusesADamagedRecordBeforeZerosAndARecord) {
  const LogEntry first = MakeLogEntry("first");
  const LogEntry zeros = MakeLogEntry(std::string(100000, '\0'));
  const LogEntry last = MakeLogEntry("last");
  std::string path;
  {
    absl::StatusOr<std::unique_ptr<UpdateLogWriter>> writer =
        UpdateLogWriter::Create(dir_, 3, 0, {}, false, 1 << 20);
    ASSERT_TRUE(writer.ok()) << writer.status();
    path = (*writer)->path();
    ASSERT_TRUE((*writer)->Append({&first, &zeros, &last}).ok());
  }
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    // The length of the record of zeros.
    f.seekp(32 + kLogRecordPrefixBytes + 5 + 1);
    f.put('\x7f');
  }
  absl::StatusOr<UpdateLogContents> read = ReadUpdateLog(path, 3);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(read.status().message().find("record 2"), std::string::npos)
      << read.status();
}

TEST_F(UpdateLogTest, NeverWritesOverAFileWithAnotherName) {
  const std::string old_path = WriteLog(0, {"kept"});
  const std::string link = dir_ + "/kept-copy";
  std::filesystem::create_hard_link(old_path, link);
  const std::string copy_before = ReadAll(link);
  WriteLog(10, {});
  ASSERT_TRUE(PruneUpdateLogs(dir_, 3, 10).ok());
  EXPECT_FALSE(std::filesystem::exists(old_path));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/" + SpareLogFileName(3)));
  // A spare linked after it was made is not written over either.
  const std::string other = WriteLog(20, {"other"});
  std::filesystem::rename(other, dir_ + "/" + SpareLogFileName(3));
  std::filesystem::create_hard_link(dir_ + "/" + SpareLogFileName(3),
                                    dir_ + "/spare-copy");
  const std::string spare_before = ReadAll(dir_ + "/spare-copy");
  const std::string path = WriteLog(30, {std::string(100, 'z')});
  EXPECT_EQ(ReadAll(link), copy_before);
  EXPECT_EQ(ReadAll(dir_ + "/spare-copy"), spare_before);
  EXPECT_NE(Inode(path), Inode(dir_ + "/spare-copy"));
  EXPECT_EQ(ReadUpdateLog(path, 3)->records,
            std::vector<std::string>{std::string(100, 'z')});
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
  // The newest pruned is kept to be written over.
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/" + SpareLogFileName(3)));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/shard-4-10.wal"));
  EXPECT_TRUE(ListUpdateLogs(dir_ + "/missing", 3)->empty());
}

}  // namespace
}  // namespace ps::update
