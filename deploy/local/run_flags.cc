#include "deploy/local/run_flags.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
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
  // clang-format off
  static const auto* const kFlags = new std::vector<std::string>{
      "num_servers",    "num_workers",   "model",         "epochs",
      "batch_size",     "mode",          "staleness",     "optimizer",
      "lr_schedule",    "learning_rate", "seed",          "data_dir",
      "device",         "save_model",    "server_flags",  "worker_flags",
      "log_every",      "eval_every",    "max_steps",     "checkpoints",
      "checkpoint_dir", "auth",          "micro_batches", "pipeline_stages",
      "pipeline_schedule", "stage_split", "worker_memory_budget"};
  // clang-format on
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
    const RunSettings& settings, const std::string& cwd) {
  std::vector<std::pair<std::string, std::string>> flags;
  for (const std::string& name : RunDefiningFlags()) {
    if (!settings.Has(name)) continue;
    std::string value = settings.Text(name);
    if (IsPathFlag(name)) value = ResolveUserPath(value, cwd);
    flags.emplace_back(name, value);
  }
  return flags;
}

absl::Status ApplyRecordedFlags(const RunRecord& record,
                                const std::set<std::string>& given,
                                RunSettings* settings) {
  for (const std::string& name : RunDefiningFlags()) {
    if (given.count(name) > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name,
          " defines the run: --resume continues it as it is (its run.txt); ",
          WhyFixedOnExtend(name) == nullptr
              ? "--extend=DIR goes on with another value"
              : "for another value start a new run"));
    }
  }
  for (const auto& [name, value] : CurrentFlags(record)) {
    if (!settings->Has(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the run's flag --", name, " is unknown to this launcher"));
    }
    if (absl::Status s = settings->Set(name, value); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the run's flag --", name, "=", value, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

const char* WhyFixedOnExtend(absl::string_view name) {
  static const auto* const kWhy = new std::map<absl::string_view, const char*>{
      {"num_servers",
       "the checkpoints hold the model split over the run's servers"},
      {"num_workers",
       "the data is split among the run's workers, and the checkpoints "
       "record where each one is in it"},
      {"model", "the checkpoints hold the run's model"},
      {"batch_size",
       "the workers' places in the data and the steps of an epoch follow "
       "from it"},
      {"pipeline_stages",
       "the data is split among the run's replicas, and the checkpoints "
       "record where each worker is in it"},
      {"stage_split",
       "each stage's server group holds the tensors of the run's split"},
      {"mode", "the checkpoints are of the run's consistency mode"},
      {"staleness", "the checkpoints are of the run's consistency mode"},
      {"optimizer",
       "the checkpoints hold the state of the run's optimizer (Adam's "
       "moments, SGD's momentum)"},
      {"seed",
       "every epoch's data order follows from it: the run goes on in its "
       "own"},
      {"data_dir", "the workers' places in the data are in the run's data"},
      {"checkpoints", "the run goes on from its checkpoints"},
      {"checkpoint_dir", "the run goes on from its checkpoints"},
  };
  const auto it = kWhy->find(name);
  return it == kWhy->end() ? nullptr : it->second;
}

absl::StatusOr<std::vector<FlagChange>> ApplyExtension(
    const RunRecord& record, const std::set<std::string>& given,
    const std::string& cwd, RunSettings* settings) {
  // The command line's values, before the run's replace them.
  std::map<std::string, std::string> wanted;
  for (const std::string& name : RunDefiningFlags()) {
    if (!settings->Has(name) || given.count(name) == 0) continue;
    std::string value = settings->Text(name);
    if (IsPathFlag(name)) value = ResolveUserPath(value, cwd);
    wanted[name] = value;
  }
  if (absl::Status s = ApplyRecordedFlags(record, {}, settings); !s.ok()) {
    return s;
  }
  std::vector<FlagChange> changes;
  for (const auto& [name, value] : wanted) {
    const std::string run_value = settings->Text(name);
    if (value == run_value) continue;
    if (const char* why = WhyFixedOnExtend(name); why != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name, "=", value, ": an extended run keeps its --", name, "=",
          run_value, ", since ", why, "; for another value start a new run"));
    }
    if (absl::Status s = settings->Set(name, value); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, "=", value, ": ", s.message()));
    }
    changes.push_back({name, run_value, value});
  }
  return changes;
}

absl::Status CheckExtension(
    const std::string& state,
    const std::vector<std::pair<std::string, std::string>>& before,
    const std::vector<FlagChange>& changes, const std::string& shown_dir) {
  if (state != "finished") {
    if (!changes.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "--extend=", shown_dir,
        " changes nothing: give the flags to change (e.g. --epochs=N, the "
        "new total, or --learning_rate), or go on as it is with --resume=",
        shown_dir));
  }
  // The values before and after, as numbers; a flag the record lacks has
  // its default (none limits).
  auto value = [](const std::vector<std::pair<std::string, std::string>>& flags,
                  absl::string_view name) {
    int64_t number = 0;
    for (const auto& [n, v] : flags) {
      if (n == name && absl::SimpleAtoi(v, &number)) return number;
    }
    return number;
  };
  std::vector<std::pair<std::string, std::string>> after = before;
  for (const FlagChange& change : changes) {
    bool found = false;
    for (auto& [n, v] : after) {
      if (n == change.name) {
        v = change.to;
        found = true;
      }
    }
    if (!found) after.emplace_back(change.name, change.to);
  }
  const int64_t epochs = value(before, "epochs");
  const int64_t new_epochs = value(after, "epochs");
  const int64_t max_steps = value(before, "max_steps");
  const int64_t new_max_steps = value(after, "max_steps");
  const bool longer =
      new_epochs > epochs ||
      (max_steps > 0 && (new_max_steps == 0 || new_max_steps > max_steps));
  const bool shorter =
      new_epochs < epochs ||
      (max_steps > 0 && new_max_steps > 0 && new_max_steps < max_steps);
  if (longer && !shorter) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the run in ", shown_dir, " finished the ", epochs,
      epochs == 1 ? " epoch" : " epochs",
      max_steps > 0 ? absl::StrCat(" (at most ", max_steps, " steps)") : "",
      " it planned: extending it needs more, --epochs=N with N > ", epochs,
      " (the new total; another --learning_rate may come with it)",
      max_steps > 0
          ? absl::StrCat(" and a --max_steps above ", max_steps, " (or 0)")
          : ""));
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
