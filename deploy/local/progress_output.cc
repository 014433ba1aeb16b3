#include "deploy/local/progress_output.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace ps {
namespace {

constexpr int kBarWidth = 20;
// Redraws at most this often: progress lines of several workers arrive at
// once.
constexpr absl::Duration kMinRedraw = absl::Milliseconds(200);
constexpr absl::Duration kWarningQuiet = absl::Seconds(5);

// Warnings of a normal start: workers other than rank 0 retry until it has
// declared the model.
bool Expected(absl::string_view line) {
  return absl::StrContains(line, "rank 0 has not declared the model yet");
}

int TerminalColumns(std::FILE* out) {
  winsize size = {};
  if (ioctl(fileno(out), TIOCGWINSZ, &size) == 0 && size.ws_col > 0) {
    return size.ws_col;
  }
  return 80;
}

std::string Rate(double samples_per_second) {
  if (samples_per_second >= 1e4) {
    return absl::StrFormat("%.1fk", samples_per_second / 1e3);
  }
  return absl::StrFormat("%.0f", samples_per_second);
}

}  // namespace

ProgressOutput::ProgressOutput(std::FILE* out, bool tty,
                               absl::Duration interval,
                               TrainingProgress* progress)
    : out_(out), tty_(tty), interval_(interval), progress_(progress) {}

std::string ProgressOutput::ProgressText(const ProgressSnapshot& s) const {
  std::string text =
      absl::StrFormat("epoch %d/%d step %d/%d loss %.4f", s.epoch, s.epochs,
                      s.step, s.steps_per_epoch, s.loss);
  if (s.last_test_accuracy.has_value()) {
    absl::StrAppendFormat(&text, " test acc %.4f", *s.last_test_accuracy);
  }
  absl::StrAppend(&text, " ", Rate(s.samples_per_second), " samples/s ETA ",
                  s.eta);
  return text;
}

void ProgressOutput::PrintLocked(absl::string_view line) {
  if (bar_shown_) std::fputs("\r\x1b[K", out_);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fputc('\n', out_);
  if (bar_shown_) {
    bar_shown_ = false;
    DrawBarLocked();
  }
  std::fflush(out_);
}

void ProgressOutput::DrawBarLocked() {
  const ProgressSnapshot s = progress_->Snapshot();
  if (!s.started) return;
  const int filled = static_cast<int>(s.fraction * kBarWidth + 0.5);
  std::string line = absl::StrCat(
      "[", std::string(filled, '#'), std::string(kBarWidth - filled, '.'), "] ",
      absl::StrFormat("%3.0f%% ", 100 * s.fraction), ProgressText(s));
  const size_t columns = static_cast<size_t>(TerminalColumns(out_));
  if (line.size() >= columns) line.resize(columns - 1);
  std::fputs("\r\x1b[K", out_);
  std::fputs(line.c_str(), out_);
  std::fflush(out_);
  bar_shown_ = true;
  last_draw_ = absl::Now();
}

void ProgressOutput::ProcessLine(const ProcessId& who, absl::string_view line) {
  const TrainingProgress::LineKind kind =
      who.is_server ? TrainingProgress::LineKind::kOther
                    : progress_->Feed(who.index, line);
  absl::MutexLock lock(&mu_);
  switch (kind) {
    case TrainingProgress::LineKind::kStep: {
      const absl::Time now = absl::Now();
      if (tty_) {
        if (now - last_draw_ >= kMinRedraw) DrawBarLocked();
      } else if (now - last_plain_ >= interval_) {
        last_plain_ = now;
        const ProgressSnapshot s = progress_->Snapshot();
        PrintLocked(absl::StrFormat("[progress] %3.0f%% %s", 100 * s.fraction,
                                    ProgressText(s)));
      }
      return;
    }
    case TrainingProgress::LineKind::kStart: {
      // The first step line may be a while away (a slow model, a large
      // --log_every): say what comes.
      const ProgressSnapshot s = progress_->Snapshot();
      if (!s.started) {
        PrintLocked(absl::StrFormat(
            "[progress] training %d epoch%s of %d steps; progress every "
            "--log_every steps",
            s.epochs, s.epochs == 1 ? "" : "s", s.steps_per_epoch));
      }
      return;
    }
    case TrainingProgress::LineKind::kTestAccuracy: {
      const ProgressSnapshot s = progress_->Snapshot();
      // One line an epoch: evaluations within it (--eval_every) only update
      // the progress line.
      if (s.last_eval_at_epoch_end &&
          s.last_eval_epoch > last_reported_epoch_) {
        last_reported_epoch_ = s.last_eval_epoch;
        double loss = s.loss;
        for (const EpochRecord& record : progress_->History()) {
          if (record.epoch == s.last_eval_epoch && record.train_loss) {
            loss = *record.train_loss;
          }
        }
        PrintLocked(absl::StrFormat(
            "[progress] epoch %d/%d done: loss %.4f, test accuracy %.4f",
            s.last_eval_epoch, s.epochs, loss,
            s.last_test_accuracy.value_or(0)));
      } else if (tty_) {
        DrawBarLocked();
      }
      return;
    }
    case TrainingProgress::LineKind::kFinalAccuracy: {
      const ProgressSnapshot s = progress_->Snapshot();
      if (tty_) DrawBarLocked();
      PrintLocked(
          absl::StrFormat("[progress] training done: final test "
                          "accuracy %.4f",
                          s.last_test_accuracy.value_or(0)));
      return;
    }
    case TrainingProgress::LineKind::kOther:
      break;
  }
  const LineSeverity severity = SeverityOf(line);
  if (severity == LineSeverity::kInfo || Expected(line)) return;
  std::string suffix;
  if (severity == LineSeverity::kWarning) {
    WarningState& state = warnings_[who.Name()];
    const absl::Time now = absl::Now();
    if (now - state.shown < kWarningQuiet) {
      ++state.held_back;
      return;
    }
    if (state.held_back > 0) {
      suffix = absl::StrCat(" (and ", state.held_back,
                            " more warnings before, in its log)");
    }
    state = WarningState{now, 0};
  }
  const std::string prefix = absl::StrCat("[", who.Name(), "] ");
  PrintLocked(absl::StrCat(absl::StrContains(line.substr(0, 40), prefix)
                               ? std::string(line)
                               : absl::StrCat(prefix, line),
                           suffix));
}

void ProgressOutput::LauncherLine(LaunchLevel level, absl::string_view text) {
  if (level == LaunchLevel::kDetail) return;
  const char* mark = level == LaunchLevel::kWarning ? "warning: "
                     : level == LaunchLevel::kError ? "error: "
                                                    : "";
  absl::MutexLock lock(&mu_);
  PrintLocked(absl::StrCat("[launch] ", mark, text));
}

void ProgressOutput::Close() {
  absl::MutexLock lock(&mu_);
  if (!bar_shown_) return;
  std::fputc('\n', out_);
  std::fflush(out_);
  bar_shown_ = false;
}

}  // namespace ps
