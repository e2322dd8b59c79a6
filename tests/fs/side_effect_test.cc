// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/fs/side_effect_test.cc — what a change does besides its own job, as
// xfstests checks it against the kernel: setuid/setgid cleared by another
// user's write or fallocate and seen by stat at once (generic/355, 683-685),
// a mode rewritten by an ACL (375), a file capability dropped by fallocate
// (688), an exec-only file run by another user (126), and the umask under
// a default ACL (099, 319, 444, 697).  Each is compared with the backing
// filesystem itself, or with what the kernel does on a local directory.
#include <sys/stat.h>
#include <sys/xattr.h>

#include <cstring>
#include <string>
#include <vector>

#include "fs_test_util.h"

namespace norefs::fs::test {
namespace {

constexpr uid_t kOtherUser = 65534;  // nobody: owns nothing here, in no group of the files

class SideEffectTest : public MountTest {
 protected:
  MountConfig config() const override { return {{"allow_other", "default_permissions"}, {}}; }
  RunResult as_user(const std::string& op, const std::string& path) {
    return run({NOREFS_HELPER_AS_USER, std::to_string(kOtherUser), op, path}, 30s);
  }
  // Lets uid kOtherUser reach the backing tree's files through the mount.
  void open_tree() {
    ASSERT_SYS(::chmod(tree().root.c_str(), 0755));
    ASSERT_SYS(::chmod(b().c_str(), 0777));
  }
};

// The mode as a stat that asks for nothing else sees it (statx with
// STATX_MODE: what `stat -c %a` asks, and what the kernel answers from its
// cached attributes unless they were invalidated).
mode_t statx_mode(const std::string& path) {
  struct statx sx {};
  if (::statx(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW, STATX_MODE, &sx) != 0) {
    throw std::system_error(errno, std::generic_category(), "statx " + path);
  }
  return sx.stx_mode & 07777;
}

mode_t backing_mode(const std::string& path) { return lstat_or_throw(path).st_mode & 07777; }

// The file is made through the mount as root, given to `owner` with `mode`,
// and stat'ed through the mount, so that the kernel holds its attributes.
void make_file(const std::string& mnt_path, uid_t owner, mode_t mode) {
  write_file(mnt_path, std::string(8192, 'x'), 0644);
  ASSERT_SYS(::chown(mnt_path.c_str(), owner, 0));
  ASSERT_SYS(::chmod(mnt_path.c_str(), mode));
  ASSERT_EQ(statx_mode(mnt_path), mode);
}

TEST_F(SideEffectTest, SetidClearedByAnotherUsersChangeIsSeenAtOnce) {
  SKIP_UNLESS_ROOT();
  open_tree();
  struct Case {
    const char* op;
    uid_t owner;
    mode_t mode;
  };
  // generic/355: the owner appends to its 6644 file (setuid goes, setgid
  // without group execute stays); 683-685: a non-owner fallocates, punches
  // or zeroes a 2666 file of root (setgid goes: the writer is not in group 0).
  for (const Case& c : {Case{"append", kOtherUser, 06644}, Case{"fallocate", 0, 02666},
                        Case{"punch", 0, 02666}, Case{"zero", 0, 02666}}) {
    SCOPED_TRACE(c.op);
    const std::string name = std::string("f-") + c.op;
    make_file(m(name), c.owner, c.mode);
    RunResult r = as_user(c.op, m(name));
    ASSERT_TRUE(r.exited(0)) << describe_status(r.status) << ": " << r.output;
    const mode_t want = backing_mode(b(name));
    EXPECT_NE(want, c.mode) << "the backing filesystem kept the bits: nothing to check";
    EXPECT_EQ(statx_mode(m(name)), want) << "mode through the mount, right after the change";
    EXPECT_EQ(lstat_or_throw(m(name)).st_mode & 07777, want);
  }
}

// An access ACL's entries are the mode's bits (generic/375): setting one
// through the mount changes the mode, and stat shows it at once.
std::string acl_xattr(std::vector<std::pair<std::uint16_t, std::uint16_t>> entries) {
  // struct posix_acl_xattr_header { le32 a_version = 2; } and, per entry,
  // { le16 e_tag; le16 e_perm; le32 e_id; }.
  std::string v(4, '\0');
  const std::uint32_t version = 2;
  std::memcpy(v.data(), &version, 4);
  for (auto [tag, perm] : entries) {
    char e[8] = {};
    const std::uint32_t id = ~0u;
    std::memcpy(e, &tag, 2);
    std::memcpy(e + 2, &perm, 2);
    std::memcpy(e + 4, &id, 4);
    v.append(e, 8);
  }
  return v;
}
constexpr std::uint16_t kAclUserObj = 0x01, kAclGroupObj = 0x04, kAclOther = 0x20;

TEST_F(SideEffectTest, AccessAclRewritesTheModeSeenAtOnce) {
  SKIP_UNLESS_ROOT();
  make_file(m("f"), 0, 0644);
  const std::string acl = acl_xattr({{kAclUserObj, 7}, {kAclGroupObj, 5}, {kAclOther, 0}});
  if (::setxattr(m("f").c_str(), "system.posix_acl_access", acl.data(), acl.size(), 0) != 0) {
    if (errno == EOPNOTSUPP) GTEST_SKIP() << "the backing filesystem has no ACLs";
    FAIL() << "setxattr: " << errno_name(errno);
  }
  ASSERT_EQ(backing_mode(b("f")), 0750u);
  EXPECT_EQ(statx_mode(m("f")), 0750u);
}

// generic/688: a file capability goes with a change by an unprivileged
// user who may write the file, fallocate included, and the change succeeds.
TEST_F(SideEffectTest, FallocateByAWriterDropsTheFileCapability) {
  SKIP_UNLESS_ROOT();
  open_tree();
  make_file(m("f"), 0, 0666);
  // struct vfs_cap_data, revision 2: magic_etc, then permitted/inheritable
  // pairs; CAP_NET_RAW (13) permitted, not effective.
  std::uint32_t cap[5] = {0x02000000, 1u << 13, 0, 0, 0};
  if (::setxattr(b("f").c_str(), "security.capability", cap, sizeof cap, 0) != 0) {
    GTEST_SKIP() << "cannot set security.capability here: " << errno_name(errno);
  }
  RunResult r = as_user("fallocate", m("f"));
  EXPECT_TRUE(r.exited(0)) << describe_status(r.status) << ": " << r.output;
  char buf[64];
  EXPECT_LT(::getxattr(b("f").c_str(), "security.capability", buf, sizeof buf), 0)
      << "the capability survived";
  EXPECT_EQ(errno, ENODATA);
}

// A plain user may not set a capability through the mount, even on a file
// it may write (only the kernel's removal is done for it).
TEST_F(SideEffectTest, AWriterCannotSetACapability) {
  SKIP_UNLESS_ROOT();
  open_tree();
  make_file(m("f"), kOtherUser, 0644);
  RunResult r = run({NOREFS_HELPER_AS_USER, std::to_string(kOtherUser), "setcap", m("f")}, 30s);
  EXPECT_FALSE(r.exited(0)) << r.output;
  char buf[64];
  EXPECT_LT(::getxattr(b("f").c_str(), "security.capability", buf, sizeof buf), 0);
}

// generic/126: a file with execute permission but no read permission for
// the caller runs, as on a local filesystem.
TEST_F(SideEffectTest, ExecOnlyFileRunsForAnotherUser) {
  SKIP_UNLESS_ROOT();
  open_tree();
  write_file(m("t"), read_file("/bin/true"), 0755);
  ASSERT_SYS(::chmod(m("t").c_str(), 0711));
  RunResult r = as_user("exec", m("t"));
  EXPECT_TRUE(r.exited(0)) << describe_status(r.status) << ": " << r.output;
  // And reading it is still refused.
  RunResult rd = as_user("read", m("t"));
  EXPECT_FALSE(rd.exited(0)) << rd.output;
  EXPECT_NE(rd.output.find("EACCES"), std::string::npos) << rd.output;
}

// generic/099 and friends: under a directory with a default ACL the umask
// is not applied; elsewhere it is.  The same steps in a local directory
// (the backing filesystem's own, beside the backing tree) give the modes
// to expect.
TEST_F(SideEffectTest, UmaskUnderADefaultAclAsLocally) {
  SKIP_UNLESS_ROOT();
  const std::string acl = acl_xattr({{kAclUserObj, 7}, {kAclGroupObj, 7}, {kAclOther, 7}});
  auto run_steps = [&](const std::string& top) {
    std::vector<mode_t> modes;
    const std::string ad = top + "/ad", plain = top + "/plain";
    must(::mkdir(ad.c_str(), 0755), "mkdir " + ad);
    must(::mkdir(plain.c_str(), 0755), "mkdir " + plain);
    if (::setxattr(ad.c_str(), "system.posix_acl_default", acl.data(), acl.size(), 0) != 0) {
      throw std::system_error(errno, std::generic_category(), "setxattr " + ad);
    }
    const mode_t old = ::umask(022);
    for (const std::string& d : {ad, plain}) {
      ::close(must(::open((d + "/f1").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0666), "create"));
      must(::mkdir((d + "/d1").c_str(), 0777), "mkdir");
      must(::mknod((d + "/p1").c_str(), S_IFIFO | 0666, 0), "mknod");
      for (const char* n : {"/f1", "/d1", "/p1"}) modes.push_back(lstat_or_throw(d + n).st_mode);
    }
    ::umask(old);
    return modes;
  };
  const std::string local = tree().root + "/local";
  must(::mkdir(local.c_str(), 0755), "mkdir " + local);
  std::vector<mode_t> want;
  try {
    want = run_steps(local);
  } catch (const std::system_error& e) {
    if (e.code().value() == EOPNOTSUPP) GTEST_SKIP() << "no ACLs on the backing filesystem";
    throw;
  }
  ASSERT_EQ(want[0] & 07777, 0666u) << "the local filesystem applied the umask under the ACL";
  ASSERT_EQ(want[3] & 07777, 0644u);
  EXPECT_EQ(run_steps(m()), want) << "modes through the mount differ from the local ones";
}

}  // namespace
}  // namespace norefs::fs::test
