// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/fs/side_effect_test.cc — what a change does besides its own job, as
// xfstests checks it against the kernel: setuid/setgid cleared by another
// user's write or fallocate and seen by stat at once (generic/355, 683-685)
// and a mode rewritten by an ACL (375).  Each is compared with the backing
// filesystem itself.
#include <sys/stat.h>
#include <sys/xattr.h>

#include <cstring>
#include <string>
#include <vector>

#include "fs_test_util.h"

namespace norefs::fs::test {
namespace {

constexpr uid_t kUser = 65534;  // nobody: owns nothing here, in no group of the files

class SideEffectTest : public MountTest {
 protected:
  MountConfig config() const override { return {{"allow_other", "default_permissions"}, {}}; }
  RunResult as_user(const std::string& op, const std::string& path) {
    return run({NOREFS_HELPER_AS_USER, std::to_string(kUser), op, path}, 30s);
  }
  // Lets uid kUser reach the backing tree's files through the mount.
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
  for (const Case& c : {Case{"append", kUser, 06644}, Case{"fallocate", 0, 02666},
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
constexpr std::uint16_t kUserObj = 0x01, kGroupObj = 0x04, kOther = 0x20;

TEST_F(SideEffectTest, AccessAclRewritesTheModeSeenAtOnce) {
  SKIP_UNLESS_ROOT();
  make_file(m("f"), 0, 0644);
  const std::string acl = acl_xattr({{kUserObj, 7}, {kGroupObj, 5}, {kOther, 0}});
  if (::setxattr(m("f").c_str(), "system.posix_acl_access", acl.data(), acl.size(), 0) != 0) {
    if (errno == EOPNOTSUPP) GTEST_SKIP() << "the backing filesystem has no ACLs";
    FAIL() << "setxattr: " << errno_name(errno);
  }
  ASSERT_EQ(backing_mode(b("f")), 0750u);
  EXPECT_EQ(statx_mode(m("f")), 0750u);
}

}  // namespace
}  // namespace norefs::fs::test
