// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/fs/fs_test_util.h — the mount fixture of the daemon's integration
// tests, and the small file helpers they share.
//
// Every mount lives in one temporary tree, /tmp/norefs-it-<test pid>-XXXXXX:
//
//   b/backing   the backing directory          b/secret   beside it (escape tests)
//   mnt         the mountpoint                 secret     beside the mountpoint
//   stats       the daemon's stats_dir         daemon.log its stdout + stderr
//   daemons     pids of the daemons started on it, one a line
//
// (The backing directory sits one level deeper than the mountpoint, so that
// a relative symlink resolved by the daemon instead of the client reaches a
// different file: see the escape tests.)
//
// Unmounting happens in every outcome:
//  - normal and failed tests: Mount's destructor (and MountTest::TearDown,
//    which also checks the exit status) runs `fusermount3 -u`, waits for the
//    daemon, and only then SIGKILL + `umount -l` as a last resort;
//  - a test that hangs in a FUSE call: the watchdog kills the daemon before
//    ctest's timeout, which turns the hang into ENOTCONN and a failure;
//  - a test process killed by ctest (SIGKILL, no destructor): the next test
//    binary that starts cleans trees whose owner pid is dead (a gtest
//    Environment): kills their daemons, detaches their mounts, removes them.
//
// Timing rule (as in tests/alloc/test_util.h): timeouts only bound how long
// we wait for a broken daemon; they never decide a pass.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "sanitizers.h"

namespace norefs::fs::test {

using namespace std::chrono_literals;

// Timeouts grow under the sanitizers (never a pass condition).
#if defined(NOREFS_TEST_TSAN)
inline constexpr int kSlow = 5;
#elif defined(NOREFS_TEST_ASAN)
inline constexpr int kSlow = 3;
#else
inline constexpr int kSlow = 1;
#endif

inline constexpr std::size_t kPage = 4096;
inline constexpr std::size_t kMiB = std::size_t{1} << 20;
inline constexpr const char* kTreePrefix = "/tmp/norefs-it-";

// The daemon under test (NOREFS_DAEMON), or "" if it was not built.
const char* daemon_path();

// ── Errors: helpers throw std::system_error; gtest reports it as a failure
// of the test body and still runs TearDown. ──
[[noreturn]] void throw_errno(const std::string& what);
template <class T>
T must(T rc, const std::string& what) {
  if (rc < 0) throw_errno(what);
  return rc;
}

// `expr` fails with exactly errno `err`.
#define EXPECT_ERRNO(err, expr)                                                                  \
  do {                                                                                           \
    errno = 0;                                                                                   \
    auto _rc = (expr);                                                                           \
    int _e = errno;                                                                              \
    EXPECT_EQ(_rc, -1) << #expr << " succeeded";                                                 \
    EXPECT_EQ(_e, (err)) << #expr << ": got " << ::norefs::fs::test::errno_name(_e) << ", want " \
                         << ::norefs::fs::test::errno_name(err);                                 \
  } while (0)

// `expr` returns >= 0; else fails with errno.
#define ASSERT_SYS(expr)                                                         \
  do {                                                                           \
    errno = 0;                                                                   \
    auto _rc = (expr);                                                           \
    ASSERT_GE(_rc, 0) << #expr << ": " << ::norefs::fs::test::errno_name(errno); \
  } while (0)
#define EXPECT_SYS(expr)                                                         \
  do {                                                                           \
    errno = 0;                                                                   \
    auto _rc = (expr);                                                           \
    EXPECT_GE(_rc, 0) << #expr << ": " << ::norefs::fs::test::errno_name(errno); \
  } while (0)

std::string errno_name(int e);  // "ENOENT (No such file or directory)"

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const std::string& path, int flags, mode_t mode = 0644)
      : fd_(must(::open(path.c_str(), flags | O_CLOEXEC, mode), "open " + path)) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    reset(o.release());
    return *this;
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  // close() with its result (flush reaches the daemon here).
  int close() { return ::close(std::exchange(fd_, -1)); }

 private:
  int fd_ = -1;
};

// ── Bytes ──
std::string random_bytes(std::size_t n, std::uint64_t seed);
std::string read_file(const std::string& path);  // whole file; throws
void write_file(const std::string& path, std::string_view data, mode_t mode = 0644);
// Reads up to n bytes at off (loops over short reads; stops at EOF).
std::string pread_str(int fd, std::size_t n, off_t off);
// Reads the whole file through fd with reads of `chunk` bytes from offset 0.
std::string read_chunked(int fd, std::size_t chunk);
void pwrite_all(int fd, std::string_view data, off_t off);
// Model of a write: data at off, zero-filled gap if off is past the end.
void model_write(std::string& model, std::string_view data, std::size_t off);
// Equal bytes, or where and how they first differ (never a dump of MiBs).
::testing::AssertionResult same_bytes(const char* got_expr, const char* want_expr,
                                      const std::string& got, const std::string& want);
#define EXPECT_BYTES_EQ(want, got) EXPECT_PRED_FORMAT2(::norefs::fs::test::same_bytes, got, want)
#define ASSERT_BYTES_EQ(want, got) ASSERT_PRED_FORMAT2(::norefs::fs::test::same_bytes, got, want)

struct stat lstat_or_throw(const std::string& path);

// ── Processes (posix_spawn: fork aborts under TSan) ──
// Starts argv[0] (searched in PATH if it has no '/'), stdin /dev/null,
// stdout+stderr appended to `log` ("" = inherited).  Throws on failure.
pid_t spawn(const std::vector<std::string>& argv, const std::string& log = "");
// Waits up to `limit` for pid; the wait status, or nullopt if it still runs.
std::optional<int> wait_exit(pid_t pid, std::chrono::milliseconds limit);
std::string describe_status(int status);  // "exit 2", "signal 9 (Killed)"
struct RunResult {
  int status = -1;     // wait status; -1: did not finish in time (killed)
  std::string output;  // stdout + stderr
  bool exited(int code) const {
    return status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == code;
  }
};
RunResult run(const std::vector<std::string>& argv, std::chrono::milliseconds limit = 30s);
bool have_program(const std::string& name);  // in PATH and executable

// ── /proc/self/mountinfo ──
struct MountEntry {
  std::string mount_point, fstype, source, options, super_options;
};
std::vector<MountEntry> mounts();
int mount_count(const std::string& mount_point);
// Detaches a mount: umount2(MNT_DETACH), then `fusermount3 -u -z`.
bool lazy_unmount(const std::string& mount_point);

// ── The temporary tree ──
class TempTree {
 public:
  TempTree();
  // Removes the tree, unless something is still mounted under it (then it
  // says so on stderr and leaves it to the stale cleanup).
  ~TempTree();
  TempTree(const TempTree&) = delete;
  TempTree& operator=(const TempTree&) = delete;

  std::string root, backing, mnt, stats, log;
  void note_daemon(pid_t pid) const;  // appends to root/daemons
};

struct MountConfig {
  std::vector<std::string> options;  // -o entries, e.g. "read_path=ref"
  std::vector<std::string> flags;    // e.g. "-s", "-d"
};

// One daemon on a tree.  The daemon runs in the foreground (-f) with
// stats_dir=<tree>/stats added to its options.
class Mount {
 public:
  Mount(const TempTree& tree, MountConfig cfg) : tree_(tree), cfg_(std::move(cfg)) {}
  // Unmounts and reaps if still running (see stop()); never throws.
  ~Mount();
  Mount(const Mount&) = delete;
  Mount& operator=(const Mount&) = delete;

  // Starts the daemon and waits for the mountpoint in mountinfo and for
  // the daemon to serve a first request.  On failure the daemon is gone and
  // the result carries its log.
  ::testing::AssertionResult start();
  // fusermount3 -u (retried a few times while EBUSY), then waits for the
  // daemon.  If it does not exit: SIGKILL + umount -l.  The daemon's wait
  // status, or nullopt if it had to be killed.
  std::optional<int> unmount();
  // Waits for the daemon to exit (e.g. after a signal).
  std::optional<int> wait(std::chrono::milliseconds limit);
  void signal(int sig) const;
  // After the daemon died without unmounting: removes the dead mount with
  // `fusermount3 -u` (lazy: `umount -l`).  True if it is gone.
  bool remove_dead_mount(bool lazy);

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !status_; }
  std::optional<int> status() const { return status_; }
  std::string log() const;  // everything the daemon printed so far
  std::vector<std::string> argv() const;

 private:
  ::testing::AssertionResult wait_ready(const std::string& cmd);
  const TempTree& tree_;
  MountConfig cfg_;
  pid_t pid_ = -1;
  std::optional<int> status_;
  bool mounted_ = false;  // start() saw the mount appear
};

// The daemon exited with status 0; else the status and its log.
::testing::AssertionResult exited_cleanly(const Mount& m);
// No stats file of pid is left in dir.
::testing::AssertionResult stats_files_removed(const std::string& dir, pid_t pid);

// Kills the daemon if the test runs past its budget, so that a test blocked
// in a FUSE call gets ENOTCONN and fails instead of hitting ctest's SIGKILL.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds budget);
  ~Watchdog();
  // The daemon to kill and the mount to detach (after a remount: the new one).
  void watch(pid_t daemon, const std::string& mount_point, const std::string& log);
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// A test against one mount: SetUp mounts with config(), TearDown unmounts
// and checks that the daemon exited 0 and removed its stats files.  A test
// that ends the daemon itself calls mount().unmount()/wait() first; the
// teardown then only checks what is left to check.
class MountTest : public ::testing::Test {
 protected:
  virtual MountConfig config() const { return {}; }
  // Under the budget with margin: ctest's TIMEOUT is 120 s.
  virtual std::chrono::seconds budget() const { return 90s; }
  void SetUp() override;
  void TearDown() override;

  std::string m(std::string_view rel = "") const;  // path through the mount
  std::string b(std::string_view rel = "") const;  // path in the backing dir
  TempTree& tree() { return *tree_; }
  Mount& mount() { return *mount_; }
  // Unmounts and mounts again with the same config, same tree.
  void remount();
  // Starts a new daemon on the same tree after the old one ended (its exit
  // already checked by the test); the teardown checks the new one.
  void mount_again();
  // Tells the teardown the daemon's exit was already checked.
  void daemon_checked() { checked_ = true; }

 private:
  std::unique_ptr<TempTree> tree_;
  std::unique_ptr<Mount> mount_;
  std::unique_ptr<Watchdog> watchdog_;
  bool checked_ = false;
};

// Skips the test unless it runs as root (chown, mknod, setuid helpers).
#define SKIP_UNLESS_ROOT()                                                                  \
  do {                                                                                      \
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (runs as uid " << ::geteuid() << ")"; \
  } while (0)

// The name of a case parameterised by read path ("ref_fetchadd" and the
// like): the path with every character that is not alphanumeric as _.
inline std::string path_name(const ::testing::TestParamInfo<const char*>& info) {
  std::string s = info.param;
  for (char& c : s) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return s;
}

}  // namespace norefs::fs::test
