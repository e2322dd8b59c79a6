// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/fs/rename_xattr_test.cc — rename (plain, over a file, NOREPLACE,
// EXCHANGE, whole directories, errors) and extended attributes.  Cached
// bytes must follow the file, not the name.
#include <stdio.h>  // renameat2
#include <sys/xattr.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "fs_test_util.h"

namespace norefs::fs::test {
namespace {

using RenameTest = MountTest;
using XattrTest = MountTest;

int rename2(const std::string& from, const std::string& to, unsigned flags) {
  return ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), flags);
}

bool exists(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

TEST_F(RenameTest, RenameFileCarriesCachedBytes) {
  const std::string data = random_bytes(2 * kPage + 9, 11);
  write_file(m("a"), data);
  EXPECT_BYTES_EQ(data, read_file(m("a")));  // cached under the old name
  ASSERT_SYS(::rename(m("a").c_str(), m("b").c_str()));
  EXPECT_FALSE(exists(m("a")));
  EXPECT_FALSE(exists(b("a")));
  EXPECT_BYTES_EQ(data, read_file(m("b")));
  EXPECT_BYTES_EQ(data, read_file(b("b")));
  // A file created under the old name is a different, empty file.
  write_file(m("a"), "");
  EXPECT_EQ(read_file(m("a")), "");
  EXPECT_BYTES_EQ(data, read_file(m("b")));
}

TEST_F(RenameTest, RenameOverExistingFile) {
  const std::string src = random_bytes(kPage + 1, 12), dst = random_bytes(3 * kPage, 13);
  write_file(m("src"), src);
  write_file(m("dst"), dst);
  EXPECT_BYTES_EQ(src, read_file(m("src")));
  EXPECT_BYTES_EQ(dst, read_file(m("dst")));
  Fd old_dst(m("dst"), O_RDONLY);
  ASSERT_SYS(::rename(m("src").c_str(), m("dst").c_str()));
  EXPECT_FALSE(exists(m("src")));
  EXPECT_BYTES_EQ(src, read_file(m("dst")));
  EXPECT_BYTES_EQ(src, read_file(b("dst")));
  // The replaced file lives on through its descriptor.
  EXPECT_BYTES_EQ(dst, pread_str(old_dst.get(), dst.size() + 10, 0));
}

TEST_F(RenameTest, NoreplaceRefusesAnExistingTarget) {
  write_file(m("a"), "aaa");
  write_file(m("b"), "bbb");
  EXPECT_ERRNO(EEXIST, rename2(m("a"), m("b"), RENAME_NOREPLACE));
  EXPECT_EQ(read_file(m("a")), "aaa");
  EXPECT_EQ(read_file(m("b")), "bbb");
  EXPECT_EQ(read_file(b("a")), "aaa");
  EXPECT_EQ(read_file(b("b")), "bbb");
  ASSERT_SYS(::mkdir(m("d").c_str(), 0755));
  EXPECT_ERRNO(EEXIST, rename2(m("a"), m("d"), RENAME_NOREPLACE));
  ASSERT_SYS(rename2(m("a"), m("c"), RENAME_NOREPLACE));
  EXPECT_EQ(read_file(m("c")), "aaa");
  EXPECT_FALSE(exists(b("a")));
}

TEST_F(RenameTest, ExchangeSwapsFilesAndTheirCaches) {
  const std::string a = random_bytes(kPage + 100, 14), bb = random_bytes(2 * kPage + 3, 15);
  write_file(m("a"), a);
  write_file(m("b"), bb);
  EXPECT_BYTES_EQ(a, read_file(m("a")));
  EXPECT_BYTES_EQ(bb, read_file(m("b")));
  Fd fa(m("a"), O_RDONLY);
  ASSERT_SYS(rename2(m("a"), m("b"), RENAME_EXCHANGE));
  EXPECT_BYTES_EQ(bb, read_file(m("a")));
  EXPECT_BYTES_EQ(a, read_file(m("b")));
  EXPECT_BYTES_EQ(bb, read_file(b("a")));
  EXPECT_BYTES_EQ(a, read_file(b("b")));
  EXPECT_BYTES_EQ(a, pread_str(fa.get(), a.size() + 1, 0)) << "the descriptor follows the file";
  EXPECT_EQ(lstat_or_throw(m("a")).st_size, static_cast<off_t>(bb.size()));
  EXPECT_EQ(lstat_or_throw(m("b")).st_size, static_cast<off_t>(a.size()));
  // A file and a directory.
  ASSERT_SYS(::mkdir(m("d").c_str(), 0755));
  write_file(m("d/child"), "child");
  ASSERT_SYS(rename2(m("a"), m("d"), RENAME_EXCHANGE));
  EXPECT_EQ(read_file(m("a/child")), "child");
  EXPECT_BYTES_EQ(bb, read_file(m("d")));
  EXPECT_TRUE(S_ISDIR(lstat_or_throw(b("a")).st_mode));
  EXPECT_ERRNO(ENOENT, rename2(m("a"), m("missing"), RENAME_EXCHANGE));
}

// A directory renamed: everything below it is reachable under the new name
// and writes land in the right backing file, also through descriptors
// opened before the rename.
TEST_F(RenameTest, RenameDirectoryMovesItsSubtree) {
  ASSERT_SYS(::mkdir(m("d1").c_str(), 0755));
  ASSERT_SYS(::mkdir(m("d1/sub").c_str(), 0755));
  write_file(m("d1/sub/f"), "deep");
  EXPECT_EQ(read_file(m("d1/sub/f")), "deep");
  Fd fd(m("d1/sub/f"), O_RDWR);
  ASSERT_SYS(::rename(m("d1").c_str(), m("d2").c_str()));
  EXPECT_FALSE(exists(m("d1")));
  EXPECT_EQ(read_file(m("d2/sub/f")), "deep");
  pwrite_all(fd.get(), "DEEP", 0);
  EXPECT_EQ(read_file(b("d2/sub/f")), "DEEP");
  EXPECT_EQ(read_file(m("d2/sub/f")), "DEEP");
  write_file(m("d2/sub/g"), "new");
  EXPECT_EQ(read_file(b("d2/sub/g")), "new");
  // Across directories.
  ASSERT_SYS(::mkdir(m("top").c_str(), 0755));
  ASSERT_SYS(::rename(m("d2/sub/f").c_str(), m("top/f").c_str()));
  EXPECT_EQ(read_file(m("top/f")), "DEEP");
  pwrite_all(fd.get(), "MOVED", 0);
  EXPECT_EQ(read_file(b("top/f")), "MOVED");
  EXPECT_FALSE(exists(b("d2/sub/f")));
  // Over an empty directory.
  ASSERT_SYS(::mkdir(m("empty").c_str(), 0755));
  ASSERT_SYS(::rename(m("d2").c_str(), m("empty").c_str()));
  EXPECT_EQ(read_file(m("empty/sub/g")), "new");
}

TEST_F(RenameTest, Errors) {
  ASSERT_SYS(::mkdir(m("d").c_str(), 0755));
  ASSERT_SYS(::mkdir(m("full").c_str(), 0755));
  write_file(m("full/x"), "x");
  write_file(m("f"), "f");
  EXPECT_ERRNO(ENOTEMPTY, ::rename(m("d").c_str(), m("full").c_str()));
  EXPECT_ERRNO(ENOTDIR, ::rename(m("d").c_str(), m("f").c_str()));
  EXPECT_ERRNO(EISDIR, ::rename(m("f").c_str(), m("d").c_str()));
  EXPECT_ERRNO(EINVAL, ::rename(m("full").c_str(), m("full/inside").c_str()));
  EXPECT_ERRNO(ENOENT, ::rename(m("missing").c_str(), m("g").c_str()));
  EXPECT_ERRNO(ENOENT, ::rename(m("f").c_str(), m("nodir/g").c_str()));
  EXPECT_ERRNO(EINVAL, rename2(m("f"), m("g"), RENAME_NOREPLACE | RENAME_EXCHANGE));
  EXPECT_EQ(read_file(m("full/x")), "x");
  EXPECT_EQ(read_file(m("f")), "f");
  EXPECT_TRUE(exists(b("d")));
}

// ── Extended attributes ──

std::set<std::string> list_xattrs(const std::string& path) {
  ssize_t n = ::llistxattr(path.c_str(), nullptr, 0);
  if (n < 0) throw_errno("llistxattr " + path);
  std::string buf(static_cast<std::size_t>(n), '\0');
  n = ::llistxattr(path.c_str(), buf.data(), buf.size());
  if (n < 0) throw_errno("llistxattr " + path);
  std::set<std::string> out;
  for (std::size_t i = 0; i < static_cast<std::size_t>(n);) {
    std::string name(buf.c_str() + i);
    i += name.size() + 1;
    if (name.rfind("user.", 0) == 0) out.insert(name);  // security.* may be there too
  }
  return out;
}

std::string get_xattr(const std::string& path, const std::string& name) {
  ssize_t n = ::lgetxattr(path.c_str(), name.c_str(), nullptr, 0);
  if (n < 0) throw_errno("lgetxattr " + name);
  std::string v(static_cast<std::size_t>(n), '\0');
  ssize_t got = ::lgetxattr(path.c_str(), name.c_str(), v.data(), v.size());
  if (got < 0) throw_errno("lgetxattr " + name);
  v.resize(static_cast<std::size_t>(got));
  return v;
}

TEST_F(XattrTest, SetGetListRemove) {
  write_file(m("f"), "x");
  const std::string binary("a\0b\0\xff", 5);
  const std::string big = random_bytes(3000, 16);
  ASSERT_SYS(::setxattr(m("f").c_str(), "user.a", "v1", 2, XATTR_CREATE));
  EXPECT_ERRNO(EEXIST, ::setxattr(m("f").c_str(), "user.a", "v2", 2, XATTR_CREATE));
  EXPECT_ERRNO(ENODATA, ::setxattr(m("f").c_str(), "user.nope", "v", 1, XATTR_REPLACE));
  ASSERT_SYS(::setxattr(m("f").c_str(), "user.bin", binary.data(), binary.size(), 0));
  ASSERT_SYS(::setxattr(m("f").c_str(), "user.empty", "", 0, 0));
  ASSERT_SYS(::setxattr(m("f").c_str(), "user.big", big.data(), big.size(), 0));
  EXPECT_EQ(get_xattr(m("f"), "user.a"), "v1");
  EXPECT_EQ(get_xattr(m("f"), "user.bin"), binary);
  EXPECT_EQ(get_xattr(m("f"), "user.empty"), "");
  EXPECT_EQ(get_xattr(m("f"), "user.big"), big);
  EXPECT_EQ(::getxattr(m("f").c_str(), "user.big", nullptr, 0), 3000);  // size query
  char small[2];
  EXPECT_ERRNO(ERANGE, ::getxattr(m("f").c_str(), "user.a", small, 1));
  EXPECT_ERRNO(ENODATA, ::getxattr(m("f").c_str(), "user.missing", small, sizeof small));
  ASSERT_SYS(::setxattr(m("f").c_str(), "user.a", "replaced", 8, XATTR_REPLACE));
  EXPECT_EQ(get_xattr(m("f"), "user.a"), "replaced");
  // The backing file holds the same attributes.
  EXPECT_EQ(get_xattr(b("f"), "user.a"), "replaced");
  EXPECT_EQ(get_xattr(b("f"), "user.bin"), binary);
  const std::set<std::string> want{"user.a", "user.bin", "user.empty", "user.big"};
  EXPECT_EQ(list_xattrs(m("f")), want);
  EXPECT_EQ(list_xattrs(b("f")), want);
  // listxattr with a too-small buffer.
  EXPECT_ERRNO(ERANGE, ::listxattr(m("f").c_str(), small, 1));
  ASSERT_SYS(::removexattr(m("f").c_str(), "user.a"));
  EXPECT_ERRNO(ENODATA, ::getxattr(m("f").c_str(), "user.a", small, sizeof small));
  EXPECT_ERRNO(ENODATA, ::removexattr(m("f").c_str(), "user.a"));
  EXPECT_ERRNO(ENODATA, ::getxattr(b("f").c_str(), "user.a", small, sizeof small));
  EXPECT_EQ(list_xattrs(m("f")), (std::set<std::string>{"user.bin", "user.empty", "user.big"}));
  EXPECT_EQ(read_file(m("f")), "x");
}

TEST_F(XattrTest, OnDirectoriesAndThroughDescriptors) {
  ASSERT_SYS(::mkdir(m("d").c_str(), 0755));
  ASSERT_SYS(::setxattr(m("d").c_str(), "user.dir", "yes", 3, 0));
  EXPECT_EQ(get_xattr(m("d"), "user.dir"), "yes");
  EXPECT_EQ(get_xattr(b("d"), "user.dir"), "yes");
  write_file(m("f"), "x");
  Fd fd(m("f"), O_RDONLY);
  ASSERT_SYS(::fsetxattr(fd.get(), "user.fd", "via fd", 6, 0));
  char buf[16];
  ssize_t n = ::fgetxattr(fd.get(), "user.fd", buf, sizeof buf);
  ASSERT_EQ(n, 6);
  EXPECT_EQ(std::string(buf, 6), "via fd");
  EXPECT_EQ(get_xattr(b("f"), "user.fd"), "via fd");
  ASSERT_SYS(::fremovexattr(fd.get(), "user.fd"));
  EXPECT_ERRNO(ENODATA, ::fgetxattr(fd.get(), "user.fd", buf, sizeof buf));
  EXPECT_ERRNO(ENOENT, ::getxattr(m("missing").c_str(), "user.x", buf, sizeof buf));
  // Set on the backing file behind the daemon's back: seen through the mount.
  ASSERT_SYS(::setxattr(b("f").c_str(), "user.outside", "o", 1, 0));
  EXPECT_EQ(get_xattr(m("f"), "user.outside"), "o");
}

// An attribute set through a symlink with the l* calls belongs to the link
// (or is refused): it never lands on the target.
TEST_F(XattrTest, SymlinkAttributesNeverReachTheTarget) {
  SKIP_UNLESS_ROOT();  // trusted.*: user.* is not allowed on links at all
  write_file(m("target"), "t");
  ASSERT_SYS(::symlink("target", m("l").c_str()));
  char buf[16];
  EXPECT_ERRNO(EPERM, ::lsetxattr(m("l").c_str(), "user.x", "v", 1, 0));
  int rc = ::lsetxattr(m("l").c_str(), "trusted.norefs", "link", 4, 0);
  if (rc == 0) {
    ssize_t n = ::lgetxattr(b("l").c_str(), "trusted.norefs", buf, sizeof buf);
    EXPECT_EQ(n, 4) << "set through the mount, missing on the backing link";
    n = ::lgetxattr(m("l").c_str(), "trusted.norefs", buf, sizeof buf);
    EXPECT_EQ(n, 4);
  } else {
    EXPECT_TRUE(errno == EPERM || errno == ENOTSUP) << errno_name(errno);
  }
  EXPECT_ERRNO(ENODATA, ::lgetxattr(b("target").c_str(), "trusted.norefs", buf, sizeof buf));
  EXPECT_ERRNO(ENODATA, ::getxattr(m("target").c_str(), "trusted.norefs", buf, sizeof buf));
  if (rc == 0) {
    ASSERT_SYS(::lremovexattr(m("l").c_str(), "trusted.norefs"));
    EXPECT_ERRNO(ENODATA, ::lgetxattr(b("l").c_str(), "trusted.norefs", buf, sizeof buf));
  }
}

}  // namespace
}  // namespace norefs::fs::test
