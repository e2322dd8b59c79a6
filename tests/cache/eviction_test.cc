// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Eviction: the memory limit, fadvise(DONTNEED) (evict) and shrink.
//
//  - limit_pages is a hard bound on pages not yet back in the arena, those
//    waiting for a grace period included: checked after every read of a
//    file many times the limit, sequential and random, on every read path,
//    and with a limit smaller than the readahead window (and than a read).
//  - evict() and shrink() skip a page a reference-path reader holds (held
//    at the sync point read:slow:before_copy), take every other one, and
//    the held reader still returns the right bytes.
//  - shrink() takes the inactive list first.
#include <random>
#include <thread>

#include "cache_test_util.h"

namespace norefs::cache::test {
namespace {

class LimitTest : public ::testing::TestWithParam<ReadPath> {};

TEST_P(LimitTest, ReadsOfLargeFileStayUnderLimit) {
  PageCacheConfig cfg = test_config(GetParam());
  cfg.limit_pages = 32;
  PageCache cache(cfg);
  const std::uint64_t pages = kSanitized ? 192 : 512;
  const std::uint64_t size = pages * P + 77;
  TestFile tf(cache, 2, size);

  auto check_live = [&](const char* what, std::uint64_t pos) {
    auto pc = cache.pool_counters();
    ASSERT_LE(pc.live(), cfg.limit_pages)
        << what << " at " << pos << ": " << alloc::test::describe(pc);
    ASSERT_LE(cache.counters().pages_cached, cfg.limit_pages);
  };
  for (std::uint64_t pos = 0; pos < size; pos += 4 * P) {
    ASSERT_TRUE(reads_right(cache, tf, pos, 4 * P)) << "sequential at " << pos;
    check_live("sequential", pos);
  }
  std::mt19937_64 rng(3);
  for (int i = 0; i < (kSanitized ? 30 : 100); i++) {
    std::uint64_t pos = rng() % size;
    std::size_t len = 1 + rng() % (16 * P);
    ASSERT_TRUE(reads_right(cache, tf, pos, len)) << "random at " << pos;
    check_live("random", pos);
  }
  auto c = cache.counters();
  EXPECT_GE(c[Ctr::evicted], pages - cfg.limit_pages) << describe(c);
  EXPECT_EQ(c[Ctr::io_errors], 0u);
}

INSTANTIATE_TEST_SUITE_P(Paths, LimitTest, ::testing::ValuesIn(kAllPaths), path_param_name);

TEST(LimitTest, LimitSmallerThanReadaheadWindowAndRead) {
  for (std::size_t limit : {1, 4}) {
    SCOPED_TRACE(testing::Message() << "limit " << limit);
    PageCacheConfig cfg = test_config();
    cfg.limit_pages = limit;
    cfg.readahead_max_pages = 32;
    PageCache cache(cfg);
    const std::uint64_t size = 96 * P + 5;
    TestFile tf(cache, 2, size);
    for (std::size_t len : {P, 3 * P + 1, 16 * P, 64 * P}) {
      SCOPED_TRACE(testing::Message() << "len " << len);
      FileHandle h(tf.f);
      for (std::uint64_t pos = 0; pos < size; pos += len) {
        ssize_t r = 0;
        Bytes got = read_bytes(cache, h, pos, len, &r);
        ASSERT_EQ(r, static_cast<ssize_t>(std::min<std::uint64_t>(len, size - pos)));
        ASSERT_TRUE(same_bytes(got, pattern(2, pos, static_cast<std::size_t>(r), 0), pos));
        auto pc = cache.pool_counters();
        ASSERT_LE(pc.live(), limit) << alloc::test::describe(pc);
      }
    }
    auto c = cache.counters();
    // Either the windows shrank to what fits or pages were read uncached.
    EXPECT_GT(c[Ctr::readahead_pages] + c[Ctr::uncached_reads], 0u) << describe(c);
    EXPECT_GT(c[Ctr::evicted], 0u);
  }
}

// A write that replaces cached pages allocates the copies while the old
// pages wait for a grace period: the limit counts both.
TEST(LimitTest, WriteOverManyCachedPagesStaysUnderLimit) {
  PageCacheConfig cfg = test_config();
  cfg.limit_pages = 700;
  cfg.readahead_max_pages = 0;
  PageCache cache(cfg);
  const std::uint64_t pages = 400;
  TestFile tf(cache, 2, pages * P);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, pages * P), static_cast<ssize_t>(pages));
  ASSERT_LE(cache.pool_counters().live(), cfg.limit_pages);

  Bytes w = pattern(8, 0, pages * P, 1);
  tf.ctl->write(0, w);
  int err = cache.write(*tf.f, 0, w.data(), w.size());
  auto pc = cache.pool_counters();
  EXPECT_LE(pc.live(), cfg.limit_pages) << alloc::test::describe(pc);
  EXPECT_TRUE(err == 0 || err == -ENOMEM) << err;
  EXPECT_TRUE(reads_right(cache, tf, 0, pages * P));
  EXPECT_LE(cache.pool_counters().live(), cfg.limit_pages);
}

// The bound holds with several readers filling at once: each fill's
// reservation must count the others' pages, not only what is live now.
TEST(LimitTest, ConcurrentReadersStayUnderLimit) {
  PageCacheConfig cfg = test_config();
  cfg.limit_pages = 16;
  cfg.readahead_max_pages = 8;
  PageCache cache(cfg);
  constexpr int kThreads = 4;
  std::vector<std::unique_ptr<TestFile>> files;
  for (int t = 0; t < kThreads; t++) {
    files.push_back(std::make_unique<TestFile>(cache, 10 + t, 128 * P));
  }
  std::atomic<std::uint64_t> worst{0};
  std::atomic<int> bad{0};
  run_threads(kThreads, [&](int t) {
    TestFile& tf = *files[t];
    Bytes buf(2 * P);
    for (int round = 0; round < 4; round++) {
      for (std::uint64_t pos = 0; pos < 128 * P; pos += 2 * P) {
        if (cache.read(*tf.h, pos, 2 * P, buf.data()) != static_cast<ssize_t>(2 * P) ||
            buf != pattern(10 + t, pos, 2 * P, 0)) {
          bad++;
        }
        std::uint64_t live = cache.pool_counters().live();
        std::uint64_t w = worst.load();
        while (live > w && !worst.compare_exchange_weak(w, live)) {
        }
      }
    }
  });
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(worst.load(), cfg.limit_pages) << describe(cache.counters());
}

class HeldPageTest : public ::testing::TestWithParam<ReadPath> {};

TEST_P(HeldPageTest, EvictAndShrinkSkipPageHeldByReferenceReader) {
  if (!sync_point::kEnabled) GTEST_SKIP() << "needs -DNOREFS_SYNC_POINTS=ON";
  PageCache cache(test_config(GetParam()));
  const std::uint64_t size = 4 * P;
  TestFile tf(cache, 2, size);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, size), 4);

  SyncPointScope scope;
  Holder holder;
  sync_point::set("read:slow:before_copy", holder.callback());
  ssize_t r = 0;
  Bytes got;
  std::thread reader([&] {
    Holder::hold_me();
    got = read_bytes(cache, *tf.h, 2 * P + 8, 100, &r);
  });
  ASSERT_TRUE(holder.wait_held());

  auto before = cache.counters();
  EXPECT_EQ(cache.evict(*tf.f), 3u);
  EXPECT_EQ(tf.f->pages(), 1u);
  EXPECT_EQ(cache.shrink(10), 0u);
  auto after = cache.counters();
  EXPECT_EQ(delta(after, before, Ctr::evicted), 3u);
  EXPECT_GE(delta(after, before, Ctr::evict_skipped), 1u) << describe(after);
  EXPECT_EQ(tf.f->pages(), 1u);

  holder.release();
  reader.join();
  sync_point::clear();
  EXPECT_EQ(r, 100);
  EXPECT_TRUE(same_bytes(got, pattern(2, 2 * P + 8, 100, 0), 2 * P + 8));
  // The page the reader held is an ordinary page again.
  EXPECT_EQ(cache.evict(*tf.f), 1u);
  EXPECT_EQ(tf.f->pages(), 0u);
  EXPECT_TRUE(reads_right(cache, tf, 0, size));
}

INSTANTIATE_TEST_SUITE_P(RefPaths, HeldPageTest,
                         ::testing::Values(ReadPath::ref, ReadPath::ref_fetchadd), path_param_name);

// The limit is full of pages reference-path readers hold: nothing can be
// evicted or waited for, so a miss reads from the backing file without
// caching (uncached_reads), and the bytes are still right.
TEST(LimitTest, FullOfHeldPagesReadsUncached) {
  if (!sync_point::kEnabled) GTEST_SKIP() << "needs -DNOREFS_SYNC_POINTS=ON";
  PageCacheConfig cfg = test_config(ReadPath::ref);
  cfg.limit_pages = 1;
  PageCache cache(cfg);
  TestFile tf(cache, 2, 8 * P);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, P), 1);

  SyncPointScope scope;
  Holder holder;
  sync_point::set("read:slow:before_copy", holder.callback());
  ssize_t r = 0;
  Bytes got;
  std::thread reader([&] {
    Holder::hold_me();
    got = read_bytes(cache, *tf.h, 0, 100, &r);
  });
  if (!holder.wait_held()) {
    holder.release();
    reader.join();
    FAIL() << "the reader never reached the sync point";
  }
  FileHandle h2(tf.f);
  auto before = cache.counters();
  ssize_t r2 = 0;
  Bytes got2 = read_bytes(cache, h2, P + 10, 3 * P, &r2);
  auto after = cache.counters();
  holder.release();
  reader.join();
  sync_point::clear();

  EXPECT_EQ(r2, static_cast<ssize_t>(3 * P));
  EXPECT_TRUE(same_bytes(got2, pattern(2, P + 10, 3 * P, 0), P + 10));
  EXPECT_EQ(delta(after, before, Ctr::uncached_reads), 4u) << describe(after);
  EXPECT_EQ(delta(after, before, Ctr::readahead_pages), 0u);
  EXPECT_EQ(tf.f->pages(), 1u);
  EXPECT_LE(cache.pool_counters().live(), 1u);
  EXPECT_EQ(r, 100);
  EXPECT_TRUE(same_bytes(got, pattern(2, 0, 100, 0)));
}

TEST(ShrinkTest, TakesInactiveListFirst) {
  PageCache cache(test_config());
  const std::uint64_t size = 10 * P;
  TestFile tf(cache, 2, size);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, size), 10);
  // Pages 8 and 9 to the active list (two marks: referenced, activated).
  for (int i = 0; i < 2; i++) ASSERT_TRUE(reads_right(cache, tf, 8 * P, 2 * P));
  ASSERT_EQ(cache.counters().active_pages, 2u);

  auto before = cache.counters();
  EXPECT_EQ(cache.shrink(8), 8u);
  EXPECT_EQ(tf.f->pages(), 2u);
  EXPECT_EQ(delta(cache.counters(), before, Ctr::evicted), 8u);
  EXPECT_EQ(cache.counters().pages_cached, 2u);

  before = cache.counters();
  EXPECT_TRUE(reads_right(cache, tf, 8 * P, 2 * P));
  EXPECT_EQ(delta(cache.counters(), before, Ctr::misses), 0u);
  EXPECT_TRUE(reads_right(cache, tf, 3 * P, 10));
  EXPECT_EQ(delta(cache.counters(), before, Ctr::misses), 1u);

  // Only active pages left (and the one just read): shrink refills the
  // inactive list from the active tail and still finds what it asked for.
  ASSERT_EQ(tf.f->pages(), 3u);
  EXPECT_EQ(cache.shrink(100), 3u);
  EXPECT_EQ(tf.f->pages(), 0u);
  EXPECT_EQ(cache.counters().pages_cached, 0u);
}

TEST(EvictTest, EvictsEveryUnheldPageDeferred) {
  PageCache cache(test_config());
  const std::uint64_t size = 6 * P;
  TestFile tf(cache, 2, size);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, size), 6);
  auto p0 = cache.pool_counters();
  EXPECT_EQ(cache.evict(*tf.f), 6u);
  auto p1 = cache.pool_counters();
  EXPECT_EQ(tf.f->pages(), 0u);
  EXPECT_EQ(p1.deferred - p0.deferred, 6u) << alloc::test::describe(p1);
  EXPECT_EQ(cache.evict(*tf.f), 0u);
  auto before = cache.counters();
  EXPECT_TRUE(reads_right(cache, tf, 0, size));
  EXPECT_EQ(delta(cache.counters(), before, Ctr::misses), 1u);
}

}  // namespace
}  // namespace norefs::cache::test
