#ifndef PS_DEPLOY_LOCAL_RUN_SETTINGS_H_
#define PS_DEPLOY_LOCAL_RUN_SETTINGS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/flags/marshalling.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ps {

// The launcher's settings for one run: each of its flags' value as text, by
// name (no "--"), with the flag's type and default. Main takes them from
// absl's flag registry once, after parsing the command line; --resume and
// --extend then replace values with the run's (run.txt) in this value,
// never in the registry.
//
// A value type: copyable, not thread-safe.
class RunSettings {
 public:
  // The types the launcher's flags have.
  enum class Type { kBool, kInt, kInt64, kDouble, kString, kDuration };

  RunSettings() = default;

  // The flags `names` as absl's registry holds them now (those it does not
  // know are left out). Reads the registry; for main and tests.
  static RunSettings FromFlags(const std::vector<std::string>& names);
  // Every flag defined in a file whose path ends with `file`.
  static RunSettings FromFlagsDefinedIn(absl::string_view file);

  // Adds flag `name` of `type`, with `default_text`, set to it.
  void Define(const std::string& name, Type type,
              const std::string& default_text);

  bool Has(absl::string_view name) const;
  // The value's text, "" for an unknown flag.
  std::string Text(absl::string_view name) const;
  // Whether the value differs from the flag's default.
  bool Changed(absl::string_view name) const;

  // Sets a known flag to `text`, which must parse as its type.
  // InvalidArgument otherwise: "unknown flag", or the parser's error.
  absl::Status Set(absl::string_view name, absl::string_view text);

  // The value of a known flag of type T (a flag of another type, or an
  // unknown one, is a bug of ours: T's default value then).
  template <typename T>
  T Get(absl::string_view name) const {
    T value{};
    std::string error;
    const auto it = flags_.find(name);
    if (it == flags_.end() ||
        !absl::ParseFlag(absl::string_view(it->second.text), &value, &error)) {
      return T{};
    }
    return value;
  }

 private:
  struct Flag {
    Type type = Type::kString;
    std::string default_text;
    std::string text;
  };
  std::map<std::string, Flag, std::less<>> flags_;
};

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_RUN_SETTINGS_H_
