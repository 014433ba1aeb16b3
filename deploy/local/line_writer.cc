#include "deploy/local/line_writer.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ps {

LineWriter::LineWriter(std::function<void(absl::string_view)> sink)
    : sink_(std::move(sink)) {}

std::function<void(absl::string_view)> LineWriter::FileSink(std::FILE* out) {
  return [out](absl::string_view line) {
    // Errors (a closed pipe) are ignored: output is best effort, the
    // cluster's outcome does not depend on it.
    std::fwrite(line.data(), 1, line.size(), out);
    std::fputc('\n', out);
    std::fflush(out);
  };
}

void LineWriter::Write(absl::string_view prefix, absl::string_view line) {
  const std::string text = absl::StrCat(prefix, line);
  absl::MutexLock lock(&mu_);
  sink_(text);
}

}  // namespace ps
