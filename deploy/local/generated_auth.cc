#include "deploy/local/generated_auth.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "common/subprocess.h"

namespace ps {
namespace {

constexpr absl::Duration kOpensslTimeout = absl::Seconds(30);
// The run's certificates outlive no run, but a local run may take days.
constexpr char kValidDays[] = "30";
// A job's CA serves the jobs of a year.
constexpr char kJobCaValidDays[] = "365";

// Our own configuration, so that the system's openssl.cnf changes nothing:
// the CA may only sign; leaves are for a TLS server or client only.
// SERVER_NAMES: the server's subjectAltName entries (OpensslConfig).
constexpr char kOpensslConfig[] = R"([req]
distinguished_name = dn
prompt = no
[dn]
CN = ps-launch
[ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = SERVER_NAMES
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
)";

// The subjectAltName entries for `names` besides 127.0.0.1 and localhost.
std::string OpensslConfig(absl::string_view server_names) {
  return absl::StrReplaceAll(kOpensslConfig, {{"SERVER_NAMES", server_names}});
}

absl::StatusOr<std::string> SubjectAltNames(
    const std::vector<std::string>& names) {
  std::vector<std::string> entries = {"IP:127.0.0.1", "DNS:localhost"};
  for (std::string name : names) {
    if (absl::StartsWith(name, "[") && absl::EndsWith(name, "]")) {
      name = name.substr(1, name.size() - 2);
    }
    in6_addr ip6;
    in_addr ip4;
    if (inet_pton(AF_INET, name.c_str(), &ip4) == 1 ||
        inet_pton(AF_INET6, name.c_str(), &ip6) == 1) {
      entries.push_back(absl::StrCat("IP:", name));
      continue;
    }
    // A host name, and nothing that could change the configuration.
    const bool host_name =
        !name.empty() && name.size() <= 253 &&
        std::all_of(name.begin(), name.end(), [](char c) {
          return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                 c == '-' || c == '.';
        });
    if (!host_name) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--auth: '", name, "' is neither an address nor a host name"));
    }
    entries.push_back(absl::StrCat("DNS:", name));
  }
  return absl::StrJoin(entries, ", ");
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RandomBytes(size_t n) {
  std::ifstream in("/dev/urandom", std::ios::binary);
  std::string bytes(n, '\0');
  if (!in.read(bytes.data(), static_cast<std::streamsize>(n))) {
    return absl::FailedPreconditionError("cannot read /dev/urandom");
  }
  return bytes;
}

absl::Status RunOpenssl(const std::string& openssl, absl::string_view step,
                        std::vector<std::string> args) {
  SubprocessOptions options;
  options.argv = {openssl};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.name = "openssl";
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Start(std::move(options));
  if (!child.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--auth: cannot run ", openssl, " (", step,
        "; Debian's package `openssl`): ", child.status().message()));
  }
  std::optional<ExitStatus> exit = (*child)->WaitFor(kOpensslTimeout);
  if (!exit.has_value() || !exit->success()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--auth: openssl failed to ", step, " (",
                     exit.has_value() ? exit->ToString() : "timed out",
                     "): ", (*child)->LastLines(5)));
  }
  return absl::OkStatus();
}

// A key and a certificate signed by the CA in `dir`, with the extensions
// of section `section` of the configuration.
absl::Status MakeLeaf(const std::string& openssl, const std::string& dir,
                      const std::string& ca_key, const std::string& name,
                      const std::string& section) {
  const std::string key = absl::StrCat(dir, "/", name, ".key");
  const std::string csr = absl::StrCat(dir, "/", name, ".csr");
  if (absl::Status s = RunOpenssl(
          openssl, absl::StrCat("make the ", name, " key"),
          {"req", "-new", "-config", dir + "/openssl.cnf", "-newkey", "ec",
           "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
           "-out", csr, "-subj", absl::StrCat("/CN=ps-", name)});
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::string> serial = RandomBytes(16);
  if (!serial.ok()) return serial.status();
  // Serials must be positive: clear the sign bit.
  (*serial)[0] &= 0x7f;
  return RunOpenssl(
      openssl, absl::StrCat("sign the ", name, " certificate"),
      {"x509", "-req", "-in", csr, "-CA", dir + "/ca.crt", "-CAkey", ca_key,
       "-set_serial", absl::StrCat("0x", absl::BytesToHexString(*serial)),
       "-days", kValidDays, "-extfile", dir + "/openssl.cnf", "-extensions",
       section, "-out", absl::StrCat(dir, "/", name, ".crt")});
}

// A new directory under `temp_root` ($TMPDIR or /tmp if empty), mode 0700
// (mkdtemp's): only this user can read the keys.
absl::StatusOr<std::string> MakePrivateDir(std::string temp_root) {
  if (temp_root.empty()) {
    const char* tmp = getenv("TMPDIR");
    temp_root = (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
  }
  std::string pattern = absl::StrCat(temp_root, "/ps-auth-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create a directory in ", temp_root, ": ", strerror(errno)));
  }
  return pattern;
}

absl::Status MakeCa(const std::string& openssl, const std::string& dir,
                    const char* days) {
  if (absl::Status s =
          WriteFile(dir + "/openssl.cnf", OpensslConfig("IP:127.0.0.1"));
      !s.ok()) {
    return s;
  }
  absl::Status made = RunOpenssl(
      openssl, "make the CA",
      {"req", "-x509", "-config", dir + "/openssl.cnf", "-extensions", "ca",
       "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
       "-keyout", dir + "/ca.key", "-out", dir + "/ca.crt", "-days", days,
       "-subj", "/CN=ps-launch-ca"});
  std::error_code ignored;
  std::filesystem::remove(dir + "/openssl.cnf", ignored);
  return made;
}

absl::Status WriteToken(const std::string& path) {
  absl::StatusOr<std::string> token = RandomBytes(32);
  if (!token.ok()) return token.status();
  if (absl::Status s = WriteFile(path, absl::BytesToHexString(*token) + "\n");
      !s.ok()) {
    return s;
  }
  // Readable by this user only, wherever it is copied with its mode.
  if (chmod(path.c_str(), 0600) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot chmod ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

// A job CA's files, checked before openssl is given them.
absl::Status CheckJobCa(const std::string& dir) {
  for (const char* name : {kJobCaCert, kJobCaKey, kJobCaToken}) {
    const std::string path = absl::StrCat(dir, "/", name);
    std::error_code ec;
    const std::filesystem::file_status status =
        std::filesystem::status(path, ec);
    if (ec || !std::filesystem::is_regular_file(status)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--auth_ca=", dir, " has no ", name,
          " (make the directory with launch --make_auth_ca=DIR and copy it "
          "to every host)"));
    }
    using std::filesystem::perms;
    if (std::string(name) != kJobCaCert &&
        (status.permissions() & (perms::group_all | perms::others_all)) !=
            perms::none) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth_ca: ", path,
                       " may be read by other users: chmod 600 it (whoever "
                       "reads it can join the job)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AuthMode> ParseAuthMode(absl::string_view text) {
  if (text == "none") return AuthMode::kNone;
  if (text == "tls") return AuthMode::kTls;
  if (text == "mtls") return AuthMode::kMtls;
  return absl::InvalidArgumentError(
      absl::StrCat("--auth must be none, tls or mtls, got '", text, "'"));
}

absl::Status MakeJobCa(const std::string& dir, const std::string& openssl) {
  if (mkdir(dir.c_str(), 0700) != 0) {
    if (errno == EEXIST) {
      return absl::AlreadyExistsError(absl::StrCat(
          "--make_auth_ca: ", dir, " exists; give a new directory"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "--make_auth_ca: cannot create ", dir, ": ", strerror(errno)));
  }
  if (absl::Status s = MakeCa(openssl, dir, kJobCaValidDays); !s.ok()) {
    return s;
  }
  return WriteToken(absl::StrCat(dir, "/", kJobCaToken));
}

absl::StatusOr<std::unique_ptr<GeneratedAuth>> GeneratedAuth::Create(
    AuthMode mode, GeneratedAuthOptions options) {
  if (mode == AuthMode::kNone) {
    return absl::InvalidArgumentError("GeneratedAuth: nothing to make");
  }
  absl::StatusOr<std::string> san = SubjectAltNames(options.server_names);
  if (!san.ok()) return san.status();
  if (!options.job_ca.empty()) {
    if (absl::Status s = CheckJobCa(options.job_ca); !s.ok()) return s;
  }
  absl::StatusOr<std::string> made_dir = MakePrivateDir(options.temp_root);
  if (!made_dir.ok()) return made_dir.status();
  std::unique_ptr<GeneratedAuth> auth(new GeneratedAuth(*made_dir));
  const std::string& dir = auth->dir_;
  const std::string& openssl = options.openssl;
  std::string ca_key = dir + "/ca.key";
  if (options.job_ca.empty()) {
    if (absl::Status s = MakeCa(openssl, dir, kValidDays); !s.ok()) return s;
    if (absl::Status s = WriteToken(dir + "/token"); !s.ok()) return s;
  } else {
    ca_key = absl::StrCat(options.job_ca, "/", kJobCaKey);
    std::error_code ec;
    for (const char* name : {kJobCaCert, kJobCaToken}) {
      std::filesystem::copy_file(absl::StrCat(options.job_ca, "/", name),
                                 absl::StrCat(dir, "/", name), ec);
      if (ec) {
        return absl::FailedPreconditionError(
            absl::StrCat("--auth_ca: cannot copy ", options.job_ca, "/", name,
                         ": ", ec.message()));
      }
    }
  }
  if (absl::Status s = WriteFile(dir + "/openssl.cnf", OpensslConfig(*san));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = MakeLeaf(openssl, dir, ca_key, "server", "server");
      !s.ok()) {
    return s;
  }
  if (mode == AuthMode::kMtls) {
    if (absl::Status s = MakeLeaf(openssl, dir, ca_key, "client", "client");
        !s.ok()) {
      return s;
    }
  }
  std::error_code ignored;
  for (const char* name :
       {"ca.key", "server.csr", "client.csr", "openssl.cnf"}) {
    std::filesystem::remove(absl::StrCat(dir, "/", name), ignored);
  }
  AuthFiles& files = auth->files_;
  files.ca_cert = dir + "/ca.crt";
  files.server_cert = dir + "/server.crt";
  files.server_key = dir + "/server.key";
  if (mode == AuthMode::kMtls) {
    files.client_cert = dir + "/client.crt";
    files.client_key = dir + "/client.key";
  }
  files.token = dir + "/token";
  return auth;
}

GeneratedAuth::~GeneratedAuth() {
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

}  // namespace ps
