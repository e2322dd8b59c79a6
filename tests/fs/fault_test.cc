// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/fs/fault_test.cc — faults from the backing store (docs/faults.md):
// EIO on read and on write from an error-injecting backing (the FUSE server
// norefs_fs_faulty_fuse mounted as the backing directory), ENOSPC from a
// small tmpfs backing, and a backing file removed or replaced underneath an
// open file.  In each: the caller gets the right errno or bytes, nothing
// wrong stays cached (a read after the fault is gone returns the right
// bytes), another file still reads, and the daemon exits 0 at unmount.
//
// Stacks: the backing (FUSE server or tmpfs) is mounted on the tree's
// backing directory before norefs starts and unmounted after norefs, in
// every outcome (BackingMount's destructor; the server's pid goes into the
// tree's daemon list, so the stale cleanup of a killed test run kills it and
// detaches both mounts).
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <fstream>
#include <thread>

#include "cache/cache_stats.h"
#include "fs_test_util.h"

namespace norefs::fs::test {
namespace {

using cache::CacheCounters;
using cache::Ctr;

const char* faulty_fuse_path() {
#ifdef NOREFS_HELPER_FAULTY_FUSE
  return NOREFS_HELPER_FAULTY_FUSE;
#else
  return "";
#endif
}

// The server's content: byte i of f<k> (see helpers/faulty_fuse.cc).
std::string server_bytes(unsigned k, std::size_t size) {
  std::string s(size, '\0');
  for (std::size_t i = 0; i < size; i++) s[i] = static_cast<char>((i + 13 * k) % 251);
  return s;
}

// pread that reports errno instead of throwing: the bytes, or the error.
struct ReadResult {
  std::string bytes;
  int err = 0;
};
ReadResult try_pread(int fd, std::size_t n, off_t off) {
  ReadResult r;
  r.bytes.resize(n);
  ssize_t got = ::pread(fd, r.bytes.data(), n, off);
  if (got < 0) {
    r.err = errno;
    r.bytes.clear();
  } else {
    r.bytes.resize(static_cast<std::size_t>(got));
  }
  return r;
}

// A filesystem mounted on the tree's backing directory: the faulty FUSE
// server or a tmpfs.  Unmounted by the destructor (after norefs).
class BackingMount {
 public:
  explicit BackingMount(const TempTree& tree) : tree_(tree) {}
  ~BackingMount() { stop(); }
  BackingMount(const BackingMount&) = delete;
  BackingMount& operator=(const BackingMount&) = delete;

  ::testing::AssertionResult start_faulty(const std::string& opts) {
    if (*faulty_fuse_path() == '\0') {
      return ::testing::AssertionFailure() << "norefs_fs_faulty_fuse was not built";
    }
    const std::string log = tree_.root + "/faulty.log";
    pid_ = spawn({faulty_fuse_path(), "-f", "-s", "-o", opts, tree_.backing}, log);
    tree_.note_daemon(pid_);
    auto deadline = std::chrono::steady_clock::now() + 10s * kSlow;
    while (mount_count(tree_.backing) == 0) {
      if (auto st = wait_exit(pid_, 0ms)) {
        status_ = st;
        return ::testing::AssertionFailure()
               << "faulty_fuse exited (" << describe_status(*st) << "): " << slurp(log);
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return ::testing::AssertionFailure() << "faulty_fuse did not mount: " << slurp(log);
      }
      std::this_thread::sleep_for(2ms);
    }
    mounted_ = true;
    // Served once: a stat of the root answers after FUSE_INIT.
    struct stat st {};
    if (::stat(tree_.backing.c_str(), &st) != 0) {
      return ::testing::AssertionFailure() << "stat of the faulty mount: " << errno_name(errno);
    }
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult start_tmpfs(const std::string& size) {
    if (::mount("norefs-test-tmpfs", tree_.backing.c_str(), "tmpfs", 0,
                ("size=" + size + ",mode=0755").c_str()) != 0) {
      return ::testing::AssertionFailure() << "mount tmpfs: " << errno_name(errno);
    }
    mounted_ = true;
    return ::testing::AssertionSuccess();
  }

  // One control command to the faulty server (helpers/faulty_fuse.cc).
  void command(const std::string& cmd) const {
    Fd c(tree_.backing + "/.faults", O_WRONLY);
    ASSERT_EQ(::write(c.get(), cmd.data(), cmd.size()), static_cast<ssize_t>(cmd.size())) << cmd;
  }
  // EIO replies the server sent so far: {reads, writes}.
  std::pair<unsigned long, unsigned long> faults() const {
    std::ifstream in(tree_.backing + "/.faults");
    std::string k1, k2;
    unsigned long r = 0, w = 0;
    in >> k1 >> r >> k2 >> w;
    return {r, w};
  }

  // Unmounts; for the server, its exit status.
  std::optional<int> stop() {
    if (!mounted_) return status_;
    mounted_ = false;
    if (pid_ < 0) {
      if (::umount2(tree_.backing.c_str(), 0) != 0) lazy_unmount(tree_.backing);
      return status_;
    }
    if (!status_) {
      run({"fusermount3", "-u", tree_.backing}, 10s * kSlow);
      status_ = wait_exit(pid_, 10s * kSlow);
      if (!status_) {
        ::kill(pid_, SIGKILL);
        wait_exit(pid_, 10s);
      }
    }
    if (mount_count(tree_.backing) > 0) lazy_unmount(tree_.backing);
    return status_;
  }

 private:
  static std::string slurp(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  const TempTree& tree_;
  pid_t pid_ = -1;
  std::optional<int> status_;
  bool mounted_ = false;
};

// norefs over a BackingMount: the MountTest checks (exit 0, stats files
// removed, nothing left mounted), with the backing mounted first and
// unmounted last.
class BackedMountTest : public ::testing::Test {
 protected:
  virtual ::testing::AssertionResult start_backing(BackingMount& b) = 0;

  void SetUp() override {
    ASSERT_NE(*daemon_path(), '\0') << "the daemon was not built (NOREFS_DAEMON undefined)";
    if (::access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/fuse is not usable here";
    SKIP_UNLESS_ROOT();  // mount(2) of a tmpfs; a FUSE server under another FUSE mount
    tree_ = std::make_unique<TempTree>();
    watchdog_ = std::make_unique<Watchdog>(60s);
    backing_ = std::make_unique<BackingMount>(*tree_);
    ASSERT_TRUE(start_backing(*backing_));
    mount_ = std::make_unique<Mount>(*tree_, MountConfig{});
    ASSERT_TRUE(mount_->start());
    watchdog_->watch(mount_->pid(), tree_->mnt, tree_->log);
  }

  void TearDown() override {
    if (mount_) {
      const bool was_running = mount_->running();
      if (was_running) {
        EXPECT_TRUE(mount_->unmount().has_value()) << mount_->log();
      }
      if (mount_->status()) {
        EXPECT_TRUE(exited_cleanly(*mount_));
        if (was_running) {
          EXPECT_TRUE(stats_files_removed(tree_->stats, mount_->pid()));
        }
      }
      if (HasFailure()) std::cerr << "---- daemon output:\n" << mount_->log() << "----\n";
      mount_.reset();
    }
    if (backing_) {
      auto st = backing_->stop();
      if (st) {
        EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << describe_status(*st);
      }
      backing_.reset();
    }
    if (tree_) {
      EXPECT_EQ(mount_count(tree_->mnt), 0) << "norefs still mounted after the test";
      EXPECT_EQ(mount_count(tree_->backing), 0) << "the backing still mounted after the test";
    }
    watchdog_.reset();
    tree_.reset();
  }

  std::string m(std::string_view rel) const { return tree_->mnt + "/" + std::string(rel); }
  std::string b(std::string_view rel) const { return tree_->backing + "/" + std::string(rel); }

  // The daemon's cache counters, once they stop moving (replies may go out
  // before the last bump; async readahead runs on a worker).
  CacheCounters counters() const {
    cache::CacheStatsReader r(tree_->stats + "/cache." + std::to_string(mount_->pid()));
    CacheCounters prev = r.sum();
    for (int i = 0; i < 50; i++) {
      std::this_thread::sleep_for(10ms);
      CacheCounters c = r.sum();
      if (c.v == prev.v && c.pages_cached == prev.pages_cached) return c;
      prev = c;
    }
    return prev;
  }

  std::unique_ptr<TempTree> tree_;
  std::unique_ptr<Watchdog> watchdog_;
  std::unique_ptr<BackingMount> backing_;
  std::unique_ptr<Mount> mount_;
};

// ── EIO from an error-injecting backing ──

constexpr std::size_t kFileSize = 256 << 10;  // 64 pages, the server's default

class FaultyBackingTest : public BackedMountTest {
 protected:
  ::testing::AssertionResult start_backing(BackingMount& b) override {
    return b.start_faulty("files=3,size=" + std::to_string(kFileSize));
  }
  void fault(const std::string& cmd) { backing_->command(cmd); }
  // f2 is never faulted: the daemon keeps serving it.
  void expect_other_file_reads() {
    EXPECT_BYTES_EQ(server_bytes(2, kFileSize), read_file(m("f2")));
  }
};

// Reads that meet a bad page: a readahead window that covers it fails at the
// backing as a whole, yet the caller's own good pages are read; a read that
// reaches the bad page returns what came before it, then EIO; nothing of the
// failed windows stays cached, so once the fault is gone every byte is right.
TEST_F(FaultyBackingTest, ReadEioReachesOnlyTheReaderOfTheBadPage) {
  const std::string want = server_bytes(0, kFileSize);
  fault("read f0 8192 4096");  // page 2
  Fd fd(m("f0"), O_RDONLY);

  // Page 0: a sequential first read, whose window (4 pages) covers page 2.
  ReadResult r = try_pread(fd.get(), kPage, 0);
  EXPECT_EQ(r.err, 0) << "a read of good page 0 failed: " << errno_name(r.err);
  EXPECT_BYTES_EQ(want.substr(0, kPage), r.bytes);
  // Pages 1-2: page 1 comes back, then the read stops at the bad page.
  r = try_pread(fd.get(), 2 * kPage, kPage);
  EXPECT_EQ(r.err, 0) << errno_name(r.err);
  EXPECT_BYTES_EQ(want.substr(kPage, kPage), r.bytes);
  // Page 2 alone: EIO, uncached and again after a failed fill.
  for (int i = 0; i < 2; i++) {
    r = try_pread(fd.get(), 100, 2 * kPage + 10);
    EXPECT_EQ(r.err, EIO) << "read of the bad page, try " << i << ": got " << r.bytes.size()
                          << " bytes";
  }
  // A good page past it, read at random.
  r = try_pread(fd.get(), kPage, 10 * kPage);
  EXPECT_EQ(r.err, 0) << errno_name(r.err);
  EXPECT_BYTES_EQ(want.substr(10 * kPage, kPage), r.bytes);
  EXPECT_GE(backing_->faults().first, 2u) << "the fault was never hit";
  expect_other_file_reads();

  CacheCounters c = counters();
  EXPECT_GE(c[Ctr::io_errors], 2u);
  EXPECT_LE(c[Ctr::io_errors], backing_->faults().first) << "an error counted twice";

  fault("clear");
  EXPECT_BYTES_EQ(want, read_chunked(fd.get(), kPage));
  EXPECT_BYTES_EQ(want, read_chunked(fd.get(), 96 << 10));
  // Every page of f0 and f2 is cached once, and nothing else.
  c = counters();
  EXPECT_EQ(c.pages_cached, 2 * kFileSize / kPage);
  EXPECT_LE(c.pages_cached, c.limit_pages);
}

// A sequential reader whose asynchronous readahead window (on the daemon's
// worker, no caller to tell) fails: the reader gets every byte before the
// bad page, EIO at it, and after the fault is gone the rest, right.
TEST_F(FaultyBackingTest, FailedAsyncReadaheadLeavesNoPageBehind) {
  const std::string want = server_bytes(1, kFileSize);
  const std::size_t bad = 40;  // in the third window (4, 16, 32... pages)
  fault("read f1 " + std::to_string(bad * kPage) + " 4096");
  Fd fd(m("f1"), O_RDONLY);
  std::size_t page = 0;
  for (; page < kFileSize / kPage; page++) {
    ReadResult r = try_pread(fd.get(), kPage, static_cast<off_t>(page * kPage));
    if (r.err) {
      EXPECT_EQ(r.err, EIO);
      break;
    }
    ASSERT_BYTES_EQ(want.substr(page * kPage, kPage), r.bytes) << "page " << page;
  }
  EXPECT_EQ(page, bad) << "the reader stopped at the wrong page";
  expect_other_file_reads();
  fault("clear");
  for (; page < kFileSize / kPage; page++) {
    ReadResult r = try_pread(fd.get(), kPage, static_cast<off_t>(page * kPage));
    ASSERT_EQ(r.err, 0) << "page " << page << ": " << errno_name(r.err);
    ASSERT_BYTES_EQ(want.substr(page * kPage, kPage), r.bytes) << "page " << page;
  }
  EXPECT_BYTES_EQ(want, read_chunked(fd.get(), 64 << 10));
}

// A write the backing refuses: the caller gets EIO and neither the cache nor
// the backing changed; writes elsewhere and after the fault go through.
TEST_F(FaultyBackingTest, WriteEioLeavesCacheAndBackingUnchanged) {
  std::string want = server_bytes(1, kFileSize);
  Fd fd(m("f1"), O_RDWR);
  ASSERT_BYTES_EQ(want, read_chunked(fd.get(), 64 << 10));  // all cached
  fault("write f1 4096 4096");
  const std::string data(300, 'X');
  errno = 0;
  EXPECT_EQ(::pwrite(fd.get(), data.data(), data.size(), kPage + 100), -1);
  EXPECT_EQ(errno, EIO) << errno_name(errno);
  // Straddling the bad range: the backing fails the whole request.
  EXPECT_EQ(::pwrite(fd.get(), data.data(), data.size(), kPage - 150), -1);
  EXPECT_GE(backing_->faults().second, 2u) << "the fault was never hit";
  EXPECT_BYTES_EQ(want, read_chunked(fd.get(), 64 << 10)) << "through the mount";
  EXPECT_BYTES_EQ(want, read_file(b("f1"))) << "the backing";
  // Elsewhere: written and cached.
  pwrite_all(fd.get(), data, 3 * kPage);
  model_write(want, data, 3 * kPage);
  EXPECT_BYTES_EQ(want, read_chunked(fd.get(), 64 << 10));
  expect_other_file_reads();
  fault("clear");
  pwrite_all(fd.get(), data, kPage + 100);
  model_write(want, data, kPage + 100);
  EXPECT_BYTES_EQ(want, read_chunked(fd.get(), kPage));
  EXPECT_BYTES_EQ(want, read_file(b("f1")));
}

// ── ENOSPC from a small tmpfs ──

class FullBackingTest : public BackedMountTest {
 protected:
  ::testing::AssertionResult start_backing(BackingMount& b) override {
    return b.start_tmpfs("64k");  // 16 pages
  }
};

// Writes until the backing is full: the write that does not fit is short or
// fails with ENOSPC, as the backing answers it; afterwards the mount shows
// exactly what the backing holds, and a file written before still reads.
TEST_F(FullBackingTest, EnospcWriteLeavesWhatTheBackingHolds) {
  const std::string other = random_bytes(kPage, 1);
  write_file(m("other"), other);
  Fd fd(m("big"), O_RDWR | O_CREAT | O_TRUNC);
  const std::string chunk = random_bytes(24 << 10, 2);
  std::size_t size = 0;
  bool short_write = false;
  int err = 0;
  for (int i = 0; i < 16 && err == 0; i++) {
    ssize_t r = ::pwrite(fd.get(), chunk.data(), chunk.size(), static_cast<off_t>(size));
    if (r < 0) {
      err = errno;
    } else {
      short_write |= static_cast<std::size_t>(r) < chunk.size();
      size += static_cast<std::size_t>(r);
    }
  }
  EXPECT_EQ(err, ENOSPC) << errno_name(err);
  EXPECT_LT(size, 64u << 10);
  // What the backing took (a short write, then ENOSPC, on this tmpfs) is
  // what the mount shows, through the cache and after dropping it.
  struct stat st {};
  ASSERT_SYS(::fstat(fd.get(), &st));
  EXPECT_EQ(static_cast<std::size_t>(st.st_size), size);
  EXPECT_EQ(static_cast<std::size_t>(lstat_or_throw(b("big")).st_size), size);
  const std::string backing = read_file(b("big"));
  EXPECT_EQ(backing.size(), size);
  EXPECT_BYTES_EQ(backing, read_chunked(fd.get(), kPage));
  std::string want;
  for (std::size_t off = 0; off < size; off += chunk.size()) {
    want += chunk.substr(0, std::min(chunk.size(), size - off));
  }
  EXPECT_BYTES_EQ(want, backing);
  if (!short_write) std::cerr << "note: this tmpfs answered ENOSPC with no short write\n";
  EXPECT_BYTES_EQ(other, read_file(m("other")));
  // Room again: the write goes through.
  ASSERT_SYS(::unlink(m("other").c_str()));
  // The backing file goes when the daemon closes its descriptors of it: at
  // the kernel's FORGET, which follows the unlink asynchronously.
  auto deadline = std::chrono::steady_clock::now() + 5s * kSlow;
  struct statvfs vfs {};
  while (::statvfs(tree_->backing.c_str(), &vfs) == 0 && vfs.f_bfree == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_GT(vfs.f_bfree, 0u) << "the unlinked file's space never came back";
  pwrite_all(fd.get(), std::string_view(chunk).substr(0, 1000), static_cast<off_t>(size));
  EXPECT_BYTES_EQ(want + chunk.substr(0, 1000), read_chunked(fd.get(), kPage));
}

// ── A backing file removed or replaced under an open file ──

class UnderneathTest : public MountTest {};

// rename(2) over the backing file, outside the mount: the old handle keeps
// reading the old file (what the backing's open file gives), a new open at
// once sees the new file (close-to-open), with none of the old pages.
TEST_F(UnderneathTest, ReplacedBackingFile) {
  const std::string old_bytes = random_bytes(5 * kPage + 100, 10);
  const std::string new_bytes = random_bytes(3 * kPage + 7, 11);
  write_file(b("a"), old_bytes);
  write_file(b("keep"), random_bytes(kPage, 12));
  Fd old_fd(m("a"), O_RDONLY);
  ASSERT_BYTES_EQ(old_bytes, read_chunked(old_fd.get(), kPage));  // cached
  write_file(b("a.tmp"), new_bytes);
  ASSERT_SYS(::rename(b("a.tmp").c_str(), b("a").c_str()));

  EXPECT_BYTES_EQ(old_bytes, read_chunked(old_fd.get(), kPage)) << "the old handle";
  {
    Fd new_fd(m("a"), O_RDONLY);
    EXPECT_BYTES_EQ(new_bytes, read_chunked(new_fd.get(), kPage)) << "a new open";
    struct stat st {};
    ASSERT_SYS(::fstat(new_fd.get(), &st));
    EXPECT_EQ(st.st_size, static_cast<off_t>(new_bytes.size()));
  }
  EXPECT_BYTES_EQ(new_bytes, read_file(m("a")));
  EXPECT_BYTES_EQ(old_bytes, read_chunked(old_fd.get(), 64 << 10)) << "the old handle, again";
  EXPECT_BYTES_EQ(read_file(b("keep")), read_file(m("keep")));
}

// unlink(2) of the backing file, outside the mount: the open handle keeps
// reading it, a new open fails with ENOENT at once.
TEST_F(UnderneathTest, RemovedBackingFile) {
  const std::string bytes = random_bytes(4 * kPage + 1, 20);
  write_file(b("r"), bytes);
  write_file(b("keep"), random_bytes(kPage, 21));
  Fd fd(m("r"), O_RDONLY);
  ASSERT_BYTES_EQ(bytes, read_chunked(fd.get(), kPage));
  ASSERT_SYS(::unlink(b("r").c_str()));
  EXPECT_BYTES_EQ(bytes, read_chunked(fd.get(), 3 * kPage)) << "the open handle";
  errno = 0;
  Fd again(::open(m("r").c_str(), O_RDONLY | O_CLOEXEC));
  EXPECT_EQ(again.get(), -1) << "a new open of the removed file succeeded";
  EXPECT_EQ(errno, ENOENT) << errno_name(errno);
  again.reset();  // else the mount stays busy
  EXPECT_BYTES_EQ(read_file(b("keep")), read_file(m("keep")));
  EXPECT_BYTES_EQ(bytes, read_chunked(fd.get(), 64 << 10));
}

// The ESTALE answer is only for removals outside the mount: a file whose
// last name went through the mount can still be reopened through
// /proc/self/fd/N, as on a native filesystem.
TEST_F(UnderneathTest, ReopenThroughProcAfterUnlinkThroughTheMount) {
  const std::string bytes = random_bytes(2 * kPage + 3, 30);
  write_file(m("u"), bytes);
  Fd fd(m("u"), O_RDONLY);
  ASSERT_SYS(::unlink(m("u").c_str()));
  Fd again("/proc/self/fd/" + std::to_string(fd.get()), O_RDONLY);
  EXPECT_BYTES_EQ(bytes, read_chunked(again.get(), kPage));
  // Renamed over through the mount: the same.
  write_file(m("v"), bytes);
  write_file(m("w"), "new");
  Fd v(m("v"), O_RDONLY);
  ASSERT_SYS(::rename(m("w").c_str(), m("v").c_str()));
  Fd v_again("/proc/self/fd/" + std::to_string(v.get()), O_RDONLY);
  EXPECT_BYTES_EQ(bytes, read_chunked(v_again.get(), kPage));
  EXPECT_EQ(read_file(m("v")), "new");
}

}  // namespace
}  // namespace norefs::fs::test
