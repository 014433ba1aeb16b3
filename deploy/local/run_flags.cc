#include "deploy/local/run_flags.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "deploy/local/binary_locator.h"

namespace ps {
namespace {

bool IsPathFlag(const std::string& name) {
  return name == "data_dir" || name == "save_model" || name == "checkpoint_dir";
}

}  // namespace

const std::vector<std::string>& RunDefiningFlags() {
  static const auto* const kFlags = new std::vector<std::string>{
      "num_servers",    "num_workers",   "model",        "epochs",
      "batch_size",     "mode",          "staleness",    "optimizer",
      "lr_schedule",    "learning_rate", "seed",         "data_dir",
      "device",         "save_model",    "server_flags", "worker_flags",
      "log_every",      "eval_every",    "max_steps",    "checkpoints",
      "checkpoint_dir", "auth"};
  return *kFlags;
}

std::set<std::string> FlagsOnCommandLine(int argc, char** argv) {
  std::set<std::string> names;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "-")) continue;
    absl::ConsumePrefix(&arg, "-");
    std::string name(arg.substr(0, arg.find('=')));
    if (absl::FindCommandLineFlag(name) == nullptr &&
        absl::StartsWith(name, "no")) {
      name = name.substr(2);
    }
    names.insert(name);
  }
  return names;
}

std::vector<std::pair<std::string, std::string>> CurrentRunFlags(
    const std::string& cwd) {
  std::vector<std::pair<std::string, std::string>> flags;
  for (const std::string& name : RunDefiningFlags()) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) continue;
    std::string value = flag->CurrentValue();
    if (IsPathFlag(name)) value = ResolveUserPath(value, cwd);
    flags.emplace_back(name, value);
  }
  return flags;
}

absl::Status ApplyRecordedFlags(const RunRecord& record,
                                const std::set<std::string>& given) {
  for (const std::string& name : RunDefiningFlags()) {
    if (given.count(name) > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name,
          " defines the run: --resume continues it as it was started (its "
          "run.txt); for other values start a new run"));
    }
  }
  for (const auto& [name, value] : record.flags) {
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the run's flag --", name, " is unknown to this launcher"));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the run's flag --", name, "=", value, ": ", error));
    }
  }
  return absl::OkStatus();
}

void PrintFlagHelp(bool full, const std::string& own_dir) {
  std::printf("%s\n", std::string(absl::ProgramUsageMessage()).c_str());
  // By file, then name, as absl's own help.
  std::map<std::string, std::map<std::string, absl::CommandLineFlag*>> files;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!full && !absl::StrContains(flag->Filename(), own_dir)) continue;
    files[flag->Filename()][std::string(name)] = flag;
  }
  for (const auto& [file, flags] : files) {
    std::printf("\n  Flags from %s:\n", file.c_str());
    for (const auto& [name, flag] : flags) {
      std::printf(
          "    --%s (%s); default: %s;\n", name.c_str(), flag->Help().c_str(),
          flag->DefaultValue().empty() ? "\"\"" : flag->DefaultValue().c_str());
    }
  }
  if (!full) std::printf("\nTry --helpfull to see every flag.\n");
}

}  // namespace ps
