#include "client/channel_auth.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::client_internal {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string WriteFile(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path =
      std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string ErrorOf(const ClientOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(options);
  EXPECT_FALSE(credentials.ok());
  EXPECT_EQ(credentials.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(credentials.status().message());
}

TEST(MakeChannelCredentialsTest, NothingGivenIsPlaintext) {
  EXPECT_TRUE(MakeChannelCredentials(ClientOptions()).ok());
}

TEST(MakeChannelCredentialsTest, ATokenNeedsTls) {
  ClientOptions options;
  options.token_file = WriteFile("token", "0123456789abcdef0123456789abcdef");
  EXPECT_THAT(ErrorOf(options), HasSubstr("ClientOptions.tls_ca_file is "
                                          "needed by tls_cert_file"));
}

TEST(MakeChannelCredentialsTest, CertificateAndKeyGoTogether) {
  ClientOptions options;
  options.tls_ca_file = "/ca.crt";
  options.tls_cert_file = "/client.crt";
  EXPECT_THAT(ErrorOf(options), HasSubstr("tls_cert_file and tls_key_file "
                                          "go together"));
}

TEST(MakeChannelCredentialsTest, NamesTheFieldOfABadFile) {
  const std::string cert = WriteFile(
      "cert.pem", "-----BEGIN CERTIFICATE-----\nAA\n-----END CERTIFICATE-----");
  ClientOptions options;
  options.tls_ca_file = "/nonexistent/ca.crt";
  EXPECT_THAT(ErrorOf(options),
              HasSubstr("ClientOptions.tls_ca_file ($PS_TLS_CA): "
                        "cannot read /nonexistent/ca.crt"));
  options.tls_ca_file = cert;
  options.tls_cert_file = cert;
  options.tls_key_file = cert;
  EXPECT_THAT(ErrorOf(options),
              HasSubstr("ClientOptions.tls_key_file ($PS_TLS_KEY): " + cert +
                        " holds no PEM PRIVATE KEY"));
  options.tls_cert_file.clear();
  options.tls_key_file.clear();
  options.token_file = WriteFile("short", "short");
  EXPECT_THAT(ErrorOf(options),
              HasSubstr("ClientOptions.token_file ($PS_TOKEN_FILE): "
                        "the token in"));
}

TEST(ConnectionHintTest, SaysWhatEachSetupMayLack) {
  ClientOptions plaintext;
  EXPECT_THAT(ConnectionHint(plaintext, "ipv4:127.0.0.1:1: Socket closed"),
              HasSubstr("this client speaks plaintext"));
  // A server that is not up: nothing to hint.
  EXPECT_THAT(ConnectionHint(plaintext, "Connection refused"), IsEmpty());
  ClientOptions tls;
  tls.tls_ca_file = "/ca.crt";
  EXPECT_THAT(ConnectionHint(tls, "Socket closed"),
              HasSubstr("give this client one (--tls_cert and --tls_key"));
  EXPECT_THAT(ConnectionHint(tls,
                             "Ssl handshake failed: ... wrong version "
                             "number"),
              HasSubstr("seems to speak plaintext"));
  EXPECT_THAT(ConnectionHint(tls, "certificate verify failed"),
              HasSubstr("does not trust the server's certificate"));
  EXPECT_THAT(ConnectionHint(tls, "Peer name x is not in peer certificate"),
              HasSubstr("--tls_server_name"));
  ClientOptions mtls = tls;
  mtls.tls_cert_file = "/client.crt";
  EXPECT_THAT(ConnectionHint(mtls, "Socket closed"),
              HasSubstr("refused this client's certificate"));
}

}  // namespace
}  // namespace ps::client_internal
