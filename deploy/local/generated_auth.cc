#include "deploy/local/generated_auth.h"

#include <stdlib.h>
#include <string.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/subprocess.h"

namespace ps {
namespace {

constexpr absl::Duration kOpensslTimeout = absl::Seconds(30);
// The run's certificates outlive no run, but a local run may take days.
constexpr char kValidDays[] = "30";

// Our own configuration, so that the system's openssl.cnf changes nothing:
// the CA may only sign; leaves are for a TLS server or client only.
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
subjectAltName = IP:127.0.0.1, DNS:localhost
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
)";

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
                      const std::string& name, const std::string& section) {
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
      {"x509", "-req", "-in", csr, "-CA", dir + "/ca.crt", "-CAkey",
       dir + "/ca.key", "-set_serial",
       absl::StrCat("0x", absl::BytesToHexString(*serial)), "-days", kValidDays,
       "-extfile", dir + "/openssl.cnf", "-extensions", section, "-out",
       absl::StrCat(dir, "/", name, ".crt")});
}

}  // namespace

absl::StatusOr<AuthMode> ParseAuthMode(absl::string_view text) {
  if (text == "none") return AuthMode::kNone;
  if (text == "tls") return AuthMode::kTls;
  if (text == "mtls") return AuthMode::kMtls;
  return absl::InvalidArgumentError(
      absl::StrCat("--auth must be none, tls or mtls, got '", text, "'"));
}

absl::StatusOr<std::unique_ptr<GeneratedAuth>> GeneratedAuth::Create(
    AuthMode mode, std::string temp_root, const std::string& openssl) {
  if (mode == AuthMode::kNone) {
    return absl::InvalidArgumentError("GeneratedAuth: nothing to make");
  }
  if (temp_root.empty()) {
    const char* tmp = getenv("TMPDIR");
    temp_root = (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
  }
  // mkdtemp makes it 0700: only this user can read the keys.
  std::string pattern = absl::StrCat(temp_root, "/ps-auth-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create a directory in ", temp_root, ": ", strerror(errno)));
  }
  std::unique_ptr<GeneratedAuth> auth(new GeneratedAuth(pattern));
  const std::string& dir = auth->dir_;
  if (absl::Status s = WriteFile(dir + "/openssl.cnf", kOpensslConfig);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = RunOpenssl(
          openssl, "make the CA",
          {"req", "-x509", "-config", dir + "/openssl.cnf", "-extensions", "ca",
           "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
           "-nodes", "-keyout", dir + "/ca.key", "-out", dir + "/ca.crt",
           "-days", kValidDays, "-subj", "/CN=ps-launch-ca"});
      !s.ok()) {
    return s;
  }
  if (absl::Status s = MakeLeaf(openssl, dir, "server", "server"); !s.ok()) {
    return s;
  }
  if (mode == AuthMode::kMtls) {
    if (absl::Status s = MakeLeaf(openssl, dir, "client", "client"); !s.ok()) {
      return s;
    }
  }
  std::error_code ignored;
  for (const char* name :
       {"ca.key", "server.csr", "client.csr", "openssl.cnf"}) {
    std::filesystem::remove(absl::StrCat(dir, "/", name), ignored);
  }
  absl::StatusOr<std::string> token = RandomBytes(32);
  if (!token.ok()) return token.status();
  if (absl::Status s =
          WriteFile(dir + "/token", absl::BytesToHexString(*token) + "\n");
      !s.ok()) {
    return s;
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
