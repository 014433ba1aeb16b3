#ifndef PS_COMMON_CPU_AFFINITY_H_
#define PS_COMMON_CPU_AFFINITY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ps {

// Which CPUs a process may run on (the `--cpus` flag of the server and the
// worker). In a cluster a worker and its shards run on separate machines;
// where they share one, giving each its own cores keeps the scheduler from
// moving them onto each other's cores in the middle of a transfer, which
// makes transfers faster and cheaper in CPU (bench/README.md, "Large
// transfers over gRPC").

// Parses a CPU list in the kernel's list format (cpuset(7)): CPU numbers
// and inclusive ranges separated by commas, e.g. "0-3,8". Returns the CPUs
// in increasing order, each once. InvalidArgument names the bad entry.
absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view list);

// For a binary's CPU-list flag `--<flag>=<value>`: no CPUs (meaning any)
// for an empty value, else ParseCpuList's, its errors naming the flag.
absl::StatusOr<std::vector<int>> CpusFromFlag(absl::string_view flag,
                                              absl::string_view value);

// The inverse of ParseCpuList for sorted CPUs, runs written as ranges:
// {0, 1, 2, 5} -> "0-2,5".
std::string FormatCpuList(absl::Span<const int> cpus);

// The CPUs the calling thread may run on, in increasing order; empty if
// the kernel will not say.
std::vector<int> UsableCpus();

// How many CPUs the calling thread may run on (its affinity, which --cpus
// and cgroup cpusets narrow; std::thread::hardware_concurrency counts the
// machine's): the threads worth starting for parallel work. At least 1.
int UsableCpuCount();

// Restricts the calling thread to `cpus`; threads it starts afterwards
// inherit the restriction. Fails, leaving the thread as it was, if any of
// `cpus` is one this thread may not use (offline, absent or outside its
// cgroup's cpuset), naming them.
absl::Status RestrictThreadToCpus(absl::Span<const int> cpus);

// RestrictThreadToCpus for every thread of this process, the caller's
// first: for main, before it starts threads of its own (libraries such as
// OpenBLAS start theirs before main runs).
absl::Status RestrictProcessToCpus(absl::Span<const int> cpus);

}  // namespace ps

#endif  // PS_COMMON_CPU_AFFINITY_H_
