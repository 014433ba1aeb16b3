// Runs the server and the worker each as PID 1 of a new PID namespace, as a
// container's entrypoint runs without an init, and sends SIGTERM from
// outside the namespace, as the kubelet does. The kernel drops a signal to
// such a process unless it handles (or blocks) it, so a binary that ignores
// the issue would run until SIGKILL.
//
// Needs `unshare --pid --fork --mount-proc` (root, or a user namespace);
// skips with the reason where it is not permitted.

#include <signal.h>
#include <sys/types.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"

namespace ps::testing {
namespace {

// Generous: a handled SIGTERM ends either binary in well under a second;
// an ignored one never does. Only a hang fails, not a slow machine.
constexpr absl::Duration kExitTimeout = absl::Seconds(60);
constexpr absl::Duration kStartTimeout = absl::Seconds(120);
constexpr int kTerminatedCode = 143;

std::vector<std::string> InNewPidNamespace(std::vector<std::string> argv) {
  std::vector<std::string> full = {"unshare", "--pid", "--fork",
                                   "--mount-proc"};
  full.insert(full.end(), argv.begin(), argv.end());
  return full;
}

std::unique_ptr<Subprocess> Start(std::vector<std::string> argv,
                                  const std::string& name) {
  SubprocessOptions options;
  options.argv = InNewPidNamespace(std::move(argv));
  options.name = name;
  options.line_callback = [name](absl::string_view line) {
    std::fprintf(stderr, "[%s] %.*s\n", name.c_str(),
                 static_cast<int>(line.size()), line.data());
  };
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Start(std::move(options));
  EXPECT_TRUE(child.ok()) << child.status();
  return child.ok() ? *std::move(child) : nullptr;
}

// Empty if this process may create PID namespaces, else why not.
std::string WhyNoPidNamespace() {
  SubprocessOptions options;
  options.argv = InNewPidNamespace({"true"});
  absl::StatusOr<std::unique_ptr<Subprocess>> probe =
      Subprocess::Start(std::move(options));
  if (!probe.ok()) return std::string(probe.status().message());
  const ExitStatus status = (*probe)->Wait();
  if (status.success()) return "";
  return absl::StrCat("unshare --pid --fork --mount-proc true ",
                      status.ToString(), ": ", (*probe)->LastLines(3));
}

// The pid, in this namespace, of `parent`'s only child: the process that is
// PID 1 inside the namespace unshare created. Checked through NSpid.
absl::StatusOr<pid_t> PidOneOf(pid_t parent) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    std::ifstream status(entry.path() / "status");
    std::string line;
    pid_t ppid = -1;
    std::string nspid;
    while (std::getline(status, line)) {
      absl::string_view rest = line;
      if (absl::ConsumePrefix(&rest, "PPid:")) {
        if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &ppid)) {
          ppid = -1;
        }
      } else if (absl::ConsumePrefix(&rest, "NSpid:")) {
        nspid = std::string(absl::StripAsciiWhitespace(rest));
      }
    }
    if (ppid != parent) continue;
    // "NSpid: <pid here> 1": the last field is its pid in its own namespace.
    std::vector<std::string> fields =
        absl::StrSplit(nspid, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() < 2 || fields.back() != "1") {
      return absl::FailedPreconditionError(absl::StrCat(
          "child ", pid, " of unshare is not PID 1 inside: NSpid ", nspid));
    }
    return pid;
  }
  return absl::NotFoundError(absl::StrCat("unshare ", parent, " has no child"));
}

struct Stopped {
  ExitStatus status = ExitStatus::Exited(-1);
  absl::Duration took;
};

// SIGTERM to PID 1 of `child`'s namespace; how and how fast it ended.
std::optional<Stopped> Terminate(Subprocess& child) {
  absl::StatusOr<pid_t> pid_one = PidOneOf(child.pid());
  EXPECT_TRUE(pid_one.ok()) << pid_one.status();
  if (!pid_one.ok()) return std::nullopt;
  const absl::Time sent = absl::Now();
  EXPECT_EQ(kill(*pid_one, SIGTERM), 0);
  std::optional<ExitStatus> status = child.WaitFor(kExitTimeout);
  if (!status.has_value()) return std::nullopt;
  return Stopped{*status, absl::Now() - sent};
}

TEST(Pid1SigtermTest, WorkerAndServerStopPromptlyAsPidOne) {
  if (std::string why = WhyNoPidNamespace(); !why.empty()) {
    GTEST_SKIP() << "cannot create a PID namespace here (" << why
                 << "); run this test outside the sandbox, as root: bazel "
                    "test //tests:pid1_sigterm_test --spawn_strategy=local";
  }
  const std::string port_file = TempPath("pid1.port");
  const std::string checkpoints = TempPath("pid1-checkpoints");
  std::remove(port_file.c_str());
  std::filesystem::remove_all(checkpoints);
  const std::string model = "784-16-10";

  std::unique_ptr<Subprocess> server =
      Start({RunfilePath("server/server"), "--server_index=0",
             "--num_servers=1", "--num_workers=1", "--mode=sync",
             "--optimizer=sgd", "--learning_rate=0.05", "--host=127.0.0.1",
             "--port=0", absl::StrCat("--port_file=", port_file),
             absl::StrCat("--checkpoint_dir=", checkpoints),
             // Only on a signal: not while training, so the file below is the
             // one SIGTERM wrote.
             "--checkpoint_every_steps=0", "--checkpoint_every_seconds=0",
             absl::StrCat("--signal_exit_code=", kTerminatedCode)},
            "server");
  ASSERT_NE(server, nullptr);
  absl::StatusOr<int> port =
      WaitForPortFile(port_file, kStartTimeout, server.get());
  ASSERT_TRUE(port.ok()) << port.status();

  std::unique_ptr<Subprocess> worker =
      Start({RunfilePath("worker/worker"), "--rank=0", "--num_workers=1",
             absl::StrCat("--servers=127.0.0.1:", *port),
             absl::StrCat("--model=", model), "--batch_size=32", "--epochs=1",
             "--log_every=1", "--device=cpu",
             // Slow enough that the job still trains when SIGTERM comes
             // (its 1875 steps take over a minute).
             "--slowdown_ms=40"},
            "worker");
  ASSERT_NE(worker, nullptr);
  // Mid-training: at least one step done, many to go.
  absl::StatusOr<std::string> progress =
      worker->WaitForOutputLine("samples/s", kStartTimeout);
  ASSERT_TRUE(progress.ok()) << progress.status() << worker->LastLines(20);

  std::optional<Stopped> worker_stop = Terminate(*worker);
  ASSERT_TRUE(worker_stop.has_value())
      << "the worker ignored SIGTERM as PID 1\n"
      << worker->LastLines(20);
  std::fprintf(stderr, "worker (PID 1) %s, %s after SIGTERM\n",
               worker_stop->status.ToString().c_str(),
               absl::FormatDuration(worker_stop->took).c_str());
  EXPECT_EQ(worker_stop->status, ExitStatus::Exited(kTerminatedCode))
      << worker->LastLines(20);
  EXPECT_TRUE(
      worker->WaitForOutputLine("stopping on signal 15", absl::ZeroDuration())
          .ok())
      << worker->LastLines(20);

  std::optional<Stopped> server_stop = Terminate(*server);
  ASSERT_TRUE(server_stop.has_value())
      << "the server ignored SIGTERM as PID 1\n"
      << server->LastLines(20);
  std::fprintf(stderr, "server (PID 1) %s, %s after SIGTERM\n",
               server_stop->status.ToString().c_str(),
               absl::FormatDuration(server_stop->took).c_str());
  EXPECT_EQ(server_stop->status, ExitStatus::Exited(kTerminatedCode))
      << server->LastLines(20);
  int written = 0;
  for (const auto& entry : std::filesystem::directory_iterator(checkpoints)) {
    const std::string name = entry.path().filename().string();
    // The version is how many steps it applied: at least the one seen.
    if (absl::StartsWith(name, "shard-0-") && absl::EndsWith(name, ".ckpt") &&
        name != "shard-0-0.ckpt") {
      ++written;
    }
  }
  EXPECT_EQ(written, 1) << "no checkpoint after SIGTERM in " << checkpoints
                        << "\n"
                        << server->LastLines(20);
}

}  // namespace
}  // namespace ps::testing
