// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The noref fast path's reasons to stop (cache_stats.h, Stop), one test
// each: the reason is counted, the reference path takes over from exactly
// there, and the read returns exactly the file's bytes.
//
//  - EOF: a read past i_size inside a page is a short read that the fast
//    path finishes itself; `past_eof` counts an i_size that shrank between
//    the batch's first size load and the page's (forced with a sync point).
//  - missing: one page of a cached range invalidated.
//  - not_uptodate: a fill held at the backing; a second reader waits.
//  - readahead: sequential reads find the marks and start the next windows.
//  - drop_behind: pages read with ReadOptions::drop_behind leave once read.
//  - accessed: the exact mark_accessed no-op predicate, page by page state.
//  - interrupted: before the first page, and in the middle of a read.
//  - batch: config.batch = 4 over 10 cached pages.
#include <atomic>
#include <cerrno>
#include <thread>

#include "cache_test_util.h"

namespace norefs::cache::test {
namespace {

TEST(ReadStopTest, ReadPastEofInsidePageIsShortAndExact) {
  PageCache cache(test_config());
  const std::uint64_t size = 2 * P + 1000;
  TestFile tf(cache, 1, size);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, size), 3);
  ASSERT_TRUE(warm(cache, tf, 0, size));

  for (auto [pos, len] : {std::pair<std::uint64_t, std::size_t>{2 * P + 10, 4096},
                          {2 * P + 999, 2},
                          {P + 5, 2 * P},
                          {0, 4 * P}}) {
    SCOPED_TRACE(testing::Message() << "pos " << pos << " len " << len);
    auto before = cache.counters();
    ssize_t r = 0;
    Bytes got = read_bytes(cache, *tf.h, pos, len, &r);
    EXPECT_EQ(r, static_cast<ssize_t>(size - pos));
    EXPECT_TRUE(same_bytes(got, pattern(1, pos, size - pos, 0), pos));
    auto after = cache.counters();
    // Served whole by the fast path: EOF is completion, not a stop.
    EXPECT_EQ(delta(after, before, Ctr::fast_reads), 1u);
    EXPECT_EQ(all_stops(after) - all_stops(before), 0u) << describe(after);
  }
  // At and past EOF: nothing, and no error.
  ssize_t r = -1;
  EXPECT_TRUE(read_bytes(cache, *tf.h, size, 10, &r).empty());
  EXPECT_EQ(r, 0);
  EXPECT_TRUE(read_bytes(cache, *tf.h, size + 3 * P, 10, &r).empty());
  EXPECT_EQ(r, 0);
}

TEST(ReadStopTest, PastEofStopWhenSizeShrinksDuringBatch) {
  if (!sync_point::kEnabled) GTEST_SKIP() << "needs -DNOREFS_SYNC_POINTS=ON";
  PageCache cache(test_config());
  const std::uint64_t size = 3 * P;
  TestFile tf(cache, 1, size);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, size), 3);
  ASSERT_TRUE(warm(cache, tf, 0, size));

  // While page 0 is being copied, i_size drops to the end of page 0 with
  // page 1 still in the index (set_size touches no page): the batch's
  // isize0 still says 3 pages, page 1's isize1 says it is past the end.
  SyncPointScope scope;
  int calls = 0;
  sync_point::set("read:fast:before_copy", [&] {
    if (calls++ == 0) cache.set_size(*tf.f, P);
  });
  auto before = cache.counters();
  ssize_t r = 0;
  Bytes got = read_bytes(cache, *tf.h, 0, size, &r);
  sync_point::clear();
  auto after = cache.counters();
  EXPECT_EQ(r, static_cast<ssize_t>(P));
  EXPECT_TRUE(same_bytes(got, pattern(1, 0, P, 0)));
  EXPECT_EQ(stops_delta(after, before, Stop::past_eof), 1u) << describe(after);
  EXPECT_EQ(delta(after, before, Ctr::fast_pages), 1u);
  EXPECT_EQ(tf.f->pages(), 3u);  // set_size removes nothing
}

TEST(ReadStopTest, MissingPageInMiddleOfBatch) {
  PageCache cache(test_config());
  const std::uint64_t size = 8 * P;
  TestFile tf(cache, 1, size);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, size), 8);
  ASSERT_TRUE(warm(cache, tf, 0, size));
  cache.invalidate(*tf.f, 3 * P + 100, 10);  // page 3 only
  ASSERT_EQ(tf.f->pages(), 7u);

  auto before = cache.counters();
  std::uint64_t reads_before = tf.ctl->reads.load();
  EXPECT_TRUE(reads_right(cache, tf, 50, size - 100));
  auto after = cache.counters();
  EXPECT_EQ(stops_delta(after, before, Stop::missing), 1u) << describe(after);
  EXPECT_EQ(delta(after, before, Ctr::misses), 1u);
  EXPECT_EQ(delta(after, before, Ctr::fast_reads), 0u);
  EXPECT_EQ(delta(after, before, Ctr::fast_pages), 7u);       // 0-2 before, 4-7 after
  EXPECT_EQ(delta(after, before, Ctr::readahead_pages), 1u);  // page 3 only: 4-7 are cached
  EXPECT_EQ(tf.ctl->reads.load() - reads_before, 1u);
  EXPECT_EQ(tf.f->pages(), 8u);
}

TEST(ReadStopTest, NotUptodatePageIsWaitedFor) {
  PageCacheConfig cfg = test_config();
  cfg.readahead_max_pages = 0;  // each miss fills exactly the pages asked for
  PageCache cache(cfg);
  const std::uint64_t size = 2 * P;
  TestFile tf(cache, 1, size);
  FileHandle h2(tf.f);

  // Reader A misses on page 0; its fill inserts the page (not uptodate) and
  // is held at the backing.  Reader B finds the page not uptodate and waits.
  tf.ctl->close_gate();
  Bytes a_got, b_got;
  ssize_t a_ret = 0, b_ret = 0;
  std::thread a([&] { a_got = read_bytes(cache, *tf.h, 100, 3000, &a_ret); });
  ASSERT_TRUE(wait_until([&] { return tf.ctl->held() == 1; }, kLongWait));
  std::thread b([&] { b_got = read_bytes(cache, h2, 200, 3000, &b_ret); });
  // B counts its wait before it blocks; only then may the fill end.
  bool waited = wait_until([&] { return cache.counters()[Ctr::waits] == 1; }, kLongWait);
  tf.ctl->open_gate();
  a.join();
  b.join();
  ASSERT_TRUE(waited);

  auto c = cache.counters();
  EXPECT_EQ(a_ret, 3000);
  EXPECT_EQ(b_ret, 3000);
  EXPECT_TRUE(same_bytes(a_got, pattern(1, 100, 3000, 0), 100));
  EXPECT_TRUE(same_bytes(b_got, pattern(1, 200, 3000, 0), 200));
  EXPECT_EQ(c.stops(Stop::not_uptodate), 1u) << describe(c);
  EXPECT_EQ(c[Ctr::waits], 1u);
  EXPECT_EQ(c[Ctr::misses], 1u);  // A only: B found the page
  EXPECT_EQ(tf.ctl->reads.load(), 1u);
  EXPECT_EQ(tf.f->pages(), 1u);
}

TEST(ReadStopTest, ReadaheadMarkStartsNextWindow) {
  PageCache cache(test_config());
  const std::uint64_t pages = 64;
  TestFile tf(cache, 1, pages * P);

  for (std::uint64_t i = 0; i < pages; i++) {
    ASSERT_TRUE(reads_right(cache, tf, i * P, P)) << "page " << i;
  }
  auto c = cache.counters();
  EXPECT_GT(c.stops(Stop::readahead), 0u) << describe(c);
  EXPECT_GT(c[Ctr::async_readahead], 0u);
  // Every mark the fast path stopped on started exactly one window, and the
  // windows kept ahead of the reader: one miss, at page 0.
  EXPECT_EQ(c.stops(Stop::readahead), c[Ctr::async_readahead]);
  EXPECT_EQ(c[Ctr::misses], 1u);
  EXPECT_EQ(c[Ctr::sync_readahead], 1u);
  EXPECT_EQ(c[Ctr::readahead_pages], pages);
  EXPECT_EQ(c.hits() + c[Ctr::misses], pages);
}

TEST(ReadStopTest, DropBehindPagesLeaveOnceRead) {
  PageCacheConfig cfg = test_config();
  cfg.readahead_max_pages = 0;
  PageCache cache(cfg);
  const std::uint64_t size = 4 * P;
  TestFile tf(cache, 1, size);
  ReadOptions db;
  db.drop_behind = true;

  auto before = cache.counters();
  ssize_t r = 0;
  Bytes got = read_bytes(cache, *tf.h, 10, 3 * P, &r, db);
  auto after = cache.counters();
  EXPECT_EQ(r, static_cast<ssize_t>(3 * P));
  EXPECT_TRUE(same_bytes(got, pattern(1, 10, 3 * P, 0), 10));
  // One fill brought pages 0-3 in as drop-behind; page 0 was a miss, the
  // fast path stopped on each of pages 1-3, and every page left once read.
  EXPECT_EQ(delta(after, before, Ctr::misses), 1u);
  EXPECT_EQ(stops_delta(after, before, Stop::drop_behind), 3u) << describe(after);
  EXPECT_EQ(tf.f->pages(), 0u);
  EXPECT_EQ(after.pages_cached, 0u);

  // Nothing stayed: a second (normal) read misses again and reads right.
  before = cache.counters();
  EXPECT_TRUE(reads_right(cache, tf, 10, 3 * P));
  after = cache.counters();
  EXPECT_EQ(delta(after, before, Ctr::misses), 1u);
  EXPECT_EQ(delta(after, before, Ctr::readahead_pages), 4u);
  EXPECT_EQ(tf.f->pages(), 4u);
}

// The page's flags go none -> referenced -> active -> active+referenced, one
// step per reference-path visit; only the last is a no-op for
// mark_accessed, so only then does the fast path take the page.
TEST(ReadStopTest, AccessedRuleNeedsReferencedAndActive) {
  PageCache cache(test_config());
  TestFile tf(cache, 1, 2 * P);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, 2 * P), 2);

  struct Step {
    std::uint64_t accessed_stops, fast_reads, active_pages;
  };
  // After read k: cumulative `accessed` stops and fast reads, and pages on
  // the active list.
  const Step steps[] = {
      {1, 0, 0},  // fresh: not referenced -> stop, marked referenced
      {2, 0, 1},  // referenced, inactive -> still stops, activated
      {3, 0, 1},  // active, not referenced -> stops, marked referenced
      {3, 1, 1},  // referenced + active: the no-op, fast
      {3, 2, 1},
  };
  for (std::size_t k = 0; k < std::size(steps); k++) {
    SCOPED_TRACE(testing::Message() << "read " << k + 1);
    EXPECT_TRUE(reads_right(cache, tf, 0, P));
    auto c = cache.counters();
    EXPECT_EQ(c.stops(Stop::accessed), steps[k].accessed_stops) << describe(c);
    EXPECT_EQ(c[Ctr::fast_reads], steps[k].fast_reads);
    EXPECT_EQ(c.active_pages, steps[k].active_pages);
    EXPECT_EQ(c.hits(), k + 1);
  }
}

TEST(ReadStopTest, MarkAccessedNoopPredicateIsExact) {
  for (std::uint64_t bits = 0; bits < 8; bits++) {
    std::uint64_t s = pg::kUptodate | ((bits & 1) ? pg::kReferenced : 0) |
                      ((bits & 2) ? pg::kActive : 0) | ((bits & 4) ? pg::kDropBehind : 0);
    bool expect = (bits & 4) || (bits & 3) == 3;
    EXPECT_EQ(pg::mark_accessed_is_noop(s), expect) << "bits " << bits;
  }
}

class InterruptTest : public ::testing::TestWithParam<ReadPath> {};

TEST_P(InterruptTest, InterruptedBeforeFirstPageReturnsEintr) {
  PageCache cache(test_config(GetParam()));
  const std::uint64_t size = 4 * P;
  TestFile tf(cache, 1, size);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, size), 4);
  ASSERT_TRUE(warm(cache, tf, 0, size));
  ASSERT_TRUE(warm(cache, tf, 100, 200));  // stackcopy's fast path

  std::atomic<bool> intr{true};
  ReadOptions opt;
  opt.interrupted = &intr;
  for (auto [pos, len] : {std::pair<std::uint64_t, std::size_t>{0, size}, {100, 200}}) {
    SCOPED_TRACE(testing::Message() << "pos " << pos << " len " << len);
    auto before = cache.counters();
    ssize_t r = 0;
    read_bytes(cache, *tf.h, pos, len, &r, opt);
    auto after = cache.counters();
    // "Checked before every page": nothing read, so -EINTR.
    EXPECT_EQ(r, -EINTR);
    bool fast = GetParam() == ReadPath::noref || (GetParam() == ReadPath::stackcopy && len <= 1024);
    EXPECT_EQ(stops_delta(after, before, Stop::interrupted), fast ? 1u : 0u) << describe(after);
    EXPECT_EQ(delta(after, before, Ctr::bytes), 0u);
  }
  // Cleared: the same reads work.
  intr.store(false);
  Bytes got = read_bytes(cache, *tf.h, 0, size, nullptr, opt);
  EXPECT_TRUE(same_bytes(got, pattern(1, 0, size, 0)));
}

TEST_P(InterruptTest, InterruptedMidReadReturnsWhatItHas) {
  if (!sync_point::kEnabled) GTEST_SKIP() << "needs -DNOREFS_SYNC_POINTS=ON";
  if (GetParam() == ReadPath::stackcopy) GTEST_SKIP() << "one page per read";
  PageCache cache(test_config(GetParam()));
  const std::uint64_t size = 8 * P;
  TestFile tf(cache, 1, size);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, size), 8);
  ASSERT_TRUE(warm(cache, tf, 0, size));

  // The request is interrupted while page 2 is being copied: page 2 is
  // finished, page 3 is not started.
  std::atomic<bool> intr{false};
  ReadOptions opt;
  opt.interrupted = &intr;
  SyncPointScope scope;
  int calls = 0;
  const char* point =
      GetParam() == ReadPath::noref ? "read:fast:before_copy" : "read:slow:before_copy";
  sync_point::set(point, [&] {
    if (++calls == 3) intr.store(true);
  });
  auto before = cache.counters();
  ssize_t r = 0;
  Bytes got = read_bytes(cache, *tf.h, 0, size, &r, opt);
  sync_point::clear();
  auto after = cache.counters();
  EXPECT_EQ(r, static_cast<ssize_t>(3 * P));
  EXPECT_TRUE(same_bytes(got, pattern(1, 0, 3 * P, 0)));
  EXPECT_EQ(stops_delta(after, before, Stop::interrupted), GetParam() == ReadPath::noref ? 1u : 0u)
      << describe(after);
}

INSTANTIATE_TEST_SUITE_P(Paths, InterruptTest, ::testing::ValuesIn(kAllPaths), path_param_name);

TEST(ReadStopTest, BatchBoundary) {
  PageCacheConfig cfg = test_config();
  cfg.batch = 4;
  PageCache cache(cfg);
  const std::uint64_t size = 10 * P;
  TestFile tf(cache, 1, size);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, size), 10);
  ASSERT_TRUE(warm(cache, tf, 0, size));

  auto before = cache.counters();
  EXPECT_TRUE(reads_right(cache, tf, 0, size));
  auto after = cache.counters();
  // Pages 0-3 in one section, stop, 4-7 in the next, stop, 8-9: the fast
  // path leaves and re-enters its section, nothing goes by reference.
  EXPECT_EQ(stops_delta(after, before, Stop::batch), 2u) << describe(after);
  EXPECT_EQ(all_stops(after) - all_stops(before), 2u);
  EXPECT_EQ(delta(after, before, Ctr::fast_pages), 10u);
  EXPECT_EQ(delta(after, before, Ctr::slow_hits), 0u);
  EXPECT_EQ(delta(after, before, Ctr::misses), 0u);
  EXPECT_EQ(delta(after, before, Ctr::fast_reads), 1u);

  // Unaligned, 10 pages touched: same count, same bytes.
  before = cache.counters();
  EXPECT_TRUE(reads_right(cache, tf, 7, size - 20));
  after = cache.counters();
  EXPECT_EQ(stops_delta(after, before, Stop::batch), 2u);
  EXPECT_EQ(delta(after, before, Ctr::fast_reads), 1u);
}

}  // namespace
}  // namespace norefs::cache::test
