#include "worker/kill_point.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "spdlog/spdlog.h"

namespace ps::worker {
namespace {

absl::Status Bad(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("--test_kill_self=", text, ": ", why,
                   " (want rank=R,at=step:N|push:N|upload|done[,once=PATH])"));
}

// Digits only: SimpleAtoi would also take a sign and spaces.
template <typename T>
bool ParseCount(absl::string_view text, T* out) {
  if (text.empty()) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return absl::SimpleAtoi(text, out);
}

}  // namespace

absl::StatusOr<KillPoint> KillPoint::Parse(absl::string_view text) {
  KillPoint point;
  if (text.empty()) return point;
  bool has_rank = false;
  bool has_at = false;
  bool has_once = false;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    const std::vector<absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.size() != 2)
      return Bad(text, absl::StrCat("'", item, "' is not KEY=VALUE"));
    const absl::string_view key = kv[0];
    const absl::string_view value = kv[1];
    if (key == "rank") {
      if (has_rank) return Bad(text, "rank given twice");
      has_rank = true;
      if (!ParseCount(value, &point.rank_)) {
        return Bad(text,
                   absl::StrCat("rank '", value, "' is not a number >= 0"));
      }
    } else if (key == "at") {
      if (has_at) return Bad(text, "at given twice");
      has_at = true;
      absl::string_view step = value;
      if (value == "upload") {
        point.moment_ = KillMoment::kUpload;
      } else if (value == "done") {
        point.moment_ = KillMoment::kDone;
      } else if (absl::ConsumePrefix(&step, "step:") ||
                 absl::ConsumePrefix(&step, "push:")) {
        point.moment_ = value[0] == 's' ? KillMoment::kStep : KillMoment::kPush;
        if (!ParseCount(step, &point.step_)) {
          return Bad(text,
                     absl::StrCat("step '", step, "' is not a number >= 0"));
        }
      } else {
        return Bad(text, absl::StrCat("unknown moment '", value, "'"));
      }
    } else if (key == "once") {
      if (has_once) return Bad(text, "once given twice");
      has_once = true;
      if (value.empty()) return Bad(text, "once needs a file path");
      point.once_path_ = std::string(value);
    } else {
      return Bad(text, absl::StrCat("unknown key '", key, "'"));
    }
  }
  if (!has_rank) return Bad(text, "rank= missing");
  if (!has_at) return Bad(text, "at= missing");
  point.armed_ = true;
  return point;
}

bool KillPoint::Matches(int rank, KillMoment moment, uint64_t step) const {
  return armed_ && rank == rank_ && moment == moment_ &&
         ((moment != KillMoment::kStep && moment != KillMoment::kPush) ||
          step == step_);
}

std::string KillPoint::ToString() const {
  if (!armed_) return "never";
  std::string at;
  switch (moment_) {
    case KillMoment::kStep:
      at = absl::StrCat("step ", step_);
      break;
    case KillMoment::kPush:
      at = absl::StrCat("push of step ", step_);
      break;
    case KillMoment::kUpload:
      at = "upload";
      break;
    case KillMoment::kDone:
      at = "done";
      break;
  }
  return absl::StrCat("rank ", rank_, " at ", at,
                      once_path_.empty() ? "" : ", once");
}

void KillPoint::FireIf(int rank, KillMoment moment, uint64_t step) const {
  if (!Matches(rank, moment, step)) return;
  if (!once_path_.empty()) {
    // O_EXCL: of two incarnations racing, one fires.
    const int fd = open(once_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) {
      if (errno != EEXIST) {
        spdlog::warn("--test_kill_self: cannot create {}: {}; not killing",
                     once_path_, strerror(errno));
      }
      return;
    }
    close(fd);
  }
  spdlog::warn("--test_kill_self: killing this worker ({}) with SIGKILL",
               ToString());
  spdlog::default_logger()->flush();
  std::fflush(nullptr);
  raise(SIGKILL);
}

}  // namespace ps::worker
