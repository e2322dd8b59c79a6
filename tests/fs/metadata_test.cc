// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/fs/metadata_test.cc — lookup/getattr, setattr, open/create flags,
// readdir(plus), mkdir/rmdir, unlink, mknod, symlink/readlink, link, statfs,
// access.  The model for every attribute is the backing file's own lstat().
#include <dirent.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fs_test_util.h"

namespace norefs::fs::test {
namespace {

using MetadataTest = MountTest;

std::string octal(mode_t m) {
  char b[16];
  std::snprintf(b, sizeof b, "0%o", static_cast<unsigned>(m));
  return b;
}

bool same_time(const timespec& a, const timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}
std::string str(const timespec& t) {
  return std::to_string(t.tv_sec) + "." + std::to_string(t.tv_nsec);
}

// The mount's view of `rel` equals the backing file's lstat, field by field.
void expect_same_attrs(const std::string& mnt_path, const std::string& backing_path,
                       bool atime = true) {
  SCOPED_TRACE(mnt_path);
  struct stat ms = lstat_or_throw(mnt_path), bs = lstat_or_throw(backing_path);
  EXPECT_EQ(octal(ms.st_mode), octal(bs.st_mode));
  EXPECT_EQ(ms.st_size, bs.st_size);
  EXPECT_EQ(ms.st_nlink, bs.st_nlink);
  EXPECT_EQ(ms.st_uid, bs.st_uid);
  EXPECT_EQ(ms.st_gid, bs.st_gid);
  EXPECT_EQ(ms.st_rdev, bs.st_rdev);
  EXPECT_EQ(ms.st_blocks, bs.st_blocks);
  EXPECT_TRUE(same_time(ms.st_mtim, bs.st_mtim))
      << "mtime " << str(ms.st_mtim) << " vs " << str(bs.st_mtim);
  EXPECT_TRUE(same_time(ms.st_ctim, bs.st_ctim))
      << "ctime " << str(ms.st_ctim) << " vs " << str(bs.st_ctim);
  if (atime) {
    EXPECT_TRUE(same_time(ms.st_atim, bs.st_atim))
        << "atime " << str(ms.st_atim) << " vs " << str(bs.st_atim);
  }
}

timespec now_realtime() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return t;
}
double secs(const timespec& t) { return static_cast<double>(t.tv_sec) + t.tv_nsec * 1e-9; }

// ── lookup / getattr ──

TEST_F(MetadataTest, GetattrMatchesBackingForEveryType) {
  // Made in the backing dir behind the daemon's back: first lookups.
  write_file(b("empty"), "");
  write_file(b("one"), "x");
  write_file(b("page_plus_one"), random_bytes(kPage + 1, 1));
  write_file(b("m0751"), "x", 0751);
  ASSERT_SYS(::chmod(b("m0751").c_str(), 0751));
  write_file(b("suid"), "x");
  ASSERT_SYS(::chmod(b("suid").c_str(), 04755));
  write_file(b("sparse5g"), "");
  ASSERT_SYS(::truncate(b("sparse5g").c_str(), 5LL << 30));
  ASSERT_SYS(::mkdir(b("dir").c_str(), 0710));
  ASSERT_SYS(::mkdir(b("dir/sub1").c_str(), 0755));
  ASSERT_SYS(::mkdir(b("dir/sub2").c_str(), 0755));
  ASSERT_SYS(::symlink("some/where", b("link").c_str()));
  ASSERT_SYS(::mkfifo(b("fifo").c_str(), 0640));
  write_file(b("old"), "old");
  timespec old[2] = {{1000000000, 123456789}, {1100000000, 987654321}};
  ASSERT_SYS(::utimensat(AT_FDCWD, b("old").c_str(), old, 0));
  if (::geteuid() == 0) {
    write_file(b("owned"), "x");
    ASSERT_SYS(::chown(b("owned").c_str(), 1234, 5678));
    ASSERT_SYS(::mknod(b("chardev").c_str(), S_IFCHR | 0600, makedev(1, 3)));
  }
  for (const char* n : {"empty", "one", "page_plus_one", "m0751", "suid", "sparse5g", "dir",
                        "dir/sub1", "link", "fifo", "old", "owned", "chardev"}) {
    if (::geteuid() != 0 && (std::string(n) == "owned" || std::string(n) == "chardev")) continue;
    expect_same_attrs(m(n), b(n));
  }
  EXPECT_EQ(lstat_or_throw(m("sparse5g")).st_size, 5LL << 30);
  EXPECT_EQ(lstat_or_throw(m("dir")).st_nlink, 4u);
  EXPECT_TRUE(S_ISLNK(lstat_or_throw(m("link")).st_mode));
  EXPECT_TRUE(S_ISFIFO(lstat_or_throw(m("fifo")).st_mode));
  EXPECT_TRUE(same_time(lstat_or_throw(m("old")).st_mtim, old[1]));
  // The root of the mount is the backing dir.  Its attributes were cached
  // (coherence_timeout) before the changes above, made behind the daemon's
  // back; a change through the mount invalidates them.
  ASSERT_SYS(::mkdir(m("via_mount").c_str(), 0755));
  expect_same_attrs(m(), b(), false);
  struct stat st {};
  EXPECT_ERRNO(ENOENT, ::lstat(m("missing").c_str(), &st));
  EXPECT_ERRNO(ENOENT, ::lstat(m("dir/missing").c_str(), &st));
  EXPECT_ERRNO(ENOTDIR, ::lstat(m("one/x").c_str(), &st));
  EXPECT_ERRNO(ENAMETOOLONG, ::lstat(m(std::string(256, 'n')).c_str(), &st));
}

TEST_F(MetadataTest, GetattrThroughOpenFd) {
  write_file(m("f"), random_bytes(10000, 2));
  Fd fd(m("f"), O_RDWR);
  struct stat fs {};
  ASSERT_SYS(::fstat(fd.get(), &fs));
  EXPECT_EQ(fs.st_size, 10000);
  pwrite_all(fd.get(), "tail", 20000);  // grows the file
  ASSERT_SYS(::fstat(fd.get(), &fs));
  EXPECT_EQ(fs.st_size, 20004);
  EXPECT_EQ(lstat_or_throw(b("f")).st_size, 20004);
  expect_same_attrs(m("f"), b("f"), false);
}

// ── setattr ──

TEST_F(MetadataTest, Chmod) {
  write_file(m("f"), "data");
  ASSERT_SYS(::mkdir(m("d").c_str(), 0755));
  for (mode_t mode : {0600, 0755, 0000, 04755, 02711, 0644}) {
    ASSERT_SYS(::chmod(m("f").c_str(), mode));
    EXPECT_EQ(octal(lstat_or_throw(m("f")).st_mode), octal(S_IFREG | mode));
    EXPECT_EQ(octal(lstat_or_throw(b("f")).st_mode), octal(S_IFREG | mode));
  }
  ASSERT_SYS(::chmod(m("d").c_str(), 01777));
  EXPECT_EQ(octal(lstat_or_throw(b("d")).st_mode), octal(S_IFDIR | 01777));
  expect_same_attrs(m("d"), b("d"), false);
  // fchmod through an open descriptor.
  Fd fd(m("f"), O_RDONLY);
  ASSERT_SYS(::fchmod(fd.get(), 0640));
  EXPECT_EQ(octal(lstat_or_throw(b("f")).st_mode), octal(S_IFREG | 0640));
  EXPECT_EQ(read_file(m("f")), "data");
}

TEST_F(MetadataTest, ChownAsRoot) {
  SKIP_UNLESS_ROOT();
  write_file(m("f"), "data");
  ASSERT_SYS(::symlink("f", m("l").c_str()));
  ASSERT_SYS(::chown(m("f").c_str(), 1234, 5678));
  struct stat st = lstat_or_throw(b("f"));
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 5678u);
  ASSERT_SYS(::chown(m("f").c_str(), static_cast<uid_t>(-1), 42));  // group only
  st = lstat_or_throw(b("f"));
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 42u);
  expect_same_attrs(m("f"), b("f"), false);
  // lchown changes the link, not its target.
  ASSERT_SYS(::lchown(m("l").c_str(), 777, 888));
  st = lstat_or_throw(b("l"));
  EXPECT_EQ(st.st_uid, 777u);
  EXPECT_EQ(st.st_gid, 888u);
  st = lstat_or_throw(b("f"));
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 42u);
  expect_same_attrs(m("l"), b("l"), false);
}

TEST_F(MetadataTest, Utimensat) {
  write_file(m("f"), "data");
  timespec t[2] = {{1000000000, 123456789}, {1200000000, 987654321}};
  ASSERT_SYS(::utimensat(AT_FDCWD, m("f").c_str(), t, 0));
  struct stat ms = lstat_or_throw(m("f")), bs = lstat_or_throw(b("f"));
  EXPECT_TRUE(same_time(ms.st_atim, t[0])) << str(ms.st_atim);
  EXPECT_TRUE(same_time(ms.st_mtim, t[1])) << str(ms.st_mtim);
  EXPECT_TRUE(same_time(bs.st_atim, t[0])) << str(bs.st_atim);
  EXPECT_TRUE(same_time(bs.st_mtim, t[1])) << str(bs.st_mtim);

  // UTIME_OMIT keeps atime; mtime set.
  timespec t2[2] = {{0, UTIME_OMIT}, {1300000000, 5}};
  ASSERT_SYS(::utimensat(AT_FDCWD, m("f").c_str(), t2, 0));
  bs = lstat_or_throw(b("f"));
  EXPECT_TRUE(same_time(bs.st_atim, t[0])) << str(bs.st_atim);
  EXPECT_TRUE(same_time(bs.st_mtim, t2[1])) << str(bs.st_mtim);
  expect_same_attrs(m("f"), b("f"));

  // UTIME_NOW for mtime, UTIME_OMIT for atime.  The backing fs stamps
  // with its (coarse) clock: allow a tick either side.
  timespec before = now_realtime();
  timespec t3[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
  ASSERT_SYS(::utimensat(AT_FDCWD, m("f").c_str(), t3, 0));
  timespec after = now_realtime();
  bs = lstat_or_throw(b("f"));
  EXPECT_TRUE(same_time(bs.st_atim, t[0])) << str(bs.st_atim);
  EXPECT_GE(secs(bs.st_mtim), secs(before) - 0.05) << str(bs.st_mtim);
  EXPECT_LE(secs(bs.st_mtim), secs(after) + 0.05) << str(bs.st_mtim);
  expect_same_attrs(m("f"), b("f"));

  // Both UTIME_NOW (futimens through a descriptor).
  Fd fd(m("f"), O_RDWR);
  timespec t4[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
  before = now_realtime();
  ASSERT_SYS(::futimens(fd.get(), t4));
  after = now_realtime();
  bs = lstat_or_throw(b("f"));
  EXPECT_GE(secs(bs.st_atim), secs(before) - 0.05) << str(bs.st_atim);
  EXPECT_LE(secs(bs.st_atim), secs(after) + 0.05) << str(bs.st_atim);
  EXPECT_GE(secs(bs.st_mtim), secs(before) - 0.05) << str(bs.st_mtim);
  expect_same_attrs(m("f"), b("f"));
}

TEST_F(MetadataTest, UtimensatOnSymlinkDoesNotFollow) {
  write_file(m("target"), "data");
  ASSERT_SYS(::symlink("target", m("l").c_str()));
  struct stat target_before = lstat_or_throw(b("target"));
  timespec t[2] = {{1000000000, 1}, {1000000000, 2}};
  int rc = ::utimensat(AT_FDCWD, m("l").c_str(), t, AT_SYMLINK_NOFOLLOW);
  if (rc != 0) {
    // Refusing is acceptable; following the link is not.
    EXPECT_TRUE(errno == EPERM || errno == EOPNOTSUPP || errno == ENOTSUP) << errno_name(errno);
  } else {
    EXPECT_TRUE(same_time(lstat_or_throw(b("l")).st_mtim, t[1]));
  }
  struct stat target_after = lstat_or_throw(b("target"));
  EXPECT_TRUE(same_time(target_after.st_mtim, target_before.st_mtim))
      << "utimensat(AT_SYMLINK_NOFOLLOW) on a link changed its target";
}

// Truncate down then up must show zeros past the old end, never the bytes
// that were cached there before.
TEST_F(MetadataTest, TruncateDownAndUp) {
  const std::string data = random_bytes(3 * kPage + 500, 3);
  write_file(m("f"), data);
  EXPECT_BYTES_EQ(data, read_file(m("f")));  // cached now
  std::string model = data;
  for (off_t size : {off_t(kPage + 100), off_t(kPage), off_t(7), off_t(0)}) {
    ASSERT_SYS(::truncate(m("f").c_str(), size));
    model.resize(size);
    EXPECT_EQ(lstat_or_throw(m("f")).st_size, size);
    EXPECT_BYTES_EQ(model, read_file(m("f")));
    EXPECT_BYTES_EQ(model, read_file(b("f")));
    ASSERT_SYS(::truncate(m("f").c_str(), 3 * kPage + 500));
    model.resize(3 * kPage + 500, '\0');
    EXPECT_BYTES_EQ(model, read_file(m("f")));
    EXPECT_BYTES_EQ(model, read_file(b("f")));
    write_file(m("f"), data);
    model = data;
    EXPECT_BYTES_EQ(model, read_file(m("f")));
  }
  // ftruncate through an open descriptor, read through the same one.
  Fd fd(m("f"), O_RDWR);
  EXPECT_BYTES_EQ(data, pread_str(fd.get(), data.size(), 0));
  ASSERT_SYS(::ftruncate(fd.get(), 1000));
  EXPECT_BYTES_EQ(data.substr(0, 1000), pread_str(fd.get(), data.size(), 0));
  ASSERT_SYS(::ftruncate(fd.get(), 2 * kPage + 1));
  model = data.substr(0, 1000);
  model.resize(2 * kPage + 1, '\0');
  EXPECT_BYTES_EQ(model, pread_str(fd.get(), data.size(), 0));
  EXPECT_BYTES_EQ(model, read_file(b("f")));
  // Truncating up far: a sparse tail.
  ASSERT_SYS(::ftruncate(fd.get(), 64 << 20));
  EXPECT_EQ(pread_str(fd.get(), 10, (64 << 20) - 10), std::string(10, '\0'));
  EXPECT_EQ(lstat_or_throw(b("f")).st_size, 64 << 20);
}

// ── open / create ──

TEST_F(MetadataTest, CreateExclusive) {
  write_file(m("f"), "data");
  ASSERT_SYS(::mkdir(m("d").c_str(), 0755));
  ASSERT_SYS(::symlink("dangling-target", m("dangling").c_str()));
  EXPECT_ERRNO(EEXIST, ::open(m("f").c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644));
  EXPECT_ERRNO(EEXIST, ::open(m("d").c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644));
  EXPECT_ERRNO(EEXIST,
               ::open(m("dangling").c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644));
  EXPECT_EQ(::access(b("dangling-target").c_str(), F_OK), -1) << "O_EXCL followed the link";
  EXPECT_EQ(read_file(m("f")), "data");
  {
    Fd fd(m("new"), O_CREAT | O_EXCL | O_RDWR, 0600);
    pwrite_all(fd.get(), "fresh", 0);
    EXPECT_EQ(pread_str(fd.get(), 100, 0), "fresh");
  }
  EXPECT_EQ(read_file(b("new")), "fresh");
  EXPECT_EQ(octal(lstat_or_throw(b("new")).st_mode & 07777), octal(0600));
  // O_CREAT without O_EXCL on an existing file opens it, mode untouched.
  ASSERT_SYS(::chmod(m("f").c_str(), 0640));
  { Fd fd(m("f"), O_CREAT | O_RDWR, 0777); }
  EXPECT_EQ(octal(lstat_or_throw(b("f")).st_mode & 07777), octal(0640));
  EXPECT_EQ(read_file(m("f")), "data");
}

TEST_F(MetadataTest, CreateModeFollowsCallersUmask) {
  mode_t old = ::umask(0);
  { Fd fd(m("f777"), O_CREAT | O_EXCL | O_WRONLY, 0777); }
  ASSERT_SYS(::mkdir(m("d777").c_str(), 0777));
  ::umask(027);
  { Fd fd(m("f027"), O_CREAT | O_EXCL | O_WRONLY, 0777); }
  ASSERT_SYS(::mkdir(m("d027").c_str(), 0777));
  ::umask(old);
  EXPECT_EQ(octal(lstat_or_throw(b("f777")).st_mode & 07777), octal(0777));
  EXPECT_EQ(octal(lstat_or_throw(b("d777")).st_mode & 07777), octal(0777));
  EXPECT_EQ(octal(lstat_or_throw(b("f027")).st_mode & 07777), octal(0750));
  EXPECT_EQ(octal(lstat_or_throw(b("d027")).st_mode & 07777), octal(0750));
  for (const char* n : {"f777", "d777", "f027", "d027"}) expect_same_attrs(m(n), b(n), false);
}

TEST_F(MetadataTest, OpenTruncDropsCachedBytes) {
  const std::string data = random_bytes(2 * kPage + 10, 4);
  write_file(m("f"), data);
  EXPECT_BYTES_EQ(data, read_file(m("f")));  // cached
  {
    Fd fd(m("f"), O_RDWR | O_TRUNC);
    EXPECT_EQ(pread_str(fd.get(), 100, 0), "");
    struct stat st {};
    ASSERT_SYS(::fstat(fd.get(), &st));
    EXPECT_EQ(st.st_size, 0);
    pwrite_all(fd.get(), "short", 0);
    EXPECT_EQ(pread_str(fd.get(), data.size(), 0), "short");
  }
  EXPECT_EQ(read_file(m("f")), "short");
  EXPECT_EQ(read_file(b("f")), "short");
  // O_RDONLY|O_TRUNC is unspecified by POSIX (Linux truncates): only check
  // that the mount reads what the backing file holds, cached bytes or not.
  EXPECT_EQ(read_file(m("f")), "short");
  { Fd ro(m("f"), O_RDONLY | O_TRUNC); }
  EXPECT_EQ(read_file(m("f")), read_file(b("f")));
}

TEST_F(MetadataTest, OpenAppend) {
  write_file(m("f"), "start");
  std::string model = "start";
  {
    Fd fd(m("f"), O_WRONLY | O_APPEND);
    ASSERT_EQ(::write(fd.get(), "-one", 4), 4);
    ASSERT_EQ(::write(fd.get(), "-two", 4), 4);
    // pwrite on an O_APPEND descriptor appends on Linux.
    ASSERT_EQ(::pwrite(fd.get(), "-three", 6, 0), 6);
    model += "-one-two-three";
  }
  EXPECT_EQ(read_file(m("f")), model);
  EXPECT_EQ(read_file(b("f")), model);
  // An append of more than a page across page boundaries.
  const std::string big = random_bytes(2 * kPage + 3, 5);
  {
    Fd fd(m("f"), O_RDWR | O_APPEND);
    ASSERT_EQ(::write(fd.get(), big.data(), big.size()), static_cast<ssize_t>(big.size()));
    model += big;
    EXPECT_BYTES_EQ(model, pread_str(fd.get(), model.size() + 1, 0));
  }
  EXPECT_BYTES_EQ(model, read_file(b("f")));
}

TEST_F(MetadataTest, OpenErrors) {
  write_file(m("f"), "x");
  ASSERT_SYS(::mkdir(m("d").c_str(), 0755));
  EXPECT_ERRNO(ENOENT, ::open(m("missing").c_str(), O_RDONLY | O_CLOEXEC));
  EXPECT_ERRNO(ENOENT, ::open(m("nodir/f").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
  EXPECT_ERRNO(EISDIR, ::open(m("d").c_str(), O_WRONLY | O_CLOEXEC));
  EXPECT_ERRNO(ENOTDIR, ::open(m("f").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  EXPECT_ERRNO(ENOTDIR, ::open(m("f/x").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
}

// ── readdir / readdirplus ──

struct Entry {
  unsigned char type;
  ino_t ino;
};

std::map<std::string, Entry> list_dir(const std::string& path) {
  std::map<std::string, Entry> out;
  DIR* d = ::opendir(path.c_str());
  if (!d) throw_errno("opendir " + path);
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    if (!out.emplace(e->d_name, Entry{e->d_type, e->d_ino}).second) {
      ADD_FAILURE() << "readdir returned " << e->d_name << " twice";
    }
  }
  int err = errno;
  ::closedir(d);
  if (err) throw std::system_error(err, std::generic_category(), "readdir " + path);
  return out;
}

TEST_F(MetadataTest, ReaddirManyEntriesAndStatEach) {
  ASSERT_SYS(::mkdir(m("big").c_str(), 0755));
  std::set<std::string> want{".", ".."};
  for (int i = 0; i < 1000; i++) {
    // Names of every length class, up to NAME_MAX.
    std::string name = "f" + std::to_string(i);
    if (i % 97 == 0) name += std::string(200 - name.size() % 50, 'x');
    if (i == 999) name = std::string(255, 'z');
    write_file(m("big/" + name), std::string(static_cast<std::size_t>(i % 50), 'a'));
    want.insert(name);
  }
  ASSERT_SYS(::mkdir(m("big/subdir").c_str(), 0700));
  ASSERT_SYS(::symlink("f1", m("big/link").c_str()));
  ASSERT_SYS(::mkfifo(m("big/fifo").c_str(), 0600));
  want.insert({"subdir", "link", "fifo"});

  auto got = list_dir(m("big"));
  std::set<std::string> names;
  for (const auto& [n, e] : got) names.insert(n);
  EXPECT_EQ(names.size(), want.size());
  EXPECT_TRUE(names == want) << "readdir names differ from the created set";
  EXPECT_EQ(got["subdir"].type, DT_DIR);
  EXPECT_EQ(got["link"].type, DT_LNK);
  EXPECT_EQ(got["fifo"].type, DT_FIFO);
  EXPECT_EQ(got["f1"].type, DT_REG);
  EXPECT_EQ(got["."].type, DT_DIR);
  // The backing dir agrees.
  std::set<std::string> bnames;
  for (const auto& [n, e] : list_dir(b("big"))) bnames.insert(n);
  EXPECT_TRUE(bnames == want);

  // ls -l: stat every entry (served from readdirplus where the kernel used it).
  for (const auto& n : names) {
    if (n == "." || n == "..") continue;
    struct stat ms = lstat_or_throw(m("big/" + n)), bs = lstat_or_throw(b("big/" + n));
    EXPECT_EQ(ms.st_mode, bs.st_mode) << n;
    EXPECT_EQ(ms.st_size, bs.st_size) << n;
    EXPECT_EQ(ms.st_nlink, bs.st_nlink) << n;
    EXPECT_TRUE(same_time(ms.st_mtim, bs.st_mtim)) << n;
  }
  EXPECT_EQ(lstat_or_throw(m("big")).st_nlink, 3u);
}

// telldir/seekdir: resuming at a saved position lists the same rest.
TEST_F(MetadataTest, ReaddirSeekResumes) {
  ASSERT_SYS(::mkdir(m("d").c_str(), 0755));
  for (int i = 0; i < 300; i++) write_file(m("d/entry-" + std::to_string(i)), "");
  DIR* d = ::opendir(m("d").c_str());
  ASSERT_NE(d, nullptr) << errno_name(errno);
  std::vector<std::string> first, rest, again;
  for (int i = 0; i < 150; i++) {
    dirent* e = ::readdir(d);
    ASSERT_NE(e, nullptr);
    first.push_back(e->d_name);
  }
  long pos = ::telldir(d);
  while (dirent* e = ::readdir(d)) rest.push_back(e->d_name);
  ::seekdir(d, pos);
  while (dirent* e = ::readdir(d)) again.push_back(e->d_name);
  ::rewinddir(d);
  std::size_t total = 0;
  while (::readdir(d)) total++;
  ::closedir(d);
  EXPECT_EQ(first.size() + rest.size(), 302u);
  EXPECT_EQ(rest, again);
  EXPECT_EQ(total, 302u);
}

TEST_F(MetadataTest, ReaddirEmptyAndFsyncdir) {
  ASSERT_SYS(::mkdir(m("e").c_str(), 0755));
  auto got = list_dir(m("e"));
  EXPECT_EQ(got.size(), 2u);
  EXPECT_TRUE(got.count(".") && got.count(".."));
  Fd dfd(m("e"), O_RDONLY | O_DIRECTORY);
  EXPECT_SYS(::fsync(dfd.get()));
  EXPECT_SYS(::fdatasync(dfd.get()));
  Fd rfd(m(), O_RDONLY | O_DIRECTORY);
  EXPECT_SYS(::fsync(rfd.get()));
}

// Entries created and removed during a listing may or may not show up; every
// other entry appears exactly once (POSIX readdir).
TEST_F(MetadataTest, ReaddirWhileTheDirectoryChanges) {
  ASSERT_SYS(::mkdir(m("d").c_str(), 0755));
  std::set<std::string> keep;
  for (int i = 0; i < 300; i++) {
    keep.insert("keep-" + std::to_string(i));
    write_file(m("d/keep-" + std::to_string(i)), "");
  }
  std::atomic<bool> stop{false};
  std::string churn_error;
  std::thread churn([&] {
    try {
      for (int i = 0; !stop; i++) {
        write_file(m("d/churn-" + std::to_string(i)), "");
        if (i >= 50) must(::unlink(m("d/churn-" + std::to_string(i - 50)).c_str()), "unlink");
      }
    } catch (const std::exception& e) {
      churn_error = e.what();
    }
  });
  for (int round = 0; round < 15; round++) {
    std::map<std::string, int> count;
    DIR* d = ::opendir(m("d").c_str());
    ASSERT_NE(d, nullptr);
    while (dirent* e = ::readdir(d)) count[e->d_name]++;
    ::closedir(d);
    for (const auto& k : keep) EXPECT_EQ(count[k], 1) << k << " in listing " << round;
    for (const auto& [name, n] : count) EXPECT_EQ(n, 1) << name << " listed " << n << " times";
    if (HasFailure()) break;
  }
  stop = true;
  churn.join();
  EXPECT_EQ(churn_error, "");
}

// Names with spaces, newlines, backslashes, UTF-8, leading dashes and dots.
TEST_F(MetadataTest, UnusualNames) {
  const std::vector<std::string> names{"with space",
                                       "new\nline",
                                       "tab\there",
                                       "back\\slash",
                                       "\xc3\xbc"
                                       "n\xc3\xaf"
                                       "c\xc3\xb6"
                                       "d\xc3\xa9-\xe5\x90\x8d",
                                       "-dash",
                                       ".hidden",
                                       "...",
                                       "a:b=c",
                                       "%s%n",
                                       "*?[x]",
                                       std::string(255, 'n')};
  for (const auto& n : names) {
    SCOPED_TRACE(n);
    write_file(m(n), "content of " + n);
    EXPECT_EQ(read_file(b(n)), "content of " + n);
    EXPECT_EQ(read_file(m(n)), "content of " + n);
    expect_same_attrs(m(n), b(n), false);
  }
  auto listed = list_dir(m());
  for (const auto& n : names) EXPECT_EQ(listed.count(n), 1u) << n;
  for (const auto& n : names) {
    if (n.size() > 200) continue;
    ASSERT_SYS(::rename(m(n).c_str(), m(n + ".2").c_str()));
    EXPECT_EQ(read_file(b(n + ".2")), "content of " + n);
    ASSERT_SYS(::unlink(m(n + ".2").c_str()));
  }
  ASSERT_SYS(::mkdir(m("dir with space").c_str(), 0755));
  write_file(m("dir with space/new\nline"), "nested");
  EXPECT_EQ(read_file(b("dir with space/new\nline")), "nested");
}

// ── mkdir / rmdir / unlink ──

TEST_F(MetadataTest, MkdirRmdir) {
  ASSERT_SYS(::mkdir(m("d").c_str(), 0750));
  EXPECT_EQ(octal(lstat_or_throw(b("d")).st_mode), octal(S_IFDIR | 0750));
  EXPECT_ERRNO(EEXIST, ::mkdir(m("d").c_str(), 0755));
  EXPECT_ERRNO(ENOENT, ::mkdir(m("no/d").c_str(), 0755));
  write_file(m("d/f"), "x");
  EXPECT_ERRNO(ENOTEMPTY, ::rmdir(m("d").c_str()));
  EXPECT_ERRNO(ENOTDIR, ::rmdir(m("d/f").c_str()));
  EXPECT_ERRNO(EISDIR, ::unlink(m("d").c_str()));
  EXPECT_ERRNO(ENOENT, ::rmdir(m("missing").c_str()));
  ASSERT_SYS(::unlink(m("d/f").c_str()));
  ASSERT_SYS(::rmdir(m("d").c_str()));
  struct stat st {};
  EXPECT_ERRNO(ENOENT, ::lstat(m("d").c_str(), &st));
  EXPECT_ERRNO(ENOENT, ::lstat(b("d").c_str(), &st));
  // A new directory of the same name is empty.
  ASSERT_SYS(::mkdir(m("d").c_str(), 0755));
  EXPECT_EQ(list_dir(m("d")).size(), 2u);
}

TEST_F(MetadataTest, UnlinkedOpenFileStaysReadable) {
  const std::string data = random_bytes(3 * kPage + 77, 6);
  write_file(m("f"), data);
  Fd fd(m("f"), O_RDWR);
  EXPECT_BYTES_EQ(data, pread_str(fd.get(), data.size(), 0));  // partly cached
  ASSERT_SYS(::unlink(m("f").c_str()));
  struct stat st {};
  EXPECT_ERRNO(ENOENT, ::lstat(m("f").c_str(), &st));
  EXPECT_ERRNO(ENOENT, ::lstat(b("f").c_str(), &st));
  EXPECT_EQ(list_dir(m()).count("f"), 0u);
  // Same bytes through the descriptor, cached or not.
  EXPECT_BYTES_EQ(data, pread_str(fd.get(), data.size() + 100, 0));
  EXPECT_BYTES_EQ(data.substr(kPage + 5, 3000), pread_str(fd.get(), 3000, kPage + 5));
  ASSERT_SYS(::fstat(fd.get(), &st));
  EXPECT_EQ(st.st_nlink, 0u);
  EXPECT_EQ(st.st_size, static_cast<off_t>(data.size()));
  // A new file of the same name is another file: its bytes are not the
  // old one's, and the old descriptor still reads the old bytes.
  write_file(m("f"), "new file");
  EXPECT_EQ(read_file(m("f")), "new file");
  EXPECT_BYTES_EQ(data, pread_str(fd.get(), data.size(), 0));
  // Writes through the unlinked file's descriptor still work.
  pwrite_all(fd.get(), "XYZ", 10);
  std::string model = data;
  model_write(model, "XYZ", 10);
  EXPECT_BYTES_EQ(model, pread_str(fd.get(), model.size(), 0));
  EXPECT_EQ(read_file(m("f")), "new file");
  EXPECT_EQ(fd.close(), 0);
}

// ── mknod / symlink / link ──

TEST_F(MetadataTest, MknodFifoAndRegular) {
  ASSERT_SYS(::mkfifo(m("fifo").c_str(), 0640));
  EXPECT_TRUE(S_ISFIFO(lstat_or_throw(b("fifo")).st_mode));
  expect_same_attrs(m("fifo"), b("fifo"), false);
  {
    // The fifo works (the kernel serves it; the lookup came from the daemon).
    Fd r(m("fifo"), O_RDONLY | O_NONBLOCK);
    Fd w(m("fifo"), O_WRONLY | O_NONBLOCK);
    ASSERT_EQ(::write(w.get(), "ping", 4), 4);
    char buf[8] = {};
    ASSERT_EQ(::read(r.get(), buf, sizeof buf), 4);
    EXPECT_EQ(std::string(buf, 4), "ping");
  }
  ASSERT_SYS(::mknod(m("reg").c_str(), S_IFREG | 0600, 0));
  EXPECT_TRUE(S_ISREG(lstat_or_throw(b("reg")).st_mode));
  EXPECT_EQ(lstat_or_throw(m("reg")).st_size, 0);
  EXPECT_ERRNO(EEXIST, ::mkfifo(m("reg").c_str(), 0600));
  if (::geteuid() == 0) {
    ASSERT_SYS(::mknod(m("null").c_str(), S_IFCHR | 0666, makedev(1, 3)));
    struct stat bs = lstat_or_throw(b("null"));
    EXPECT_TRUE(S_ISCHR(bs.st_mode));
    EXPECT_EQ(bs.st_rdev, makedev(1, 3));
    expect_same_attrs(m("null"), b("null"), false);
  }
}

TEST_F(MetadataTest, SymlinkReadlink) {
  const std::vector<std::string> targets{
      "/etc", "relative/path", "../up", std::string(1000, 't'), "with space", "/"};
  for (std::size_t i = 0; i < targets.size(); i++) {
    const std::string& target = targets[i];
    std::string name = "l" + std::to_string(i);
    ASSERT_SYS(::symlink(target.c_str(), m(name).c_str()));
    char buf[4096];
    ssize_t n = ::readlink(m(name).c_str(), buf, sizeof buf);
    ASSERT_GE(n, 0) << errno_name(errno);
    EXPECT_EQ(std::string(buf, n), target) << "readlink through the mount";
    n = ::readlink(b(name).c_str(), buf, sizeof buf);
    ASSERT_GE(n, 0);
    EXPECT_EQ(std::string(buf, n), target) << "backing link";
    struct stat st = lstat_or_throw(m(name));
    EXPECT_TRUE(S_ISLNK(st.st_mode));
    EXPECT_EQ(st.st_size, static_cast<off_t>(target.size()));
  }
  char small[3];
  EXPECT_EQ(::readlink(m("l0").c_str(), small, sizeof small), 3);  // truncated, like the VFS
  EXPECT_EQ(std::string(small, 3), "/et");
  write_file(m("f"), "x");
  EXPECT_ERRNO(EINVAL, ::readlink(m("f").c_str(), small, sizeof small));
  EXPECT_ERRNO(EEXIST, ::symlink("x", m("f").c_str()));
}

// The daemon never resolves a symlink itself: the client does, in its own
// namespace.  b/backing/rel -> ../secret reads <root>/secret through the
// mount (the client's view), never <root>/b/secret (the daemon's).
TEST_F(MetadataTest, SymlinksResolveInTheClientsNamespace) {
  write_file(tree().root + "/secret", "client side");
  write_file(tree().root + "/b/secret", "daemon side");
  ASSERT_SYS(::symlink("../secret", b("rel").c_str()));
  ASSERT_SYS(::mkdir(b("d").c_str(), 0755));
  ASSERT_SYS(::symlink("../../secret", b("d/up").c_str()));
  ASSERT_SYS(::symlink("/etc", b("esc").c_str()));
  EXPECT_TRUE(S_ISLNK(lstat_or_throw(m("rel")).st_mode)) << "lookup followed the link";
  EXPECT_TRUE(S_ISLNK(lstat_or_throw(m("d/up")).st_mode)) << "lookup followed the link";
  EXPECT_EQ(read_file(m("rel")), "client side");
  EXPECT_EQ(read_file(m("d/up")), "client side");
  // Absolute: /etc/passwd of the client, as is.
  char buf[64];
  ssize_t n = ::readlink(m("esc").c_str(), buf, sizeof buf);
  ASSERT_GE(n, 0);
  EXPECT_EQ(std::string(buf, n), "/etc");
  if (::access("/etc/passwd", R_OK) == 0) {
    struct stat a {
    }, e{};
    ASSERT_SYS(::stat(m("esc/passwd").c_str(), &a));
    ASSERT_SYS(::stat("/etc/passwd", &e));
    EXPECT_EQ(a.st_dev, e.st_dev);
    EXPECT_EQ(a.st_ino, e.st_ino);
  }
  // ".." is resolved by the kernel: <mnt>/d/.. is the mount's root, and
  // <mnt>/d/../.. is the mountpoint's parent (the client's), never the
  // backing dir's parent.
  struct stat root_st {
  }, dd{}, ddd{}, tree_root{};
  ASSERT_SYS(::stat(m().c_str(), &root_st));
  ASSERT_SYS(::stat(m("d/..").c_str(), &dd));
  ASSERT_SYS(::stat(m("d/../..").c_str(), &ddd));
  ASSERT_SYS(::stat(tree().root.c_str(), &tree_root));
  EXPECT_EQ(dd.st_dev, root_st.st_dev);
  EXPECT_EQ(dd.st_ino, root_st.st_ino);
  EXPECT_EQ(ddd.st_dev, tree_root.st_dev);
  EXPECT_EQ(ddd.st_ino, tree_root.st_ino);
  struct stat st {};
  EXPECT_ERRNO(ENOENT, ::stat(m("d/../secret").c_str(), &st));  // b/secret is not in the mount
}

TEST_F(MetadataTest, HardLinksShareOneFile) {
  const std::string data = random_bytes(2 * kPage + 5, 7);
  write_file(m("a"), data);
  ASSERT_SYS(::link(m("a").c_str(), m("b").c_str()));
  EXPECT_EQ(lstat_or_throw(m("a")).st_nlink, 2u);
  EXPECT_EQ(lstat_or_throw(m("b")).st_nlink, 2u);
  EXPECT_EQ(lstat_or_throw(b("a")).st_ino, lstat_or_throw(b("b")).st_ino);
  EXPECT_EQ(lstat_or_throw(m("a")).st_ino, lstat_or_throw(m("b")).st_ino);
  // A write through one name is read through the other, even by a
  // descriptor opened (and its pages cached) before the write.
  Fd fa(m("a"), O_RDONLY);
  EXPECT_BYTES_EQ(data, pread_str(fa.get(), data.size(), 0));
  {
    Fd fb(m("b"), O_WRONLY);
    pwrite_all(fb.get(), "LINKED", kPage - 3);
  }
  std::string model = data;
  model_write(model, "LINKED", kPage - 3);
  EXPECT_BYTES_EQ(model, pread_str(fa.get(), model.size(), 0));
  EXPECT_BYTES_EQ(model, read_file(m("a")));
  EXPECT_BYTES_EQ(model, read_file(b("a")));
  ASSERT_SYS(::link(m("a").c_str(), m("c").c_str()));
  EXPECT_EQ(lstat_or_throw(m("b")).st_nlink, 3u);
  ASSERT_SYS(::unlink(m("a").c_str()));
  EXPECT_EQ(lstat_or_throw(m("b")).st_nlink, 2u);
  ASSERT_SYS(::unlink(m("c").c_str()));
  EXPECT_EQ(lstat_or_throw(m("b")).st_nlink, 1u);
  EXPECT_BYTES_EQ(model, read_file(m("b")));
  EXPECT_BYTES_EQ(model, pread_str(fa.get(), model.size(), 0));
  EXPECT_ERRNO(EEXIST, ::link(m("b").c_str(), m("b").c_str()));
  ASSERT_SYS(::mkdir(m("d").c_str(), 0755));
  EXPECT_ERRNO(EPERM, ::link(m("d").c_str(), m("d2").c_str()));
}

// ── statfs / access ──

TEST_F(MetadataTest, StatfsMatchesBacking) {
  struct statvfs ms {
  }, bs{};
  ASSERT_SYS(::statvfs(m().c_str(), &ms));
  ASSERT_SYS(::statvfs(b().c_str(), &bs));
  EXPECT_EQ(ms.f_blocks * ms.f_frsize, bs.f_blocks * bs.f_frsize);
  EXPECT_EQ(ms.f_files, bs.f_files);
  EXPECT_EQ(ms.f_namemax, bs.f_namemax);
  // Free space moves under other workers: within 1% of the total.
  double total = static_cast<double>(bs.f_blocks * bs.f_frsize);
  double free_m = static_cast<double>(ms.f_bfree * ms.f_frsize);
  double free_b = static_cast<double>(bs.f_bfree * bs.f_frsize);
  EXPECT_NEAR(free_m, free_b, total * 0.01);
  // Also through a file's path.
  write_file(m("f"), "x");
  struct statvfs fs {};
  ASSERT_SYS(::statvfs(m("f").c_str(), &fs));
  EXPECT_EQ(fs.f_blocks, ms.f_blocks);
}

TEST_F(MetadataTest, Access) {
  write_file(m("f"), "x", 0644);
  ASSERT_SYS(::chmod(m("f").c_str(), 0644));
  write_file(m("x"), "#!/bin/sh\n", 0755);
  ASSERT_SYS(::chmod(m("x").c_str(), 0755));
  EXPECT_SYS(::access(m("f").c_str(), F_OK));
  EXPECT_SYS(::access(m("f").c_str(), R_OK | W_OK));
  EXPECT_SYS(::access(m("x").c_str(), R_OK | X_OK));
  EXPECT_SYS(::access(m().c_str(), R_OK | W_OK | X_OK));
  EXPECT_ERRNO(ENOENT, ::access(m("missing").c_str(), F_OK));
  if (::geteuid() == 0) {
    // Even root needs some x bit to execute.
    EXPECT_ERRNO(EACCES, ::access(m("f").c_str(), X_OK));
  }
}

}  // namespace
}  // namespace norefs::fs::test
