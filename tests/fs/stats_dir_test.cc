// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/fs/stats_dir_test.cc — the stats directory is refused unless only
// the daemon's user controls it (docs/faults.md, "The stats directory"): a
// symlink, a directory writable by group or others, or one owned by another
// user gets exit 2 and nothing mounted; a missing one is created 0700; a
// user mount defaults to $XDG_RUNTIME_DIR/norefs.
#include <sys/stat.h>

#include <string>
#include <vector>

#include "fs_test_util.h"

namespace norefs::fs::test {
namespace {

constexpr uid_t kNobody = 65534;

class StatsDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(*daemon_path(), '\0') << "the daemon was not built (NOREFS_DAEMON undefined)";
    if (::access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/fuse is not usable here";
  }

  // Exit 2, a message naming the directory and `reason`, nothing mounted,
  // no stats file created there.
  void expect_refused(const std::string& dir, const std::string& reason) {
    RunResult r =
        run({daemon_path(), "-f", "-o", "stats_dir=" + dir, tree_.backing, tree_.mnt}, 10s * kSlow);
    if (mount_count(tree_.mnt) > 0) {
      ADD_FAILURE() << "mounted with stats_dir " << dir;
      lazy_unmount(tree_.mnt);
    }
    EXPECT_TRUE(r.exited(2)) << dir << ": "
                             << (r.status < 0 ? "a timeout" : describe_status(r.status))
                             << ", want exit 2; output:\n"
                             << r.output;
    EXPECT_NE(r.output.find("stats_dir '" + dir + "'"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(reason), std::string::npos) << "want '" << reason << "' in:\n"
                                                        << r.output;
  }

  TempTree tree_;
};

TEST_F(StatsDirTest, SymlinkIsRefused) {
  const std::string real = tree_.root + "/real", link = tree_.root + "/link";
  ASSERT_SYS(::mkdir(real.c_str(), 0700));
  ASSERT_SYS(::symlink(real.c_str(), link.c_str()));
  expect_refused(link, "symbolic link");
  const std::string dangling = tree_.root + "/dangling";
  ASSERT_SYS(::symlink((tree_.root + "/nowhere").c_str(), dangling.c_str()));
  expect_refused(dangling, "symbolic link");
  EXPECT_NE(::access((tree_.root + "/nowhere").c_str(), F_OK), 0) << "followed the dangling link";
}

TEST_F(StatsDirTest, GroupOrWorldWritableIsRefused) {
  for (mode_t mode : {0777, 01777, 0770, 0720}) {
    const std::string dir = tree_.root + "/w" + std::to_string(mode);
    ASSERT_SYS(::mkdir(dir.c_str(), 0700));
    ASSERT_SYS(::chmod(dir.c_str(), mode));
    expect_refused(dir, "writable by group or others");
  }
}

TEST_F(StatsDirTest, OwnedByAnotherUserIsRefused) {
  SKIP_UNLESS_ROOT();
  const std::string dir = tree_.root + "/theirs";
  ASSERT_SYS(::mkdir(dir.c_str(), 0700));
  ASSERT_SYS(::chown(dir.c_str(), kNobody, kNobody));
  expect_refused(dir, "owned by uid " + std::to_string(kNobody));
}

TEST_F(StatsDirTest, MissingDirectoryIsCreatedPrivate) {
  const std::string dir = tree_.root + "/new/stats";
  // Mount adds stats_dir=<tree>/stats first; a later one wins.
  Mount custom(tree_, MountConfig{{"stats_dir=" + dir}, {}});
  ASSERT_TRUE(custom.start());
  struct stat st = lstat_or_throw(dir);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  const std::string block = dir + "/cache." + std::to_string(custom.pid());
  st = lstat_or_throw(block);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_TRUE(custom.unmount().has_value());
  EXPECT_TRUE(exited_cleanly(custom));
  EXPECT_TRUE(stats_files_removed(dir, custom.pid()));
}

// A user mount (euid != 0) defaults to $XDG_RUNTIME_DIR/norefs, created
// 0700 and checked like any stats_dir.  (Whether the mount itself then
// succeeds depends on /dev/fuse and fusermount3 for that user, which this
// test does not need: the directory is settled before mounting.)
TEST_F(StatsDirTest, UserMountDefaultsToXdgRuntimeDir) {
  SKIP_UNLESS_ROOT();
  if (!have_program("setpriv")) GTEST_SKIP() << "needs setpriv (util-linux)";
  const std::string xdg = tree_.root + "/xdg";
  ASSERT_SYS(::mkdir(xdg.c_str(), 0700));
  ASSERT_SYS(::chown(xdg.c_str(), kNobody, kNobody));
  auto run_as_nobody = [&](std::vector<std::string> args) {
    std::vector<std::string> argv{"setpriv",
                                  "--reuid=" + std::to_string(kNobody),
                                  "--regid=" + std::to_string(kNobody),
                                  "--clear-groups",
                                  "env",
                                  "XDG_RUNTIME_DIR=" + xdg,
                                  daemon_path(),
                                  "-f"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {tree_.backing, tree_.mnt});
    RunResult r = run(argv, 10s * kSlow);
    if (mount_count(tree_.mnt) > 0) {
      // The user could mount after all: unmount (the default was taken).
      run({"fusermount3", "-u", tree_.mnt}, 10s * kSlow);
      if (mount_count(tree_.mnt) > 0) lazy_unmount(tree_.mnt);
    }
    return r;
  };
  // A symlink planted there by someone with write access to the runtime
  // directory: refused, so the default path is the one checked.
  const std::string def = xdg + "/norefs";
  ASSERT_SYS(::symlink(tree_.root.c_str(), def.c_str()));
  RunResult r = run_as_nobody({});
  EXPECT_TRUE(r.exited(2)) << describe_status(r.status) << ":\n" << r.output;
  EXPECT_NE(r.output.find("stats_dir '" + def + "': is a symbolic link"), std::string::npos)
      << r.output;
  ASSERT_SYS(::unlink(def.c_str()));
  // Missing: created 0700, owned by the user.
  r = run_as_nobody({});
  EXPECT_EQ(r.output.find("stats_dir"), std::string::npos) << r.output;
  struct stat st = lstat_or_throw(def);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_uid, kNobody);
}

}  // namespace
}  // namespace norefs::fs::test
