#include "worker/pipeline/link_routes.h"

#include <string>

#include "absl/status/status.h"
#include "common/status_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::worker::pipeline {
namespace {

using ::ps::testing::ExpectInvalid;
using ::testing::HasSubstr;

constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";

PipelinePlace Stage(int stage, int stages) {
  return *PipelinePlace::FromRank(stage, stages, stages);
}

TEST(LinkRoutesTest, SameHostLinksNeedNothing) {
  EXPECT_OK(CheckLinkRoutes({}, Stage(0, 2), /*tls=*/true));
}

TEST(LinkRoutesTest, TcpRoutesAreCheckedAndNamed) {
  LinkRoutes routes{"10.0.0.1:4000", "", kSecret};
  EXPECT_OK(CheckLinkRoutes(routes, Stage(0, 2), false));
  ExpectInvalid(CheckLinkRoutes(routes, Stage(1, 2), false),
                "--stage_link_listen is for a stage with a next stage");
  routes = {"", "10.0.0.1:4000", kSecret};
  EXPECT_OK(CheckLinkRoutes(routes, Stage(1, 2), false));
  ExpectInvalid(CheckLinkRoutes(routes, Stage(0, 2), false),
                "--stage_link_previous is for a stage with a previous");
  routes = {"", "10.0.0.1", kSecret};
  ExpectInvalid(CheckLinkRoutes(routes, Stage(1, 2), false),
                "--stage_link_previous=10.0.0.1");
  routes = {"[::1]:4000", "", kSecret};
  EXPECT_OK(CheckLinkRoutes(routes, Stage(0, 2), false));
  EXPECT_EQ(ParseLinkAddress("f", "[::1]:4000")->host, "::1");
  EXPECT_EQ(ParseLinkAddress("f", "[::1]:4000")->port, 4000);
}

TEST(LinkRoutesTest, TcpNeedsTheSecretAndNoTls) {
  LinkRoutes routes{"10.0.0.1:4000", "", ""};
  ExpectInvalid(CheckLinkRoutes(routes, Stage(0, 3), false),
                "$PS_STAGE_LINK_SECRET");
  routes.secret = "short";
  ExpectInvalid(CheckLinkRoutes(routes, Stage(0, 3), false), "it is not)");
  routes.secret = std::string(kSecret) + " x";
  ExpectInvalid(CheckLinkRoutes(routes, Stage(0, 3), false), "visible");
  routes.secret = kSecret;
  ExpectInvalid(CheckLinkRoutes(routes, Stage(0, 3), true),
                "unencrypted, which a job with TLS");
}

TEST(LinkRoutesTest, TheHelloAdmitsOnlyTheNextStageWithTheSecret) {
  const std::string hello = TcpHello("job r0 s1", kSecret);
  EXPECT_OK(CheckTcpHello(hello, "job r0 s1", kSecret));
  EXPECT_LE(hello.size(), MaxTcpHelloBytes("job r0 s1"));
  const absl::Status wrong_secret =
      CheckTcpHello(TcpHello("job r0 s1", "fedcba9876543210fedcba9876543210"),
                    "job r0 s1", kSecret);
  EXPECT_EQ(wrong_secret.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(wrong_secret.message(), HasSubstr("without the job's stage"));
  // The secret is never echoed, nor is what the stage waits for told to a
  // peer without it.
  EXPECT_THAT(wrong_secret.message(), ::testing::Not(HasSubstr(kSecret)));
  const absl::Status wrong_stage =
      CheckTcpHello(TcpHello("job r0 s2", kSecret), "job r0 s1", kSecret);
  EXPECT_EQ(wrong_stage.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(wrong_stage.message(), HasSubstr("not the next one"));
  EXPECT_EQ(CheckTcpHello("GET / HTTP/1.1", "job r0 s1", kSecret).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(LinkRoutesTest, AnotherByteOrderIsRefusedSayingSo) {
  std::string hello = TcpHello("job r0 s1", kSecret);
  // The third line is the sender's byte order; a host of the other order
  // writes it reversed.
  const size_t start = hello.find('\n', hello.find('\n') + 1) + 1;
  std::string order = hello.substr(start, 8);
  std::string reversed;
  for (int i = 3; i >= 0; --i) reversed += order.substr(2 * i, 2);
  hello.replace(start, 8, reversed);
  const absl::Status refused = CheckTcpHello(hello, "job r0 s1", kSecret);
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(refused.message(), HasSubstr("lays out bytes as"));
}

}  // namespace
}  // namespace ps::worker::pipeline
