// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/fs/fs_test_util.cc — the mount fixture (see fs_test_util.h).
#include "fs_test_util.h"

#include <dirent.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

extern char** environ;

namespace norefs::fs::test {

namespace stdfs = std::filesystem;

const char* daemon_path() {
#ifdef NOREFS_DAEMON
  return NOREFS_DAEMON;
#else
  return "";
#endif
}

void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

std::string errno_name(int e) {
  const char* name = strerrorname_np(e);
  std::string s = name ? name : ("errno " + std::to_string(e));
  return s + " (" + std::strerror(e) + ")";
}

// ── Bytes ──

std::string random_bytes(std::size_t n, std::uint64_t seed) {
  std::string s(n, '\0');
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL;
  for (std::size_t i = 0; i < n; i += 8) {
    // splitmix64
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    std::memcpy(s.data() + i, &z, std::min<std::size_t>(8, n - i));
  }
  return s;
}

std::string pread_str(int fd, std::size_t n, off_t off) {
  std::string s(n, '\0');
  std::size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, s.data() + got, n - got, off + static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw_errno("pread at " + std::to_string(off + got));
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  s.resize(got);
  return s;
}

std::string read_chunked(int fd, std::size_t chunk) {
  std::string s, buf(chunk, '\0');
  for (;;) {
    ssize_t r = ::pread(fd, buf.data(), chunk, static_cast<off_t>(s.size()));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw_errno("pread at " + std::to_string(s.size()));
    if (r == 0) return s;
    s.append(buf, 0, static_cast<std::size_t>(r));
  }
}

std::string read_file(const std::string& path) {
  Fd fd(path, O_RDONLY);
  return read_chunked(fd.get(), 1 << 20);
}

void pwrite_all(int fd, std::string_view data, off_t off) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t r =
        ::pwrite(fd, data.data() + done, data.size() - done, off + static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw_errno("pwrite at " + std::to_string(off + done));
    if (r == 0) throw std::runtime_error("pwrite returned 0");
    done += static_cast<std::size_t>(r);
  }
}

void write_file(const std::string& path, std::string_view data, mode_t mode) {
  Fd fd(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
  pwrite_all(fd.get(), data, 0);
  if (fd.close() != 0) throw_errno("close " + path);
}

void model_write(std::string& model, std::string_view data, std::size_t off) {
  if (model.size() < off + data.size()) model.resize(off + data.size(), '\0');
  std::memcpy(model.data() + off, data.data(), data.size());
}

namespace {
std::string hex_around(const std::string& s, std::size_t at) {
  std::ostringstream os;
  std::size_t from = at >= 8 ? at - 8 : 0, to = std::min(s.size(), at + 8);
  for (std::size_t i = from; i < to; i++) {
    char b[4];
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(s[i]));
    os << (i == at ? "[" : "") << b << (i == at ? "]" : "") << (i + 1 < to ? " " : "");
  }
  return os.str();
}
}  // namespace

::testing::AssertionResult same_bytes(const char* got_expr, const char* want_expr,
                                      const std::string& got, const std::string& want) {
  if (got == want) return ::testing::AssertionSuccess();
  std::size_t n = std::min(got.size(), want.size()), i = 0;
  while (i < n && got[i] == want[i]) i++;
  std::size_t differing = 0, last = i;
  for (std::size_t j = i; j < n; j++) {
    if (got[j] != want[j]) {
      differing++;
      last = j;
    }
  }
  auto r = ::testing::AssertionFailure();
  r << got_expr << " != " << want_expr << ": sizes " << got.size() << " vs " << want.size();
  if (i < n) {
    r << "; first difference at offset " << i << " (page " << i / kPage << " +" << i % kPage
      << "), last at " << last << ", " << differing << " bytes differ in the common part"
      << "\n  got:  " << hex_around(got, i) << "\n  want: " << hex_around(want, i);
  } else {
    r << "; equal up to the shorter size";
  }
  return r;
}

struct stat lstat_or_throw(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) throw_errno("lstat " + path);
  return st;
}

// ── Processes ──

pid_t spawn(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (!log.empty()) {
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
  }
  // No descriptor of ours may leak into the child: a daemon holding a file
  // of its own mount could never be unmounted.
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  pid_t pid = -1;
  bool search = argv[0].find('/') == std::string::npos;
  int rc = search ? posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ)
                  : posix_spawn(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::system_error(rc, std::generic_category(), "posix_spawn " + argv[0]);
  return pid;
}

std::optional<int> wait_exit(pid_t pid, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return std::nullopt;  // not our child (any more)
    if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
    std::this_thread::sleep_for(2ms);
  }
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  }
  return "status " + std::to_string(status);
}

RunResult run(const std::vector<std::string>& argv, std::chrono::milliseconds limit) {
  // Named like a tree (owner pid first) so that the stale cleanup removes
  // it if this process is killed.
  std::string path = std::string(kTreePrefix) + std::to_string(::getpid()) + "-run-XXXXXX";
  int fd = must(::mkstemp(path.data()), "mkstemp");
  ::close(fd);
  RunResult res;
  pid_t pid = spawn(argv, path);
  if (auto st = wait_exit(pid, limit)) {
    res.status = *st;
  } else {
    ::kill(pid, SIGKILL);
    wait_exit(pid, 10s);
    res.output = "(killed after " + std::to_string(limit.count()) + " ms)\n";
  }
  std::ifstream in(path);
  res.output += std::string(std::istreambuf_iterator<char>(in), {});
  ::unlink(path.c_str());
  return res;
}

bool have_program(const std::string& name) {
  const char* p = std::getenv("PATH");
  std::stringstream ss(p ? p : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return true;
  }
  return false;
}

// ── mountinfo ──

namespace {
std::string unescape(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); i++) {
    if (s[i] == '\\' && i + 3 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}
}  // namespace

std::vector<MountEntry> mounts() {
  std::vector<MountEntry> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<std::string> f;
    std::string w;
    while (ls >> w) f.push_back(w);
    auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 6 || dash == f.end() || f.end() - dash < 3) continue;
    MountEntry e;
    e.mount_point = unescape(f[4]);
    e.options = f[5];
    e.fstype = dash[1];
    e.source = unescape(dash[2]);
    e.super_options = f.end() - dash > 3 ? dash[3] : "";
    out.push_back(std::move(e));
  }
  return out;
}

int mount_count(const std::string& mount_point) {
  int n = 0;
  for (const auto& e : mounts()) n += e.mount_point == mount_point;
  return n;
}

bool lazy_unmount(const std::string& mount_point) {
  if (::umount2(mount_point.c_str(), MNT_DETACH) == 0) return true;
  return run({"fusermount3", "-u", "-z", mount_point}, 10s).exited(0);
}

// ── The temporary tree ──

TempTree::TempTree() {
  std::string tmpl = std::string(kTreePrefix) + std::to_string(::getpid()) + "-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw_errno("mkdtemp " + tmpl);
  root = tmpl;
  // Reachable by the unprivileged helpers (uid 65534).
  must(::chmod(root.c_str(), 0755), "chmod " + root);
  backing = root + "/b/backing";
  mnt = root + "/mnt";
  stats = root + "/stats";
  log = root + "/daemon.log";
  for (const auto& d : {root + "/b", backing, mnt, stats}) {
    must(::mkdir(d.c_str(), 0755), "mkdir " + d);
  }
}

TempTree::~TempTree() {
  for (const auto& e : mounts()) {
    if (e.mount_point.rfind(root + "/", 0) == 0) {
      std::cerr << "norefs fs tests: " << e.mount_point << " is still mounted; leaving " << root
                << " to the stale cleanup\n";
      return;
    }
  }
  std::error_code ec;
  stdfs::remove_all(root, ec);
  if (ec) std::cerr << "norefs fs tests: removing " << root << ": " << ec.message() << "\n";
}

void TempTree::note_daemon(pid_t pid) const {
  std::ofstream(root + "/daemons", std::ios::app) << pid << "\n";
}

// ── Mount ──

std::vector<std::string> Mount::argv() const {
  std::vector<std::string> a{daemon_path(), "-f"};
  a.insert(a.end(), cfg_.flags.begin(), cfg_.flags.end());
  std::string opts = "stats_dir=" + tree_.stats;
  for (const auto& o : cfg_.options) opts += "," + o;
  a.insert(a.end(), {"-o", opts, tree_.backing, tree_.mnt});
  return a;
}

std::string Mount::log() const {
  std::ifstream in(tree_.log);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

::testing::AssertionResult Mount::start() {
  if (*daemon_path() == '\0') {
    return ::testing::AssertionFailure() << "the daemon was not built (NOREFS_DAEMON undefined)";
  }
  const int before = mount_count(tree_.mnt);
  std::string cmd;
  for (const auto& a : argv()) cmd += a + " ";
  std::ofstream(tree_.log, std::ios::app) << "---- " << cmd << "\n";
  status_.reset();
  pid_ = spawn(argv(), tree_.log);
  tree_.note_daemon(pid_);
  auto deadline = std::chrono::steady_clock::now() + 10s * kSlow;
  for (;;) {
    if (mount_count(tree_.mnt) > before) {
      mounted_ = true;
      return wait_ready(cmd);
    }
    if (auto st = wait_exit(pid_, 0ms)) {
      status_ = st;
      return ::testing::AssertionFailure() << "the daemon exited before mounting ("
                                           << describe_status(*st) << "): " << cmd << "\n"
                                           << log();
    }
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(2ms);
  }
  ::kill(pid_, SIGKILL);
  status_ = wait_exit(pid_, 10s);
  if (mount_count(tree_.mnt) > before) lazy_unmount(tree_.mnt);
  return ::testing::AssertionFailure()
         << "no mount on " << tree_.mnt << " after " << 10 * kSlow << " s: " << cmd << "\n"
         << log();
}

// The mount is in mountinfo once mount(2) returned, before the daemon has
// answered FUSE_INIT (and before it set up its cache and stats files).  A
// stat() of the mountpoint blocks until the session serves; it runs in a
// thread so that a daemon that never serves is killed, not waited for.
::testing::AssertionResult Mount::wait_ready(const std::string& cmd) {
  struct Probe {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    int err = 0;
  };
  auto probe = std::make_shared<Probe>();
  std::thread t([probe, mnt = tree_.mnt] {
    struct stat st {};
    int err = ::stat(mnt.c_str(), &st) == 0 ? 0 : errno;
    std::lock_guard lk(probe->mu);
    probe->done = true;
    probe->err = err;
    probe->cv.notify_all();
  });
  bool done;
  {
    std::unique_lock lk(probe->mu);
    done = probe->cv.wait_for(lk, 10s * kSlow, [&] { return probe->done; });
  }
  if (!done) ::kill(pid_, SIGKILL);  // aborts the connection: the stat returns
  t.join();
  if (done && probe->err == 0) return ::testing::AssertionSuccess();
  ::kill(pid_, SIGKILL);
  status_ = wait_exit(pid_, 10s);
  if (mount_count(tree_.mnt) > 0) lazy_unmount(tree_.mnt);
  return ::testing::AssertionFailure()
         << "the mount appeared but "
         << (done ? "stat() of it failed: " + errno_name(probe->err)
                  : "the daemon served no request in " + std::to_string(10 * kSlow) + " s")
         << ": " << cmd << "\n"
         << log();
}

std::optional<int> Mount::wait(std::chrono::milliseconds limit) {
  if (pid_ <= 0 || status_) return status_;
  status_ = wait_exit(pid_, limit);
  return status_;
}

void Mount::signal(int sig) const {
  if (running()) ::kill(pid_, sig);
}

std::optional<int> Mount::unmount() {
  if (pid_ <= 0 || status_) return status_;
  // EBUSY if a file is still open (e.g. a helper that has not exited yet).
  auto deadline = std::chrono::steady_clock::now() + 3s;
  RunResult r;
  while (mount_count(tree_.mnt) > 0) {
    r = run({"fusermount3", "-u", tree_.mnt}, 10s * kSlow);
    if (r.exited(0) || std::chrono::steady_clock::now() > deadline) break;
    if (wait(0ms)) break;  // the daemon died meanwhile
    std::this_thread::sleep_for(50ms);
  }
  if (auto st = wait(10s * kSlow)) return st;
  std::ofstream(tree_.log, std::ios::app)
      << "---- test fixture: the daemon did not exit after fusermount3 -u (" << r.output
      << "); SIGKILL\n";
  ::kill(pid_, SIGKILL);
  wait(10s);
  if (mount_count(tree_.mnt) > 0) lazy_unmount(tree_.mnt);
  return std::nullopt;
}

bool Mount::remove_dead_mount(bool lazy) {
  const int before = mount_count(tree_.mnt);
  RunResult r = lazy ? run({"umount", "-l", tree_.mnt}) : run({"fusermount3", "-u", tree_.mnt});
  if (!r.exited(0)) {
    std::cerr << (lazy ? "umount -l" : "fusermount3 -u") << " " << tree_.mnt << ": "
              << describe_status(r.status) << ": " << r.output;
  }
  return mount_count(tree_.mnt) < before || before == 0;
}

Mount::~Mount() {
  try {
    if (running()) unmount();
    // A daemon that died without unmounting leaves a dead mount behind.
    if (mounted_ && !running() && mount_count(tree_.mnt) > 0) lazy_unmount(tree_.mnt);
  } catch (const std::exception& e) {
    std::cerr << "norefs fs tests: ~Mount: " << e.what() << "\n";
  }
}

::testing::AssertionResult exited_cleanly(const Mount& m) {
  if (!m.status()) return ::testing::AssertionFailure() << "the daemon has not exited\n" << m.log();
  int st = *m.status();
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "the daemon ended with " << describe_status(st) << ", want exit 0; its output:\n"
         << m.log();
}

::testing::AssertionResult stats_files_removed(const std::string& dir, pid_t pid) {
  std::vector<std::string> left;
  for (const char* kind : {"alloc.", "cache."}) {
    std::string p = dir + "/" + kind + std::to_string(pid);
    if (::access(p.c_str(), F_OK) == 0) left.push_back(p);
  }
  if (left.empty()) return ::testing::AssertionSuccess();
  auto r = ::testing::AssertionFailure() << "stats files left after a clean exit:";
  for (const auto& p : left) r << " " << p;
  return r;
}

// ── Watchdog ──

struct Watchdog::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  pid_t pid = -1;
  std::string mnt, log;
  std::thread thread;
};

Watchdog::Watchdog(std::chrono::seconds budget) : state_(std::make_shared<State>()) {
  state_->thread = std::thread([s = state_, budget] {
    std::unique_lock lk(s->mu);
    if (s->cv.wait_for(lk, budget, [&] { return s->done; })) return;
    ADD_FAILURE() << "watchdog: the test ran past its budget of " << budget.count()
                  << " s; killing the daemon (pid " << s->pid << ") so that blocked calls fail";
    if (s->pid > 0) ::kill(s->pid, SIGKILL);
    if (s->cv.wait_for(lk, 20s, [&] { return s->done; })) return;
    // Still stuck (e.g. in a thread that does not touch the mount): leave
    // nothing mounted behind, then give up before ctest's SIGKILL.
    std::cerr << "watchdog: the test is still stuck; detaching " << s->mnt << " and exiting\n";
    std::ifstream in(s->log);
    std::cerr << std::string(std::istreambuf_iterator<char>(in), {});
    lazy_unmount(s->mnt);
    std::_Exit(1);
  });
}

void Watchdog::watch(pid_t daemon, const std::string& mount_point, const std::string& log) {
  std::lock_guard lk(state_->mu);
  state_->pid = daemon;
  state_->mnt = mount_point;
  state_->log = log;
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lk(state_->mu);
    state_->done = true;
  }
  state_->cv.notify_all();
  state_->thread.join();
}

// ── MountTest ──

void MountTest::SetUp() {
  ASSERT_NE(*daemon_path(), '\0') << "the daemon was not built (NOREFS_DAEMON undefined)";
  if (::access("/dev/fuse", R_OK | W_OK) != 0) {
    GTEST_SKIP() << "/dev/fuse is not usable here: " << errno_name(errno);
  }
  tree_ = std::make_unique<TempTree>();
  watchdog_ = std::make_unique<Watchdog>(budget());
  mount_ = std::make_unique<Mount>(*tree_, config());
  ASSERT_TRUE(mount_->start());
  watchdog_->watch(mount_->pid(), tree_->mnt, tree_->log);
}

void MountTest::TearDown() {
  if (mount_) {
    const bool was_running = mount_->running();
    if (was_running) {
      EXPECT_TRUE(mount_->unmount().has_value())
          << "the daemon did not exit after fusermount3 -u; killed it\n"
          << mount_->log();
    }
    if (!checked_ && mount_->status()) {
      EXPECT_TRUE(exited_cleanly(*mount_));
      if (was_running && exited_cleanly(*mount_)) {
        EXPECT_TRUE(stats_files_removed(tree_->stats, mount_->pid()));
      }
    }
    if (HasFailure()) {
      std::string log = mount_->log();
      if (log.size() > 16384) log = "...\n" + log.substr(log.size() - 16384);
      std::cerr << "---- daemon output (" << tree_->log << "):\n" << log << "----\n";
    }
    mount_.reset();
    EXPECT_EQ(mount_count(tree_->mnt), 0) << "still mounted after the test";
  }
  watchdog_.reset();
  tree_.reset();
}

std::string MountTest::m(std::string_view rel) const {
  return rel.empty() ? tree_->mnt : tree_->mnt + "/" + std::string(rel);
}
std::string MountTest::b(std::string_view rel) const {
  return rel.empty() ? tree_->backing : tree_->backing + "/" + std::string(rel);
}

void MountTest::remount() {
  auto st = mount_->unmount();
  ASSERT_TRUE(st.has_value()) << "the daemon did not exit after fusermount3 -u\n" << mount_->log();
  ASSERT_TRUE(exited_cleanly(*mount_));
  ASSERT_TRUE(stats_files_removed(tree_->stats, mount_->pid()));
  mount_ = std::make_unique<Mount>(*tree_, config());
  ASSERT_TRUE(mount_->start());
  watchdog_->watch(mount_->pid(), tree_->mnt, tree_->log);
}

void MountTest::mount_again() {
  ASSERT_FALSE(mount_->running()) << "mount_again() while the daemon runs";
  mount_ = std::make_unique<Mount>(*tree_, config());
  checked_ = false;
  ASSERT_TRUE(mount_->start());
  watchdog_->watch(mount_->pid(), tree_->mnt, tree_->log);
}

// ── Stale trees of killed test processes ──

namespace {

bool alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

// "/tmp/norefs-it-<pid>-XXXXXX/..." -> ("/tmp/norefs-it-<pid>-XXXXXX", pid).
std::optional<std::pair<std::string, pid_t>> tree_of(const std::string& path) {
  const std::string prefix = kTreePrefix;
  if (path.rfind(prefix, 0) != 0) return std::nullopt;
  std::size_t end = path.find('/', prefix.size());
  std::string root = path.substr(0, end);
  std::size_t dash = root.find('-', prefix.size());
  if (dash == std::string::npos) return std::nullopt;
  std::string digits = root.substr(prefix.size(), dash - prefix.size());
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return std::nullopt;
  return std::make_pair(root, static_cast<pid_t>(std::stol(digits)));
}

bool cmdline_mentions(pid_t pid, const std::string& s) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  std::string c(std::istreambuf_iterator<char>(in), {});
  return c.find(s) != std::string::npos;
}

class StaleCleanup : public ::testing::Environment {
 public:
  void SetUp() override {
    std::vector<std::pair<std::string, pid_t>> trees;
    auto add = [&](const std::string& path) {
      auto t = tree_of(path);
      if (t && t->second != ::getpid() && !alive(t->second) &&
          std::find(trees.begin(), trees.end(), *t) == trees.end()) {
        trees.push_back(*t);
      }
    };
    for (const auto& e : mounts()) add(e.mount_point);
    std::error_code ec;
    for (const auto& d : stdfs::directory_iterator("/tmp", ec)) add(d.path().string());
    for (const auto& [root, owner] : trees) clean(root, owner);
  }

 private:
  static void clean(const std::string& root, pid_t owner) {
    std::cerr << "norefs fs tests: cleaning " << root << " (test process " << owner
              << " is gone)\n";
    std::ifstream in(root + "/daemons");
    pid_t pid;
    while (in >> pid) {
      if (pid > 0 && alive(pid) && cmdline_mentions(pid, root)) ::kill(pid, SIGKILL);
    }
    std::vector<std::string> mps;
    for (const auto& e : mounts()) {
      if (e.mount_point.rfind(root + "/", 0) == 0) mps.push_back(e.mount_point);
    }
    std::sort(mps.rbegin(), mps.rend());  // deepest first
    for (const auto& mp : mps) lazy_unmount(mp);
    for (const auto& e : mounts()) {
      if (e.mount_point.rfind(root + "/", 0) == 0) {
        std::cerr << "norefs fs tests: cannot unmount " << e.mount_point << "\n";
        return;
      }
    }
    std::error_code ec;
    stdfs::remove_all(root, ec);
  }
};

[[maybe_unused]] ::testing::Environment* const kStaleCleanup =
    ::testing::AddGlobalTestEnvironment(new StaleCleanup);

}  // namespace

}  // namespace norefs::fs::test
