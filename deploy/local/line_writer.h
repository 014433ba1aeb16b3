#ifndef PS_DEPLOY_LOCAL_LINE_WRITER_H_
#define PS_DEPLOY_LOCAL_LINE_WRITER_H_

#include <cstdio>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace ps {

// Writes whole lines, each with a prefix such as "[worker 1] ", from any
// number of threads without ever mixing two lines.
//
// Why: every child's output is read on its own thread; the launcher prints
// them all on one terminal. Thread-safe; holds its sink by value (a FILE* is
// not owned and must outlive the writer).
class LineWriter {
 public:
  // Sends each finished line (prefix included, no '\n') to `sink`.
  explicit LineWriter(std::function<void(absl::string_view)> sink);
  // Writes to `out` (e.g. stdout), flushing each line.
  static std::function<void(absl::string_view)> FileSink(std::FILE* out);

  LineWriter(const LineWriter&) = delete;
  LineWriter& operator=(const LineWriter&) = delete;

  void Write(absl::string_view prefix, absl::string_view line);

 private:
  absl::Mutex mu_;
  std::function<void(absl::string_view)> sink_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_LINE_WRITER_H_
