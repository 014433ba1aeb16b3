#include "common/logging.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace ps {

void InitLogging(absl::string_view role, int index) {
  auto logger = spdlog::stderr_color_mt(absl::StrCat(role, "-", index));
  logger->set_pattern(
      absl::StrCat("%H:%M:%S.%e [", role, " ", index, "] %l: %v"));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace ps
