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

  RemoteReadTest() {
    alloc::process_registry();  // before the reader starts: it needs its fd
    for (std::uint32_t i = 0; i < kRemoteFiles; i++) {
      files_.push_back(std::make_unique<TestFile>(cache_, i, kRemoteFileBytes));
    }
  }

  // Runs the reader for `seconds` while this process changes the files.
  RemoteReaderOutcome run(double seconds, unsigned delay_every, unsigned delay_us,
                          pid_t* child = nullptr) {
    int region = dup(cache_.region().fd()), registry = dup(alloc::process_registry().fd());
    std::vector<std::string> args = {
        NOREFS_HELPER_REMOTE_FAST_READER, std::to_string(region),
        std::to_string(registry),         std::to_string(cache_.config().batch),
        std::to_string(seconds),          std::to_string(delay_every),
        std::to_string(delay_us)};
    for (std::uint32_t i = 0; i < kRemoteFiles; i++) {
      char a[64];
      std::snprintf(a, sizeof a, "%u:%" PRIxPTR ":%" PRIu64, i,
                    reinterpret_cast<std::uintptr_t>(&PageCache::shared_file(*files_[i]->f)),
                    kRemoteFileBytes);
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
    if (child) *child = pid;
    close(out[1]);
    close(region);
    close(registry);

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

    RemoteReaderOutcome o;
    char buf[512];
    for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) o.out.append(buf, n);
    close(out[0]);
    stop.store(true);
    for (auto& t : threads) t.join();
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
  // grace periods and that some waited for the reader.
  alloc::Counters c = cache_.pool_counters();
  EXPECT_GT(c.remote.grace_periods, 0u);
  EXPECT_GT(c.remote.waited, 0u);
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
