#ifndef PS_COMMON_LOGGING_H_
#define PS_COMMON_LOGGING_H_

#include "absl/strings/string_view.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

// Debian's Abseil has its own string_view (not std::string_view), which fmt
// does not know; this lets log lines take Status messages and the like.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename FormatContext>
  auto format(absl::string_view s, FormatContext& ctx) const {
    return fmt::formatter<fmt::string_view>::format(
        fmt::string_view(s.data(), s.size()), ctx);
  }
};

namespace ps {

// Sets the format of spdlog's default logger so that every line names the
// process: "12:00:00.123 [server 1] info: ...". Called once, first thing in
// main, before any thread starts; everything else only logs.
void InitLogging(absl::string_view role, int index);

}  // namespace ps

#endif  // PS_COMMON_LOGGING_H_
