#include "deploy/local/curves.h"

#include <fstream>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "common/subprocess.h"

namespace ps {
namespace {

constexpr absl::Duration kPlotTimeout = absl::Seconds(30);

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.flush();
  if (!out)
    return absl::FailedPreconditionError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// A gnuplot string literal.
std::string Quoted(absl::string_view text) {
  return absl::StrCat(
      "\"", absl::StrReplaceAll(text, {{"\\", "\\\\"}, {"\"", "\\\""}}), "\"");
}

// Loss on the left axis, accuracy on the right; empty CSV fields are
// skipped ("set datafile missing"), and a curve with no value at all is left
// out (gnuplot refuses to plot one).
std::string GnuplotScript(const std::string& csv, const std::string& png,
                          const std::string& title, bool any_loss,
                          bool any_accuracy) {
  std::vector<std::string> curves;
  if (any_loss) {
    curves.push_back(absl::StrCat(Quoted(csv),
                                  " using 1:2 with linespoints lw 2 title "
                                  "\"training loss\" axes x1y1"));
  }
  if (any_accuracy) {
    curves.push_back(absl::StrCat(Quoted(csv),
                                  " using 1:3 with linespoints lw 2 title "
                                  "\"test accuracy\" axes x1y2"));
  }
  return absl::StrCat(
      "set terminal png size 900,540\n"
      "set output ",
      Quoted(png),
      "\n"
      "set datafile separator \",\"\n"
      "set datafile missing \"\"\n"
      "set title ",
      Quoted(title),
      " noenhanced\n"
      "set xlabel \"epoch\"\n"
      "set ylabel \"training loss\"\n"
      "set y2label \"test accuracy\"\n"
      "set ytics nomirror\n"
      "set y2tics\n"
      "set grid\n"
      "set key center right\n"
      "set xtics 1\n"
      "plot ",
      absl::StrJoin(curves, ", \\\n     "), "\n");
}

}  // namespace

absl::StatusOr<CurveFiles> WriteCurves(const std::string& dir,
                                       const std::vector<EpochRecord>& history,
                                       const std::string& title) {
  if (history.empty()) {
    return absl::FailedPreconditionError(
        "no epoch was logged (a program other than our worker?)");
  }
  CurveFiles files;
  files.csv = absl::StrCat(dir, "/curves.csv");
  if (absl::Status s = WriteFile(files.csv, HistoryCsv(history)); !s.ok()) {
    return s;
  }
  const std::string png = absl::StrCat(dir, "/curves.png");
  const std::string script = absl::StrCat(dir, "/curves.gp");
  bool any_loss = false, any_accuracy = false;
  for (const EpochRecord& r : history) {
    any_loss |= r.train_loss.has_value();
    any_accuracy |= r.test_accuracy.has_value();
  }
  if (absl::Status s = WriteFile(
          script, GnuplotScript(files.csv, png, title, any_loss, any_accuracy));
      !s.ok()) {
    files.png_problem = std::string(s.message());
    return files;
  }
  SubprocessOptions options;
  options.argv = {"gnuplot", script};
  options.name = "gnuplot";
  absl::StatusOr<std::unique_ptr<Subprocess>> gnuplot =
      Subprocess::Start(std::move(options));
  if (!gnuplot.ok()) {
    files.png_problem = absl::StrCat(
        "no gnuplot (scripts/install_deps.sh installs gnuplot-nox): ",
        gnuplot.status().message());
    return files;
  }
  std::optional<ExitStatus> exit = (*gnuplot)->WaitFor(kPlotTimeout);
  if (!exit.has_value() || !exit->success()) {
    files.png_problem = absl::StrCat(
        "gnuplot ", exit.has_value() ? exit->ToString() : "timed out", ": ",
        (*gnuplot)->LastLines(2));
    return files;
  }
  files.png = png;
  return files;
}

}  // namespace ps
