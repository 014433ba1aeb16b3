#include "server/server_flags.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace ps::server {
namespace {

std::string Show(const std::optional<std::string>& v) {
  return v.has_value() ? *v : "unset";
}
std::string Show(const std::optional<float>& v) {
  return v.has_value() ? absl::StrCat(*v) : "unset";
}
std::string Show(const std::optional<int>& v) {
  return v.has_value() ? absl::StrCat(*v) : "unset";
}

// Every field, named, so that a mismatch says which.
std::vector<std::string> Fields(const ServerFlags& f) {
  return {
      absl::StrCat("server_index=", f.server_index),
      absl::StrCat("num_servers=", f.num_servers),
      absl::StrCat("num_workers=", f.num_workers),
      absl::StrCat("max_model_bytes=", f.max_model_bytes),
      absl::StrCat("max_tensors=", f.max_tensors),
      absl::StrCat("host=", f.host),
      absl::StrCat("port=", f.port),
      absl::StrCat("port_file=", f.port_file),
      absl::StrCat("report_file=", f.report_file),
      absl::StrCat("mode=", f.mode),
      absl::StrCat("staleness=", f.staleness),
      absl::StrCat("optimizer=", Show(f.optimizer)),
      absl::StrCat("learning_rate=", Show(f.learning_rate)),
      absl::StrCat("momentum=", Show(f.momentum)),
      absl::StrCat("weight_decay=", Show(f.weight_decay)),
      absl::StrCat("beta1=", Show(f.beta1)),
      absl::StrCat("beta2=", Show(f.beta2)),
      absl::StrCat("epsilon=", Show(f.epsilon)),
      absl::StrCat("max_message_mb=", f.max_message_mb),
      absl::StrCat("lr_schedule=", f.lr_schedule),
      absl::StrCat("min_learning_rate=", f.min_learning_rate),
      absl::StrCat("worker_timeout=", absl::FormatDuration(f.worker_timeout)),
      absl::StrCat("on_worker_failure=", f.on_worker_failure),
      absl::StrCat("rejoin_grace=", absl::FormatDuration(f.rejoin_grace)),
      absl::StrCat("slow_wait_log=", absl::FormatDuration(f.slow_wait_log)),
      absl::StrCat("checkpoint_dir=", f.checkpoint_dir),
      absl::StrCat("checkpoint_every_steps=", f.checkpoint_every_steps),
      absl::StrCat("checkpoint_every_seconds=", f.checkpoint_every_seconds),
      absl::StrCat("cpus=", f.cpus),
      absl::StrCat("signal_exit_code=", f.signal_exit_code),
      absl::StrCat("non_finite_gradients=", f.non_finite_gradients),
      absl::StrCat("max_threads=", f.max_threads),
      absl::StrCat("max_calls_per_rank=", f.max_calls_per_rank),
      absl::StrCat("stream_idle_timeout=",
                   absl::FormatDuration(f.stream_idle_timeout)),
      absl::StrCat("local_transport=", f.local_transport),
      absl::StrCat("tcp_data_port=", Show(f.tcp_data_port)),
      absl::StrCat("job_id=", f.job_id),
      absl::StrCat("tls_cert=", f.tls_cert),
      absl::StrCat("tls_key=", f.tls_key),
      absl::StrCat("tls_client_ca=", f.tls_client_ca),
      absl::StrCat("token_file=", f.token_file),
      absl::StrCat("health_port=", f.health_port),
      absl::StrCat("metrics_port=", f.metrics_port),
      absl::StrCat("metrics_host=", f.metrics_host),
      absl::StrCat("restore=", f.restore),
      absl::StrCat("extend=", f.extend),
  };
}

// One test: the flags are parsed once per process.
TEST(ServerFlagsTest, EachFlagFillsItsFieldWithServerFlagsDefaults) {
  EXPECT_EQ(Fields(ServerFlagValues()), Fields(ServerFlags()));

  // A value for every flag, none of them its default.
  std::vector<std::string> args = {
      "server_flags_test",
      "--server_index=3",
      "--num_servers=5",
      "--num_workers=6",
      "--max_model_bytes=7",
      "--max_tensors=8",
      "--host=10.1.2.3",
      "--port=9",
      "--port_file=/p",
      "--report_file=/r",
      "--mode=ssp",
      "--staleness=10",
      "--optimizer=sgd",
      "--learning_rate=0.5",
      "--momentum=0.25",
      "--weight_decay=0.125",
      "--beta1=0.75",
      "--beta2=0.875",
      "--epsilon=0.0625",
      "--max_message_mb=11",
      "--lr_schedule=cosine",
      "--min_learning_rate=0.03125",
      "--worker_timeout=12s",
      "--on_worker_failure=fail",
      "--rejoin_grace=13s",
      "--slow_wait_log=14s",
      "--checkpoint_dir=/c",
      "--checkpoint_every_steps=15",
      "--checkpoint_every_seconds=16",
      "--cpus=0-1",
      "--signal_exit_code=17",
      "--non_finite_gradients=skip",
      "--max_threads=18",
      "--max_calls_per_rank=19",
      "--stream_idle_timeout=20s",
      "--nolocal_transport",
      "--tcp_data_port=21",
      "--job_id=j",
      "--tls_cert=/cert",
      "--tls_key=/key",
      "--tls_client_ca=/ca",
      "--token_file=/token",
      "--health_port=21",
      "--metrics_port=22",
      "--metrics_host=0.0.0.0",
      "--restore",
      "--extend",
  };
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  absl::ParseCommandLine(static_cast<int>(argv.size()), argv.data());

  ServerFlags want;
  want.server_index = 3;
  want.num_servers = 5;
  want.num_workers = 6;
  want.max_model_bytes = 7;
  want.max_tensors = 8;
  want.host = "10.1.2.3";
  want.port = 9;
  want.port_file = "/p";
  want.report_file = "/r";
  want.mode = "ssp";
  want.staleness = 10;
  want.optimizer = "sgd";
  want.learning_rate = 0.5f;
  want.momentum = 0.25f;
  want.weight_decay = 0.125f;
  want.beta1 = 0.75f;
  want.beta2 = 0.875f;
  want.epsilon = 0.0625f;
  want.max_message_mb = 11;
  want.lr_schedule = "cosine";
  want.min_learning_rate = 0.03125f;
  want.worker_timeout = absl::Seconds(12);
  want.on_worker_failure = "fail";
  want.rejoin_grace = absl::Seconds(13);
  want.slow_wait_log = absl::Seconds(14);
  want.checkpoint_dir = "/c";
  want.checkpoint_every_steps = 15;
  want.checkpoint_every_seconds = 16;
  want.cpus = "0-1";
  want.signal_exit_code = 17;
  want.non_finite_gradients = "skip";
  want.max_threads = 18;
  want.max_calls_per_rank = 19;
  want.stream_idle_timeout = absl::Seconds(20);
  want.local_transport = false;
  want.tcp_data_port = 21;
  want.job_id = "j";
  want.tls_cert = "/cert";
  want.tls_key = "/key";
  want.tls_client_ca = "/ca";
  want.token_file = "/token";
  want.health_port = 21;
  want.metrics_port = 22;
  want.metrics_host = "0.0.0.0";
  want.restore = true;
  want.extend = true;
  // Every field differs from its default, so a flag read into the wrong
  // field shows.
  const std::vector<std::string> defaults = Fields(ServerFlags());
  const std::vector<std::string> wanted = Fields(want);
  ASSERT_EQ(defaults.size(), wanted.size());
  for (size_t i = 0; i < wanted.size(); ++i) {
    EXPECT_NE(wanted[i], defaults[i]);
  }
  EXPECT_EQ(Fields(ServerFlagValues()), wanted);
}

}  // namespace
}  // namespace ps::server
