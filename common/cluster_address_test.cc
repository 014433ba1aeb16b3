#include "common/cluster_address.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/status_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::ps::testing::ExpectInvalid;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseServerListTest, AcceptsNamesIpv4AndBracketedIpv6) {
  absl::StatusOr<std::vector<std::string>> servers = ParseServerList(
      "ps-server-0.ps-server:7000, 127.0.0.1:65535,[::1]:1,Host-A.example:80");
  ASSERT_TRUE(servers.ok()) << servers.status();
  EXPECT_THAT(*servers,
              ElementsAre("ps-server-0.ps-server:7000", "127.0.0.1:65535",
                          "[::1]:1", "Host-A.example:80"));
}

TEST(ParseServerListTest, RejectsEmptyListAndEmptyEntry) {
  ExpectInvalid(ParseServerList("").status(), "server list is empty");
  ExpectInvalid(ParseServerList("  ").status(), "server list is empty");
  ExpectInvalid(ParseServerList("a:1,,b:2").status(), "empty entry");
  ExpectInvalid(ParseServerList("a:1,").status(), "empty entry");
}

TEST(ParseServerListTest, RejectsMissingOrOutOfRangePort) {
  ExpectInvalid(ParseServerList("a").status(), "has no port");
  ExpectInvalid(ParseServerList("a:").status(), "port \"\"");
  ExpectInvalid(ParseServerList("a:0").status(), "port \"0\"");
  ExpectInvalid(ParseServerList("a:65536").status(), "port \"65536\"");
  ExpectInvalid(ParseServerList("a:-1").status(), "port \"-1\"");
  ExpectInvalid(ParseServerList("a:+80").status(), "port \"+80\"");
  ExpectInvalid(ParseServerList("a:7000x").status(), "port \"7000x\"");
  ExpectInvalid(ParseServerList("a:0000000080").status(), "port");
  ExpectInvalid(ParseServerList("[::1]").status(), "has no port");
}

TEST(ParseServerListTest, RejectsBadHosts) {
  ExpectInvalid(ParseServerList(":7000").status(), "host is empty");
  ExpectInvalid(ParseServerList("ps_server:7000").status(), "contains '_'");
  ExpectInvalid(ParseServerList("-a:7000").status(), "starts or ends");
  ExpectInvalid(ParseServerList("a..b:7000").status(), "empty or over-long");
  ExpectInvalid(ParseServerList(std::string(64, 'a') + ":1").status(),
                "over-long");
  ExpectInvalid(ParseServerList("256.0.0.1:7000").status(), "IPv4");
  ExpectInvalid(ParseServerList("1.2.3:7000").status(), "IPv4");
  ExpectInvalid(ParseServerList("::1:7000").status(), "brackets");
  ExpectInvalid(ParseServerList("[::g]:7000").status(), "IPv6");
  ExpectInvalid(ParseServerList("[::1:7000").status(), "does not close");
}

TEST(ParseServerListTest, ErrorNamesTheEntry) {
  absl::Status status = ParseServerList("a:1,b:2,c:99999").status();
  ExpectInvalid(status, "entry 2");
  ExpectInvalid(status, "c:99999");
}

TEST(ParseServerListTest, RejectsDuplicateAddress) {
  ExpectInvalid(ParseServerList("a:1,b:2, a:1").status(), "\"a:1\" twice");
}

TEST(ExpandServerPatternTest, ExpandsEveryPlaceholder) {
  absl::StatusOr<std::vector<std::string>> servers =
      ExpandServerPattern("ps-server-{index}.ps-server:7000", 3);
  ASSERT_TRUE(servers.ok()) << servers.status();
  EXPECT_THAT(*servers, ElementsAre("ps-server-0.ps-server:7000",
                                    "ps-server-1.ps-server:7000",
                                    "ps-server-2.ps-server:7000"));
  // Local runs put the index in the port.
  servers = ExpandServerPattern("127.0.0.1:700{index}", 2);
  ASSERT_TRUE(servers.ok()) << servers.status();
  EXPECT_THAT(*servers, ElementsAre("127.0.0.1:7000", "127.0.0.1:7001"));
  servers = ExpandServerPattern("s{index}-{index}:1", 1);
  ASSERT_TRUE(servers.ok()) << servers.status();
  EXPECT_THAT(*servers, ElementsAre("s0-0:1"));
}

TEST(ExpandServerPatternTest, RejectsPatternWithoutPlaceholder) {
  ExpectInvalid(ExpandServerPattern("ps-server:7000", 2).status(),
                "does not contain {index}");
}

TEST(ExpandServerPatternTest, RejectsMisspelledPlaceholder) {
  ExpectInvalid(ExpandServerPattern("ps-{idx}-{index}:7000", 2).status(),
                "brace");
  ExpectInvalid(ExpandServerPattern("ps-{index}}:7000", 2).status(), "brace");
}

TEST(ExpandServerPatternTest, RejectsCountOutOfRange) {
  ExpectInvalid(ExpandServerPattern("s-{index}:1", 0).status(),
                "number of servers 0");
  ExpectInvalid(ExpandServerPattern("s-{index}:1", -2).status(),
                "number of servers -2");
  ExpectInvalid(ExpandServerPattern("s-{index}:1", 4097).status(),
                "number of servers 4097");
  EXPECT_TRUE(ExpandServerPattern("s-{index}:1", 4096).ok());
}

TEST(ExpandServerPatternTest, RejectsExpansionThatIsNotAnAddress) {
  // Index 0 gives port 0; the error names the index.
  absl::Status status = ExpandServerPattern("h:{index}", 2).status();
  ExpectInvalid(status, "index 0");
  ExpectInvalid(status, "port \"0\"");
  // Fine up to index 5, then port 65536 is out of range.
  status = ExpandServerPattern("h:6553{index}", 7).status();
  ExpectInvalid(status, "index 6");
  ExpectInvalid(ExpandServerPattern("s_{index}:7000", 1).status(),
                "contains '_'");
}

TEST(OrdinalFromHostnameTest, ReadsStatefulSetOrdinal) {
  EXPECT_EQ(OrdinalFromHostname("ps-server-0").value(), 0);
  EXPECT_EQ(OrdinalFromHostname("ps-server-3").value(), 3);
  EXPECT_EQ(OrdinalFromHostname("ps-server-12.ps-server.ml.svc").value(), 12);
  EXPECT_EQ(OrdinalFromHostname("a-2147483647").value(), 2147483647);
}

TEST(OrdinalFromHostnameTest, RejectsHostnamesWithoutOrdinal) {
  for (const char* bad :
       {"", "ps-server", "ps-server-", "-3", "3", "ps-server-x", "ps-server-03",
        "ps-server-+3", "ps-server--3x", "ps-server-3a", "ps-server-2147483648",
        ".ps-server-3", "ps-server.ps-server-3"}) {
    absl::StatusOr<int> ordinal = OrdinalFromHostname(bad);
    ExpectInvalid(ordinal.status(), "-<ordinal>");
    EXPECT_THAT(std::string(ordinal.status().message()),
                HasSubstr(std::string("\"") + bad + "\""));
  }
}

TEST(RankFromEnvTest, ParsesIndex) {
  EXPECT_EQ(RankFromEnv("0").value(), 0);
  EXPECT_EQ(RankFromEnv("7").value(), 7);
  EXPECT_EQ(RankFromEnv("99999").value(), 99999);
}

TEST(RankFromEnvTest, RejectsUnsetVariable) {
  ExpectInvalid(RankFromEnv(nullptr).status(),
                "JOB_COMPLETION_INDEX is not set");
}

TEST(RankFromEnvTest, RejectsNonNumbers) {
  for (const char* bad :
       {"", " 1", "1 ", "-1", "+1", "01", "1.0", "x", "99999999999999999999"}) {
    ExpectInvalid(RankFromEnv(bad).status(), "not a non-negative decimal");
  }
}

TEST(JobIdTest, AcceptsRunIdsAndRefusesOthers) {
  for (const char* ok : {"", "run-2026-11-25.1", "launch_4711_9f3a", "A"}) {
    EXPECT_TRUE(ValidateJobId(ok).ok()) << ok;
  }
  ExpectInvalid(ValidateJobId("two words"), "may hold only letters");
  ExpectInvalid(ValidateJobId("a/b"), "may hold only letters");
  ExpectInvalid(ValidateJobId(std::string(129, 'x')), "at most 128");
}

}  // namespace
}  // namespace ps
