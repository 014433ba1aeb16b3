#include "common/slurm_lists.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ps {
namespace {

// More hosts than any job of ours runs on; bounds a list's expansion.
constexpr size_t kMaxHosts = 1 << 16;

// Digits only, and at most 9 of them: no sign, no space, no overflow.
bool AllDigits(absl::string_view text) {
  return !text.empty() && text.size() <= 9 &&
         std::all_of(text.begin(), text.end(), absl::ascii_isdigit);
}

absl::Status Invalid(absl::string_view what, absl::string_view list,
                     absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(what, " '", list, "': ", why));
}

// The items of `list` separated by commas outside brackets.
absl::StatusOr<std::vector<absl::string_view>> SplitTopLevel(
    absl::string_view list) {
  std::vector<absl::string_view> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') {
      if (++depth > 1) return Invalid("host list", list, "nested '['");
    } else if (c == ']') {
      if (--depth < 0) return Invalid("host list", list, "']' without '['");
    } else if (c == ',' && depth == 0) {
      if (i == start) return Invalid("host list", list, "an empty name");
      items.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) return Invalid("host list", list, "'[' without ']'");
  return items;
}

// "01-04,07" as the names it stands for, without the text around it.
absl::StatusOr<std::vector<std::string>> ExpandBracket(absl::string_view body,
                                                       absl::string_view list) {
  std::vector<std::string> values;
  for (absl::string_view range : absl::StrSplit(body, ',')) {
    std::pair<absl::string_view, absl::string_view> bounds =
        absl::StrSplit(range, absl::MaxSplits('-', 1));
    if (bounds.second.empty() && !absl::StrContains(range, '-')) {
      bounds.second = bounds.first;
    }
    int64_t low = 0;
    int64_t high = 0;
    if (!AllDigits(bounds.first) || !AllDigits(bounds.second) ||
        !absl::SimpleAtoi(bounds.first, &low) ||
        !absl::SimpleAtoi(bounds.second, &high)) {
      return Invalid("host list", list,
                     absl::StrCat("'", range, "' is not a number or range"));
    }
    if (high < low) {
      return Invalid("host list", list,
                     absl::StrCat("'", range, "' runs backwards"));
    }
    if (values.size() + static_cast<size_t>(high - low) >= kMaxHosts) {
      return Invalid("host list", list,
                     absl::StrCat("more than ", kMaxHosts, " hosts"));
    }
    const size_t width = bounds.first.size();
    for (int64_t n = low; n <= high; ++n) {
      std::string digits = absl::StrCat(n);
      if (digits.size() < width) {
        digits.insert(0, width - digits.size(), '0');
      }
      values.push_back(std::move(digits));
    }
  }
  return values;
}

// One item, "r[1-2]n[01-02]-ib", expanded into `hosts`.
absl::Status ExpandItem(absl::string_view item, absl::string_view list,
                        std::vector<std::string>* hosts) {
  std::vector<std::string> names = {""};
  while (!item.empty()) {
    const size_t open = item.find('[');
    const absl::string_view text = item.substr(0, open);
    for (std::string& name : names) absl::StrAppend(&name, text);
    if (open == absl::string_view::npos) break;
    const size_t close = item.find(']', open);
    absl::StatusOr<std::vector<std::string>> values =
        ExpandBracket(item.substr(open + 1, close - open - 1), list);
    if (!values.ok()) return values.status();
    if (names.size() * values->size() + hosts->size() > kMaxHosts) {
      return Invalid("host list", list,
                     absl::StrCat("more than ", kMaxHosts, " hosts"));
    }
    std::vector<std::string> longer;
    longer.reserve(names.size() * values->size());
    for (const std::string& name : names) {
      for (const std::string& value : *values) {
        longer.push_back(absl::StrCat(name, value));
      }
    }
    names = std::move(longer);
    item.remove_prefix(close + 1);
  }
  for (std::string& name : names) {
    for (char c : name) {
      if (!absl::ascii_isalnum(c) && c != '-' && c != '.' && c != '_') {
        return Invalid("host list", list,
                       absl::StrCat("'", name, "' is not a host name"));
      }
    }
    hosts->push_back(std::move(name));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandSlurmHostList(
    absl::string_view list) {
  if (list.empty()) return Invalid("host list", list, "empty");
  absl::StatusOr<std::vector<absl::string_view>> items = SplitTopLevel(list);
  if (!items.ok()) return items.status();
  std::vector<std::string> hosts;
  for (absl::string_view item : *items) {
    if (absl::Status s = ExpandItem(item, list, &hosts); !s.ok()) return s;
  }
  return hosts;
}

absl::StatusOr<std::vector<int>> ExpandSlurmTasksPerNode(
    absl::string_view list) {
  std::vector<int> counts;
  if (list.empty()) return Invalid("tasks per node", list, "empty");
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    // "N" or "N(xR)".
    int count = 0;
    int repeat = 1;
    absl::string_view number = item;
    if (const size_t open = item.find('('); open != absl::string_view::npos) {
      number = item.substr(0, open);
      absl::string_view times = item.substr(open);
      if (!absl::ConsumePrefix(&times, "(x") ||
          !absl::ConsumeSuffix(&times, ")") || !AllDigits(times) ||
          !absl::SimpleAtoi(times, &repeat) || repeat < 1 ||
          repeat > static_cast<int>(kMaxHosts)) {
        return Invalid("tasks per node", list,
                       absl::StrCat("'", item, "' is not N or N(xR)"));
      }
    }
    if (!AllDigits(number) || !absl::SimpleAtoi(number, &count) || count < 1) {
      return Invalid("tasks per node", list,
                     absl::StrCat("'", item, "' is not N or N(xR)"));
    }
    if (counts.size() + repeat > kMaxHosts) {
      return Invalid("tasks per node", list,
                     absl::StrCat("more than ", kMaxHosts, " nodes"));
    }
    counts.insert(counts.end(), repeat, count);
  }
  return counts;
}

}  // namespace ps
