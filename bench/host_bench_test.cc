#include "bench/host_bench.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "tests/hosts/skip_without_hosts.h"

namespace ps::testing {
namespace {

TEST(HostBenchTest, ServersApartTakeTwoHostsOfTheirOwn) {
  EXPECT_EQ(HostsFor(ServiceLayout::kServersApart, 4), 6);
  EXPECT_EQ(HostsFor(ServiceLayout::kServersBeside, 4), 4);
  EXPECT_EQ(HostsFor(ServiceLayout::kRing, 2), 2);
}

std::unique_ptr<Subprocess> Shell(const std::string& script) {
  SubprocessOptions options;
  options.argv = {"/bin/sh", "-c", script};
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Start(std::move(options));
  EXPECT_TRUE(child.ok()) << child.status();
  return child.ok() ? *std::move(child) : nullptr;
}

TEST(AwaitWorkersTest, TrueOnlyIfEveryWorkerExitsZeroInTime) {
  std::vector<std::unique_ptr<Subprocess>> workers;
  workers.push_back(Shell("exit 0"));
  workers.push_back(Shell("exit 0"));
  EXPECT_TRUE(AwaitWorkers(workers, absl::Minutes(1)));
  workers.push_back(Shell("exit 3"));
  EXPECT_FALSE(AwaitWorkers(workers, absl::Minutes(1)));
  workers.back() = Shell("sleep 600");
  EXPECT_FALSE(AwaitWorkers(workers, absl::Milliseconds(100)));
}

class StartServicesTest : public ::testing::Test {
 protected:
  void SetUp() override { SKIP_WITHOUT_TEST_HOSTS(); }
};

TEST_F(StartServicesTest, EachListensOnItsHost) {
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(4, 0);
  ASSERT_TRUE(made.ok()) << made.status();
  const TestHosts& hosts = **made;
  std::vector<std::unique_ptr<Subprocess>> services;
  const std::optional<std::vector<std::string>> ring = StartServices(
      hosts, ServiceLayout::kRing, 2, {}, absl::Seconds(120), services);
  ASSERT_TRUE(ring.has_value());
  ASSERT_EQ(ring->size(), 1u);
  EXPECT_TRUE(absl::StartsWith((*ring)[0], absl::StrCat(hosts.address(0), ":")))
      << (*ring)[0];
  const std::optional<std::vector<std::string>> apart =
      StartServices(hosts, ServiceLayout::kServersApart, 2, {"--optimizer=sgd"},
                    absl::Seconds(120), services);
  ASSERT_TRUE(apart.has_value());
  ASSERT_EQ(apart->size(), 2u);
  for (int index = 0; index < 2; ++index) {
    EXPECT_TRUE(absl::StartsWith((*apart)[index],
                                 absl::StrCat(hosts.address(2 + index), ":")))
        << (*apart)[index];
  }
  EXPECT_EQ(services.size(), 3u);
}

}  // namespace
}  // namespace ps::testing
