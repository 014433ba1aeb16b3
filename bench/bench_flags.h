#ifndef PS_BENCH_BENCH_FLAGS_H_
#define PS_BENCH_BENCH_FLAGS_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/flag_range.h"

namespace ps::bench {

// Checks of the flags the benches take on their command lines, before
// anything runs: lists (--workers=2,4, --rates_mbit=0,1000, --sizes=4K,1M);
// single numbers go through CheckFlagRange (common/flag_range.h).

// Parses `text`, whole numbers separated by commas (spaces around each
// allowed), each in [min, max]. InvalidArgument names `what` (e.g. "worker
// count") and the first entry that is not one; the caller adds the flag.
absl::StatusOr<std::vector<int64_t>> ParseNumberList(
    absl::string_view text, absl::string_view what, int64_t min,
    int64_t max = std::numeric_limits<int64_t>::max());

// Parses a comma-separated list of tensor sizes such as "4K,1M,16M,64M": a
// whole number with an optional binary suffix K, M or G (KiB, MiB, GiB).
// Each must be a multiple of 4 bytes (float32) in [8 B, 1 GiB].
absl::StatusOr<std::vector<uint64_t>> ParseSizes(absl::string_view text);

// Parses the flag --`flag`=`text`, names separated by commas (spaces
// around each allowed), each one of `allowed` and none twice, e.g.
// --transports=grpc,frames. InvalidArgument names the flag, the entry and
// what is allowed.
absl::StatusOr<std::vector<std::string>> ParseChoiceList(
    absl::string_view flag, absl::string_view text,
    const std::vector<std::string>& allowed);

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
