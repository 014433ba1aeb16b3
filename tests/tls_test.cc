// TLS, mutual TLS and the job token with the real binaries on 127.0.0.1,
// with a CA, certificates and tokens made by openssl at test time
// (deploy/local/generated_auth.h): jobs train through the launcher with
// --auth=mtls and --auth=tls, and a server refuses, with an error that says
// why, a plaintext client, a client without a certificate or with one of
// another CA, a client that does not trust its certificate, and calls
// without the job token or with another job's.

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/parameter_client.h"
#include "common/model_spec.h"
#include "common/progress_line.h"
#include "common/subprocess.h"
#include "deploy/local/generated_auth.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"
#include "tests/cluster_runner.h"

namespace ps::testing {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(120);
// How long a refused client tries: the refusal is immediate, so this is the
// whole wait of each refused case.
constexpr absl::Duration kRefusedConnectTimeout = absl::Seconds(1);

std::unique_ptr<GeneratedAuth> MakeAuth(AuthMode mode) {
  absl::StatusOr<std::unique_ptr<GeneratedAuth>> auth =
      GeneratedAuth::Create(mode, TempPath(""));
  EXPECT_TRUE(auth.ok()) << auth.status();
  return auth.ok() ? *std::move(auth) : nullptr;
}

LauncherRun RunLauncher(std::vector<std::string> args) {
  return testing::RunLauncher(std::move(args), kTimeout,
                              {{"TMPDIR", TempPath("")}});
}

TEST(TlsJobTest, MutualTlsJobTrainsThroughTheLauncher) {
  const LauncherRun launch = RunLauncher(
      {absl::StrCat("--worker_binary=", RunfilePath("worker/worker")),
       "--auth=mtls", "--num_servers=2", "--num_workers=2", "--model=784-16-10",
       "--epochs=1", "--batch_size=32", "--optimizer=sgd",
       "--learning_rate=0.05", "--max_steps=40", "--log_every=20",
       "--output=stream"});
  ASSERT_TRUE(launch.exit.success()) << launch.exit.ToString();
  for (int server : {0, 1}) {
    EXPECT_THAT(LineWith(launch.lines, "connections: ",
                         absl::StrCat("[server ", server, "]")),
                HasSubstr("connections: mutual TLS, job token required"));
  }
  // It trained: well above chance (0.1) after 40 steps.
  const std::string accuracy =
      LineWith(launch.lines, "[launch] final test accuracy: ");
  const std::optional<double> value = FindFinalTestAccuracy(accuracy);
  ASSERT_TRUE(value.has_value()) << accuracy;
  EXPECT_GT(*value, 0.3);
  // The run's keys are gone with it.
  const std::string made =
      LineWith(launch.lines, "certificates and token are in ");
  ASSERT_FALSE(made.empty());
  const std::string dir = std::string(made.substr(made.rfind(' ') + 1));
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
}

TEST(TlsJobTest, TlsJobOfAProgramReadsItsEnvironment) {
  // The program finds PS_TLS_CA and PS_TOKEN_FILE through
  // ClientOptions::FromEnvironment.
  const LauncherRun launch =
      RunLauncher({"--auth=tls", "--num_servers=2", "--num_workers=2",
                   "--optimizer=sgd", "--learning_rate=0.2",
                   "--lr_schedule=constant", "--server_flags=--momentum=0",
                   "--", RunfilePath("tests/declared_model_program"),
                   "--big_elements=1000", "--steps=10"});
  ASSERT_TRUE(launch.exit.success()) << launch.exit.ToString();
  EXPECT_THAT(LineWith(launch.lines, "connections: "),
              HasSubstr("connections: TLS, job token required"));
  for (int rank : {0, 1}) {
    EXPECT_THAT(launch.lines,
                Contains(absl::StrCat("[worker ", rank,
                                      "] declared_model_program: ok")));
  }
}

// A server of `auth`'s job (TLS, mutual with a client CA, the token) on a
// free port, with a plaintext health port.
class AuthServer {
 public:
  explicit AuthServer(const AuthFiles& files) {
    const std::string port_file =
        TempPath(absl::StrCat("auth-server-", ++count_, ".port"));
    std::filesystem::remove(port_file);
    SubprocessOptions options;
    options.argv = {RunfilePath("server/server"),
                    "--server_index=0",
                    "--num_servers=1",
                    "--num_workers=1",
                    "--host=127.0.0.1",
                    "--port=0",
                    absl::StrCat("--port_file=", port_file),
                    "--health_port=0",
                    absl::StrCat("--tls_cert=", files.server_cert),
                    absl::StrCat("--tls_key=", files.server_key),
                    absl::StrCat("--token_file=", files.token)};
    if (files.mtls()) {
      options.argv.push_back(absl::StrCat("--tls_client_ca=", files.ca_cert));
    }
    absl::StatusOr<std::unique_ptr<Subprocess>> started =
        Subprocess::Start(std::move(options));
    EXPECT_TRUE(started.ok()) << started.status();
    if (!started.ok()) return;
    process_ = *std::move(started);
    absl::StatusOr<int> port =
        WaitForPortFile(port_file, kTimeout, process_.get());
    EXPECT_TRUE(port.ok()) << port.status();
    port_ = port.value_or(0);
    absl::StatusOr<std::string> line =
        process_->WaitForOutputLine("health checks also on port ", kTimeout);
    EXPECT_TRUE(line.ok()) << line.status();
    if (line.ok()) {
      absl::string_view rest = *line;
      rest.remove_prefix(rest.find("also on port ") + 13);
      EXPECT_TRUE(
          absl::SimpleAtoi(rest.substr(0, rest.find(' ')), &health_port_));
    }
  }

  Subprocess& process() { return *process_; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  int health_port() const { return health_port_; }

 private:
  static inline int count_ = 0;
  std::unique_ptr<Subprocess> process_;
  int port_ = 0;
  int health_port_ = 0;
};

ClientOptions ClientOf(const AuthServer& server) {
  ClientOptions options;
  options.servers = {server.address()};
  options.connect_timeout = kRefusedConnectTimeout;
  options.retry_timeout = absl::Seconds(5);
  return options;
}

ClientOptions WithFiles(ClientOptions options, const AuthFiles& files) {
  options.tls_ca_file = files.ca_cert;
  options.tls_cert_file = files.client_cert;
  options.tls_key_file = files.client_key;
  options.token_file = files.token;
  return options;
}

// Connects and declares; the first error.
absl::Status ConnectAndDeclare(
    const ClientOptions& options,
    std::unique_ptr<ParameterClient>* out = nullptr) {
  absl::StatusOr<std::unique_ptr<ParameterClient>> client =
      ParameterClient::Connect(options);
  if (!client.ok()) return client.status();
  absl::Status declared =
      (*client)->Declare(MlpModelSpec({8, 4, 2}), 1).status();
  if (out != nullptr) *out = *std::move(client);
  return declared;
}

void ExpectRefused(const absl::Status& status, absl::StatusCode code,
                   const std::vector<std::string>& fragments) {
  // The log shows what a user would see.
  std::printf("refused: %s\n", status.ToString().c_str());
  EXPECT_EQ(status.code(), code) << status;
  for (const std::string& fragment : fragments) {
    EXPECT_THAT(std::string(status.message()), HasSubstr(fragment));
  }
}

grpc::health::v1::HealthCheckResponse::ServingStatus Health(
    const std::string& address,
    std::shared_ptr<grpc::ChannelCredentials> credentials) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, std::move(credentials)));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response.status();
}

TEST(TlsRefusalTest, MutualTlsServerRefusesWhatItShould) {
  std::unique_ptr<GeneratedAuth> job = MakeAuth(AuthMode::kMtls);
  std::unique_ptr<GeneratedAuth> stranger = MakeAuth(AuthMode::kMtls);
  ASSERT_NE(job, nullptr);
  ASSERT_NE(stranger, nullptr);
  AuthServer server(job->files());
  const ClientOptions plain = ClientOf(server);
  const ClientOptions good = WithFiles(plain, job->files());

  // The transport refuses these: gRPC's last connection error, and a hint.
  ExpectRefused(ConnectAndDeclare(plain), absl::StatusCode::kUnavailable,
                {"did not accept a connection", "Socket closed",
                 "this client speaks plaintext", "--tls_ca"});
  ClientOptions no_cert = good;
  no_cert.tls_cert_file.clear();
  no_cert.tls_key_file.clear();
  ExpectRefused(ConnectAndDeclare(no_cert), absl::StatusCode::kUnavailable,
                {"did not accept a connection",
                 "if the servers require client certificates",
                 "--tls_cert and --tls_key"});
  ClientOptions other_cert = good;
  other_cert.tls_cert_file = stranger->files().client_cert;
  other_cert.tls_key_file = stranger->files().client_key;
  ExpectRefused(
      ConnectAndDeclare(other_cert), absl::StatusCode::kUnavailable,
      {"did not accept a connection", "refused this client's certificate"});
  ClientOptions other_ca = good;
  other_ca.tls_ca_file = stranger->files().ca_cert;
  ExpectRefused(ConnectAndDeclare(other_ca), absl::StatusCode::kUnavailable,
                {"Ssl handshake failed", "certificate verify failed",
                 "does not trust the server's certificate"});

  // The server refuses these calls, at the first one.
  ClientOptions no_token = good;
  no_token.token_file.clear();
  ExpectRefused(ConnectAndDeclare(no_token), absl::StatusCode::kUnauthenticated,
                {"requires the job token", "carried none"});
  ClientOptions other_token = good;
  other_token.token_file = stranger->files().token;
  ExpectRefused(ConnectAndDeclare(other_token),
                absl::StatusCode::kUnauthenticated, {"wrong job token"});

  // Health checks need no token: on the TLS port (with the client
  // certificate), and in plaintext on the health port.
  grpc::SslCredentialsOptions ssl;
  {
    std::ifstream ca(job->files().ca_cert), cert(job->files().client_cert),
        key(job->files().client_key);
    std::stringstream a, b, c;
    a << ca.rdbuf();
    b << cert.rdbuf();
    c << key.rdbuf();
    ssl.pem_root_certs = a.str();
    ssl.pem_cert_chain = b.str();
    ssl.pem_private_key = c.str();
  }
  EXPECT_EQ(Health(server.address(), grpc::SslCredentials(ssl)),
            grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(Health(absl::StrCat("127.0.0.1:", server.health_port()),
                   grpc::InsecureChannelCredentials()),
            grpc::health::v1::HealthCheckResponse::SERVING);

  // After all that the server serves its job, which then ends it.
  std::unique_ptr<ParameterClient> client;
  ASSERT_TRUE(ConnectAndDeclare(good, &client).ok());
  ASSERT_TRUE(client->Finish().ok());
  std::optional<ExitStatus> exit = server.process().WaitFor(kTimeout);
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success()) << exit->ToString();
  const std::vector<std::string> lines = server.process().OutputLines();
  EXPECT_THAT(LineWith(lines, "refused a call to /ps.proto.ParameterServer/"),
              HasSubstr("carried none"));
  // gRPC's own line for the client without a certificate.
  EXPECT_THAT(LineWith(lines, "peer did not return a certificate"),
              HasSubstr("Handshake failed"));
}

TEST(TlsRefusalTest, TlsServerRefusesAPlaintextClient) {
  std::unique_ptr<GeneratedAuth> job = MakeAuth(AuthMode::kTls);
  ASSERT_NE(job, nullptr);
  AuthServer server(job->files());
  ExpectRefused(ConnectAndDeclare(ClientOf(server)),
                absl::StatusCode::kUnavailable,
                {"Socket closed", "this client speaks plaintext"});
  // A client that knows the CA and the token but has no certificate is
  // what this server asks for.
  std::unique_ptr<ParameterClient> client;
  ASSERT_TRUE(
      ConnectAndDeclare(WithFiles(ClientOf(server), job->files()), &client)
          .ok());
  ASSERT_TRUE(client->Finish().ok());
  std::optional<ExitStatus> exit = server.process().WaitFor(kTimeout);
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success()) << exit->ToString();
}

TEST(TlsRefusalTest, ServerRefusesATokenWithoutTls) {
  std::unique_ptr<GeneratedAuth> job = MakeAuth(AuthMode::kTls);
  ASSERT_NE(job, nullptr);
  SubprocessOptions options;
  options.argv = {RunfilePath("server/server"), "--server_index=0", "--port=0",
                  absl::StrCat("--token_file=", job->files().token)};
  absl::StatusOr<std::unique_ptr<Subprocess>> server =
      Subprocess::Start(std::move(options));
  ASSERT_TRUE(server.ok()) << server.status();
  std::optional<ExitStatus> exit = (*server)->WaitFor(kTimeout);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(*exit, ExitStatus::Exited(2));
  EXPECT_THAT((*server)->LastLines(5),
              HasSubstr("--token_file needs --tls_cert and --tls_key"));
}

}  // namespace
}  // namespace ps::testing
