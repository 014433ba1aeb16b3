#include "common/peer_text.h"

#include <string>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(PeerTextTest, KeepsPrintableText) {
  EXPECT_EQ(PeerText("job-7.a_b"), "job-7.a_b");
  EXPECT_EQ(PeerText(""), "");
}

TEST(PeerTextTest, EscapesWhatCouldForgeALine) {
  EXPECT_EQ(PeerText("x\n12:00:00.000 [server 0] info: done"),
            "x\\n12:00:00.000 [server 0] info: done");
  EXPECT_EQ(PeerText("a\rb\x1b[2Jc\x7f"), "a\\rb\\x1b[2Jc\\x7f");
  // A hex digit after an escape is escaped too, so that it reads alone.
  EXPECT_EQ(PeerText(std::string("a\0z", 3)), "a\\x00z");
  EXPECT_EQ(PeerText("\"q\"\\"), "\\\"q\\\"\\\\");
  EXPECT_EQ(PeerText("\xc3\xa9"), "\\xc3\\xa9");
}

TEST(PeerTextTest, CutsLongTextNamingItsSize) {
  const std::string long_text(1 << 20, 'a');
  const std::string shown = PeerText(long_text);
  EXPECT_EQ(shown, std::string(kPeerTextBytes, 'a') + "... (1048576 bytes)");
  EXPECT_EQ(PeerText("abcdef", 3), "abc... (6 bytes)");
  // Escaping may lengthen what is kept, never beyond 4 bytes a byte.
  EXPECT_LE(PeerText(std::string(1000, '\n')).size(), 4 * kPeerTextBytes + 20);
}

}  // namespace
}  // namespace ps
