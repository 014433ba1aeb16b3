#include "common/cpu_affinity.h"

#include <sched.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ps {
namespace {

// What cpu_set_t can name.
constexpr int kMaxCpu = CPU_SETSIZE - 1;

absl::Status BadEntry(absl::string_view entry, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad CPU list entry \"", entry, "\": ", why));
}

// Digits only: SimpleAtoi alone would take "+1" and " 1".
absl::StatusOr<int> ParseCpu(absl::string_view text, absl::string_view entry) {
  int cpu = 0;
  if (text.empty() ||
      !std::all_of(text.begin(), text.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(text, &cpu) || cpu > kMaxCpu) {
    return BadEntry(entry,
                    absl::StrCat("\"", text, "\" is not a CPU number in [0, ",
                                 kMaxCpu, "]"));
  }
  return cpu;
}

// Sets thread `tid`'s affinity (0: the calling thread) to exactly `cpus`,
// or fails and leaves it as it was. The kernel silently drops CPUs a thread
// may not use as long as one is left, so the result is read back.
absl::Status SetThreadAffinity(pid_t tid, absl::Span<const int> cpus) {
  if (cpus.empty()) return absl::InvalidArgumentError("no CPUs given");
  cpu_set_t wanted;
  CPU_ZERO(&wanted);
  for (int cpu : cpus) {
    if (cpu < 0 || cpu > kMaxCpu) {
      return absl::InvalidArgumentError(
          absl::StrCat("CPU ", cpu, " is not in [0, ", kMaxCpu, "]"));
    }
    CPU_SET(cpu, &wanted);
  }
  cpu_set_t before;
  if (sched_getaffinity(tid, sizeof(before), &before) != 0) {
    return absl::ErrnoToStatus(errno, "sched_getaffinity");
  }
  constexpr absl::string_view kWhy =
      " by this process (offline, absent or outside its cgroup's cpuset)";
  if (sched_setaffinity(tid, sizeof(wanted), &wanted) != 0) {
    if (errno == EINVAL) {
      return absl::InvalidArgumentError(absl::StrCat(
          "none of CPUs ", FormatCpuList(cpus), " can be used", kWhy));
    }
    return absl::ErrnoToStatus(errno, "sched_setaffinity");
  }
  cpu_set_t now;
  if (sched_getaffinity(tid, sizeof(now), &now) != 0) {
    const int error = errno;
    sched_setaffinity(tid, sizeof(before), &before);
    return absl::ErrnoToStatus(error, "sched_getaffinity");
  }
  std::vector<int> refused;
  for (int cpu : cpus) {
    if (!CPU_ISSET(cpu, &now)) refused.push_back(cpu);
  }
  if (refused.empty()) return absl::OkStatus();
  sched_setaffinity(tid, sizeof(before), &before);
  return absl::InvalidArgumentError(
      absl::StrCat(refused.size() == 1 ? "CPU " : "CPUs ",
                   FormatCpuList(refused), " cannot be used", kWhy));
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view list) {
  if (absl::StripAsciiWhitespace(list).empty()) {
    return absl::InvalidArgumentError("CPU list is empty");
  }
  std::vector<bool> chosen(kMaxCpu + 1, false);
  for (absl::string_view raw : absl::StrSplit(list, ',')) {
    const absl::string_view entry = absl::StripAsciiWhitespace(raw);
    if (entry.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("CPU list \"", list, "\" has an empty entry"));
    }
    const size_t dash = entry.find('-');
    absl::StatusOr<int> first = ParseCpu(entry.substr(0, dash), entry);
    if (!first.ok()) return first.status();
    absl::StatusOr<int> last = first;
    if (dash != absl::string_view::npos) {
      last = ParseCpu(entry.substr(dash + 1), entry);
      if (!last.ok()) return last.status();
      if (*last < *first) return BadEntry(entry, "the range runs backwards");
    }
    for (int cpu = *first; cpu <= *last; ++cpu) chosen[cpu] = true;
  }
  std::vector<int> cpus;
  for (int cpu = 0; cpu <= kMaxCpu; ++cpu) {
    if (chosen[cpu]) cpus.push_back(cpu);
  }
  return cpus;
}

absl::StatusOr<std::vector<int>> CpusFromFlag(absl::string_view flag,
                                              absl::string_view value) {
  if (value.empty()) return std::vector<int>();
  absl::StatusOr<std::vector<int>> cpus = ParseCpuList(value);
  if (!cpus.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": ", cpus.status().message()));
  }
  return cpus;
}

std::string FormatCpuList(absl::Span<const int> cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t end = i + 1;  // Past the run that starts at i.
    while (end < cpus.size() && cpus[end] == cpus[end - 1] + 1) ++end;
    absl::StrAppend(&out, out.empty() ? "" : ",", cpus[i]);
    if (end - i > 1) absl::StrAppend(&out, "-", cpus[end - 1]);
    i = end;
  }
  return out;
}

std::vector<int> UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return {};
  std::vector<int> cpus;
  for (int cpu = 0; cpu <= kMaxCpu; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

int UsableCpuCount() {
  const std::vector<int> cpus = UsableCpus();
  if (cpus.empty()) return std::max(1u, std::thread::hardware_concurrency());
  return static_cast<int>(cpus.size());
}

absl::Status RestrictThreadToCpus(absl::Span<const int> cpus) {
  return SetThreadAffinity(0, cpus);
}

absl::Status RestrictProcessToCpus(absl::Span<const int> cpus) {
  // The caller first: it checks the CPUs for all.
  if (absl::Status s = SetThreadAffinity(0, cpus); !s.ok()) return s;
  std::error_code error;
  std::filesystem::directory_iterator task("/proc/self/task", error);
  for (; !error && task != std::filesystem::directory_iterator();
       task.increment(error)) {
    pid_t tid = 0;
    if (!absl::SimpleAtoi(task->path().filename().string(), &tid)) continue;
    absl::Status s = SetThreadAffinity(tid, cpus);
    // A thread may have ended since the directory was read (ESRCH).
    if (!s.ok() && !absl::IsNotFound(s)) {
      return absl::Status(s.code(),
                          absl::StrCat("thread ", tid, ": ", s.message()));
    }
  }
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot list /proc/self/task: ", error.message()));
  }
  return absl::OkStatus();
}

}  // namespace ps
