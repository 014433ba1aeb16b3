#include "bench/bench_flags.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/byte_size.h"

namespace ps::bench {
namespace {

// Test hosts are at most 200 (tests/hosts/test_hosts.h), one a worker.
constexpr int kMaxWorkers = 200;
constexpr uint64_t kMaxSize = uint64_t{1} << 30;

}  // namespace

absl::StatusOr<std::vector<int64_t>> ParseNumberList(absl::string_view text,
                                                     absl::string_view what,
                                                     int64_t min, int64_t max) {
  std::vector<int64_t> numbers;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &n) || n < min ||
        n > max) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " \"", part, "\" is not a whole number ",
                       max == std::numeric_limits<int64_t>::max()
                           ? absl::StrCat("of at least ", min)
                           : absl::StrCat("in [", min, ", ", max, "]")));
    }
    numbers.push_back(n);
  }
  return numbers;
}

absl::StatusOr<std::vector<uint64_t>> ParseSizes(absl::string_view text) {
  std::vector<uint64_t> sizes;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    absl::StatusOr<uint64_t> parsed =
        ParseByteSize(absl::StripAsciiWhitespace(part), kMaxSize);
    if (!parsed.ok() || *parsed == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "size \"", part, "\" is not a whole number of bytes in [8, 1G] ",
          "with an optional K, M or G suffix (e.g. 4K,1M,16M,64M)"));
    }
    const uint64_t bytes = *parsed;
    if (bytes < 8 || bytes % 4 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("size \"", part, "\" (", bytes,
                       " bytes) is not a multiple of 4 bytes (float32) of at "
                       "least 8"));
    }
    sizes.push_back(bytes);
  }
  return sizes;
}

absl::StatusOr<std::vector<std::string>> ParseChoiceList(
    absl::string_view flag, absl::string_view text,
    const std::vector<std::string>& allowed) {
  std::vector<std::string> names;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    const std::string name(absl::StripAsciiWhitespace(part));
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": \"", name, "\" is not one of ",
                       absl::StrJoin(allowed, ", ")));
    }
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": \"", name, "\" is listed twice"));
    }
    names.push_back(name);
  }
  return names;
}

absl::StatusOr<HostGrid> ParseHostGrid(absl::string_view workers,
                                       absl::string_view rates_mbit) {
  absl::StatusOr<std::vector<int64_t>> counts =
      ParseNumberList(workers, "worker count", 1, kMaxWorkers);
  if (!counts.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--workers: ", counts.status().message()));
  }
  absl::StatusOr<std::vector<int64_t>> rates =
      ParseNumberList(rates_mbit, "rate", 0);
  if (!rates.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rates_mbit: ", rates.status().message()));
  }
  return HostGrid{std::vector<int>(counts->begin(), counts->end()),
                  *std::move(rates)};
}

std::string LinkRateName(int64_t mbit) {
  return mbit == 0 ? "unshaped" : absl::StrCat(mbit / 1000.0, " Gbit/s");
}

}  // namespace ps::bench
