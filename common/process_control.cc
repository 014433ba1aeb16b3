#include "common/process_control.h"

#include <pthread.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace ps {

absl::Status CheckFlagSyntax(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "-")) continue;  // Positional.
    absl::ConsumePrefix(&arg, "-");
    const size_t eq = arg.find('=');
    absl::string_view name = arg.substr(0, eq);
    // absl's own flags (--help, --flagfile, ...) are left to absl.
    for (absl::string_view builtin :
         {"help", "helpfull", "helpshort", "helppackage", "helpon", "helpmatch",
          "version", "only_check_args", "flagfile", "fromenv", "tryfromenv",
          "undefok"}) {
      if (name == builtin) name = "";
    }
    if (name.empty()) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && eq == absl::string_view::npos &&
        absl::StartsWith(name, "no")) {
      flag = absl::FindCommandLineFlag(name.substr(2));
      if (flag != nullptr && flag->IsOfType<bool>()) continue;
      flag = nullptr;
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    absl::string_view value;
    if (eq != absl::string_view::npos) {
      value = arg.substr(eq + 1);
    } else if (flag->IsOfType<bool>()) {
      continue;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " needs a value"));
    }
    // Parsing sets the flag; ParseCommandLine sets it again to the same.
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, "=", value, ": ", error));
    }
  }
  return absl::OkStatus();
}

absl::Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = absl::StrCat(path, ".tmp");
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "--port_file: cannot create ", tmp, ": ", std::strerror(errno)));
  }
  const std::string text = absl::StrCat(port, "\n");
  const bool written =
      std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !written) {
    return absl::UnavailableError(
        absl::StrCat("--port_file: cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("--port_file: cannot rename ",
                                               tmp, " to ", path, ": ",
                                               std::strerror(errno)));
  }
  return absl::OkStatus();
}

void ShutdownRequest::Request(const std::string& reason, int exit_code) {
  absl::MutexLock lock(&mu_);
  if (reason_.text.empty()) reason_ = {reason, exit_code, false};
}

void ShutdownRequest::RequestBySignal(const std::string& reason,
                                      int exit_code) {
  absl::MutexLock lock(&mu_);
  if (reason_.text.empty()) reason_ = {reason, exit_code, true};
}

ShutdownRequest::Reason ShutdownRequest::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](Reason* r) { return !r->text.empty(); }, &reason_));
  return reason_;
}

bool ShutdownRequest::requested() {
  absl::MutexLock lock(&mu_);
  return !reason_.text.empty();
}

void RequestShutdownOnSignal(StopSignals* signals, int exit_code,
                             ShutdownRequest* request) {
  signals->Watch([exit_code, request](int sig) {
    request->RequestBySignal(
        absl::StrCat("signal ", sig, " (", strsignal(sig), ")"), exit_code);
  });
}

}  // namespace ps
