#include "worker/worker_run.h"

#include <stdlib.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "gtest/gtest.h"

namespace ps::worker {
namespace {

void AppendBigEndian(uint32_t v, std::string* out) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    out->push_back(static_cast<char>((v >> shift) & 0xff));
  }
}

void WriteIdx(const std::string& path, uint32_t magic,
              const std::vector<uint32_t>& dims,
              const std::vector<uint8_t>& body) {
  std::string bytes;
  AppendBigEndian(magic, &bytes);
  for (uint32_t d : dims) AppendBigEndian(d, &bytes);
  bytes.append(body.begin(), body.end());
  std::ofstream(path, std::ios::binary) << bytes;
}

// A data directory of `examples` 2x2 images per split, labels 0..9 in turn.
std::string TinyData(int examples) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/worker_run_test.XXXXXX");
  EXPECT_NE(mkdtemp(dir.data()), nullptr) << dir;
  std::vector<uint8_t> pixels, labels;
  for (int i = 0; i < examples; ++i) {
    for (int p = 0; p < 4; ++p) pixels.push_back((i * 37 + p * 61) % 256);
    labels.push_back(i % 10);
  }
  for (const char* split : {"train", "t10k"}) {
    const uint32_t n = static_cast<uint32_t>(examples);
    WriteIdx(absl::StrCat(dir, "/", split, "-images-idx3-ubyte"), 0x803,
             {n, 2, 2}, pixels);
    WriteIdx(absl::StrCat(dir, "/", split, "-labels-idx1-ubyte"), 0x801, {n},
             labels);
  }
  return dir;
}

// Trains alone (--local), a tiny network on the tiny data.
WorkerConfig Local(const std::string& data_dir) {
  WorkerConfig config;
  config.local = true;
  config.data_dir = data_dir;
  config.model = "4-8-10";
  config.device = "cpu";
  config.epochs = 2;
  config.batch_size = 8;
  config.log_every = 1;
  return config;
}

TEST(WorkerRunTest, TrainsAloneToTheEnd) {
  EXPECT_EQ(WorkerRun(Local(TinyData(32)), 0).Run(), kExitOk);
}

TEST(WorkerRunTest, BadSettingsAndDataAreBadConfiguration) {
  const std::string data = TinyData(32);
  WorkerConfig two_workers = Local(data);
  two_workers.num_workers = 2;  // --local trains alone.
  EXPECT_EQ(WorkerRun(two_workers, 0).Run(), kExitBadConfig);

  WorkerConfig no_data = Local(data + "/none");
  EXPECT_EQ(WorkerRun(no_data, 0).Run(), kExitBadConfig);

  WorkerConfig wrong_input = Local(data);
  wrong_input.model = "9-8-10";  // The images have 4 pixels.
  EXPECT_EQ(WorkerRun(wrong_input, 0).Run(), kExitBadConfig);

  WorkerConfig other_mode = Local(data);
  other_mode.mode = "async";  // Training alone is sync.
  EXPECT_EQ(WorkerRun(other_mode, 0).Run(), kExitBadConfig);
}

TEST(WorkerRunTest, RankZeroElsewhereHasNothingToDo) {
  WorkerConfig config = Local("/no/data");
  config.rank0_elsewhere = true;
  config.rank = -1;  // Resolved to 0 from the Job's index.
  EXPECT_EQ(WorkerRun(config, 0).Run(), kExitOk);
  config.rank = 0;  // Only with a rank from the Job's index.
  EXPECT_EQ(WorkerRun(config, 0).Run(), kExitBadConfig);
}

TEST(WorkerRunTest, UnreachableServersAreLost) {
  WorkerConfig config = Local(TinyData(32));
  config.local = false;
  config.servers = "127.0.0.1:1";  // Nothing listens on port 1.
  config.retry_timeout = absl::ZeroDuration();
  EXPECT_EQ(WorkerRun(config, 0).Run(), kExitServersLost);
}

// NCCL sums GPU memory: asked for on a CPU worker (or in a build without
// it), the worker stops before joining the ring, as a configuration error.
TEST(WorkerRunTest, NcclOnACpuWorkerIsBadConfiguration) {
  WorkerConfig config = Local(TinyData(32));
  config.local = false;
  config.mode = kAllreduceMode;
  config.servers = "127.0.0.1:1";  // Never reached.
  config.allreduce_backend = "nccl";
  EXPECT_EQ(WorkerRun(config, 0).Run(), kExitBadConfig);
}

}  // namespace
}  // namespace ps::worker
