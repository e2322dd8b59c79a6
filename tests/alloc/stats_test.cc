// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Property 11: the counters published through a stats file are those of the
// pool, for a reader in this process and in another one, live (a reader
// mapped before a change sees it); the file is private (0600), unlinked when
// the pool goes, exclusive (O_EXCL), and StatsReader refuses what is not a
// stats block.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "test_util.h"

namespace norefs::alloc::test {
namespace {

void expect_same(const Counters& a, const Counters& b) {
  EXPECT_EQ(a.allocated, b.allocated);
  EXPECT_EQ(a.deferred, b.deferred);
  EXPECT_EQ(a.immediate, b.immediate);
  EXPECT_EQ(a.not_deferred, b.not_deferred);
  EXPECT_EQ(a.freed_after_gp, b.freed_after_gp);
  EXPECT_EQ(a.pending, b.pending);
  EXPECT_EQ(a.inflight, b.inflight);
  EXPECT_EQ(a.waiting, b.waiting);
  EXPECT_EQ(a.peak_waiting, b.peak_waiting);
  EXPECT_EQ(a.expedites, b.expedites);
  EXPECT_EQ(a.expedited_pages, b.expedited_pages);
  EXPECT_EQ(a.check_violations, b.check_violations);
  EXPECT_EQ(a.threads, b.threads);
  EXPECT_EQ(a.slots, b.slots);
  EXPECT_EQ(a.config, b.config);
}

// Some frees of each kind, then quiescence.
void workload(PagePool& pool, int n) {
  run_threads(2, [&](int) {
    for (int i = 0; i < n; i++) free_rcu(pool, must_alloc(pool));
    for (int i = 0; i < n / 2; i++) pool.free(must_alloc(pool));
    for (int i = 0; i < n / 4; i++) pool.free_not_deferred(must_alloc(pool));
  });
  pool.drain();
}

TEST(StatsTest, ReaderInThisProcessSeesPoolCounters) {
  PagePoolConfig cfg;
  cfg.stats_path = unique_stats_path("same-process");
  PagePool pool(cfg);
  EXPECT_EQ(pool.stats_path(), cfg.stats_path);
  StatsReader reader(cfg.stats_path);
  Counters empty = reader.sum();
  EXPECT_EQ(empty.allocated, 0u) << describe(empty);
  EXPECT_EQ(empty.config, pool.counters().config);

  workload(pool, 40);
  // Pages held and pages waiting, as seen while they are.
  Page* held = must_alloc(pool);
  {
    ReaderThread rcu_reader;
    for (int i = 0; i < 10; i++) free_rcu(pool, must_alloc(pool));
    Counters mid_pool = pool.counters();
    Counters mid_file = reader.sum();
    EXPECT_EQ(mid_file.live(), 11u) << describe(mid_file);
    EXPECT_EQ(mid_file.live(), mid_pool.live());
    // At rest the lower bound is exact (tools/check/soak_monitor.h samples it).
    EXPECT_EQ(reader.live_lower_bound(), 11);
    EXPECT_EQ(mid_file.deferred, mid_pool.deferred);
    EXPECT_EQ(reader.waiting(), mid_file.pending + mid_file.inflight);
  }
  pool.free(held);
  pool.drain();
  Counters from_pool = pool.counters();
  Counters from_file = reader.sum();
  expect_same(from_file, from_pool);
  EXPECT_EQ(from_file.deferred, 90u) << describe(from_file);
  EXPECT_EQ(from_file.allocated, 2u * (40 + 20 + 10) + 11) << describe(from_file);
  EXPECT_EQ(reader.waiting(), 0u);
  EXPECT_EQ(reader.live_lower_bound(), 0);
}

// live_lower_bound() never overstates while threads allocate and free: two
// threads each hold at most 8 pages, freed at once (immediate) and
// reallocated, so live() never exceeds 16; a sampler checks the bound
// meanwhile.  Checked against the broken order (the frees read before the
// allocations): at thousands of pages a millisecond it reads 50,000 and
// more, and the test fails.
TEST(StatsTest, LiveLowerBoundNeverOverstatesUnderChurn) {
  PagePoolConfig cfg;
  cfg.stats_path = unique_stats_path("live-bound");
  PagePool pool(cfg);
  StatsReader reader(cfg.stats_path);
  constexpr int kHeld = 8, kThreads = 2;
  std::atomic<bool> stop{false};
  std::int64_t worst = 0;
  std::uint64_t samples = 0;
  std::thread sampler([&] {
    while (!stop.load(std::memory_order_relaxed)) {  // relaxed: a flag, no data
      worst = std::max(worst, reader.live_lower_bound());
      samples++;
    }
  });
  run_threads(kThreads, [&](int) {
    Page* held[kHeld];
    for (int round = 0; round < 20000; round++) {
      for (Page*& p : held) p = must_alloc(pool);
      for (Page* p : held) pool.free(p);
    }
  });
  stop.store(true, std::memory_order_relaxed);
  sampler.join();
  EXPECT_GT(samples, 0u);
  EXPECT_LE(worst, kHeld * kThreads);
  EXPECT_EQ(reader.live_lower_bound(), 0);
}

// The helper program norefs_alloc_stats_child (tests/alloc/helpers), started
// with posix_spawn: a separately exec'd process with its own mapping of the
// file.  (Not fork(): jemalloc's prefork handler takes more locks than TSan's
// deadlock detector can hold, which aborts TSan itself.)
class StatsChild {
 public:
  explicit StatsChild(const std::string& path) {
    int to[2], from[2];
    if (pipe2(to, O_CLOEXEC) != 0 || pipe2(from, O_CLOEXEC) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to[0], 0);
    posix_spawn_file_actions_adddup2(&fa, from[1], 1);
    std::string prog = NOREFS_HELPER_STATS_CHILD;
    char* argv[] = {prog.data(), const_cast<char*>(path.c_str()), nullptr};
    if (posix_spawn(&pid_, prog.c_str(), &fa, nullptr, argv, environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    close(to[0]);
    close(from[1]);
    to_ = to[1];
    from_ = fdopen(from[0], "r");
  }
  ~StatsChild() {
    if (to_ >= 0) close(to_);
    if (from_ != nullptr) std::fclose(from_);
    if (pid_ > 0) wait();
  }
  StatsChild(const StatsChild&) = delete;
  StatsChild& operator=(const StatsChild&) = delete;

  bool started() const { return pid_ > 0 && from_ != nullptr; }
  std::string line() {
    char buf[256];
    if (from_ == nullptr || std::fgets(buf, sizeof buf, from_) == nullptr) return "";
    std::string l(buf);
    if (!l.empty() && l.back() == '\n') l.pop_back();
    return l;
  }
  void go() { EXPECT_EQ(write(to_, "go\n", 3), 3); }
  // "name value" lines up to "end".
  std::map<std::string, std::uint64_t> values() {
    std::map<std::string, std::uint64_t> v;
    for (std::string l = line(); !l.empty() && l != "end"; l = line()) {
      auto sp = l.find(' ');
      if (sp != std::string::npos) v[l.substr(0, sp)] = std::stoull(l.substr(sp + 1));
    }
    return v;
  }
  // The exit status (waitpid), once.
  int wait() {
    int status = -1;
    if (pid_ > 0 && waitpid(pid_, &status, 0) == pid_) pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1;
  FILE* from_ = nullptr;
};

// The child maps the file and says so; the parent then changes the counters
// and lets the child read: it must see the new values, live.
TEST(StatsTest, ReaderInAnotherProcessSeesLiveCounters) {
  PagePoolConfig cfg;
  cfg.stats_path = unique_stats_path("child");
  PagePool pool(cfg);
  workload(pool, 20);
  StatsChild child(cfg.stats_path);
  ASSERT_TRUE(child.started());
  ASSERT_EQ(child.line(), "ready");
  Counters at_start = pool.counters();
  workload(pool, 30);             // after the child mapped the file
  Page* held = must_alloc(pool);  // and one page live while it reads
  Counters expect = pool.counters();
  child.go();
  auto got = child.values();
  int status = child.wait();
  pool.free(held);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;

  EXPECT_GT(expect.allocated, at_start.allocated);
  EXPECT_EQ(got["allocated"], expect.allocated);
  EXPECT_EQ(got["deferred"], expect.deferred);
  EXPECT_EQ(got["immediate"], expect.immediate);
  EXPECT_EQ(got["not_deferred"], expect.not_deferred);
  EXPECT_EQ(got["freed_after_gp"], expect.freed_after_gp);
  EXPECT_EQ(got["waiting"], expect.waiting);
  EXPECT_EQ(got["reader_waiting"], expect.waiting);
  EXPECT_EQ(got["threads"], expect.threads);
  EXPECT_EQ(got["slots"], expect.slots);
  EXPECT_EQ(got["config"], expect.config);
  EXPECT_EQ(got["deferred"], 2u * (20 + 30));
  EXPECT_EQ(got["allocated"], 2u * (20 + 10 + 5 + 30 + 15 + 7) + 1);
  EXPECT_EQ(got["allocated"] - got["immediate"] - got["not_deferred"] - got["freed_after_gp"], 1u)
      << "the child sees the one live page";
}

TEST(StatsTest, AnotherProcessRejectsWhatIsNotAStatsBlock) {
  std::string missing = unique_stats_path("child-missing");
  {
    StatsChild child(missing);
    ASSERT_TRUE(child.started());
    EXPECT_EQ(child.line(), "error system_error");
    int status = child.wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 4) << status;
  }
  std::string bogus = unique_stats_path("child-bogus");
  {
    std::ofstream f(bogus, std::ios::binary);
    f << std::string(kPageSize, 'x');
  }
  {
    StatsChild child(bogus);
    ASSERT_TRUE(child.started());
    EXPECT_EQ(child.line(), "error runtime_error");
    int status = child.wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 4) << status;
  }
  unlink(bogus.c_str());
}

TEST(StatsTest, FileIsPrivateAndUnlinkedWithThePool) {
  std::string path = unique_stats_path("mode");
  {
    PagePoolConfig cfg;
    cfg.stats_path = path;
    PagePool pool(cfg);
    struct stat st {};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0600u) << std::oct << (st.st_mode & 07777);
    EXPECT_EQ(st.st_uid, geteuid());
  }
  struct stat st {};
  int rc = stat(path.c_str(), &st);
  int err = errno;
  EXPECT_EQ(rc, -1) << "stats file not unlinked with the pool";
  EXPECT_EQ(err, ENOENT);
}

TEST(StatsTest, SecondPoolWithTheSamePathThrows) {
  PagePoolConfig cfg;
  cfg.stats_path = unique_stats_path("excl");
  PagePool first(cfg);
  try {
    PagePool second(cfg);
    ADD_FAILURE() << "a second pool was created on " << cfg.stats_path;
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), EEXIST) << e.what();
  }
  // The failed second pool must not have taken the first one's file away.
  struct stat st {};
  EXPECT_EQ(stat(cfg.stats_path.c_str(), &st), 0);
  free_rcu(first, must_alloc(first));
  first.drain();
  StatsReader reader(cfg.stats_path);
  EXPECT_EQ(reader.sum().deferred, 1u);
  EXPECT_EQ(reader.sum().freed_after_gp, 1u);
}

// A symlink planted at the stats path (dangling or not) is never followed:
// the pool refuses the name (O_EXCL | O_NOFOLLOW) and the target is intact.
TEST(StatsTest, SymlinkPlantedAtThePathIsNotFollowed) {
  const std::string path = unique_stats_path("planted");
  const std::string target = path + "-target", nowhere = path + "-nowhere";
  {
    std::FILE* f = std::fopen(target.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("precious", f);
    std::fclose(f);
  }
  for (const std::string& to : {target, nowhere}) {
    ASSERT_EQ(symlink(to.c_str(), path.c_str()), 0) << std::strerror(errno);
    PagePoolConfig cfg;
    cfg.stats_path = path;
    try {
      PagePool pool(cfg);
      ADD_FAILURE() << "a pool was created through a symlink to " << to;
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code().value(), EEXIST) << e.what();
    }
    struct stat st {};
    EXPECT_EQ(lstat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the planted link was replaced";
    unlink(path.c_str());
  }
  struct stat st {};
  ASSERT_EQ(stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 8) << "the link's target was written";
  EXPECT_NE(access(nowhere.c_str(), F_OK), 0) << "the dangling link's target was created";
  unlink(target.c_str());
}

// The directory must be safe: group/world-writable only with the sticky bit.
TEST(StatsTest, DirectoryWritableByOthersWithoutStickyBitIsRefused) {
  std::string dir = "/tmp/norefs-alloc-test-dir-XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  PagePoolConfig cfg;
  cfg.stats_path = dir + "/stats";
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  try {
    PagePool pool(cfg);
    ADD_FAILURE() << "a pool was created in a 0777 directory";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), EPERM) << e.what();
    EXPECT_NE(std::string(e.what()).find("without the sticky bit"), std::string::npos) << e.what();
  }
  EXPECT_NE(access(cfg.stats_path.c_str(), F_OK), 0);
  ASSERT_EQ(chmod(dir.c_str(), 01777), 0);
  EXPECT_NO_THROW(PagePool pool(cfg));
  EXPECT_NE(access(cfg.stats_path.c_str(), F_OK), 0) << "not unlinked with the pool";
  rmdir(dir.c_str());
}

TEST(StatsTest, PoolOnAnUncreatablePathThrows) {
  PagePoolConfig cfg;
  cfg.stats_path = "/nonexistent-dir-norefs/stats";
  try {
    PagePool pool(cfg);
    ADD_FAILURE() << "a pool was created in a missing directory";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), ENOENT) << e.what();
  }
}

TEST(StatsTest, ReaderOnMissingPathThrowsSystemError) {
  std::string path = unique_stats_path("missing");
  try {
    StatsReader reader(path);
    ADD_FAILURE() << "StatsReader opened a missing file";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), ENOENT) << e.what();
  }
}

void write_file(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<char> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

TEST(StatsTest, ReaderRejectsWhatIsNotAStatsBlock) {
  std::string path = unique_stats_path("bogus");
  auto expect_rejected = [&](const std::vector<char>& bytes, const char* what) {
    write_file(path, bytes);
    try {
      StatsReader reader(path);
      ADD_FAILURE() << "StatsReader accepted " << what;
    } catch (const std::system_error& e) {
      ADD_FAILURE() << what << ": std::system_error, not std::runtime_error: " << e.what();
    } catch (const std::runtime_error&) {
    }
  };
  expect_rejected({}, "an empty file");
  expect_rejected(std::vector<char>{'h', 'e', 'l', 'l', 'o', '\n'}, "a short text file");
  expect_rejected(std::vector<char>(kPageSize, 0), "a page of zeros");
  expect_rejected(std::vector<char>(3 * kPageSize, 'x'), "three pages of text");

  // A real block, altered: another version; another slot size; slots beyond
  // the end of the file.
  std::vector<char> real;
  {
    PagePoolConfig cfg;
    cfg.stats_path = unique_stats_path("real");
    PagePool pool(cfg);
    real = read_file(cfg.stats_path);
  }
  ASSERT_GE(real.size(), sizeof(StatsHeader));
  std::uint64_t magic = 0;
  std::memcpy(&magic, real.data() + offsetof(StatsHeader, block) + offsetof(BlockHeader, magic),
              sizeof magic);
  EXPECT_EQ(magic, kStatsMagic);
  {
    write_file(path, real);
    StatsReader ok(path);  // the unaltered copy is accepted
    EXPECT_EQ(ok.sum().allocated, 0u);
  }
  std::vector<char> other_version = real;
  std::uint64_t v = kStatsVersion + 1;
  std::memcpy(other_version.data() + offsetof(StatsHeader, block) + offsetof(BlockHeader, version),
              &v, sizeof v);
  expect_rejected(other_version, "a block of another version");
  std::vector<char> other_slots = real;
  std::uint64_t slot_size = sizeof(SlotCounters) / 2;
  std::memcpy(other_slots.data() + offsetof(StatsHeader, block) + offsetof(BlockHeader, slot_size),
              &slot_size, sizeof slot_size);
  expect_rejected(other_slots, "a block whose slots have another size");
  std::vector<char> truncated(real.begin(), real.begin() + sizeof(StatsHeader) + 64);
  expect_rejected(truncated, "a block whose slots run past the end of the file");
  unlink(path.c_str());
}

TEST(StatsTest, ArenaStatisticsArePublished) {
  PagePoolConfig cfg;
  cfg.stats_path = unique_stats_path("arena");
  cfg.arena_stats_interval_ms = 10;
  PagePool pool(cfg);
  StatsReader reader(cfg.stats_path);
  std::vector<Page*> pages;
  for (int i = 0; i < 128; i++) {
    pages.push_back(must_alloc(pool));
    std::memset(pages.back()->data, 1, kPageSize);
  }
  // The driver refreshes them every 10 ms; the bound only stops a broken one.
  bool seen =
      wait_until([&] { return reader.sum().arena_active_bytes >= 128 * kPageSize; }, 20000ms);
  Counters c = reader.sum();
  EXPECT_TRUE(seen) << describe(c) << " arena_active_bytes=" << c.arena_active_bytes;
  EXPECT_GT(c.arena_resident_bytes, 0u);
  for (Page* p : pages) pool.free(p);
}

}  // namespace
}  // namespace norefs::alloc::test
