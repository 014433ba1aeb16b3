#ifndef PS_COMMON_LOGGING_H_
#define PS_COMMON_LOGGING_H_

#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

namespace ps {

// Sets the format of spdlog's default logger so that every line names the
// process: "12:00:00.123 [server 1] info: ...". Called once, first thing in
// main, before any thread starts; everything else only logs.
void InitLogging(absl::string_view role, int index);

}  // namespace ps

#endif  // PS_COMMON_LOGGING_H_
