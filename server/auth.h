#ifndef PS_SERVER_AUTH_H_
#define PS_SERVER_AUTH_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "grpcpp/security/server_credentials.h"

namespace ps::server {

// A shard's authentication, off unless its flags ask for it:
//
//   --tls_cert, --tls_key  TLS: clients check the server's certificate and
//                          the traffic is encrypted
//   --tls_client_ca        mutual TLS: a client must present a certificate
//                          signed by this CA, or its connection is refused
//   --token_file           every call must carry the job token in this
//                          file (clients' --token_file), or is refused with
//                          UNAUTHENTICATED
//
// A token needs TLS: sent in plaintext it could be read off the network,
// and gRPC clients send call credentials only over TLS anyway. Health
// checks (grpc.health.v1.Health) need no token: Kubernetes probes cannot
// send one, and they tell nothing but SERVING. Kubernetes probes cannot
// speak TLS either, hence GrpcServerOptions::health_port.

// The flags, as given.
struct ServerAuthFlags {
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  std::string token_file;
};

// The flags' files, read.
struct ServerAuth {
  std::string cert_pem;  // Empty: plaintext.
  std::string key_pem;
  std::string client_ca_pem;  // Set: mutual TLS.
  std::string token;          // Set: calls must carry it.

  bool tls() const { return !cert_pem.empty(); }
  // "plaintext", "TLS", "mutual TLS", each with ", job token required" if
  // set: for the startup log line.
  std::string Describe() const;
};

// Reads the files the flags name. InvalidArgument naming the flag for a
// file that cannot be read or holds no PEM block of the right kind, or for
// flags that do not go together (--tls_cert without --tls_key,
// --tls_client_ca or --token_file without TLS).
absl::StatusOr<ServerAuth> LoadServerAuth(const ServerAuthFlags& flags);

// The credentials to listen with: plaintext or TLS as `auth` says and,
// with a token, a TokenChecker on every call.
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(
    const ServerAuth& auth);

// Refuses, with UNAUTHENTICATED and a message saying why, every call that
// does not carry `token` (common/auth_files.h: "authorization: Bearer
// <token>"), except health checks. Removes the token from the metadata the
// handlers see. Runs inline on gRPC's threads (it only compares bytes).
//
// Thread-safe.
class TokenChecker final : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenChecker(std::string token);

  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata,
                       grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

  // Calls refused so far.
  int64_t refused() const { return refused_.load(); }

 private:
  // Logs the refusal, at most once per kRefusalLogPeriod: a client retrying
  // with a wrong token must not flood the log.
  void LogRefusal(const std::string& path, const std::string& why);

  const std::string token_;
  std::atomic<int64_t> refused_{0};
  std::atomic<int64_t> last_log_nanos_{0};
};

}  // namespace ps::server

#endif  // PS_SERVER_AUTH_H_
