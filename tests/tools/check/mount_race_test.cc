// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The through-the-mount checker's content function and verdicts
// (tools/check/mount_race.h); its runs against a mount are in tests/fs/race_test.cc.
#include <gtest/gtest.h>

#include "tools/check/mount_race.h"

namespace norefs::tools {
namespace {

TEST(MountRace, ContentWordsDecodeToFileVersionAndOffset) {
  for (unsigned f : {0u, 1u, 255u}) {
    for (unsigned v : {1u, 2u, 65535u}) {
      for (std::uint64_t w : {0ull, 7ull, 4096ull, 0xffffffffull}) {
        unsigned df = 0, dv = 0;
        std::uint64_t dw = 0;
        ASSERT_TRUE(mount_race_decode(mount_race_word(f, v, w), &df, &dv, &dw));
        EXPECT_EQ(df, f);
        EXPECT_EQ(dv, v);
        EXPECT_EQ(dw, w);
      }
    }
  }
  // Versions differ in every word: a stale byte is told apart.
  EXPECT_NE(mount_race_word(0, 1, 0), mount_race_word(0, 2, 0));
  unsigned f, v;
  std::uint64_t w;
  EXPECT_FALSE(mount_race_decode(0, &f, &v, &w));
}

TEST(MountRace, Verdicts) {
  MountRaceParams p;
  MountRaceResult r;
  EXPECT_EQ(mount_race_verdict(p, r).exit_code, 1);  // nothing read
  r.reads = 100;
  EXPECT_EQ(mount_race_verdict(p, r).exit_code, 2);  // nothing evicted
  r.pages_evicted = 5;
  EXPECT_EQ(mount_race_verdict(p, r).exit_code, 0);
  r.bad_reads = 1;
  EXPECT_EQ(mount_race_verdict(p, r).exit_code, 1);
  p.control = true;
  EXPECT_EQ(mount_race_verdict(p, r).exit_code, 0);  // the control detected it
  r.bad_reads = 0;
  EXPECT_EQ(mount_race_verdict(p, r).exit_code, 2);  // the control saw nothing
  r.tool_error = "pwrite: No space left on device";
  EXPECT_EQ(mount_race_verdict(p, r).exit_code, 1);
}

}  // namespace
}  // namespace norefs::tools
