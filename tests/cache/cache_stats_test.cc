// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The cache's counters (cache_stats.h): one slot per thread, summed; a
// thread's counts stay after it exits and its slot is reused; a stats file
// read through CacheStatsReader (as another process would) sums to what
// counters() says; every hit is counted once, by fast_pages or slow_hits;
// the LRU counts are published.
#include <unistd.h>

#include <barrier>
#include <cerrno>
#include <thread>

#include "cache_test_util.h"

namespace norefs::cache::test {
namespace {

TEST(CacheStatsTest, PerThreadCountsSumExactly) {
  PageCache cache(test_config());
  const std::uint64_t size = 8 * P;
  TestFile tf(cache, 5, size);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, size), 8);
  ASSERT_TRUE(warm(cache, tf, 0, size));

  constexpr int kThreads = 4, kReads = 50;
  constexpr std::size_t kLen = 3 * P + 17;
  auto before = cache.counters();
  std::atomic<int> bad{0};
  auto round = [&] {
    // All threads hold their slots at once (after their first read), so
    // that each round has the same peak.
    std::barrier all_in(kThreads);
    run_threads(kThreads, [&](int t) {
      FileHandle h(tf.f);
      Bytes buf(kLen);
      for (int i = 0; i < kReads; i++) {
        if (i == 1) all_in.arrive_and_wait();
        std::uint64_t pos = static_cast<std::uint64_t>(t * 1000 + i * 13) % (size - kLen);
        if (cache.read(h, pos, kLen, buf.data()) != static_cast<ssize_t>(kLen) ||
            buf != pattern(5, pos, kLen, 0)) {
          bad++;
        }
      }
    });
  };
  round();
  auto after = cache.counters();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(delta(after, before, Ctr::reads), std::uint64_t{kThreads * kReads});
  EXPECT_EQ(delta(after, before, Ctr::bytes), std::uint64_t{kThreads * kReads * kLen});
  EXPECT_EQ(delta(after, before, Ctr::fast_reads), std::uint64_t{kThreads * kReads});
  EXPECT_EQ(delta(after, before, Ctr::fast_pages), std::uint64_t{kThreads * kReads * 4});
  const std::uint64_t slots = after.slots;
  EXPECT_EQ(slots, 1u + kThreads);  // this thread's and theirs

  // The threads are gone: their counts stay, and new threads reuse their
  // slots instead of taking new ones.
  round();
  auto again = cache.counters();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(delta(again, before, Ctr::reads), std::uint64_t{2 * kThreads * kReads});
  EXPECT_EQ(again.slots, slots);
}

TEST(CacheStatsTest, ReaderOfStatsFileSeesSameSums) {
  std::string path = alloc::test::unique_stats_path("cache-stats");
  {
    PageCacheConfig cfg = test_config();
    cfg.stats_path = path;
    cfg.batch = 5;
    cfg.limit_pages = 64;
    PageCache cache(cfg);
    EXPECT_EQ(cache.stats_path(), path);
    TestFile tf(cache, 5, 100 * P);
    run_threads(3, [&](int t) {
      FileHandle h(tf.f);
      Bytes buf(2 * P);
      for (int i = 0; i < 40; i++) cache.read(h, ((t * 31 + i * 7) % 98) * P, 2 * P, buf.data());
    });
    for (int i = 0; i < 4; i++) EXPECT_TRUE(reads_right(cache, tf, 0, 10 * P));

    CacheStatsReader reader(path);
    CacheCounters mine = cache.counters(), theirs = reader.sum();
    EXPECT_EQ(theirs.v, mine.v);
    EXPECT_EQ(theirs.slots, mine.slots);
    EXPECT_EQ(theirs.pages_cached, mine.pages_cached);
    EXPECT_EQ(theirs.active_pages, mine.active_pages);
    EXPECT_EQ(theirs.limit_pages, 64u);
    EXPECT_EQ(theirs.batch, 5u);
    EXPECT_EQ(theirs.read_path, static_cast<std::uint64_t>(ReadPath::noref));
    EXPECT_GT(theirs[Ctr::reads], 0u);
    EXPECT_EQ(theirs.pages_cached, tf.f->pages());
  }
  // The owner unlinks its file.
  EXPECT_NE(access(path.c_str(), F_OK), 0);
  unlink(path.c_str());
}

TEST(CacheStatsTest, NotAStatsFileIsRefused) {
  std::string path = alloc::test::unique_stats_path("not-cache-stats");
  alloc::PagePoolConfig pc;
  pc.stats_path = path;  // an alloc stats block: another magic
  {
    alloc::PagePool pool(pc);
    EXPECT_THROW(CacheStatsReader r(path), std::runtime_error);
  }
  unlink(path.c_str());
}

// Every page visit is a hit (fast_pages or slow_hits), a miss or a wait:
// a sequence of reads whose visits are known, on every path.
TEST(CacheStatsTest, HitsCountEveryHit) {
  for (ReadPath p : kAllPaths) {
    SCOPED_TRACE(read_path_name(p));
    PageCacheConfig cfg = test_config(p);
    cfg.readahead_max_pages = 0;
    PageCache cache(cfg);
    TestFile tf(cache, 5, 6 * P);
    // 6 misses (one fill of 6 pages counts one miss), then 5 x 6 hits.
    EXPECT_TRUE(reads_right(cache, tf, 0, 6 * P));
    for (int i = 0; i < 5; i++) EXPECT_TRUE(reads_right(cache, tf, 0, 6 * P));
    for (int i = 0; i < 10; i++) EXPECT_TRUE(reads_right(cache, tf, 2 * P + 100, 200));
    auto c = cache.counters();
    EXPECT_EQ(c[Ctr::misses], 1u) << describe(c);
    EXPECT_EQ(c.hits(), 5u + 5u * 6u + 10u) << describe(c);
    EXPECT_EQ(c.hits(), c[Ctr::fast_pages] + c[Ctr::slow_hits]);
    if (p == ReadPath::ref || p == ReadPath::ref_fetchadd) {
      EXPECT_EQ(c[Ctr::fast_pages], 0u);
    } else {
      EXPECT_GT(c[Ctr::fast_pages], 0u);
    }
  }
}

}  // namespace
}  // namespace norefs::cache::test
