// SPDX-License-Identifier: LGPL-2.1-or-later
//
// A reader in another process (tests/cache/helpers/remote_fast_reader.cc)
// maps this process's shared region and reader registry and reads its
// files through the one fast path, checking every byte, while this process
// evicts, invalidates and rewrites them, refills them from its own readers,
// and reuses freed memory at once (a churner; pages are poisoned on free).
//
//  - Grace periods that wait for the registry (the design): 0 bad bytes,
//    and the reader did read through the fast path (else the test would
//    prove nothing).
//  - The control (test builds, NOREFS_SYNC_POINTS): grace periods that
//    ignore the registry.  The reader stalls inside its section before
//    some copies; the pages it holds are freed after the daemon's own grace
//    period and reused, and it must see bad bytes (or die on a reused
//    descriptor).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cinttypes>
#include <random>
#include <sstream>

#include "alloc/reader_registry.h"
#include "cache_test_util.h"

extern char** environ;

namespace norefs::cache::test {
namespace {

struct RemoteReaderOutcome {
  int status = -1;
  std::string out;
  std::uint64_t reads = 0, fast_reads = 0, bytes = 0, bad = 0;
  bool crashed() const { return WIFSIGNALED(status); }
};

class RemoteReadTest : public ::testing::Test {
 protected:
  static constexpr unsigned kRemoteFiles = 4;
  static constexpr std::uint64_t kRemoteFileBytes = 16 * P + 100;

  explicit RemoteReadTest(const PageCacheConfig& config = test_config()) : cache_(config) {
    alloc::process_registry();  // before the reader starts: it needs its fd
    for (std::uint32_t i = 0; i < kRemoteFiles; i++) {
      files_.push_back(std::make_unique<TestFile>(cache_, i, kRemoteFileBytes));
    }
  }

  // Starts the reader for `seconds`; *out gets the read end of its stdout.
  // It reads the first `nfiles` files, their first `bytes` only.
  pid_t spawn(double seconds, unsigned delay_every, unsigned delay_us, int* out_fd,
              unsigned nfiles = kRemoteFiles, std::uint64_t bytes = kRemoteFileBytes) {
    int region = dup(cache_.region().fd()), registry = dup(alloc::process_registry().fd());
    std::vector<std::string> args = {
        NOREFS_HELPER_REMOTE_FAST_READER, std::to_string(region),
        std::to_string(registry),         std::to_string(cache_.config().batch),
        std::to_string(seconds),          std::to_string(delay_every),
        std::to_string(delay_us)};
    for (std::uint32_t i = 0; i < nfiles; i++) {
      char a[64];
      std::snprintf(a, sizeof a, "%u:%" PRIxPTR ":%" PRIu64, i,
                    reinterpret_cast<std::uintptr_t>(&PageCache::shared_file(*files_[i]->f)),
                    bytes);
      args.emplace_back(a);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int out[2];
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    pid_t pid = -1;
    EXPECT_EQ(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    close(region);
    close(registry);
    *out_fd = out[0];
    return pid;
  }

  // Waits for the reader and parses its line.
  static RemoteReaderOutcome collect(pid_t pid, int out_fd) {
    RemoteReaderOutcome o;
    char buf[512];
    for (ssize_t n; (n = read(out_fd, buf, sizeof buf)) > 0;) o.out.append(buf, n);
    close(out_fd);
    if (pid > 0) waitpid(pid, &o.status, 0);
    std::istringstream is(o.out);
    std::string k;
    while (is >> k) {
      if (k == "reads") is >> o.reads;
      if (k == "fast_reads") is >> o.fast_reads;
      if (k == "bytes") is >> o.bytes;
      if (k == "bad") is >> o.bad;
    }
    std::cout << "remote reader: " << o.out;
    return o;
  }

  // Runs the reader for `seconds` while this process changes the files.
  RemoteReaderOutcome run(double seconds, unsigned delay_every, unsigned delay_us,
                          pid_t* child = nullptr) {
    int out_fd = -1;
    pid_t pid = spawn(seconds, delay_every, delay_us, &out_fd);
    if (child) *child = pid;

    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    // Readers here: refill what was evicted and keep the pages referenced
    // and active, so that the fast path may serve them.
    for (int t = 0; t < 2; t++) {
      threads.emplace_back([&, t] {
        std::mt19937_64 rng(t);
        Bytes buf(2 * P);
        while (!stop.load(std::memory_order_relaxed)) {
          TestFile& tf = *files_[rng() % kRemoteFiles];
          cache_.read(*tf.h, rng() % kRemoteFileBytes, buf.size(), buf.data());
        }
      });
    }
    // The changes: evict, invalidate, rewrite a page with the same bytes
    // (copy-on-write: the old page leaves the index).
    threads.emplace_back([&] {
      std::mt19937_64 rng(7);
      for (unsigned n = 0; !stop.load(std::memory_order_relaxed); n++) {
        TestFile& tf = *files_[n % kRemoteFiles];
        switch (n % 3) {
          case 0:
            cache_.evict(*tf.f);
            break;
          case 1:
            cache_.invalidate(*tf.f);
            break;
          default: {
            std::uint64_t idx = rng() % (kRemoteFileBytes / P);
            Bytes b = pattern(n % kRemoteFiles, idx * P, P, 0);
            cache_.write(*tf.f, idx * P, b.data(), b.size());
          }
        }
        std::this_thread::sleep_for(200us);
      }
    });
    // The churner: freed memory is reused at once.
    threads.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        std::vector<Page*> v;
        for (int i = 0; i < 32; i++) {
          if (Page* p = cache_.pool().alloc()) {
            std::memset(p->data, 0xc5, P);
            v.push_back(p);
          }
        }
        for (Page* p : v) cache_.pool().free(p);
      }
    });

    // The reader's stdout closes when it exits: then stop the load.
    RemoteReaderOutcome o = collect(pid, out_fd);
    stop.store(true);
    for (auto& t : threads) t.join();
    return o;
  }

  PageCache cache_{test_config()};
  std::vector<std::unique_ptr<TestFile>> files_;
};

TEST_F(RemoteReadTest, EveryByteIsRightWhileTheFilesChange) {
  RemoteReaderOutcome o = run(kSanitized ? 1.0 : 1.5, 64, 2000);
  ASSERT_TRUE(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0) << o.out;
  EXPECT_EQ(o.bad, 0u) << o.out;
  EXPECT_GT(o.fast_reads, 100u) << "the reader hardly read through the fast path: " << o.out;
  EXPECT_GT(o.bytes, 0u) << o.out;
  // The pool's stats block (what norefsctl reads) shows the registry's
  // grace periods.  (Whether one found the reader inside a section depends
  // on timing: the test that names a stalled reader checks that.)
  alloc::Counters c = cache_.pool_counters();
  EXPECT_GT(c.remote.grace_periods, 0u);
}

// A reader that stays inside its section is named, live, in the pool's
// stats block while a grace period waits for it.
TEST_F(RemoteReadTest, AReaderHoldingAGracePeriodIsNamedInTheStatsBlock) {
  std::atomic<std::int64_t> seen_pid{0};
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    // Grace periods back to back while the reader runs: one of them finds
    // it inside a 300 ms stall.
    while (!done.load()) {
      alloc::rcu::synchronize();
      std::this_thread::sleep_for(1ms);
    }
  });
  std::thread sampler([&] {
    while (!done.load()) {
      std::uint64_t pid = cache_.pool_counters().remote.blocking_pid;
      if (pid) seen_pid.store(static_cast<std::int64_t>(pid));
      std::this_thread::sleep_for(2ms);
    }
  });
  pid_t child = -1;
  RemoteReaderOutcome o = run(1.0, 1, 300000, &child);
  done.store(true);
  watcher.join();
  sampler.join();
  ASSERT_TRUE(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0) << o.out;
  EXPECT_EQ(seen_pid.load(), child) << "no sample named the reader: " << o.out;
  EXPECT_EQ(cache_.pool_counters().remote.blocking_pid, 0u) << "still blocked after it left";
}

// Under the limit, a reader in another process that stays inside its
// section (a 400 ms stall before each copy; a stopped process is the same
// to the daemon) keeps grace periods from ending: reads here still return
// the right bytes, uncached once what waits fills the bound; an allocation
// gives up after limit_wait_ms (limit_blocked) and the next ones do not
// wait again (limit_drains stays) until a grace period completes; once the
// reader has gone, the cache caches again.
class RemoteLimitTest : public RemoteReadTest {
 protected:
  static PageCacheConfig limited() {
    PageCacheConfig c = test_config();
    c.limit_pages = 8;
    c.limit_wait_ms = 20;
    c.readahead_max_pages = 0;
    return c;
  }
  RemoteLimitTest() : RemoteReadTest(limited()) {}
};

TEST_F(RemoteLimitTest, AReaderStuckInItsSectionLeavesPagesUncachedNotReadersStuck) {
  // Pages the reader's fast path can take (cached, referenced, active):
  // the reader reads only those, so its first read stalls inside its
  // section.
  ASSERT_TRUE(warm(cache_, *files_[0], 0, 2 * P));
  int out_fd = -1;
  pid_t pid = spawn(0.8, 1, 400000, &out_fd, 1, 2 * P);
  // Until the reader is registered and inside its first stall.
  for (int i = 0; i < 2000 && alloc::process_registry().stats().slots_in_use == 0; i++) {
    std::this_thread::sleep_for(1ms);
  }
  std::this_thread::sleep_for(50ms);
  const auto t0 = std::chrono::steady_clock::now();
  // Every page read evicts an older one, which must wait for a grace
  // period that cannot end while the reader stalls: the bound fills with
  // waiting pages.
  for (std::uint32_t f = 0; f < kRemoteFiles; f++) {
    for (std::uint64_t i = 0; i < kRemoteFileBytes / P; i++) {
      ASSERT_TRUE(reads_right(cache_, *files_[f], i * P, P)) << "file " << f << " page " << i;
      ASSERT_LE(cache_.pool_counters().live(), limited().limit_pages);
    }
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CacheCounters blocked = cache_.counters();
  RemoteReaderOutcome o = collect(pid, out_fd);
  ASSERT_TRUE(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0) << o.out;
  EXPECT_GT(blocked[Ctr::limit_blocked], 0u) << describe(blocked);
  EXPECT_GT(blocked[Ctr::uncached_reads], 0u) << describe(blocked);
  // Gave up once, then did not wait again for each page (each wait counts
  // a drain): 64 reads did not take 64 x limit_wait_ms.
  EXPECT_GT(blocked[Ctr::limit_blocked], blocked[Ctr::limit_drains]) << describe(blocked);
  RecordProperty("reads_seconds", std::to_string(took));
  EXPECT_GT(o.bytes, 0u) << "the reader never held a page: " << o.out;
  // The reader has gone: grace periods end, what waited comes back, and
  // reads are cached again (none uncached, none giving up).
  cache_.pool().drain();
  const CacheCounters after = cache_.counters();
  for (std::uint64_t i = 0; i < 4; i++) ASSERT_TRUE(reads_right(cache_, *files_[0], i * P, P));
  const CacheCounters again = cache_.counters();
  EXPECT_EQ(again[Ctr::uncached_reads], after[Ctr::uncached_reads]) << describe(again);
  EXPECT_EQ(again[Ctr::limit_blocked], after[Ctr::limit_blocked]) << describe(again);
}

#ifdef NOREFS_SYNC_POINTS
TEST_F(RemoteReadTest, ControlGracePeriodsThatIgnoreTheRegistryGiveBadReads) {
  alloc::process_registry().debug_ignore_readers(true);
  RemoteReaderOutcome o;
  // Up to three rounds: the race is likely in each, never certain.
  for (int round = 0; round < 3; round++) {
    o = run(1.0, 4, 3000);
    if (o.crashed() || o.bad > 0) break;
  }
  alloc::process_registry().debug_ignore_readers(false);
  EXPECT_TRUE(o.crashed() || o.bad > 0) << "the control found no bad read: " << o.out;
}
#endif

}  // namespace
}  // namespace norefs::cache::test
