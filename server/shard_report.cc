#include "server/shard_report.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ps::server {
namespace {

constexpr absl::string_view kHeader = "ps-shard-report 2";

// The fields that are one count each, by key, in the order written (of a
// const report to write it, of a mutable one to parse into it).
template <typename Report>
std::vector<std::pair<absl::string_view,
                      decltype(&std::declval<Report&>().replayed_pushes)>>
Counts(Report& r) {
  return {{"replayed_pushes", &r.replayed_pushes},
          {"staleness_updates", &r.staleness_updates},
          {"staleness_max", &r.staleness_max},
          {"pushes_ok", &r.pushes.ok},
          {"pushes_refused", &r.pushes.refused},
          {"push_latency_mean_us", &r.pushes.latency_mean_us},
          {"push_latency_max_us", &r.pushes.latency_max_us},
          {"push_commit_mean_us", &r.pushes.part_mean_us},
          {"pulls_ok", &r.pulls.ok},
          {"pulls_refused", &r.pulls.refused},
          {"pull_latency_mean_us", &r.pulls.latency_mean_us},
          {"pull_latency_max_us", &r.pulls.latency_max_us},
          {"pull_wait_mean_us", &r.pulls.part_mean_us}};
}

absl::Status Bad(size_t line, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("shard report line ", line, ": ", what));
}

bool ParseCount(absl::string_view text, uint64_t* out) {
  return !text.empty() && text[0] != '-' && text[0] != '+' &&
         absl::SimpleAtoi(text, out);
}

}  // namespace

bool RequestFigures::operator==(const RequestFigures& other) const {
  return ok == other.ok && refused == other.refused &&
         latency_mean_us == other.latency_mean_us &&
         latency_max_us == other.latency_max_us &&
         part_mean_us == other.part_mean_us;
}

bool ShardReport::operator==(const ShardReport& other) const {
  return server_index == other.server_index && mode == other.mode &&
         version == other.version &&
         updates_replayed == other.updates_replayed &&
         updates_lost == other.updates_lost &&
         replayed_pushes == other.replayed_pushes &&
         examples_per_epoch == other.examples_per_epoch &&
         staleness_updates == other.staleness_updates &&
         staleness_max == other.staleness_max && pushes == other.pushes &&
         pulls == other.pulls;
}

std::string FormatShardReport(const ShardReport& report) {
  std::string out =
      absl::StrCat(kHeader, "\nserver ", report.server_index, "\nmode ",
                   report.mode, "\nversion ", report.version, "\n");
  if (report.updates_replayed.has_value()) {
    absl::StrAppend(&out, "updates_replayed ", *report.updates_replayed, "\n");
  }
  absl::StrAppend(&out, "updates_lost ",
                  report.updates_lost.has_value()
                      ? absl::StrCat(*report.updates_lost)
                      : std::string("unknown"),
                  "\nexamples_per_epoch");
  for (const auto& [epoch, examples] : report.examples_per_epoch) {
    absl::StrAppend(&out, " ", epoch, "=", examples);
  }
  absl::StrAppend(&out, "\n");
  for (const auto& [key, value] : Counts(report)) {
    absl::StrAppend(&out, key, " ", *value, "\n");
  }
  return out;
}

absl::StatusOr<ShardReport> ParseShardReport(absl::string_view text) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.empty() || lines[0] != kHeader) {
    return Bad(1, absl::StrCat("expected \"", kHeader, "\""));
  }
  ShardReport report;
  absl::flat_hash_map<absl::string_view, uint64_t*> counts;
  for (const auto& [key, value] : Counts(report)) counts[key] = value;
  absl::flat_hash_set<std::string> seen;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t n = i + 1;
    const std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(lines[i], absl::MaxSplits(' ', 1));
    const absl::string_view key = kv.first, value = kv.second;
    if (!seen.insert(std::string(key)).second) {
      return Bad(n, absl::StrCat("\"", key, "\" again"));
    }
    uint64_t number = 0;
    if (key == "server") {
      if (!ParseCount(value, &number) || number > 1u << 20) {
        return Bad(n, "bad server index");
      }
      report.server_index = static_cast<int>(number);
    } else if (key == "mode") {
      if (value != "sync" && value != "ssp" && value != "async") {
        return Bad(n, absl::StrCat("unknown mode \"", value, "\""));
      }
      report.mode = std::string(value);
    } else if (key == "version" || key == "updates_replayed" ||
               (key == "updates_lost" && value != "unknown")) {
      if (!ParseCount(value, &number)) {
        return Bad(n, absl::StrCat("bad count for ", key));
      }
      if (key == "version") report.version = number;
      if (key == "updates_replayed") report.updates_replayed = number;
      if (key == "updates_lost") report.updates_lost = number;
    } else if (key == "updates_lost") {
      report.updates_lost.reset();
    } else if (key == "examples_per_epoch") {
      for (absl::string_view pair :
           absl::StrSplit(value, ' ', absl::SkipEmpty())) {
        const std::pair<absl::string_view, absl::string_view> ee =
            absl::StrSplit(pair, absl::MaxSplits('=', 1));
        uint64_t epoch = 0, examples = 0;
        if (!ParseCount(ee.first, &epoch) ||
            !ParseCount(ee.second, &examples) ||
            !report.examples_per_epoch.emplace(epoch, examples).second) {
          return Bad(n, absl::StrCat("bad epoch count \"", pair, "\""));
        }
      }
    } else if (uint64_t* count = counts.contains(key) ? counts[key] : nullptr;
               count != nullptr) {
      if (!ParseCount(value, count)) {
        return Bad(n, absl::StrCat("bad count for ", key));
      }
    } else {
      return Bad(n, absl::StrCat("unknown key \"", key, "\""));
    }
  }
  for (absl::string_view key :
       {"server", "mode", "version", "updates_lost", "examples_per_epoch"}) {
    if (!seen.contains(key)) {
      return Bad(lines.size(), absl::StrCat("no \"", key, "\" line"));
    }
  }
  for (const auto& [key, unused] : counts) {
    if (!seen.contains(key)) {
      return Bad(lines.size(), absl::StrCat("no \"", key, "\" line"));
    }
  }
  return report;
}

absl::Status WriteShardReport(const std::string& path,
                              const ShardReport& report) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << FormatShardReport(report);
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return absl::InternalError(absl::StrCat("cannot write ", tmp));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<ShardReport> ReadShardReport(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<ShardReport> report = ParseShardReport(text.str());
  if (!report.ok()) {
    return absl::Status(report.status().code(),
                        absl::StrCat(path, ": ", report.status().message()));
  }
  return report;
}

}  // namespace ps::server
