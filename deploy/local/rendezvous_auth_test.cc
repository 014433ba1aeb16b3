#include "deploy/local/rendezvous_auth.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/temp_dir_testing.h"
#include "deploy/local/generated_auth.h"
#include "deploy/local/rendezvous_client.h"
#include "deploy/local/rendezvous_server.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::ps::testing::TestTmpDir;

RendezvousOptions OneHost() {
  RendezvousOptions options;
  options.job_id = "job-1";
  options.plan = *PlanHosts(1, 1, 1, 0);
  return options;
}

// A rendezvous served with `server_files`; Status() from a client with
// `client_files`.
absl::Status StatusCall(const AuthFiles& server_files,
                        const AuthFiles& client_files) {
  RendezvousState state(OneHost(), absl::Now());
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server_credentials =
      RendezvousServerCredentials(server_files);
  if (!server_credentials.ok()) return server_credentials.status();
  absl::StatusOr<std::unique_ptr<RendezvousServer>> server =
      RendezvousServer::Start("127.0.0.1:0", &state, *server_credentials);
  if (!server.ok()) return server.status();
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      RendezvousChannelCredentials(client_files);
  if (!credentials.ok()) return credentials.status();
  RendezvousClient client(absl::StrCat("127.0.0.1:", (*server)->port()),
                          *credentials);
  return client.Status(absl::Seconds(5)).status();
}

class RendezvousAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_ca_ = absl::StrCat(
        TestTmpDir(), "/job-ca-",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(MakeJobCa(job_ca_).ok());
    GeneratedAuthOptions options;
    options.temp_root = TestTmpDir();
    options.job_ca = job_ca_;
    auto host = GeneratedAuth::Create(AuthMode::kMtls, options);
    ASSERT_TRUE(host.ok()) << host.status();
    host_ = *std::move(host);
  }

  std::string job_ca_;
  std::unique_ptr<GeneratedAuth> host_;
};

TEST_F(RendezvousAuthTest, AHostOfTheJobsCaIsServed) {
  // Another host: its own certificates, signed by the same CA.
  GeneratedAuthOptions options;
  options.temp_root = TestTmpDir();
  options.job_ca = job_ca_;
  auto other = GeneratedAuth::Create(AuthMode::kMtls, options);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE(StatusCall(host_->files(), (*other)->files()).ok());
}

TEST_F(RendezvousAuthTest, PlaintextIsRefused) {
  EXPECT_FALSE(StatusCall(host_->files(), AuthFiles()).ok());
}

TEST_F(RendezvousAuthTest, WithoutAClientCertificateIsRefused) {
  AuthFiles files = host_->files();
  files.client_cert.clear();
  files.client_key.clear();
  EXPECT_FALSE(StatusCall(host_->files(), files).ok());
}

TEST_F(RendezvousAuthTest, AnotherCasHostIsRefused) {
  auto stranger = GeneratedAuth::Create(AuthMode::kMtls, TestTmpDir());
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  EXPECT_FALSE(StatusCall(host_->files(), (*stranger)->files()).ok());
}

TEST_F(RendezvousAuthTest, AWrongTokenIsRefused) {
  // TLS only: the token is what keeps others out.
  GeneratedAuthOptions options;
  options.temp_root = TestTmpDir();
  options.job_ca = job_ca_;
  auto server = GeneratedAuth::Create(AuthMode::kTls, options);
  ASSERT_TRUE(server.ok()) << server.status();
  AuthFiles files = (*server)->files();
  EXPECT_TRUE(StatusCall(files, files).ok());
  auto stranger = GeneratedAuth::Create(AuthMode::kTls, TestTmpDir());
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  files.token = (*stranger)->files().token;
  absl::Status refused = StatusCall((*server)->files(), files);
  EXPECT_TRUE(absl::IsUnauthenticated(refused)) << refused;
}

}  // namespace
}  // namespace ps
