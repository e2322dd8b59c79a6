// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/fs/race_test.cc — races through the mount and faults inside the
// copy (docs/races.md), with the tools' checkers (tools/check/mount_race.h,
// tools/check/partial_fault.h):
//  - every read path with defer=on: readers check every byte they read
//    through the mount while an evictor, a puncher, a rewriter and a
//    truncater work on the same files under a cache smaller than the data;
//    0 bad reads.  In builds with sync points the daemon also sleeps inside
//    the fast path's read-side section (debug_read_delay_us), so the
//    window the control below opens is open here too;
//  - the control: the same with defer=off and that window widened, where
//    the checker must see bad reads (or the daemon die of the freed page);
//  - debug_read_delay_us exists only in builds with sync points;
//  - the partial-fault test through the mount.
// Each run is short (under a second of racing): the suite runs in 3 builds.
#include <sys/wait.h>

#include <string>
#include <vector>

#include "cache/page_cache.h"
#include "fs_test_util.h"
#include "tools/check/mount_race.h"
#include "tools/check/partial_fault.h"

namespace norefs::fs::test {
namespace {

using cache::ReadPath;

#ifdef NOREFS_SYNC_POINTS
constexpr bool kSyncPoints = true;
#else
constexpr bool kSyncPoints = false;
#endif

// Small: 2 files of 32 pages (256 KiB) against a 128 KiB cache.  Two files
// rather than more: evicted pages are refilled (and reused) soonest, which
// the control needs to show itself in well under a second on a loaded
// machine (measured: docs/races.md).
constexpr const char* kCacheSize = "cache_size=128K";
constexpr unsigned kDelayUs = 200;

tools::MountRaceParams race_params(const std::string& dir, double seconds) {
  tools::MountRaceParams p;
  p.dir = dir;
  p.seconds = seconds * (kSlow > 1 ? 2 : 1);
  p.readers = 4;
  p.files = 2;
  p.file_pages = 32;
  p.max_read = 16384;
  return p;
}

class MountRaceStress : public MountTest, public ::testing::WithParamInterface<ReadPath> {
 protected:
  MountConfig config() const override {
    MountConfig c;
    c.options = {"read_path=" + std::string(cache::read_path_name(GetParam())), "defer=on",
                 kCacheSize};
    if (kSyncPoints) c.options.push_back("debug_read_delay_us=" + std::to_string(kDelayUs));
    return c;
  }
};

TEST_P(MountRaceStress, DeferOnReadsEveryByteRight) {
  tools::MountRaceParams p = race_params(m(), 0.8);
  tools::MountRaceResult r = tools::run_mount_race(p);
  SCOPED_TRACE(tools::describe_mount_race_config(p) + tools::format_mount_race_report(r));
  EXPECT_EQ(r.tool_error, "");
  EXPECT_GT(r.reads, 0u);
  EXPECT_GT(r.bytes_checked, 0u);
  EXPECT_EQ(r.bad_reads, 0u);
  EXPECT_GT(r.pages_evicted, 0u);
  EXPECT_GT(r.punches + r.rewrites + r.truncates, 0u);
  // Reads raced with changes, not only with evictions.
  EXPECT_GT(r.reads - r.by_variant[static_cast<std::size_t>(tools::RaceVariant::stable)].reads, 0u);
  EXPECT_EQ(tools::mount_race_verdict(p, r).exit_code, 0);
  if (r.have_daemon_counters && GetParam() == ReadPath::noref) {
    EXPECT_GT(r.daemon_fast_pages, 0u) << "the fast path was never taken";
  }
}

INSTANTIATE_TEST_SUITE_P(Race, MountRaceStress,
                         ::testing::Values(ReadPath::noref, ReadPath::ref, ReadPath::ref_fetchadd,
                                           ReadPath::stackcopy),
                         [](const auto& tp) {
                           std::string s(cache::read_path_name(tp.param));
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

// The control: defer=off, noref, the window widened.  A reader sleeps in
// its read-side section holding a page it looked up; the evictor frees the
// page at once, a refill of another file reuses it, and the reader copies
// the new owner's bytes.  The daemon may also die of it (the descriptor
// itself reused): that is the same broken guarantee.
TEST(MountRaceControlStress, DeferOffWithWidenedWindowIsDetected) {
  if (!kSyncPoints) {
    GTEST_SKIP() << "this build has no sync points (NOREFS_SYNC_POINTS off): the daemon has no "
                    "debug_read_delay_us to widen the window, and through FUSE the window is too "
                    "narrow to hit in a short run";
  }
#ifdef NOREFS_TEST_TSAN
  GTEST_SKIP() << "defer=off is a data race by construction; not under TSan";
#endif
  ASSERT_NE(*daemon_path(), '\0');
  if (::access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/fuse is not usable here";
  TempTree tree;
  Watchdog dog(60s);
  Mount mnt(tree, {{"read_path=noref", "defer=off", kCacheSize,
                    "debug_read_delay_us=" + std::to_string(kDelayUs)},
                   {}});
  ASSERT_TRUE(mnt.start());
  dog.watch(mnt.pid(), tree.mnt, tree.log);
  tools::MountRaceParams p = race_params(tree.mnt, 2.5);
  p.control = true;
  p.stop_after_bad = 3;
  tools::MountRaceResult r;
  try {
    r = tools::run_mount_race(p);
  } catch (const std::exception& e) {
    // Setup through a mount whose daemon already died.
    ASSERT_FALSE(mnt.running()) << e.what();
  }
  SCOPED_TRACE(tools::format_mount_race_report(r));
  const bool died = !mnt.running() || mnt.wait(0ms).has_value();
  std::printf("control (defer=off, noref, debug_read_delay_us=%u): %llu bad reads of %llu%s\n",
              kDelayUs, static_cast<unsigned long long>(r.bad_reads),
              static_cast<unsigned long long>(r.reads), died ? ", the daemon died" : "");
  EXPECT_TRUE(r.bad_reads > 0 || died) << "the checker saw nothing through the mount with "
                                          "defer=off and the widened window";
  if (!died) {
    // With the daemon alive, what was caught is wrong bytes, not errors.
    EXPECT_GT(r.bad_reads - r.bad_by_kind[static_cast<std::size_t>(tools::MountBadKind::error)],
              0u);
    auto st = mnt.unmount();
    EXPECT_TRUE(st.has_value()) << mnt.log();
  } else if (mnt.running()) {
    mnt.unmount();
  } else {
    mnt.remove_dead_mount(true);
  }
}

// The widening option is compiled out of builds without sync points: there
// the daemon refuses it (exit 2, as any unknown option); with them it is
// listed in --help.
TEST(MountRaceControl, DebugReadDelayOnlyInSyncPointBuilds) {
  ASSERT_NE(*daemon_path(), '\0');
  if (kSyncPoints) {
    RunResult r = run({daemon_path(), "--help"}, 10s * kSlow);
    EXPECT_TRUE(r.exited(0)) << r.output;
    EXPECT_NE(r.output.find("debug_read_delay_us"), std::string::npos) << r.output;
  } else {
    TempTree tree;
    RunResult r = run({daemon_path(), "-f", "-o", "debug_read_delay_us=100", "-o",
                       "stats_dir=" + tree.stats, tree.backing, tree.mnt},
                      10s * kSlow);
    if (mount_count(tree.mnt) > 0) lazy_unmount(tree.mnt);
    EXPECT_TRUE(r.exited(2)) << r.output;
    RunResult h = run({daemon_path(), "--help"}, 10s * kSlow);
    EXPECT_EQ(h.output.find("debug_read_delay_us"), std::string::npos) << h.output;
  }
}

// ── The partial-fault test through the mount ──

class PartialFaultMountStress : public MountTest {};

TEST_F(PartialFaultMountStress, ReadsIntoZappedBuffersAreRight) {
  tools::PartialFaultParams p;
  p.dir = m();
  p.seconds = 0.6;
  tools::PartialFaultResult r = tools::run_partial_fault(p);
  SCOPED_TRACE(tools::describe_partial_fault_config(p) + tools::format_partial_fault_report(r));
  EXPECT_GT(r.reads, 0u);
  EXPECT_EQ(r.bad_reads, 0u);
  for (const auto& b : r.by_buffer) {
    EXPECT_GT(b.reads, 0u);
    EXPECT_GT(b.faulted_reads, 0u) << "no read into this buffer kind faulted";
  }
  EXPECT_EQ(tools::partial_fault_exit_code(r), 0);
}

}  // namespace
}  // namespace norefs::fs::test
