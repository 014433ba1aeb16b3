#include "common/auth_files.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/status_testing.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::ps::testing::ExpectInvalid;

std::string WriteFile(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path =
      std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(ReadTokenFileTest, StripsTheTrailingNewline) {
  const std::string path =
      WriteFile("token", "0123456789abcdef0123456789abcdef\n");
  absl::StatusOr<std::string> token = ReadTokenFile("--token_file", path);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "0123456789abcdef0123456789abcdef");
}

TEST(ReadTokenFileTest, RefusesAShortToken) {
  ExpectInvalid(
      ReadTokenFile("--token_file", WriteFile("short", "secret\n")).status(),
      "--token_file: the token in");
}

TEST(ReadTokenFileTest, RefusesInnerSpaces) {
  ExpectInvalid(ReadTokenFile("$PS_TOKEN_FILE",
                              WriteFile("spaces", "0123456789 abcdef0123"))
                    .status(),
                "$PS_TOKEN_FILE: the token in");
}

TEST(ReadTokenFileTest, NamesAMissingFile) {
  ExpectInvalid(ReadTokenFile("--token_file", "/nonexistent/token").status(),
                "--token_file: cannot read /nonexistent/token");
}

TEST(ReadPemFileTest, AcceptsTheKindAsked) {
  const std::string path = WriteFile(
      "key.pem",
      "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n");
  EXPECT_TRUE(ReadPemFile("--tls_key", path, "PRIVATE KEY").ok());
  ExpectInvalid(ReadPemFile("--tls_cert", path, "CERTIFICATE").status(),
                "--tls_cert: " + path + " holds no PEM CERTIFICATE");
}

TEST(ReadPemFileTest, RefusesAnEmptyFile) {
  ExpectInvalid(
      ReadPemFile("--tls_ca", WriteFile("empty.pem", ""), "CERTIFICATE")
          .status(),
      "holds no PEM CERTIFICATE");
}

TEST(TokensEqualTest, ComparesWholeTokens) {
  EXPECT_TRUE(TokensEqual("abcdef", "abcdef"));
  EXPECT_FALSE(TokensEqual("abcdeg", "abcdef"));
  EXPECT_FALSE(TokensEqual("abcde", "abcdef"));
  EXPECT_FALSE(TokensEqual("", "abcdef"));
}

}  // namespace
}  // namespace ps
