#include "server/auth.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "common/status_testing.h"
#include "gtest/gtest.h"

namespace ps::server {
namespace {

using ::ps::testing::ExpectInvalid;

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";

// Calls Process with string metadata (string_refs into `metadata`).
grpc::Status Check(TokenChecker& checker,
                   const std::multimap<std::string, std::string>& metadata,
                   std::multimap<std::string, std::string>* consumed) {
  grpc::AuthMetadataProcessor::InputMetadata input;
  for (const auto& [key, value] : metadata) input.insert({key, value});
  grpc::AuthMetadataProcessor::OutputMetadata response;
  return checker.Process(input, nullptr, consumed, &response);
}

TEST(TokenCheckerTest, TakesTheJobTokenAndHidesIt) {
  TokenChecker checker(kToken);
  std::multimap<std::string, std::string> consumed;
  grpc::Status status =
      Check(checker,
            {{":path", "/ps.proto.ParameterServer/Register"},
             {"authorization", std::string("Bearer ") + kToken}},
            &consumed);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(consumed.count("authorization"), 1u);
  EXPECT_EQ(checker.refused(), 0);
}

TEST(TokenCheckerTest, RefusesACallWithoutToken) {
  TokenChecker checker(kToken);
  std::multimap<std::string, std::string> consumed;
  grpc::Status status =
      Check(checker, {{":path", "/ps.proto.ParameterServer/Done"}}, &consumed);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(status.error_message().find("carried none"), std::string::npos)
      << status.error_message();
  EXPECT_EQ(checker.refused(), 1);
}

TEST(TokenCheckerTest, RefusesAWrongToken) {
  TokenChecker checker(kToken);
  std::multimap<std::string, std::string> consumed;
  for (const std::string& value :
       {std::string("Bearer ") + kToken + "x",
        std::string("Bearer 0123456789abcdef0123456789abcdeF"),
        std::string(kToken), std::string("Bearer ")}) {
    grpc::Status status = Check(checker,
                                {{":path", "/ps.proto.ParameterServer/Stats"},
                                 {"authorization", value}},
                                &consumed);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << value;
    EXPECT_NE(status.error_message().find("wrong job token"),
              std::string::npos);
  }
  EXPECT_TRUE(consumed.empty());
}

TEST(TokenCheckerTest, LetsHealthChecksThroughWithoutToken) {
  TokenChecker checker(kToken);
  std::multimap<std::string, std::string> consumed;
  EXPECT_TRUE(
      Check(checker, {{":path", "/grpc.health.v1.Health/Check"}}, &consumed)
          .ok());
  // Only that service's methods.
  EXPECT_FALSE(
      Check(checker, {{":path", "/grpc.health.v1.HealthX/Check"}}, &consumed)
          .ok());
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path =
      std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(LoadServerAuthTest, NothingGivenIsPlaintext) {
  absl::StatusOr<ServerAuth> auth = LoadServerAuth({});
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_FALSE(auth->tls());
  EXPECT_EQ(auth->Describe(), "plaintext");
}

TEST(LoadServerAuthTest, RefusesFlagsThatDoNotGoTogether) {
  ServerAuthFlags flags;
  flags.tls_cert = "/x.crt";
  ExpectInvalid(LoadServerAuth(flags).status(), "--tls_cert and --tls_key");
  flags = {};
  flags.tls_client_ca = "/ca.crt";
  ExpectInvalid(LoadServerAuth(flags).status(),
                "--tls_client_ca (mutual TLS) needs --tls_cert");
  flags = {};
  flags.token_file = WriteFile("token", kToken);
  ExpectInvalid(LoadServerAuth(flags).status(),
                "--token_file needs --tls_cert and --tls_key");
}

TEST(LoadServerAuthTest, NamesTheFlagOfABadFile) {
  const std::string cert = WriteFile(
      "cert.pem", "-----BEGIN CERTIFICATE-----\nAA\n-----END CERTIFICATE-----");
  const std::string key = WriteFile(
      "key.pem", "-----BEGIN PRIVATE KEY-----\nAA\n-----END PRIVATE KEY-----");
  ServerAuthFlags flags;
  flags.tls_cert = key;  // Swapped.
  flags.tls_key = cert;
  ExpectInvalid(LoadServerAuth(flags).status(), "--tls_cert: " + key);
  flags.tls_cert = cert;
  flags.tls_key = key;
  flags.tls_client_ca = "/nonexistent/ca.crt";
  ExpectInvalid(LoadServerAuth(flags).status(),
                "--tls_client_ca: cannot read /nonexistent/ca.crt");
  flags.tls_client_ca = cert;
  flags.token_file = WriteFile("short-token", "short\n");
  ExpectInvalid(LoadServerAuth(flags).status(), "--token_file: the token in");
  flags.token_file = WriteFile("token", kToken);
  absl::StatusOr<ServerAuth> auth = LoadServerAuth(flags);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ(auth->token, kToken);
  EXPECT_EQ(auth->Describe(), "mutual TLS, job token required");
}

}  // namespace
}  // namespace ps::server
