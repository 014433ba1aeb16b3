#include "server/hostname_index.h"

#include <string>

#include "gtest/gtest.h"

namespace ps::server {
namespace {

TEST(HostnameIndexTest, TakesTheStatefulSetOrdinal) {
  EXPECT_EQ(*IndexFromHostname("ps-server-0"), 0);
  EXPECT_EQ(*IndexFromHostname("ps-server-12"), 12);
  EXPECT_EQ(*IndexFromHostname("a-7"), 7);
}

TEST(HostnameIndexTest, RejectsHostnamesWithoutAnOrdinalNamingThem) {
  for (const char* name : {"ps-server", "laptop", "ps-server-", "ps-server-x1",
                           "ps-server-99999999999", ""}) {
    absl::StatusOr<int> index = IndexFromHostname(name);
    ASSERT_FALSE(index.ok()) << name;
    EXPECT_NE(index.status().message().find(absl::StrCat("\"", name, "\"")),
              std::string::npos)
        << index.status();
  }
}

}  // namespace
}  // namespace ps::server
