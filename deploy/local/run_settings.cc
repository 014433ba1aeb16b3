#include "deploy/local/run_settings.h"

#include <cstdint>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace {

template <typename T>
bool Parses(absl::string_view text, std::string* error) {
  T value{};
  return absl::ParseFlag(text, &value, error);
}

bool ParsesAs(RunSettings::Type type, absl::string_view text,
              std::string* error) {
  switch (type) {
    case RunSettings::Type::kBool:
      return Parses<bool>(text, error);
    case RunSettings::Type::kInt:
      return Parses<int>(text, error);
    case RunSettings::Type::kInt64:
      return Parses<int64_t>(text, error);
    case RunSettings::Type::kDouble:
      return Parses<double>(text, error);
    case RunSettings::Type::kDuration:
      return Parses<absl::Duration>(text, error);
    case RunSettings::Type::kString:
      return true;
  }
  return false;
}

}  // namespace

RunSettings RunSettings::FromFlags(const std::vector<std::string>& names) {
  RunSettings settings;
  for (const std::string& name : names) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) continue;
    Type type = Type::kString;
    if (flag->IsOfType<bool>()) {
      type = Type::kBool;
    } else if (flag->IsOfType<int>()) {
      type = Type::kInt;
    } else if (flag->IsOfType<int64_t>()) {
      type = Type::kInt64;
    } else if (flag->IsOfType<double>()) {
      type = Type::kDouble;
    } else if (flag->IsOfType<absl::Duration>()) {
      type = Type::kDuration;
    }
    settings.Define(name, type, flag->DefaultValue());
    settings.flags_[name].text = flag->CurrentValue();
  }
  return settings;
}

RunSettings RunSettings::FromFlagsDefinedIn(absl::string_view file) {
  std::vector<std::string> names;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::EndsWith(flag->Filename(), file)) names.emplace_back(name);
  }
  return FromFlags(names);
}

void RunSettings::Define(const std::string& name, Type type,
                         const std::string& default_text) {
  flags_[name] = Flag{type, default_text, default_text};
}

bool RunSettings::Has(absl::string_view name) const {
  return flags_.find(name) != flags_.end();
}

std::string RunSettings::Text(absl::string_view name) const {
  const auto it = flags_.find(name);
  return it == flags_.end() ? "" : it->second.text;
}

bool RunSettings::Changed(absl::string_view name) const {
  const auto it = flags_.find(name);
  return it != flags_.end() && it->second.text != it->second.default_text;
}

absl::Status RunSettings::Set(absl::string_view name, absl::string_view text) {
  const auto it = flags_.find(name);
  if (it == flags_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
  }
  std::string error;
  if (!ParsesAs(it->second.type, text, &error)) {
    // Worded as absl's own flag parsing words it.
    return absl::InvalidArgumentError(
        absl::StrCat("Illegal value '", text, "' specified for flag '", name,
                     "'", error.empty() ? "" : "; ", error));
  }
  it->second.text = std::string(text);
  return absl::OkStatus();
}

}  // namespace ps
