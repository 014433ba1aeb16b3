#ifndef PS_BENCH_BENCH_FLAGS_H_
#define PS_BENCH_BENCH_FLAGS_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps::bench {

// Checks of the flags the benches take on their command lines, before
// anything runs: lists (--workers=2,4, --rates_mbit=0,1000, --servers=1,2)
// and ranges.

// OK if `value`, that of --`flag`, is in [lo, hi]; else InvalidArgument
// "--FLAG must be in [LO, HI], got VALUE".
absl::Status CheckFlagRange(absl::string_view flag, int64_t value, int64_t lo,
                            int64_t hi);

// Parses `text`, whole numbers separated by commas (spaces around each
// allowed), each in [min, max]. InvalidArgument names `what` (e.g. "worker
// count") and the first entry that is not one; the caller adds the flag.
absl::StatusOr<std::vector<int64_t>> ParseNumberList(
    absl::string_view text, absl::string_view what, int64_t min,
    int64_t max = std::numeric_limits<int64_t>::max());

// What a bench of jobs on test hosts runs (ring_vs_servers_bench,
// torch_ring_vs_ddp_bench): each worker count at each link rate.
struct HostGrid {
  std::vector<int> workers;         // Each in [1, 200]: a host each.
  std::vector<int64_t> rates_mbit;  // Each >= 0 (0: unshaped).
};

// Parses the flags --workers=`workers` and --rates_mbit=`rates_mbit`;
// InvalidArgument names the flag and the entry that is off.
absl::StatusOr<HostGrid> ParseHostGrid(absl::string_view workers,
                                       absl::string_view rates_mbit);

// How a table names a --rates_mbit entry, `mbit` Mbit/s: "unshaped" for 0
// (the links run at whatever the kernel gives), else in Gbit/s ("1 Gbit/s",
// "0.1 Gbit/s").
std::string LinkRateName(int64_t mbit);

}  // namespace ps::bench

#endif  // PS_BENCH_BENCH_FLAGS_H_
