#include "server/hostname_index.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ps::server {

absl::StatusOr<int> IndexFromHostname(absl::string_view hostname) {
  const size_t dash = hostname.rfind('-');
  const absl::string_view digits =
      dash == absl::string_view::npos ? "" : hostname.substr(dash + 1);
  int index = -1;
  const bool all_digits =
      !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) {
        return absl::ascii_isdigit(c);
      });
  if (!all_digits || !absl::SimpleAtoi(digits, &index) || index < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--server_index=-1 takes the index from a hostname ending in "
        "\"-<ordinal>\" (a StatefulSet pod), but the hostname is \"",
        hostname, "\""));
  }
  return index;
}

absl::StatusOr<int> IndexFromThisHostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "--server_index=-1: gethostname failed: ", std::strerror(errno)));
  }
  return IndexFromHostname(name);
}

}  // namespace ps::server
