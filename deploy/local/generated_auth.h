#ifndef PS_DEPLOY_LOCAL_GENERATED_AUTH_H_
#define PS_DEPLOY_LOCAL_GENERATED_AUTH_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {

// How the launcher secures a run (--auth): none (plaintext, the default on
// 127.0.0.1), tls (the servers' certificates and the job token: a client
// must know the CA and the token), mtls (also a certificate per client).
enum class AuthMode { kNone, kTls, kMtls };

// "none", "tls" or "mtls"; InvalidArgument naming --auth otherwise.
absl::StatusOr<AuthMode> ParseAuthMode(absl::string_view text);

// Paths of a run's authentication files; empty: not used.
struct AuthFiles {
  // The CA: workers' --tls_ca, and with mTLS the servers' --tls_client_ca.
  std::string ca_cert;
  std::string server_cert;
  std::string server_key;
  // mTLS only.
  std::string client_cert;
  std::string client_key;
  std::string token;

  bool tls() const { return !server_cert.empty(); }
  bool mtls() const { return !client_cert.empty(); }
};

// A CA, certificates and a job token made for one run with openssl (Debian's
// `openssl` package), in a directory of their own (mode 0700) that the
// destructor removes with everything in it. The server certificate is for
// 127.0.0.1 and localhost; keys are ECDSA P-256. The CA's private key is
// deleted once it has signed: nothing more can be signed for the run.
//
// Not thread-safe; immutable after Create.
class GeneratedAuth {
 public:
  // `mode` must not be kNone. `temp_root`: parent of the directory; empty:
  // $TMPDIR or /tmp. `openssl`: the program to run. Errors name the step
  // that failed and openssl's last output lines.
  static absl::StatusOr<std::unique_ptr<GeneratedAuth>> Create(
      AuthMode mode, std::string temp_root = "",
      const std::string& openssl = "openssl");

  ~GeneratedAuth();
  GeneratedAuth(const GeneratedAuth&) = delete;
  GeneratedAuth& operator=(const GeneratedAuth&) = delete;

  const AuthFiles& files() const { return files_; }
  const std::string& dir() const { return dir_; }

 private:
  explicit GeneratedAuth(std::string dir) : dir_(std::move(dir)) {}

  const std::string dir_;
  AuthFiles files_;
};

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_GENERATED_AUTH_H_
