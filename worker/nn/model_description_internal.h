#ifndef PS_WORKER_NN_MODEL_DESCRIPTION_INTERNAL_H_
#define PS_WORKER_NN_MODEL_DESCRIPTION_INTERNAL_H_

// Shared by model_description.cc (checks) and model_description_parse.cc
// (text); not part of the library's interface.

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ps::worker::nn::internal {

constexpr int kMaxExtent = 1 << 20;  // Any size, channel count or stride.

// Where a problem is: the description's source and the item in it.
struct Location {
  std::string source;    // "model description", "model file \"x.txt\""
  std::string position;  // "item 3", "line 7"; empty for the whole stack.
  std::string text;      // The item as written.
};

// InvalidArgument "<source>: <position> \"<text>\": <problem>".
inline absl::Status Invalid(const Location& at, absl::string_view problem) {
  if (at.position.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(at.source, ": ", problem));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      at.source, ": ", at.position, " \"", at.text, "\": ", problem));
}

}  // namespace ps::worker::nn::internal

#endif  // PS_WORKER_NN_MODEL_DESCRIPTION_INTERNAL_H_
