#include "server/auth.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/auth_files.h"
#include "grpcpp/security/server_credentials.h"
#include "spdlog/spdlog.h"

namespace ps::server {
namespace {

// The health service's methods: probes carry no token.
constexpr absl::string_view kHealthPathPrefix = "/grpc.health.v1.Health/";
constexpr absl::Duration kRefusalLogPeriod = absl::Seconds(10);

absl::string_view View(const grpc::string_ref& s) {
  return absl::string_view(s.data(), s.size());
}

}  // namespace

std::string ServerAuth::Describe() const {
  std::string text = !tls()                  ? "plaintext"
                     : client_ca_pem.empty() ? "TLS"
                                             : "mutual TLS";
  if (!token.empty()) absl::StrAppend(&text, ", job token required");
  return text;
}

absl::StatusOr<ServerAuth> LoadServerAuth(const ServerAuthFlags& flags) {
  ServerAuth auth;
  if (flags.tls_cert.empty() != flags.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: the server's certificate and "
        "its private key");
  }
  if (flags.tls_cert.empty()) {
    if (!flags.tls_client_ca.empty()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca (mutual TLS) needs --tls_cert and --tls_key");
    }
    if (!flags.token_file.empty()) {
      return absl::InvalidArgumentError(
          "--token_file needs --tls_cert and --tls_key: without TLS the "
          "token would cross the network readable by anyone on the path");
    }
    return auth;
  }
  absl::StatusOr<std::string> cert =
      ReadPemFile("--tls_cert", flags.tls_cert, "CERTIFICATE");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key =
      ReadPemFile("--tls_key", flags.tls_key, "PRIVATE KEY");
  if (!key.ok()) return key.status();
  auth.cert_pem = *std::move(cert);
  auth.key_pem = *std::move(key);
  if (!flags.tls_client_ca.empty()) {
    absl::StatusOr<std::string> ca =
        ReadPemFile("--tls_client_ca", flags.tls_client_ca, "CERTIFICATE");
    if (!ca.ok()) return ca.status();
    auth.client_ca_pem = *std::move(ca);
  }
  if (!flags.token_file.empty()) {
    absl::StatusOr<std::string> token =
        ReadTokenFile("--token_file", flags.token_file);
    if (!token.ok()) return token.status();
    auth.token = *std::move(token);
  }
  return auth;
}

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(
    const ServerAuth& auth) {
  if (!auth.tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      auth.client_ca_pem.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = auth.client_ca_pem;
  options.pem_key_cert_pairs.push_back({auth.key_pem, auth.cert_pem});
  std::shared_ptr<grpc::ServerCredentials> credentials =
      grpc::SslServerCredentials(options);
  if (!auth.token.empty()) {
    credentials->SetAuthMetadataProcessor(
        std::make_shared<TokenChecker>(auth.token));
  }
  return credentials;
}

TokenChecker::TokenChecker(std::string token) : token_(std::move(token)) {}

grpc::Status TokenChecker::Process(const InputMetadata& auth_metadata,
                                   grpc::AuthContext* /*context*/,
                                   OutputMetadata* consumed_auth_metadata,
                                   OutputMetadata* /*response_metadata*/) {
  // gRPC routes the call by this path, so it is the method that will run.
  std::string path;
  if (auto it = auth_metadata.find(":path"); it != auth_metadata.end()) {
    path = std::string(View(it->second));
  }
  if (absl::StartsWith(path, kHealthPathPrefix)) return grpc::Status::OK;
  const auto it = auth_metadata.find(
      grpc::string_ref(kTokenMetadataKey.data(), kTokenMetadataKey.size()));
  if (it == auth_metadata.end()) {
    const std::string why =
        "this server requires the job token (its --token_file) and the call "
        "carried none: give the client the job's token file (--token_file, "
        "$PS_TOKEN_FILE)";
    LogRefusal(path, why);
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, why);
  }
  absl::string_view presented = View(it->second);
  if (!absl::ConsumePrefix(&presented, kTokenMetadataPrefix) ||
      !TokensEqual(presented, token_)) {
    const std::string why =
        "wrong job token: the call's token is not the one in this server's "
        "--token_file (a client of another job, or a stale token file?)";
    LogRefusal(path, why);
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, why);
  }
  // Handlers never see the token, so that nothing can log it.
  consumed_auth_metadata->insert(
      {std::string(kTokenMetadataKey), std::string(View(it->second))});
  return grpc::Status::OK;
}

void TokenChecker::LogRefusal(const std::string& path, const std::string& why) {
  const int64_t refused = refused_.fetch_add(1) + 1;
  const int64_t now = absl::GetCurrentTimeNanos();
  int64_t last = last_log_nanos_.load();
  if (now - last < absl::ToInt64Nanoseconds(kRefusalLogPeriod) ||
      !last_log_nanos_.compare_exchange_strong(last, now)) {
    return;
  }
  spdlog::warn("refused a call to {} ({} refused so far): {}", path, refused,
               why);
}

}  // namespace ps::server
