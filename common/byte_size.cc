#include "common/byte_size.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ps {

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text, uint64_t max) {
  absl::string_view digits = text;
  int shift = 0;
  if (!digits.empty()) {
    switch (absl::ascii_toupper(digits.back())) {
      case 'K':
        shift = 10;
        break;
      case 'M':
        shift = 20;
        break;
      case 'G':
        shift = 30;
        break;
    }
    if (shift != 0) digits.remove_suffix(1);
  }
  uint64_t value = 0;
  // SimpleAtoi alone would take a sign and surrounding spaces.
  if (digits.empty() || !absl::ascii_isdigit(digits.front()) ||
      !absl::ascii_isdigit(digits.back()) ||
      !absl::SimpleAtoi(digits, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", text, "\" is not a byte count (digits with an optional K, M or ",
        "G)"));
  }
  if (value > (max >> shift)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is more than ", max, " bytes"));
  }
  return value << shift;
}

}  // namespace ps
