#include "client/channel_auth.h"

#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/auth_files.h"

namespace ps::client_internal {
namespace {

// Adds "authorization: Bearer <token>" to every call (common/auth_files.h).
// Not blocking: it only copies a string, so gRPC runs it inline rather than
// on another thread.
class TokenPlugin final : public grpc::MetadataCredentialsPlugin {
 public:
  explicit TokenPlugin(std::string token)
      : value_(absl::StrCat(kTokenMetadataPrefix, token)) {}

  bool IsBlocking() const override { return false; }
  const char* GetType() const override { return "ps-job-token"; }

  grpc::Status GetMetadata(
      grpc::string_ref /*service_url*/, grpc::string_ref /*method_name*/,
      const grpc::AuthContext& /*channel_auth_context*/,
      std::multimap<grpc::string, grpc::string>* metadata) override {
    metadata->insert({std::string(kTokenMetadataKey), value_});
    return grpc::Status::OK;
  }

 private:
  const std::string value_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const ClientOptions& options) {
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "ClientOptions.tls_cert_file and tls_key_file go together: this "
        "client's certificate and its private key");
  }
  if (options.tls_ca_file.empty()) {
    if (!options.tls_cert_file.empty() || !options.token_file.empty() ||
        !options.tls_server_name.empty()) {
      return absl::InvalidArgumentError(
          "ClientOptions.tls_ca_file is needed by tls_cert_file, "
          "tls_server_name and token_file: the client checks the servers' "
          "certificates with it, and sends a token only over TLS");
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  absl::StatusOr<std::string> ca =
      ReadPemFile("ClientOptions.tls_ca_file ($PS_TLS_CA)", options.tls_ca_file,
                  "CERTIFICATE");
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = *std::move(ca);
  if (!options.tls_cert_file.empty()) {
    absl::StatusOr<std::string> cert =
        ReadPemFile("ClientOptions.tls_cert_file ($PS_TLS_CERT)",
                    options.tls_cert_file, "CERTIFICATE");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key =
        ReadPemFile("ClientOptions.tls_key_file ($PS_TLS_KEY)",
                    options.tls_key_file, "PRIVATE KEY");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::SslCredentials(ssl);
  if (options.token_file.empty()) return credentials;
  absl::StatusOr<std::string> token = ReadTokenFile(
      "ClientOptions.token_file ($PS_TOKEN_FILE)", options.token_file);
  if (!token.ok()) return token.status();
  return grpc::CompositeChannelCredentials(
      credentials, grpc::MetadataCredentialsFromPlugin(
                       std::make_unique<TokenPlugin>(*std::move(token))));
}

std::string ConnectionHint(const ClientOptions& options,
                           absl::string_view error) {
  // What gRPC 1.51 reports when the peer closed the connection during the
  // handshake, or the handshake itself failed.
  const bool closed = absl::StrContains(error, "Socket closed") ||
                      absl::StrContains(error, "Connection reset");
  if (options.tls_ca_file.empty()) {
    return closed ? "; this client speaks plaintext: if the servers use TLS "
                    "(--tls_cert), give it their CA (--tls_ca, $PS_TLS_CA)"
                  : "";
  }
  if (absl::StrContains(error, "certificate verify failed")) {
    return "; this client does not trust the server's certificate: its CA "
           "(--tls_ca, $PS_TLS_CA) must be the one that signed the servers' "
           "--tls_cert";
  }
  if (absl::StrContains(error, "not in peer certificate")) {
    return "; the server's certificate does not carry the name this client "
           "expects: give the name it carries (--tls_server_name, "
           "$PS_TLS_SERVER_NAME)";
  }
  if (absl::StrContains(error, "wrong version number")) {
    return "; the server seems to speak plaintext (no --tls_cert): give it "
           "--tls_cert and --tls_key, or drop this client's --tls_ca";
  }
  if (!closed) return "";
  if (options.tls_cert_file.empty()) {
    return "; if the servers require client certificates (--tls_client_ca), "
           "give this client one (--tls_cert and --tls_key, $PS_TLS_CERT and "
           "$PS_TLS_KEY)";
  }
  return "; the servers may have refused this client's certificate (not "
         "signed by their --tls_client_ca?): their log says why";
}

}  // namespace ps::client_internal
