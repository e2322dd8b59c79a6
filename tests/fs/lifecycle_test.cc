// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/fs/lifecycle_test.cc — how a mount ends: SIGTERM, SIGINT,
// fusermount3 -u and umount unmount cleanly (exit 0, no mount left, stats
// files removed, backing intact); SIGKILL leaves every acknowledged write in
// the backing dir, and the dead mount can be removed and mounted again.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>

#include "fs_test_util.h"

namespace norefs::fs::test {
namespace {

class LifecycleTest : public MountTest {
 protected:
  // Files of several sizes written, rewritten, renamed and truncated through
  // the mount, every descriptor closed: the acknowledged state.
  std::map<std::string, std::string> write_some_files() {
    std::map<std::string, std::string> model;
    model["one"] = "1";
    model["page_plus"] = random_bytes(kPage + 1, 600);
    model["big"] = random_bytes((1 << 20) + 1, 601);
    for (const auto& [name, data] : model) write_file(m(name), data);
    {
      Fd fd(m("big"), O_RDWR);
      std::string patch = random_bytes(3 * kPage, 602);
      pwrite_all(fd.get(), patch, 5000);
      model_write(model["big"], patch, 5000);
      pwrite_all(fd.get(), "tail", (1 << 20) + 10);
      model_write(model["big"], "tail", (1 << 20) + 10);
      EXPECT_EQ(fd.close(), 0);
    }
    must(::mkdir(m("dir").c_str(), 0755), "mkdir");
    write_file(m("dir/moved"), "moved");
    must(::rename(m("dir/moved").c_str(), m("renamed").c_str()), "rename");
    model["renamed"] = "moved";
    write_file(m("short"), random_bytes(3 * kPage, 603));
    must(::truncate(m("short").c_str(), 100), "truncate");
    model["short"] = read_file(b("short")).substr(0, 100);
    return model;
  }

  void expect_backing(const std::map<std::string, std::string>& model) {
    for (const auto& [name, data] : model) {
      EXPECT_BYTES_EQ(data, read_file(b(name))) << name;
    }
    EXPECT_TRUE(S_ISDIR(lstat_or_throw(b("dir")).st_mode));
  }

  void expect_clean_exit_after(const char* how) {
    auto st = mount().wait(15s * kSlow);
    ASSERT_TRUE(st.has_value()) << "the daemon did not exit after " << how << "\n" << mount().log();
    daemon_checked();
    EXPECT_TRUE(exited_cleanly(mount())) << how;
    EXPECT_EQ(mount_count(tree().mnt), 0) << "still mounted after " << how;
    EXPECT_TRUE(stats_files_removed(tree().stats, mount().pid()));
  }
};

TEST_F(LifecycleTest, StatsFilesExistWhileMounted) {
  for (const char* kind : {"alloc.", "cache."}) {
    std::string p = tree().stats + "/" + kind + std::to_string(mount().pid());
    struct stat st {};
    ASSERT_EQ(::stat(p.c_str(), &st), 0) << p << ": " << errno_name(errno);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << p;
    EXPECT_EQ(st.st_uid, ::geteuid()) << p;
  }
}

class SignalTest : public LifecycleTest, public ::testing::WithParamInterface<int> {};

TEST_P(SignalTest, UnmountsCleanly) {
  auto model = write_some_files();
  mount().signal(GetParam());
  expect_clean_exit_after(strsignal(GetParam()));
  expect_backing(model);
}

// A signal while reads are in flight: the daemon still exits 0; the reader
// gets right bytes or an error, never wrong bytes.
TEST_P(SignalTest, UnmountsCleanlyWhileReading) {
  const std::string data = random_bytes(256 * 1024, 604);
  write_file(m("f"), data);
  std::atomic<bool> started{false}, stop{false};
  std::atomic<int> reads{0};
  std::string failure;
  std::thread reader([&] {
    int fd = ::open(m("f").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      failure = "open: " + errno_name(errno);
      started = true;
      return;
    }
    std::string buf(data.size(), '\0');
    while (!stop) {
      ssize_t n = ::pread(fd, buf.data(), buf.size(), 0);
      started = true;
      if (n < 0) break;  // ENOTCONN etc.: the mount is gone
      if (static_cast<std::size_t>(n) != data.size() || buf != data) {
        failure = "read " + std::to_string(n) + " bytes that differ from the file";
        break;
      }
      reads++;
    }
    ::close(fd);
  });
  while (!started) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(100ms);
  mount().signal(GetParam());
  expect_clean_exit_after(strsignal(GetParam()));
  stop = true;
  reader.join();
  EXPECT_EQ(failure, "");
  EXPECT_GT(reads.load(), 0);
  EXPECT_BYTES_EQ(data, read_file(b("f")));
}

INSTANTIATE_TEST_SUITE_P(Lifecycle, SignalTest, ::testing::Values(SIGTERM, SIGINT),
                         [](const auto& tp) {
                           return std::string(tp.param == SIGTERM ? "SIGTERM" : "SIGINT");
                         });

TEST_F(LifecycleTest, FusermountUnmountsCleanly) {
  auto model = write_some_files();
  RunResult r = run({"fusermount3", "-u", tree().mnt});
  EXPECT_TRUE(r.exited(0)) << r.output;
  expect_clean_exit_after("fusermount3 -u");
  expect_backing(model);
}

TEST_F(LifecycleTest, UmountUnmountsCleanly) {
  SKIP_UNLESS_ROOT();
  auto model = write_some_files();
  RunResult r = run({"umount", tree().mnt});
  EXPECT_TRUE(r.exited(0)) << r.output;
  expect_clean_exit_after("umount");
  expect_backing(model);
}

// mount -o remount,ro|rw reruns the helper (the daemon's binary) with
// -o remount: the running mount turns read-only (EROFS for every change,
// reads as before, the daemon untouched) and writable again; a remount of
// something that is not a norefs mount is refused with status 2.
TEST_F(LifecycleTest, RemountReadOnlyAndBack) {
  SKIP_UNLESS_ROOT();
  auto model = write_some_files();
  const std::string f = model.begin()->first;
  auto remount = [&](const char* opts, const std::string& where) {
    return run({daemon_path(), tree().backing, where, "-o", opts});
  };
  RunResult ro = remount("remount,ro", tree().mnt);
  ASSERT_TRUE(ro.exited(0)) << describe_status(ro.status) << ": " << ro.output;
  EXPECT_EQ(::open(m("new").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(::mkdir(m("newdir").c_str(), 0755), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(::truncate(m(f).c_str(), 0), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(::unlink(m(f).c_str()), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_BYTES_EQ(model.at(f), read_file(m(f)));
  RunResult rw = remount("remount,rw", tree().mnt);
  ASSERT_TRUE(rw.exited(0)) << describe_status(rw.status) << ": " << rw.output;
  write_file(m("new"), "after");
  EXPECT_EQ(read_file(b("new")), "after");
  RunResult bad = remount("remount,ro", tree().root);
  EXPECT_TRUE(bad.exited(2)) << describe_status(bad.status) << ": " << bad.output;
  EXPECT_NE(bad.output.find("not a norefs mount"), std::string::npos) << bad.output;
}

// SIGKILL: nothing is lost that was acknowledged; the dead mount is removed
// with fusermount3 -u (or umount -l) and the same mountpoint mounts again.
class SigkillTest : public LifecycleTest, public ::testing::WithParamInterface<bool> {};

TEST_P(SigkillTest, KeepsAcknowledgedWritesAndRemounts) {
  const bool lazy = GetParam();
  auto model = write_some_files();
  mount().signal(SIGKILL);
  auto st = mount().wait(15s * kSlow);
  ASSERT_TRUE(st.has_value());
  daemon_checked();
  EXPECT_TRUE(WIFSIGNALED(*st) && WTERMSIG(*st) == SIGKILL) << describe_status(*st);
  expect_backing(model);
  // The dead mount answers ENOTCONN until it is removed.
  struct stat sb {};
  EXPECT_ERRNO(ENOTCONN, ::stat(m("one").c_str(), &sb));
  EXPECT_TRUE(mount().remove_dead_mount(lazy));
  EXPECT_EQ(mount_count(tree().mnt), 0);
  ASSERT_NO_FATAL_FAILURE(mount_again());
  for (const auto& [name, data] : model) EXPECT_BYTES_EQ(data, read_file(m(name))) << name;
  // And the new mount writes.
  write_file(m("after"), "after the crash");
  EXPECT_EQ(read_file(b("after")), "after the crash");
}

INSTANTIATE_TEST_SUITE_P(Lifecycle, SigkillTest, ::testing::Values(false, true),
                         [](const auto& tp) {
                           return std::string(tp.param ? "umount_l" : "fusermount3_u");
                         });

}  // namespace
}  // namespace norefs::fs::test
