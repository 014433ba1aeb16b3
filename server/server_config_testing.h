#ifndef PS_SERVER_SERVER_CONFIG_TESTING_H_
#define PS_SERVER_SERVER_CONFIG_TESTING_H_

// Configurations for the tests of the server's parts (ShardBuilder,
// ShardHost, the transports, ...), which take a ServerConfig without its
// flags.
#include <stdlib.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/checkpointer.h"
#include "server/server_config.h"
#include "update/lr_schedule.h"

namespace ps::server::testing {

// Shard 0 of 1 as the flags' defaults make it, with `num_workers` workers.
inline ServerConfig TestServerConfig(int num_workers = 1) {
  ServerConfig config;
  config.address = "127.0.0.1:0";
  config.coordinator.num_workers = num_workers;
  config.coordinator.lr_schedule = *update::LearningRateSchedule::Create(
      update::LrScheduleKind::kConstant, config.optimizer.learning_rate, 0);
  config.max_message_bytes = 4 << 20;
  config.max_threads = 16;
  config.stream_idle_timeout = absl::Seconds(60);
  return config;
}

// A new empty directory under the test's temporary directory.
inline std::string FreshTestDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/server_test.XXXXXX");
  EXPECT_NE(mkdtemp(dir.data()), nullptr) << dir;
  return dir;
}

// Checkpoints in a fresh directory, written only when asked for
// (Checkpointer::WriteNow), never in the background.
inline CheckpointPolicy ManualCheckpoints() {
  CheckpointPolicy policy;
  policy.dir = FreshTestDir();
  policy.every_updates = 0;
  policy.every = absl::ZeroDuration();
  return policy;
}

}  // namespace ps::server::testing

#endif  // PS_SERVER_SERVER_CONFIG_TESTING_H_
