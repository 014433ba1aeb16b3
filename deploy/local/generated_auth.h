#ifndef PS_DEPLOY_LOCAL_GENERATED_AUTH_H_
#define PS_DEPLOY_LOCAL_GENERATED_AUTH_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

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

// The files of a job's CA directory (MakeJobCa), shared by its hosts.
inline constexpr char kJobCaCert[] = "ca.crt";
inline constexpr char kJobCaKey[] = "ca.key";
inline constexpr char kJobCaToken[] = "token";

// Makes a job's CA for a job on several hosts (--make_auth_ca): `dir`, new,
// mode 0700, holding the CA's certificate and private key and a job token.
// It is copied to every host over a channel the user trusts (scp, a
// Kubernetes Secret), never by the launcher: whoever has it can join the
// job. AlreadyExists if `dir` exists; others as GeneratedAuth::Create.
absl::Status MakeJobCa(const std::string& dir,
                       const std::string& openssl = "openssl");

struct GeneratedAuthOptions {
  // Parent of the directory; empty: $TMPDIR or /tmp.
  std::string temp_root;
  // The program to run.
  std::string openssl = "openssl";
  // A MakeJobCa directory that signs this host's certificates and gives the
  // token; empty: a CA and token of this run's own.
  std::string job_ca;
  // Addresses or DNS names the server certificate is for besides
  // 127.0.0.1 and localhost (this host's, as the other hosts reach it).
  std::vector<std::string> server_names;
};

// A CA, certificates and a job token made for one run with openssl (Debian's
// `openssl` package), in a directory of their own (mode 0700) that the
// destructor removes with everything in it. The server certificate is for
// 127.0.0.1, localhost and `server_names`; keys are ECDSA P-256. A CA of
// the run's own has its private key deleted once it has signed: nothing
// more can be signed for the run; a job's CA (`job_ca`) is only read, its
// key never copied.
//
// Not thread-safe; immutable after Create.
class GeneratedAuth {
 public:
  // `mode` must not be kNone. Errors name the step that failed and
  // openssl's last output lines; InvalidArgument for a server name that is
  // not a host name or address, or a job CA that is missing a file or whose
  // key others may read.
  static absl::StatusOr<std::unique_ptr<GeneratedAuth>> Create(
      AuthMode mode, GeneratedAuthOptions options);
  static absl::StatusOr<std::unique_ptr<GeneratedAuth>> Create(
      AuthMode mode, std::string temp_root = "",
      const std::string& openssl = "openssl") {
    GeneratedAuthOptions options;
    options.temp_root = std::move(temp_root);
    options.openssl = openssl;
    return Create(mode, std::move(options));
  }

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
