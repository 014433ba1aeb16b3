#include "deploy/local/generated_auth.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/subprocess.h"
#include "common/temp_dir_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::ps::testing::TestTmpDir;
using ::testing::HasSubstr;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs openssl and returns its output; fails the test if it fails.
std::string Openssl(std::vector<std::string> args) {
  SubprocessOptions options;
  options.argv = {"openssl"};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  auto child = Subprocess::Start(std::move(options));
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return "";
  EXPECT_TRUE((*child)->Wait().success()) << (*child)->LastLines(10);
  return (*child)->LastLines(100);
}

TEST(ParseAuthModeTest, NamesTheFlag) {
  EXPECT_EQ(*ParseAuthMode("none"), AuthMode::kNone);
  EXPECT_EQ(*ParseAuthMode("mtls"), AuthMode::kMtls);
  EXPECT_THAT(std::string(ParseAuthMode("ssl").status().message()),
              HasSubstr("--auth must be none, tls or mtls, got 'ssl'"));
}

TEST(GeneratedAuthTest, MakesCertificatesTheCaVerifies) {
  std::string dir;
  {
    auto auth = GeneratedAuth::Create(AuthMode::kMtls, TestTmpDir());
    ASSERT_TRUE(auth.ok()) << auth.status();
    const AuthFiles& files = (*auth)->files();
    dir = (*auth)->dir();
    ASSERT_TRUE(files.tls());
    ASSERT_TRUE(files.mtls());
    EXPECT_EQ(std::filesystem::status(dir).permissions() &
                  std::filesystem::perms::all,
              std::filesystem::perms::owner_all);
    EXPECT_THAT(Openssl({"verify", "-CAfile", files.ca_cert, "-purpose",
                         "sslserver", files.server_cert}),
                HasSubstr(": OK"));
    EXPECT_THAT(Openssl({"verify", "-CAfile", files.ca_cert, "-purpose",
                         "sslclient", files.client_cert}),
                HasSubstr(": OK"));
    EXPECT_THAT(Openssl({"x509", "-noout", "-ext", "subjectAltName", "-in",
                         files.server_cert}),
                HasSubstr("IP Address:127.0.0.1"));
    // Nothing more can be signed for the run.
    EXPECT_FALSE(std::filesystem::exists(dir + "/ca.key"));
    const std::string token = ReadAll(files.token);
    EXPECT_EQ(token.size(), 65u) << token;  // 64 hex digits and a newline.
  }
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(GeneratedAuthTest, TlsMakesNoClientCertificate) {
  auto auth = GeneratedAuth::Create(AuthMode::kTls, TestTmpDir());
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE((*auth)->files().tls());
  EXPECT_FALSE((*auth)->files().mtls());
  EXPECT_FALSE(std::filesystem::exists((*auth)->dir() + "/client.key"));
}

TEST(GeneratedAuthTest, SaysWhichProgramIsMissing) {
  auto auth = GeneratedAuth::Create(AuthMode::kTls, TestTmpDir(),
                                    "/nonexistent/openssl");
  ASSERT_FALSE(auth.ok());
  EXPECT_THAT(std::string(auth.status().message()),
              HasSubstr("/nonexistent/openssl"));
}

TEST(GeneratedAuthTest, AJobsCaSignsEachHostsCertificates) {
  const std::string job_ca = TestTmpDir() + "/job-ca";
  ASSERT_TRUE(MakeJobCa(job_ca).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(MakeJobCa(job_ca)));
  GeneratedAuthOptions options;
  options.temp_root = TestTmpDir();
  options.job_ca = job_ca;
  options.server_names = {"10.0.0.2", "host-0.example"};
  auto auth = GeneratedAuth::Create(AuthMode::kMtls, options);
  ASSERT_TRUE(auth.ok()) << auth.status();
  const AuthFiles& files = (*auth)->files();
  // Verified by the job's CA, which every host has.
  for (const std::string& leaf : {files.server_cert, files.client_cert}) {
    EXPECT_THAT(Openssl({"verify", "-CAfile", job_ca + "/ca.crt", leaf}),
                HasSubstr(": OK"));
  }
  const std::string names = Openssl(
      {"x509", "-noout", "-ext", "subjectAltName", "-in", files.server_cert});
  EXPECT_THAT(names, HasSubstr("IP Address:10.0.0.2"));
  EXPECT_THAT(names, HasSubstr("DNS:host-0.example"));
  EXPECT_THAT(names, HasSubstr("IP Address:127.0.0.1"));
  EXPECT_EQ(ReadAll(files.token), ReadAll(job_ca + "/token"));
  // The CA's key stays where it was; the run's directory never has it.
  EXPECT_FALSE(std::filesystem::exists((*auth)->dir() + "/ca.key"));
  EXPECT_TRUE(std::filesystem::exists(job_ca + "/ca.key"));
}

TEST(GeneratedAuthTest, RefusesAJobCaOthersCanRead) {
  const std::string job_ca = TestTmpDir() + "/open-ca";
  ASSERT_TRUE(MakeJobCa(job_ca).ok());
  std::filesystem::permissions(job_ca + "/ca.key",
                               std::filesystem::perms::others_read,
                               std::filesystem::perm_options::add);
  GeneratedAuthOptions options;
  options.temp_root = TestTmpDir();
  options.job_ca = job_ca;
  auto auth = GeneratedAuth::Create(AuthMode::kTls, options);
  ASSERT_FALSE(auth.ok());
  EXPECT_THAT(std::string(auth.status().message()), HasSubstr("chmod 600"));
  options.job_ca = TestTmpDir() + "/no-such-ca";
  auth = GeneratedAuth::Create(AuthMode::kTls, options);
  ASSERT_FALSE(auth.ok());
  EXPECT_THAT(std::string(auth.status().message()),
              HasSubstr("--make_auth_ca"));
}

TEST(GeneratedAuthTest, RefusesAServerNameThatIsNoName) {
  GeneratedAuthOptions options;
  options.temp_root = TestTmpDir();
  options.server_names = {"a, DNS:evil"};
  auto auth = GeneratedAuth::Create(AuthMode::kTls, options);
  ASSERT_FALSE(auth.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(auth.status())) << auth.status();
}

}  // namespace
}  // namespace ps
