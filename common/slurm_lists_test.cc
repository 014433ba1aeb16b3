#include "common/slurm_lists.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Hosts(absl::string_view list) {
  absl::StatusOr<std::vector<std::string>> hosts = ExpandSlurmHostList(list);
  EXPECT_TRUE(hosts.ok()) << list << ": " << hosts.status();
  return hosts.ok() ? *hosts : std::vector<std::string>{};
}

TEST(SlurmHostListTest, PlainNames) {
  EXPECT_THAT(Hosts("node1"), ElementsAre("node1"));
  EXPECT_THAT(Hosts("a,b.example,c-d_e"),
              ElementsAre("a", "b.example", "c-d_e"));
}

TEST(SlurmHostListTest, RangesKeepTheLowerBoundsWidth) {
  EXPECT_THAT(Hosts("node[01-04,07]"),
              ElementsAre("node01", "node02", "node03", "node04", "node07"));
  EXPECT_THAT(Hosts("n[8-10]"), ElementsAre("n8", "n9", "n10"));
  EXPECT_THAT(Hosts("n[08-10]"), ElementsAre("n08", "n09", "n10"));
  EXPECT_THAT(Hosts("n[098-101]"), ElementsAre("n098", "n099", "n100", "n101"));
  EXPECT_THAT(Hosts("n[5]"), ElementsAre("n5"));
}

TEST(SlurmHostListTest, SeveralGroupsInOrder) {
  EXPECT_THAT(Hosts("a[1-2],b3"), ElementsAre("a1", "a2", "b3"));
  EXPECT_THAT(Hosts("gpu[1-2],cpu[07-08],login"),
              ElementsAre("gpu1", "gpu2", "cpu07", "cpu08", "login"));
}

TEST(SlurmHostListTest, TextAfterAndBetweenBrackets) {
  EXPECT_THAT(Hosts("n[1-2]-ib"), ElementsAre("n1-ib", "n2-ib"));
  EXPECT_THAT(Hosts("r[1-2]n[1-2]"),
              ElementsAre("r1n1", "r1n2", "r2n1", "r2n2"));
}

TEST(SlurmHostListTest, RefusesMalformedLists) {
  for (const char* list : {"",
                           ",",
                           "a,",
                           ",a",
                           "a,,b",
                           "n[",
                           "n]",
                           "n[1-2",
                           "n1-2]",
                           "n[[1]]",
                           "n[]",
                           "n[1-]",
                           "n[-1]",
                           "n[a-b]",
                           "n[3-1]",
                           "n[1-2-3]",
                           "n[+1]",
                           "n[ 1]",
                           "n[1234567890]",
                           "bad name",
                           "a/b",
                           "n[1,,2]"}) {
    absl::StatusOr<std::vector<std::string>> hosts = ExpandSlurmHostList(list);
    EXPECT_FALSE(hosts.ok()) << "'" << list << "'";
    if (!hosts.ok()) {
      EXPECT_EQ(hosts.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(hosts.status().message(),
                  HasSubstr(absl::StrCat("'", list, "'")));
    }
  }
}

TEST(SlurmHostListTest, RefusesMoreThanItCanHold) {
  EXPECT_TRUE(ExpandSlurmHostList("n[1-65536]").ok());
  EXPECT_THAT(ExpandSlurmHostList("n[1-65537]").status().message(),
              HasSubstr("more than 65536 hosts"));
  EXPECT_THAT(ExpandSlurmHostList("r[1-1000]n[1-1000]").status().message(),
              HasSubstr("more than 65536 hosts"));
  EXPECT_FALSE(ExpandSlurmHostList("n[1-999999999]").ok());
}

TEST(SlurmTasksPerNodeTest, Expands) {
  EXPECT_THAT(*ExpandSlurmTasksPerNode("4"), ElementsAre(4));
  EXPECT_THAT(*ExpandSlurmTasksPerNode("2(x3),1"), ElementsAre(2, 2, 2, 1));
  EXPECT_THAT(*ExpandSlurmTasksPerNode("1,3(x2)"), ElementsAre(1, 3, 3));
}

TEST(SlurmTasksPerNodeTest, RefusesMalformedCounts) {
  for (const char* list : {"", "0", "-1", "a", "2(x0)", "2(3)", "2(x3", "2x3",
                           "1,,2", "+2", "2(x+3)", " 2"}) {
    absl::StatusOr<std::vector<int>> counts = ExpandSlurmTasksPerNode(list);
    EXPECT_FALSE(counts.ok()) << "'" << list << "'";
  }
}

}  // namespace
}  // namespace ps
