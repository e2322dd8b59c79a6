// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/fs/cli_test.cc — the command line: bad input exits 2 and mounts
// nothing, -h/-V exit 0, every documented option is accepted and the mount
// then works, the mount names itself fsname=<backing dir>, subtype=norefs.
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "fs_test_util.h"

namespace norefs::fs::test {
namespace {

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(*daemon_path(), '\0') << "the daemon was not built (NOREFS_DAEMON undefined)";
    if (::access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/fuse is not usable here";
  }

  // Runs the daemon with `args` (after argv[0]); a daemon that mounted in
  // error stays in the foreground, so the timeout bounds that case.
  RunResult run_daemon(const std::vector<std::string>& args) {
    std::vector<std::string> argv{daemon_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult r = run(argv, 10s * kSlow);
    if (mount_count(tree_.mnt) > 0) lazy_unmount(tree_.mnt);  // a failed test leaves nothing
    return r;
  }

  // Exit 2, a message on stderr, and no mount on the mountpoint.
  void expect_rejected(const std::vector<std::string>& args, const std::string& why) {
    std::string cmd;
    for (const auto& a : args) cmd += " " + a;
    const int before = mount_count(tree_.mnt);
    std::vector<std::string> argv{daemon_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult r = run(argv, 10s * kSlow);
    EXPECT_EQ(mount_count(tree_.mnt), before) << why << ": norefs" << cmd << " mounted";
    EXPECT_TRUE(r.exited(2)) << why << ": norefs" << cmd << " ended with "
                             << (r.status < 0 ? "a timeout" : describe_status(r.status))
                             << ", want exit 2; output:\n"
                             << r.output;
    EXPECT_FALSE(r.output.empty()) << why << ": norefs" << cmd << " printed no message";
    if (mount_count(tree_.mnt) > before) lazy_unmount(tree_.mnt);
  }

  std::string stats_opt() const { return "stats_dir=" + tree_.stats; }

  TempTree tree_;
};

// ── Bad options ──

struct BadOption {
  const char* name;
  std::vector<std::string> opts;  // each becomes "-o X"
  std::vector<std::string> flags;
};

class BadOptionTest : public CliTest, public ::testing::WithParamInterface<BadOption> {};

TEST_P(BadOptionTest, ExitsTwoAndMountsNothing) {
  const BadOption& p = GetParam();
  std::vector<std::string> args{"-f"};
  args.insert(args.end(), p.flags.begin(), p.flags.end());
  for (const auto& o : p.opts) args.insert(args.end(), {"-o", o});
  args.insert(args.end(), {tree_.backing, tree_.mnt});
  expect_rejected(args, p.name);
}

INSTANTIATE_TEST_SUITE_P(
    Cli, BadOptionTest,
    ::testing::Values(BadOption{"unknown_o", {"no_such_option"}, {}},
                      BadOption{"unknown_o_value", {"no_such_option=1"}, {}},
                      BadOption{"unknown_flag", {}, {"--no-such-flag"}},
                      BadOption{"read_path_foo", {"read_path=foo"}, {}},
                      BadOption{"read_path_empty", {"read_path="}, {}},
                      BadOption{"cache_size_12q", {"cache_size=12q"}, {}},
                      BadOption{"cache_size_empty", {"cache_size="}, {}},
                      BadOption{"cache_size_words", {"cache_size=lots"}, {}},
                      BadOption{"batch_0", {"batch=0"}, {}},
                      BadOption{"batch_257", {"batch=257"}, {}},
                      BadOption{"batch_x", {"batch=x"}, {}},
                      BadOption{"defer_maybe", {"defer=maybe"}, {}},
                      BadOption{"expedite_maybe", {"expedite=maybe"}, {}},
                      BadOption{"expedite_pages_x", {"expedite_pages=x"}, {}},
                      BadOption{"gp_interval_us_x", {"gp_interval_us=x"}, {}},
                      BadOption{"gp_interval_us_huge", {"gp_interval_us=1000001"}, {}},
                      BadOption{"dirty_decay_ms_minus2", {"dirty_decay_ms=-2"}, {}},
                      BadOption{"dirty_decay_ms_x", {"dirty_decay_ms=1s"}, {}},
                      BadOption{"cache_maybe", {"cache=maybe"}, {}},
                      BadOption{"write_fill_maybe", {"write_fill=maybe"}, {}},
                      BadOption{"reply_foo", {"reply=foo"}, {}},
                      BadOption{"readahead_12q", {"readahead=12q"}, {}},
                      BadOption{"max_threads_x", {"max_threads=x"}, {}},
                      BadOption{"coherence_timeout_x", {"coherence_timeout=x"}, {}},
                      // One good -o and one bad: the bad one still counts.
                      BadOption{"good_then_bad", {"read_path=ref", "batch=0"}, {}}),
    [](const auto& tp) { return std::string(tp.param.name); });

// ── Bad paths and argument counts ──

TEST_F(CliTest, BackingDirMissing) {
  expect_rejected({"-f", "-o", stats_opt(), tree_.root + "/no-such-dir", tree_.mnt},
                  "missing backing dir");
}

TEST_F(CliTest, BackingDirIsAFile) {
  std::string f = tree_.root + "/b/a-file";
  write_file(f, "x");
  expect_rejected({"-f", "-o", stats_opt(), f, tree_.mnt}, "backing dir is a file");
}

TEST_F(CliTest, MountpointMissing) {
  expect_rejected({"-f", "-o", stats_opt(), tree_.backing, tree_.root + "/no-such-mnt"},
                  "missing mountpoint");
}

TEST_F(CliTest, MountpointIsAFile) {
  std::string f = tree_.root + "/mnt-file";
  write_file(f, "x");
  const int before = mount_count(f);
  expect_rejected({"-f", "-o", stats_opt(), tree_.backing, f}, "mountpoint is a file");
  EXPECT_EQ(mount_count(f), before);
}

TEST_F(CliTest, MountpointBusy) {
  Mount first(tree_, {});
  ASSERT_TRUE(first.start());
  write_file(tree_.backing + "/f", "first mount");
  expect_rejected({"-f", "-o", "stats_dir=" + tree_.root, tree_.backing, tree_.mnt},
                  "mountpoint already a mount point");
  EXPECT_EQ(mount_count(tree_.mnt), 1);
  // The first mount is untouched and still serves.
  EXPECT_EQ(read_file(tree_.mnt + "/f"), "first mount");
  auto st = first.unmount();
  ASSERT_TRUE(st.has_value()) << first.log();
  EXPECT_TRUE(exited_cleanly(first));
}

TEST_F(CliTest, WrongNumberOfArguments) {
  expect_rejected({}, "no arguments");
  expect_rejected({"-f"}, "only -f");
  expect_rejected({"-f", tree_.backing}, "one path");
  expect_rejected({"-f", tree_.backing, tree_.mnt, tree_.root}, "three paths");
}

// ── Help and version ──

TEST_F(CliTest, HelpExitsZero) {
  for (const char* flag : {"-h", "--help"}) {
    RunResult r = run_daemon({flag});
    EXPECT_TRUE(r.exited(0)) << flag << ": " << describe_status(r.status) << "\n" << r.output;
    // The options of the interface are documented in the help.
    for (const char* opt : {"cache_size", "read_path", "coherence_timeout", "stats_dir"}) {
      EXPECT_NE(r.output.find(opt), std::string::npos)
          << flag << " does not mention " << opt << ":\n"
          << r.output;
    }
    EXPECT_EQ(mount_count(tree_.mnt), 0);
  }
}

TEST_F(CliTest, VersionExitsZero) {
  for (const char* flag : {"-V", "--version"}) {
    RunResult r = run_daemon({flag});
    EXPECT_TRUE(r.exited(0)) << flag << ": " << describe_status(r.status) << "\n" << r.output;
    EXPECT_FALSE(r.output.empty()) << flag << " printed nothing";
    EXPECT_EQ(mount_count(tree_.mnt), 0);
  }
  // With paths too: -V wins and nothing is mounted.
  RunResult r = run_daemon({"-V", tree_.backing, tree_.mnt});
  EXPECT_TRUE(r.exited(0)) << describe_status(r.status) << "\n" << r.output;
  EXPECT_EQ(mount_count(tree_.mnt), 0);
}

// ── Going to the background ──

// Without -f the command returns once the mount is in place and the cache
// has started: exit 0, the mount serves at once, and the daemon that stays
// behind drains and exits on unmount (its stats files go away).
TEST_F(CliTest, DaemonizesOnceMounted) {
#if defined(NOREFS_TEST_TSAN)
  // jemalloc's fork handlers lock its mutexes before fork() and
  // re-initialize them in the child without unlocking, so TSan in the child
  // reports a "double lock" at the first arena stats refresh (the same as
  // tools/check/evict_race_main.cc notes); libfuse's own fuse_daemonize() forks
  // the same way.  The foreground daemon is what the other tests run.
  GTEST_SKIP() << "fork() under TSan with jemalloc: see the comment";
#endif
  write_file(tree_.backing + "/f", "served");
  // Every outcome: detach the mount and kill a daemon that did not exit
  // (its stats file is still there), by pid.
  pid_t daemon = -1;
  auto cache_file = [&] { return tree_.stats + "/cache." + std::to_string(daemon); };
  struct Cleanup {
    std::function<void()> f;
    ~Cleanup() { f(); }
  } cleanup{[&] {
    if (mount_count(tree_.mnt) > 0) lazy_unmount(tree_.mnt);
    if (daemon > 0 && std::filesystem::exists(cache_file())) ::kill(daemon, SIGKILL);
  }};
  RunResult r = run({daemon_path(), "-o", stats_opt(), tree_.backing, tree_.mnt}, 10s * kSlow);
  // The stats files name the daemon that stayed.
  for (const auto& e : std::filesystem::directory_iterator(tree_.stats)) {
    const std::string name = e.path().filename();
    if (name.starts_with("cache.")) daemon = std::stoi(name.substr(6));
  }
  if (daemon > 0) tree_.note_daemon(daemon);  // the stale cleanup kills it if we die here
  ASSERT_TRUE(r.exited(0)) << describe_status(r.status) << "\n" << r.output;
  EXPECT_EQ(mount_count(tree_.mnt), 1);
  EXPECT_EQ(read_file(tree_.mnt + "/f"), "served");
  ASSERT_GT(daemon, 0) << "no cache.<pid> in " << tree_.stats;
  RunResult u = run({"fusermount3", "-u", tree_.mnt}, 10s * kSlow);
  EXPECT_TRUE(u.exited(0)) << u.output;
  // Not our child (nor necessarily reaped by anyone here): a clean exit
  // removes its stats files, after draining every page.
  for (int i = 0; i < 100 * kSlow && std::filesystem::exists(cache_file()); i++) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(stats_files_removed(tree_.stats, daemon));
}

// ── The mount itself ──

TEST_F(CliTest, MountinfoNamesBackingDirAndSubtype) {
  Mount mnt(tree_, {});
  ASSERT_TRUE(mnt.start());
  int found = 0;
  for (const auto& e : mounts()) {
    if (e.mount_point != tree_.mnt) continue;
    found++;
    EXPECT_EQ(e.fstype, "fuse.norefs");
    EXPECT_EQ(e.source, tree_.backing);
  }
  EXPECT_EQ(found, 1);
  ASSERT_TRUE(mnt.unmount().has_value()) << mnt.log();
  EXPECT_TRUE(exited_cleanly(mnt));
  EXPECT_TRUE(stats_files_removed(tree_.stats, mnt.pid()));
}

// Every documented option is accepted, and the mount then reads back what
// was written (bytes compared with the backing file) and unmounts cleanly.
struct GoodOptions {
  const char* name;
  MountConfig cfg;
};

class GoodOptionsTest : public CliTest, public ::testing::WithParamInterface<GoodOptions> {};

TEST_P(GoodOptionsTest, MountWriteReadUnmount) {
  Mount mnt(tree_, GetParam().cfg);
  ASSERT_TRUE(mnt.start());
  {
    const std::string data = random_bytes(3 * kPage + 123, 7);
    const std::string old = random_bytes(5 * kPage, 8);
    write_file(tree_.backing + "/pre", old);  // read cold through the mount
    EXPECT_BYTES_EQ(old, read_file(tree_.mnt + "/pre"));
    write_file(tree_.mnt + "/f", data);
    EXPECT_BYTES_EQ(data, read_file(tree_.mnt + "/f"));
    EXPECT_BYTES_EQ(data, read_file(tree_.backing + "/f"));
    Fd fd(tree_.mnt + "/f", O_RDWR);
    pwrite_all(fd.get(), "hello", 4000);
    std::string model = data;
    model_write(model, "hello", 4000);
    EXPECT_BYTES_EQ(model, pread_str(fd.get(), model.size() + 10, 0));
  }
  auto st = mnt.unmount();
  ASSERT_TRUE(st.has_value()) << mnt.log();
  EXPECT_TRUE(exited_cleanly(mnt));
  EXPECT_TRUE(stats_files_removed(tree_.stats, mnt.pid()));
}

INSTANTIATE_TEST_SUITE_P(
    Cli, GoodOptionsTest,
    ::testing::Values(
        GoodOptions{"defaults", {}}, GoodOptions{"read_path_noref", {{"read_path=noref"}, {}}},
        GoodOptions{"read_path_ref", {{"read_path=ref"}, {}}},
        GoodOptions{"read_path_ref_fetchadd", {{"read_path=ref-fetchadd"}, {}}},
        GoodOptions{"read_path_stackcopy", {{"read_path=stackcopy"}, {}}},
        GoodOptions{"sizes", {{"cache_size=64m", "readahead=256k", "expedite_pages=16"}, {}}},
        GoodOptions{"pacing_decay", {{"gp_interval_us=20000", "dirty_decay_ms=-1"}, {}}},
        GoodOptions{"decay_0", {{"gp_interval_us=0", "dirty_decay_ms=0"}, {}}},
        GoodOptions{"size_suffixes", {{"cache_size=1g", "readahead=0"}, {}}},
        GoodOptions{"size_k", {{"cache_size=512k", "readahead=4k"}, {}}},
        GoodOptions{"no_defer_no_expedite", {{"defer=off", "expedite=off", "read_path=ref"}, {}}},
        GoodOptions{"defer_on", {{"defer=on", "expedite=on"}, {}}},
        GoodOptions{"batch_1", {{"batch=1"}, {}}}, GoodOptions{"batch_256", {{"batch=256"}, {}}},
        GoodOptions{"cache_off", {{"cache=off"}, {}}}, GoodOptions{"cache_on", {{"cache=on"}, {}}},
        GoodOptions{"write_fill_off", {{"write_fill=off"}, {}}},
        GoodOptions{"kernel_cache", {{"kernel_cache"}, {}}},
        GoodOptions{"threads", {{"max_threads=4", "clone_fd"}, {}}},
        GoodOptions{"reply_copy", {{"reply=copy"}, {}}},
        GoodOptions{"reply_iov", {{"reply=iov"}, {}}},
        GoodOptions{"reply_auto", {{"reply=auto"}, {}}},
        GoodOptions{"coherence_0", {{"coherence_timeout=0"}, {}}},
        GoodOptions{"permissions", {{"allow_other", "default_permissions"}, {}}},
        GoodOptions{"single_threaded", {{}, {"-s"}}}, GoodOptions{"debug", {{}, {"-d"}}},
        GoodOptions{"two_o_flags", {{}, {"-o", "read_path=stackcopy", "-o", "batch=3"}}},
        // What mount(8) hands /sbin/mount.fuse.norefs from an fstab line
        // (nofail, _netdev, user, relatime, ...) and mount.fuse3 adds (dev,
        // suid): accepted (tests/packaging/deb_test.sh mounts through both).
        GoodOptions{"mount8_options",
                    {{"rw", "dev", "suid", "exec", "async", "atime", "relatime", "nofail",
                      "_netdev", "auto", "noauto", "user", "users", "defaults",
                      "x-systemd.automount", "comment=fstab", "nodiratime", "lazytime", "silent"},
                     {"-n", "-v"}}}),
    [](const auto& tp) { return std::string(tp.param.name); });

}  // namespace
}  // namespace norefs::fs::test
