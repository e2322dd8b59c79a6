// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/fs/permission_test.cc — with allow_other, an unprivileged user can do
// through a norefs mount exactly what it can do on the backing filesystem
// itself, no more and no less (fs/credentials.h).
//
// Differential: the same tree is laid out twice by root, once in a native
// directory beside the backing directory (same filesystem) and once in the
// backing directory; norefs_fs_perm_probe (tests/fs/helpers) becomes user
// 60001 (primary group 60001, supplementary group 60010) and runs one fixed
// script of ~60 operations in each, printing every result and the
// attributes that result left behind.  The two transcripts must be equal,
// line by line, with and without default_permissions.  The control mounts
// with the test builds' debug_daemon_credentials (every operation with the
// daemon's root credentials, as before the switch existed) and must differ.
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

#include "fs_test_util.h"

namespace norefs::fs::test {
namespace {

constexpr uid_t kUser = 60001;    // the prober
constexpr uid_t kOther = 60002;   // owns most of the tree
constexpr gid_t kMember = 60010;  // a supplementary group of the prober
constexpr gid_t kForeign = 60020;

void put(const std::string& path, uid_t uid, gid_t gid, mode_t mode,
         const std::string& data = "data\n") {
  write_file(path, data, mode & 0777);
  ASSERT_SYS(::chown(path.c_str(), uid, gid));
  ASSERT_SYS(::chmod(path.c_str(), mode));  // after chown, which clears setuid/setgid
}

void dir(const std::string& path, uid_t uid, gid_t gid, mode_t mode) {
  ASSERT_SYS(::mkdir(path.c_str(), 0700));
  ASSERT_SYS(::chown(path.c_str(), uid, gid));
  ASSERT_SYS(::chmod(path.c_str(), mode));
}

// The tree the probe's script expects (see tests/fs/helpers/perm_probe.cc).
void lay_out(const std::string& r) {
  ASSERT_SYS(::chmod(r.c_str(), 0755));
  put(r + "/secret", 0, 0, 0600, "top secret\n");
  put(r + "/grp_r", kOther, kMember, 0640);
  put(r + "/grp_deny", kOther, kMember, 0604);
  put(r + "/pub_rw", kOther, kOther, 0666, "hello world\n");
  put(r + "/own", kUser, kUser, 0644);
  dir(r + "/dir_x", kOther, kOther, 0700);
  put(r + "/dir_x/f", kOther, kOther, 0644);
  dir(r + "/dir_r", kOther, kOther, 0744);
  put(r + "/dir_r/f", kOther, kOther, 0644);
  dir(r + "/dir_ro", kOther, kOther, 0755);
  put(r + "/dir_ro/f", kOther, kOther, 0666);
  dir(r + "/dir_ro/sub", kOther, kOther, 0777);
  dir(r + "/dir_w", kOther, kOther, 0777);
  put(r + "/dir_w/theirs", kOther, kOther, 0644);
  dir(r + "/sgid_dir", kOther, kMember, 02777);
  dir(r + "/sticky", 0, 0, 01777);
  put(r + "/sticky/theirs", kOther, kOther, 0666);
  put(r + "/sticky/theirs2", kOther, kOther, 0666);
  put(r + "/sticky/mine", kUser, kUser, 0644);
  dir(r + "/sticky/their_dir", kOther, kOther, 0777);
  put(r + "/tx", kUser, kUser, 0644);
  ASSERT_SYS(::setxattr((r + "/tx").c_str(), "trusted.t", "v", 1, 0));
  ASSERT_SYS(::setxattr((r + "/tx").c_str(), "user.u", "v", 1, 0));
  for (const char* f : {"suid_w", "suid_t", "suid_o"}) put(r + "/" + f, kOther, kOther, 06777);
  put(r + "/suid_own", kUser, kUser, 06755);
  put(r + "/sg_chmod", kUser, kForeign, 0644);
  put(r + "/sg_ours", kUser, kMember, 0644);
  put(r + "/sgid_noexec", kOther, kOther, 02666);
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

// The probe's transcript in `root`; fails the test if it did not run.
std::string probe(const std::string& root) {
  RunResult r = run({NOREFS_HELPER_PERM_PROBE, std::to_string(kUser), std::to_string(kUser),
                     std::to_string(kMember), root},
                    30s * kSlow);
  EXPECT_TRUE(r.exited(0)) << "probe in " << root << ": " << describe_status(r.status) << "\n"
                           << r.output;
  return r.output;
}

class PermissionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_UNLESS_ROOT();
    ASSERT_SYS(::chmod(tree_.root.c_str(), 0755));
    ASSERT_SYS(::chmod((tree_.root + "/b").c_str(), 0755));
    native_ = tree_.root + "/b/native";
    ASSERT_SYS(::mkdir(native_.c_str(), 0755));
    ASSERT_NO_FATAL_FAILURE(lay_out(native_));
    ASSERT_NO_FATAL_FAILURE(lay_out(tree_.backing));
  }

  // Mounts with `opts` (+ allow_other), probes through the mount, unmounts
  // and checks the daemon's exit; returns the transcript.
  std::string probe_mount(std::vector<std::string> opts) {
    opts.push_back("allow_other");
    Mount mnt(tree_, {opts, {}});
    Watchdog dog(90s);
    EXPECT_TRUE(mnt.start());
    if (!mnt.running()) return "";
    dog.watch(mnt.pid(), tree_.mnt, tree_.log);
    std::string out = probe(tree_.mnt);
    EXPECT_TRUE(mnt.unmount().has_value()) << mnt.log();
    EXPECT_TRUE(exited_cleanly(mnt));
    return out;
  }

  TempTree tree_;
  std::string native_;
};

void expect_same(const std::string& native, const std::string& mounted, const char* mode) {
  const std::vector<std::string> want = lines(native), got = lines(mounted);
  ASSERT_GT(want.size(), 50u) << "the probe's native transcript is short:\n" << native;
  ASSERT_EQ(want.size(), got.size()) << mode << ": transcript lengths differ\nnative:\n"
                                     << native << "\nthrough the mount:\n"
                                     << mounted;
  for (std::size_t i = 0; i < want.size(); i++) {
    EXPECT_EQ(want[i], got[i]) << mode << ", step " << i + 1;
  }
}

TEST_F(PermissionTest, LikeTheBackingFilesystemWithoutDefaultPermissions) {
  const std::string native = probe(native_);
  // Sanity of the script itself: what an unprivileged user must not do.
  EXPECT_NE(native.find("read secret (root 0600): EACCES"), std::string::npos) << native;
  EXPECT_NE(native.find("unlink sticky/theirs: EPERM"), std::string::npos) << native;
  expect_same(native, probe_mount({}), "without default_permissions");
}

TEST_F(PermissionTest, LikeTheBackingFilesystemWithDefaultPermissions) {
  const std::string native = probe(native_);
  expect_same(native, probe_mount({"default_permissions"}), "with default_permissions");
}

// kernel_cache: writes go through the kernel's page cache, which sends its
// own setuid/setgid clearing as a mode change from the writer.
TEST_F(PermissionTest, LikeTheBackingFilesystemWithKernelCache) {
  const std::string native = probe(native_);
  expect_same(native, probe_mount({"kernel_cache"}), "with kernel_cache");
}

#ifdef NOREFS_SYNC_POINTS
// The control: with the daemon's own credentials the same script does what
// root may do (reads the 0600 file, removes others' files from a sticky
// directory, creates files owned by root), and the comparison catches it.
TEST_F(PermissionTest, ControlDaemonCredentialsAreCaught) {
  const std::string native = probe(native_);
  const std::string mounted = probe_mount({"debug_daemon_credentials"});
  EXPECT_NE(mounted.find("read secret (root 0600): ok"), std::string::npos) << mounted;
  EXPECT_NE(mounted.find("unlink sticky/theirs: ok"), std::string::npos) << mounted;
  EXPECT_NE(native, mounted);
}
#endif

}  // namespace
}  // namespace norefs::fs::test
