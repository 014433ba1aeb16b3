#include "deploy/local/run_setup.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "deploy/local/binary_locator.h"
#include "deploy/local/pipeline_mode.h"
#include "deploy/local/run_report.h"

namespace ps {

absl::StatusOr<RunSetup> RunSetup::Plan(RunSettings settings,
                                        const std::set<std::string>& given,
                                        std::vector<std::string> program,
                                        const std::string& cwd,
                                        absl::Time now) {
  RunSetup setup;
  setup.cwd_ = cwd;
  setup.settings_ = std::move(settings);
  const bool resuming = !setup.settings_.Text("resume").empty();
  const bool extending = !setup.settings_.Text("extend").empty();
  if (resuming && extending) {
    return absl::InvalidArgumentError(
        "--resume and --extend both name a run: give one (--extend resumes "
        "it with the flags you change)");
  }
  if (resuming || extending) {
    setup.kind_ = resuming ? LaunchKind::kResume : LaunchKind::kExtend;
    if (absl::Status s = setup.Open(resuming ? "resume" : "extend", given,
                                    std::move(program));
        !s.ok()) {
      return s;
    }
    return setup;
  }
  const std::string run_dir = setup.settings_.Text("run_dir");
  setup.path_ = run_dir.empty() ? absl::StrCat(cwd, "/runs/", NewRunName(now))
                                : ResolveUserPath(run_dir, cwd);
  setup.program_ = std::move(program);
  return setup;
}

absl::Status RunSetup::Open(const std::string& flag,
                            const std::set<std::string>& given,
                            std::vector<std::string> program) {
  const bool resuming = kind_ == LaunchKind::kResume;
  const std::string how = absl::StrCat("--", flag);
  if (given.count("run_dir") > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(how, " names the run's directory: no --run_dir"));
  }
  path_ = ResolveUserPath(settings_.Text(flag), cwd_);
  const std::string shown = ShownPath(path_, cwd_);
  absl::StatusOr<std::unique_ptr<RunDirectory>> opened =
      RunDirectory::Open(path_);
  if (!opened.ok()) {
    return absl::InvalidArgumentError(opened.status().message());
  }
  dir_ = *std::move(opened);
  absl::StatusOr<RunRecord> read = dir_->Read();
  if (!read.ok()) return absl::InvalidArgumentError(read.status().message());
  record_ = *std::move(read);
  if (resuming && record_.state == "finished") {
    std::string epochs = "?";
    for (const auto& [name, value] : CurrentFlags(record_)) {
      if (name == "epochs") epochs = value;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "the run in ", shown, " already finished (", record_.outcome,
        "): nothing to resume. To train it further: --extend=", shown,
        " --epochs=N (N > ", epochs,
        ", the new total; another --learning_rate may come with it)"));
  }
  if (!resuming && !record_.program.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the run in ", shown,
        " runs a program given after --, whose epochs and learning rate "
        "are its own arguments: the launcher cannot extend it (--resume="
        "DIR goes on with it as it is)"));
  }
  if (!program.empty() && program != record_.program) {
    return absl::InvalidArgumentError(
        absl::StrCat(how, " runs the run's own program: give none after --"));
  }
  program_ = record_.program;
  if (resuming) {
    if (absl::Status s = ApplyRecordedFlags(record_, given, &settings_);
        !s.ok()) {
      return absl::InvalidArgumentError(s.message());
    }
  } else {
    absl::StatusOr<std::vector<FlagChange>> changed =
        ApplyExtension(record_, given, cwd_, &settings_);
    if (!changed.ok()) {
      return absl::InvalidArgumentError(changed.status().message());
    }
    changes_ = *std::move(changed);
    if (absl::Status s = CheckExtension(record_.state, CurrentFlags(record_),
                                        changes_, shown);
        !s.ok()) {
      return absl::InvalidArgumentError(s.message());
    }
  }
  // The run's own job id: its servers' checkpoints carry it.
  return settings_.Set("job_id", record_.job_id);
}

bool RunSetup::extended() const {
  return kind_ == LaunchKind::kExtend || WasExtended(record_);
}

absl::Status RunSetup::Begin(const LaunchConfig& config, absl::Time now) {
  RunSegment segment;
  segment.kind = kind_ == LaunchKind::kExtend   ? "extend"
                 : kind_ == LaunchKind::kResume ? "resume"
                                                : "start";
  segment.started = SegmentTime(now);
  if (kind_ == LaunchKind::kExtend) {
    if (config.checkpoint_dir.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the run in ", ShownPath(path_, cwd_),
          " kept no checkpoints (--nocheckpoints): there is nothing to "
          "extend; start a new run"));
    }
    // The run as it was stays at hand, whatever becomes of the extension.
    // Segment 1 is the start, also in a run.txt that kept no segments.
    const std::string kept = absl::StrCat(
        "before-segment-", std::max<size_t>(record_.segments.size(), 1) + 1);
    // Each stage's server group checkpoints in a folder of its own.
    const int groups = ServerGroups(config);
    for (int stage = 0; stage < groups; ++stage) {
      // On one host of several, only the groups whose servers run here.
      const int group_first = stage * config.num_servers;
      if (groups > 1 && config.host_servers >= 0 &&
          (group_first + config.num_servers <= config.first_server ||
           group_first >= config.first_server + config.host_servers)) {
        continue;
      }
      const std::string dir =
          groups == 1 ? config.checkpoint_dir
                      : StageCheckpointDir(config.checkpoint_dir, stage);
      kept_dir_ = absl::StrCat(groups == 1 ? dir : config.checkpoint_dir,
                               groups == 1 ? "/" : "/stage*/", kept);
      absl::StatusOr<int> files = KeepCheckpoints(dir, kept);
      if (absl::IsNotFound(files.status())) {
        return absl::InvalidArgumentError(absl::StrCat(
            files.status().message(), ": there is nothing to extend"));
      }
      if (!files.ok()) return absl::InternalError(files.status().message());
    }
    for (const FlagChange& change : changes_) {
      segment.flags.emplace_back(change.name, change.to);
    }
  }
  if (kind_ == LaunchKind::kStart) {
    absl::StatusOr<std::unique_ptr<RunDirectory>> created =
        RunDirectory::Create(path_);
    if (!created.ok()) {
      return absl::InvalidArgumentError(created.status().message());
    }
    dir_ = *std::move(created);
    record_.job_id = config.job_id;
    record_.flags = CurrentRunFlags(settings_, cwd_);
    record_.program = program_;
  } else if (record_.segments.empty()) {
    // A run.txt of a launcher that kept no segments.
    record_.segments.push_back(
        {"start",
         "unknown",
         {},
         absl::StrCat(record_.state, ": ", record_.outcome)});
  }
  record_.segments.push_back(segment);
  record_.state = "running";
  record_.outcome.clear();
  if (absl::Status s = dir_->Write(record_); !s.ok()) {
    return absl::InternalError(s.message());
  }
  return absl::OkStatus();
}

std::vector<std::string> RunSetup::OpeningLines(
    const LaunchConfig& config) const {
  std::vector<std::string> lines;
  const std::string shown_dir = ShownPath(path_, cwd_);
  lines.push_back(absl::StrCat(
      kind_ == LaunchKind::kResume   ? "resuming run "
      : kind_ == LaunchKind::kExtend ? "extending run "
                                     : "run ",
      shown_dir, ": ",
      ServerGroups(config) == 1
          ? absl::StrCat(config.num_servers, " servers, ")
          : absl::StrCat(ServerGroups(config), " stages' server groups of ",
                         config.num_servers, ", "),
      config.num_workers, " workers, ", config.mode,
      program_.empty()
          ? absl::StrCat(", ", config.epochs,
                         config.epochs == 1 ? " epoch of " : " epochs of ",
                         config.model)
          : "",
      " (logs in ", shown_dir, "/logs/)"));
  if (kind_ == LaunchKind::kExtend) {
    std::vector<std::string> changed;
    for (const FlagChange& change : changes_) {
      changed.push_back(absl::StrCat("--", change.name, "=", change.to,
                                     " (was ", change.from, ")"));
    }
    lines.push_back(absl::StrCat("from its checkpoints, with ",
                                 absl::StrJoin(changed, ", "),
                                 "; the checkpoints from before are kept in ",
                                 ShownPath(kept_dir_, cwd_), "/"));
  }
  return lines;
}

}  // namespace ps
