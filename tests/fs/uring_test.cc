// SPDX-License-Identifier: LGPL-2.1-or-later
//
// FUSE over io_uring (fs/fuse_uring.h), through the minimal server and the
// daemon: the bytes read through a mount served over the rings are the
// bytes served, and the requests really went over the rings.  The kernel
// offers io_uring only while the module parameter fuse.enable_uring is Y,
// which other FUSE tests on the machine must not see: these tests never
// change it.  Those that need it on are skipped when it is off, and the
// refusal test runs only when it is off.  (docs/fuse-io-uring.md: how to run
// them with the parameter on.)
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include "fs_test_util.h"

namespace norefs::fs::test {
namespace {

std::string uring_parameter() {
  std::ifstream f("/sys/module/fuse/parameters/enable_uring");
  std::string v;
  return f >> v ? v : "";
}

#define SKIP_UNLESS_URING_ON()                                                      \
  do {                                                                              \
    if (uring_parameter() != "Y")                                                   \
      GTEST_SKIP() << "needs /sys/module/fuse/parameters/enable_uring = Y (it is '" \
                   << uring_parameter() << "'; the tests never change it: see "     \
                   << "docs/fuse-io-uring.md)";                                     \
  } while (0)

const char* minimal_path() {
#ifdef NOREFS_MINIMAL_FUSE
  return NOREFS_MINIMAL_FUSE;
#else
  return "";
#endif
}

// The minimal server's file: byte i is i % 251.
std::string minimal_bytes(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; i++) s[i] = static_cast<char>(i % 251);
  return s;
}

// The number in the last line of the minimal server or the daemon, "N
// requests served over the rings", or -1.
long long served_over_rings(const std::string& log) {
  std::smatch m;
  static const std::regex re("io_uring: ([0-9]+) requests served over the rings");
  return std::regex_search(log, m, re) ? std::stoll(m[1]) : -1;
}

// One norefs_minimal_fuse in the foreground on tree.mnt; unmounted and
// reaped in every outcome.
class MinimalServer {
 public:
  MinimalServer(const TempTree& tree, std::string options) : tree_(tree) {
    pid_ = spawn({minimal_path(), "-f", "-o", options, tree.mnt}, tree.log);
    tree.note_daemon(pid_);
  }
  ~MinimalServer() {
    if (!status_) unmount();
    if (mount_count(tree_.mnt) > 0) lazy_unmount(tree_.mnt);
  }
  MinimalServer(const MinimalServer&) = delete;
  MinimalServer& operator=(const MinimalServer&) = delete;

  // Waits for the mount and a first answered request (stat of the file:
  // the first request after INIT, so it waits for the rings to register).
  ::testing::AssertionResult wait_serving(std::size_t size) {
    auto deadline = std::chrono::steady_clock::now() + 10s * kSlow;
    while (mount_count(tree_.mnt) == 0) {
      if (auto st = wait_exit(pid_, 0ms)) {
        status_ = st;
        return ::testing::AssertionFailure()
               << "exited before mounting (" << describe_status(*st) << "): " << log();
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return ::testing::AssertionFailure() << "no mount after 10 s: " << log();
      }
      std::this_thread::sleep_for(2ms);
    }
    struct stat st {};
    if (::stat((tree_.mnt + "/f").c_str(), &st) != 0) {
      return ::testing::AssertionFailure() << "stat: " << errno_name(errno) << ": " << log();
    }
    if (static_cast<std::size_t>(st.st_size) != size) {
      return ::testing::AssertionFailure() << "size " << st.st_size << ", want " << size;
    }
    return ::testing::AssertionSuccess();
  }

  // fusermount3 -u, then the server's wait status (nullopt: killed).
  std::optional<int> unmount() {
    if (status_) return status_;
    if (mount_count(tree_.mnt) > 0) run({"fusermount3", "-u", tree_.mnt}, 10s * kSlow);
    status_ = wait_exit(pid_, 10s * kSlow);
    if (!status_) {
      ::kill(pid_, SIGKILL);
      wait_exit(pid_, 10s);
      status_ = -1;
      return std::nullopt;
    }
    return status_;
  }
  std::optional<int> wait(std::chrono::milliseconds limit) {
    if (!status_) status_ = wait_exit(pid_, limit);
    return status_;
  }
  std::string log() const {
    std::ifstream f(tree_.log);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }

 private:
  const TempTree& tree_;
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// Every byte of a file larger than one request (3 x 1 MiB + a tail), read
// whole with several read sizes and at unaligned offsets, is the byte the
// server holds; and the reads were answered over the rings.
TEST(MinimalServerUring, ReadsServedOverTheRingsAreTheServedBytes) {
  SKIP_UNLESS_URING_ON();
  if (*minimal_path() == '\0') GTEST_SKIP() << "norefs_minimal_fuse was not built";
  TempTree tree;
  constexpr std::size_t kSize = (3u << 20) + 12345;
  const std::string want = minimal_bytes(kSize);
  long long reads = 0;
  {
    MinimalServer server(tree, "io_uring,size=" + std::to_string(kSize));
    ASSERT_TRUE(server.wait_serving(kSize));
    Fd fd(tree.mnt + "/f", O_RDONLY);
    for (std::size_t chunk : {std::size_t{16}, std::size_t{4096}, std::size_t{1} << 20}) {
      if (chunk == 16) {
        // 16-byte reads at every 4099th offset: the benchmark's read size,
        // never aligned.
        for (std::size_t off = 1; off + 16 <= kSize; off += 4099) {
          ASSERT_EQ(pread_str(fd.get(), 16, static_cast<off_t>(off)), want.substr(off, 16))
              << "at " << off;
          reads++;
        }
        continue;
      }
      ASSERT_BYTES_EQ(want, read_chunked(fd.get(), chunk)) << "reads of " << chunk;
      reads += static_cast<long long>(kSize / chunk);  // a lower bound
    }
    fd.reset();
    auto st = server.unmount();
    ASSERT_TRUE(st) << "the server did not exit after fusermount3 -u: " << server.log();
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0)
        << describe_status(*st) << ": " << server.log();
    const long long served = served_over_rings(server.log());
    EXPECT_GE(served, reads) << "requests over the rings; the server's log:\n" << server.log();
  }
}

// With the parameter off the option is refused before anything is mounted,
// with a message that names the parameter.
TEST(MinimalServerUring, RefusedWhenTheKernelParameterIsOff) {
  if (uring_parameter() == "Y") GTEST_SKIP() << "fuse.enable_uring is Y: nothing to refuse";
  if (*minimal_path() == '\0') GTEST_SKIP() << "norefs_minimal_fuse was not built";
  TempTree tree;
  RunResult r = run({minimal_path(), "-f", "-o", "io_uring", tree.mnt}, 10s * kSlow);
  EXPECT_TRUE(r.exited(1)) << describe_status(r.status) << ": " << r.output;
  EXPECT_NE(r.output.find("enable_uring"), std::string::npos) << r.output;
  EXPECT_EQ(mount_count(tree.mnt), 0);
}

// The daemon with -o io_uring: reads (16 B at odd offsets, 4 KiB, 1 MiB)
// return the backing file's bytes, writes land in the backing file, and the
// requests went over the rings.
class DaemonUringTest : public MountTest {
 protected:
  MountConfig config() const override { return {{"io_uring"}, {}}; }
  void SetUp() override {
    SKIP_UNLESS_URING_ON();
    MountTest::SetUp();
  }
};

TEST_F(DaemonUringTest, ReadsAndWritesOverTheRingsMatchTheBackingFile) {
  constexpr std::size_t kSize = (3u << 20) + 12345;
  const std::string data = random_bytes(kSize, 12);
  write_file(b("data"), data);
  long long requests = 0;
  {
    Fd fd(m("data"), O_RDONLY);
    for (std::size_t off = 1; off + 16 <= kSize; off += 4099) {
      ASSERT_EQ(pread_str(fd.get(), 16, static_cast<off_t>(off)), data.substr(off, 16))
          << "at " << off;
      requests++;
    }
    for (std::size_t chunk : {std::size_t{4096}, std::size_t{1} << 20}) {
      ASSERT_BYTES_EQ(data, read_chunked(fd.get(), chunk)) << "reads of " << chunk;
      requests += static_cast<long long>(kSize / chunk);  // a lower bound
    }
  }
  // Writes of several sizes, one past a 1 MiB request boundary.
  std::string model = random_bytes((1u << 20) + 4096 + 7, 13);
  {
    Fd fd(m("written"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pwrite_all(fd.get(), model, 0);
    const std::string patch = random_bytes(5000, 14);
    pwrite_all(fd.get(), patch, 777);
    model_write(model, patch, 777);
    ASSERT_EQ(fd.close(), 0);
  }
  EXPECT_BYTES_EQ(model, read_file(b("written")));
  EXPECT_BYTES_EQ(model, read_file(m("written")));
  auto st = mount().unmount();
  ASSERT_TRUE(st) << mount().log();
  EXPECT_GE(served_over_rings(mount().log()), requests) << mount().log();
}

// With the parameter off the daemon refuses -o io_uring before mounting.
TEST(DaemonUring, RefusedWhenTheKernelParameterIsOff) {
  if (uring_parameter() == "Y") GTEST_SKIP() << "fuse.enable_uring is Y: nothing to refuse";
  ASSERT_NE(*daemon_path(), '\0') << "the daemon was not built";
  TempTree tree;
  RunResult r =
      run({daemon_path(), "-f", "-o", "io_uring,stats_dir=" + tree.stats, tree.backing, tree.mnt},
          10s * kSlow);
  EXPECT_TRUE(r.exited(1)) << describe_status(r.status) << ": " << r.output;
  EXPECT_NE(r.output.find("enable_uring"), std::string::npos) << r.output;
  EXPECT_EQ(mount_count(tree.mnt), 0);
}

}  // namespace
}  // namespace norefs::fs::test
