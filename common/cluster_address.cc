#include "common/cluster_address.h"

#include <arpa/inet.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ps {
namespace {

constexpr absl::string_view kIndexPlaceholder = "{index}";
constexpr int kMaxPatternCount = 4096;
constexpr size_t kMaxDnsNameLength = 253;
constexpr size_t kMaxDnsLabelLength = 63;

bool IsAllDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// A non-negative decimal int without sign or leading zero ("0" is fine),
// so that "07" or "+3" cannot silently name another index.
bool ParseCanonicalIndex(absl::string_view s, int* out) {
  if (!IsAllDigits(s) || (s.size() > 1 && s[0] == '0')) return false;
  return absl::SimpleAtoi(s, out);
}

absl::Status ValidateDnsName(absl::string_view host) {
  if (host.size() > kMaxDnsNameLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("host \"", host, "\" is longer than ", kMaxDnsNameLength,
                     " characters"));
  }
  for (absl::string_view label : absl::StrSplit(host, '.')) {
    if (label.empty() || label.size() > kMaxDnsLabelLength) {
      return absl::InvalidArgumentError(
          absl::StrCat("host \"", host, "\" has an empty or over-long (> ",
                       kMaxDnsLabelLength, " characters) label between dots"));
    }
    for (char c : label) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-') {
        return absl::InvalidArgumentError(
            absl::StrCat("host \"", host, "\" contains '", std::string(1, c),
                         "'; a DNS name has only letters, digits, '-' and "
                         "'.'"));
      }
    }
    if (label.front() == '-' || label.back() == '-') {
      return absl::InvalidArgumentError(absl::StrCat(
          "host \"", host, "\" has a label that starts or ends with '-'"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateHost(absl::string_view host) {
  if (host.empty()) {
    return absl::InvalidArgumentError("host is empty");
  }
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') {
      return absl::InvalidArgumentError(
          absl::StrCat("host \"", host,
                       "\" opens '[' for an IPv6 address but does not "
                       "close it"));
    }
    const std::string inner(host.substr(1, host.size() - 2));
    in6_addr addr;
    if (inet_pton(AF_INET6, inner.c_str(), &addr) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("host \"", host, "\" is not a valid IPv6 address"));
    }
    return absl::OkStatus();
  }
  if (absl::StrContains(host, ':')) {
    return absl::InvalidArgumentError(
        absl::StrCat("host \"", host,
                     "\" contains ':'; write IPv6 addresses in brackets, "
                     "e.g. [::1]:7000"));
  }
  if (host.find_first_not_of("0123456789.") == absl::string_view::npos) {
    const std::string text(host);
    in_addr addr;
    if (inet_pton(AF_INET, text.c_str(), &addr) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("host \"", host, "\" is not a valid IPv4 address"));
    }
    return absl::OkStatus();
  }
  return ValidateDnsName(host);
}

}  // namespace

absl::Status ValidateServerAddress(absl::string_view address) {
  if (address.empty()) {
    return absl::InvalidArgumentError(
        "server address is empty; expected host:port");
  }
  // The port follows the last ':', which for "[v6]:port" is after the ']'.
  const size_t colon = address.rfind(':');
  const size_t close = address.front() == '[' ? address.find(']') : 0;
  if (close == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("server address \"", address,
                     "\" opens '[' for an IPv6 address but does not close it"));
  }
  if (colon == absl::string_view::npos || colon < close) {
    return absl::InvalidArgumentError(absl::StrCat(
        "server address \"", address, "\" has no port; expected host:port"));
  }
  const absl::string_view host = address.substr(0, colon);
  const absl::string_view port_text = address.substr(colon + 1);
  if (absl::Status status = ValidateHost(host); !status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("server address \"", address, "\": ", status.message()));
  }
  int port = 0;
  if (!IsAllDigits(port_text) || port_text.size() > 5 ||
      !absl::SimpleAtoi(port_text, &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("server address \"", address, "\": port \"", port_text,
                     "\" is not a number in [1, 65535]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ParseServerList(
    absl::string_view list) {
  if (absl::StripAsciiWhitespace(list).empty()) {
    return absl::InvalidArgumentError(
        "server list is empty; expected host:port,host:port,...");
  }
  std::vector<std::string> addresses;
  absl::flat_hash_set<std::string> seen;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "server list \"", list, "\" has an empty entry (check the commas)"));
    }
    if (absl::Status status = ValidateServerAddress(entry); !status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "server list entry ", addresses.size(), ": ", status.message()));
    }
    if (!seen.insert(std::string(entry)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("server list names \"", entry,
                       "\" twice; each server needs its "
                       "own address"));
    }
    addresses.emplace_back(entry);
  }
  return addresses;
}

absl::StatusOr<std::vector<std::string>> ExpandServerPattern(
    absl::string_view pattern, int count) {
  if (!absl::StrContains(pattern, kIndexPlaceholder)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "server pattern \"", pattern, "\" does not contain ", kIndexPlaceholder,
        "; expected e.g. ps-server-{index}.ps-server:7000"));
  }
  const std::string without_placeholder =
      absl::StrReplaceAll(pattern, {{kIndexPlaceholder, ""}});
  if (absl::StrContains(without_placeholder, '{') ||
      absl::StrContains(without_placeholder, '}')) {
    return absl::InvalidArgumentError(
        absl::StrCat("server pattern \"", pattern,
                     "\" has a brace that is not part of ", kIndexPlaceholder));
  }
  if (count < 1 || count > kMaxPatternCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("number of servers ", count, " for pattern \"", pattern,
                     "\" is not in [1, ", kMaxPatternCount, "]"));
  }
  std::vector<std::string> addresses;
  addresses.reserve(count);
  for (int i = 0; i < count; ++i) {
    std::string address =
        absl::StrReplaceAll(pattern, {{kIndexPlaceholder, absl::StrCat(i)}});
    if (absl::Status status = ValidateServerAddress(address); !status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("server pattern \"", pattern, "\" with index ", i, ": ",
                       status.message()));
    }
    addresses.push_back(std::move(address));
  }
  return addresses;
}

absl::StatusOr<int> OrdinalFromHostname(absl::string_view hostname) {
  const absl::string_view name = hostname.substr(0, hostname.find('.'));
  const size_t dash = name.rfind('-');
  int ordinal = 0;
  if (dash == absl::string_view::npos || dash == 0 ||
      !ParseCanonicalIndex(name.substr(dash + 1), &ordinal)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hostname \"", hostname,
        "\" does not end in -<ordinal> like a StatefulSet pod (e.g. "
        "ps-server-3); pass the index explicitly instead"));
  }
  return ordinal;
}

absl::StatusOr<int> RankFromEnv(const char* value) {
  if (value == nullptr) {
    return absl::InvalidArgumentError(
        "JOB_COMPLETION_INDEX is not set (it is set in the pods of an Indexed "
        "Job); pass the rank explicitly instead");
  }
  int rank = 0;
  if (!ParseCanonicalIndex(value, &rank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("JOB_COMPLETION_INDEX=\"", value,
                     "\" is not a non-negative decimal number"));
  }
  return rank;
}

absl::Status ValidateJobId(absl::string_view job_id) {
  constexpr size_t kMaxLength = 128;
  if (job_id.size() > kMaxLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("job id \"", job_id.substr(0, 32), "...\" is ",
                     job_id.size(), " characters long; at most ", kMaxLength));
  }
  for (char c : job_id) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("job id \"", job_id,
                       "\" may hold only letters, digits, '.', '_' and '-'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ps
