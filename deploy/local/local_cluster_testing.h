#ifndef PS_DEPLOY_LOCAL_LOCAL_CLUSTER_TESTING_H_
#define PS_DEPLOY_LOCAL_LOCAL_CLUSTER_TESTING_H_

// Shell stand-ins for servers and workers, and an output that collects
// lines: what the LocalCluster tests run through the real orchestration.

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "deploy/local/cluster_output.h"
#include "deploy/local/line_writer.h"
#include "deploy/local/local_cluster.h"
#include "gtest/gtest.h"

namespace ps {

// A stand-in server that writes port 4000 + index, then runs `then`.
// $1 is the port file, $2 the index.
inline std::string ServerScript(const std::string& then) {
  return absl::StrCat("printf 400$2 > \"$1.tmp\" && mv \"$1.tmp\" \"$1\"; ",
                      then);
}

// A fresh directory where stand-in workers say they are done.
inline std::string DoneDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name, ".", getpid());
  EXPECT_EQ(system(absl::StrCat("rm -rf ", dir, " && mkdir -p ", dir).c_str()),
            0);
  return dir;
}

// Like a real server: runs until `num_workers` workers said they are done.
inline std::string ServerUntilDone(const std::string& done_dir,
                                   int num_workers) {
  // Counts only done.<rank>: tests keep other marks in the same folder.
  return ServerScript(absl::StrCat("echo serving; while [ $(ls ", done_dir,
                                   " | grep -c '^done\\.') -lt ", num_workers,
                                   " ]; do sleep 0.02; done"));
}

// Runs `script`, then says it is done (like the Done RPC), then exits 0.
inline std::string WorkerThenDone(const std::string& done_dir,
                                  const std::string& script) {
  return absl::StrCat(script, "; touch ", done_dir, "/done.$2");
}

// Stand-ins get $1 = port file / server list and $2 = index / rank, and run
// `scripts[index]` (or the last one for higher indexes).
inline ClusterSpec ShellCluster(int num_servers,
                                std::vector<std::string> servers,
                                int num_workers,
                                std::vector<std::string> workers) {
  ClusterSpec spec;
  spec.num_servers = num_servers;
  spec.num_workers = num_workers;
  spec.server_command = [servers](int index, int /*port*/,
                                  const std::string& port_file) {
    const std::string& script =
        servers[std::min<size_t>(index, servers.size() - 1)];
    return std::vector<std::string>{"/bin/sh", "-c",      script,
                                    "sh",      port_file, absl::StrCat(index)};
  };
  spec.worker_command = [workers](int rank,
                                  const std::vector<std::string>& addresses) {
    const std::string& script =
        workers[std::min<size_t>(rank, workers.size() - 1)];
    return std::vector<std::string>{
        "/bin/sh",         "-c", script, "sh", absl::StrJoin(addresses, ","),
        absl::StrCat(rank)};
  };
  // Safety limits only, far above what a loaded 2-core CI machine needs:
  // tests that exercise a limit set a short one of their own. A long
  // kill_grace also means that a stand-in ending by a signal other than
  // SIGKILL was stopped by the stop signal, not by the escalation.
  spec.startup_timeout = absl::Seconds(60);
  spec.shutdown_timeout = absl::Seconds(60);
  spec.kill_grace = absl::Seconds(60);
  const char* tmp = std::getenv("TEST_TMPDIR");
  spec.temp_root = tmp != nullptr ? tmp : "";
  return spec;
}

// Collects everything the cluster prints.
class Output {
 public:
  Output()
      : writer_([this](absl::string_view line) {
          absl::MutexLock lock(&mu_);
          lines_.emplace_back(line);
          if (on_line_) on_line_(line);
        }) {}
  ClusterOutput* writer() { return &streamed_; }
  std::vector<std::string> lines() {
    absl::MutexLock lock(&mu_);
    return lines_;
  }
  void OnLine(std::function<void(absl::string_view)> callback) {
    absl::MutexLock lock(&mu_);
    on_line_ = std::move(callback);
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
  std::function<void(absl::string_view)> on_line_ ABSL_GUARDED_BY(mu_);
  LineWriter writer_;
  StreamedOutput streamed_{&writer_};
};

inline const ProcessOutcome& Find(const ClusterResult& result,
                                  const std::string& name) {
  for (const ProcessOutcome& process : result.processes) {
    if (process.name == name) return process;
  }
  ADD_FAILURE() << "no process " << name;
  return result.processes.front();
}

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_LOCAL_CLUSTER_TESTING_H_
