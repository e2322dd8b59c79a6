// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The operations that change a file (page_cache.h, "Changes"): write,
// truncate, punch, invalidate, set_size, set_deleting.  Each test applies
// the change to the backing file first and then to the cache, as a caller
// must, and checks the bytes the cache returns afterwards against the
// backing file, plus which pages stayed cached (so that a right answer
// cannot come from a refill that hides a stale or unzeroed page).
#include <cerrno>
#include <limits>
#include <thread>

#include "cache_test_util.h"

namespace norefs::cache::test {
namespace {

constexpr std::uint64_t kHuge = std::numeric_limits<std::uint64_t>::max();

Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// ── truncate ──

TEST(TruncateTest, ShrinkMidPageThenExtendReadsZero) {
  PageCache cache(test_config());
  const std::uint64_t size = 3 * P + 100;
  TestFile tf(cache, 1, size);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, size), 4);

  const std::uint64_t small = P + 500;
  tf.ctl->resize(small);
  auto before = cache.counters();
  ASSERT_EQ(cache.truncate(*tf.f, small), 0);
  EXPECT_EQ(tf.f->size(), small);
  EXPECT_EQ(tf.f->pages(), 2u);
  // Pages 2 and 3 removed, page 1 replaced by its zero-tailed copy.
  EXPECT_EQ(delta(cache.counters(), before, Ctr::removed_pages), 3u);

  ssize_t r = 0;
  Bytes got = read_bytes(cache, *tf.h, 0, 4 * P, &r);
  EXPECT_EQ(r, static_cast<ssize_t>(small));
  EXPECT_TRUE(same_bytes(got, pattern(1, 0, small, 0)));
  EXPECT_TRUE(read_bytes(cache, *tf.h, small, 10, &r).empty());
  EXPECT_EQ(r, 0);

  // Extend: the old partial page's tail reads zero, from the cache (no
  // backing read for pages 0-1), not the bytes it held before.
  tf.ctl->resize(size);
  ASSERT_EQ(cache.truncate(*tf.f, size), 0);
  EXPECT_EQ(tf.f->size(), size);
  std::uint64_t reads = tf.ctl->reads.load();
  got = read_bytes(cache, *tf.h, 0, 2 * P, &r);
  EXPECT_EQ(tf.ctl->reads.load(), reads) << "pages 0-1 should still be cached";
  EXPECT_TRUE(same_bytes(got, cat(pattern(1, 0, small, 0), zeros(2 * P - small))));
  got = read_bytes(cache, *tf.h, 0, 4 * P, &r);
  EXPECT_EQ(r, static_cast<ssize_t>(size));
  EXPECT_TRUE(same_bytes(got, cat(pattern(1, 0, small, 0), zeros(size - small))));
}

TEST(TruncateTest, ToZeroAndToPageBoundary) {
  PageCache cache(test_config());
  const std::uint64_t size = 5 * P;
  TestFile tf(cache, 1, size);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, size), 5);

  tf.ctl->resize(2 * P);
  ASSERT_EQ(cache.truncate(*tf.f, 2 * P), 0);
  EXPECT_EQ(tf.f->pages(), 2u);  // a boundary leaves no partial page to copy
  EXPECT_TRUE(reads_right(cache, tf, 0, size));

  tf.ctl->resize(0);
  ASSERT_EQ(cache.truncate(*tf.f, 0), 0);
  EXPECT_EQ(tf.f->size(), 0u);
  EXPECT_EQ(tf.f->pages(), 0u);
  ssize_t r = -1;
  EXPECT_TRUE(read_bytes(cache, *tf.h, 0, size, &r).empty());
  EXPECT_EQ(r, 0);
  EXPECT_EQ(cache.counters().pages_cached, 0u);

  // Grown again by a write: the gap is zero, the old bytes are gone.
  Bytes w = pattern(7, 0, 100, 1);
  tf.ctl->write(3 * P, w);
  ASSERT_EQ(cache.write(*tf.f, 3 * P, w.data(), w.size()), 0);
  EXPECT_EQ(tf.f->size(), 3 * P + 100);
  Bytes got = read_bytes(cache, *tf.h, 0, size, &r);
  EXPECT_TRUE(same_bytes(got, cat(zeros(3 * P), w)));
}

// A truncate that finds the new last page still being filled drops it: the
// fill read the bytes before the truncate and must not publish them.
TEST(TruncateTest, PartialPageBeingFilledIsDropped) {
  PageCacheConfig cfg = test_config();
  cfg.readahead_max_pages = 0;
  PageCache cache(cfg);
  TestFile tf(cache, 1, 2 * P);

  tf.ctl->close_gate();
  ssize_t r = 0;
  Bytes got;
  std::thread reader([&] { got = read_bytes(cache, *tf.h, P, P, &r); });
  ASSERT_TRUE(wait_until([&] { return tf.ctl->held() == 1; }, kLongWait));
  tf.ctl->resize(P + 10);
  EXPECT_EQ(cache.truncate(*tf.f, P + 10), 0);
  EXPECT_EQ(tf.f->pages(), 0u);
  tf.ctl->open_gate();
  reader.join();
  EXPECT_EQ(r, 10);
  EXPECT_TRUE(same_bytes(got, pattern(1, P, 10, 0), P));

  // What is cached now is the post-truncate page: zero past the end.
  tf.ctl->resize(2 * P);
  ASSERT_EQ(cache.truncate(*tf.f, 2 * P), 0);
  got = read_bytes(cache, *tf.h, P, P, &r);
  EXPECT_TRUE(same_bytes(got, cat(pattern(1, P, 10, 0), zeros(P - 10)), P));
}

// ── punch ──

TEST(PunchTest, WholePagesRemovedPartialZeroedSizeKept) {
  PageCache cache(test_config());
  const std::uint64_t size = 5 * P;
  TestFile tf(cache, 1, size);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, size), 5);

  tf.ctl->zero(100, 2 * P);
  auto before = cache.counters();
  ASSERT_EQ(cache.punch(*tf.f, 100, 2 * P), 0);
  EXPECT_EQ(tf.f->size(), size);
  EXPECT_EQ(tf.f->pages(), 4u);  // page 1 removed; 0 and 2 replaced
  EXPECT_EQ(delta(cache.counters(), before, Ctr::removed_pages), 3u);
  std::uint64_t reads = tf.ctl->reads.load();
  EXPECT_TRUE(reads_right(cache, tf, 0, size));
  EXPECT_EQ(tf.ctl->reads.load() - reads, 1u) << "only page 1 is refilled";
  Bytes got = read_bytes(cache, *tf.h, 0, size);
  EXPECT_TRUE(same_bytes(
      got, cat(cat(pattern(1, 0, 100, 0), zeros(2 * P)), pattern(1, 2 * P + 100, 3 * P - 100, 0))));
}

TEST(PunchTest, AnyRange) {
  PageCache cache(test_config());
  const std::uint64_t size = 6 * P + 333;
  TestFile tf(cache, 1, size);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, size), 7);

  struct Range {
    std::uint64_t off, len;
  };
  for (Range k : {Range{P + 10, 20},             // inside one page
                  Range{size + 100, 5000},       // beyond EOF
                  Range{size - 10, 1ull << 40},  // tail, len far past EOF
                  Range{4 * P - 1, 2},           // across a boundary, 1 byte each side
                  Range{3 * P, P},               // exactly one page
                  Range{5 * P + 7, kHuge - 3},   // off + len overflows
                  Range{2 * P, 0}}) {            // nothing
    SCOPED_TRACE(testing::Message() << "punch " << k.off << " +" << k.len);
    tf.ctl->zero(k.off, k.len);
    ASSERT_EQ(cache.punch(*tf.f, k.off, k.len), 0);
    EXPECT_EQ(tf.f->size(), size);
    EXPECT_TRUE(reads_right(cache, tf, 0, size + P));
    EXPECT_TRUE(reads_right(cache, tf, k.off > 50 ? k.off - 50 : 0, 200));
  }
  // Everything past 5P + 7 is zero.
  Bytes got = read_bytes(cache, *tf.h, 5 * P, 2 * P);
  EXPECT_TRUE(same_bytes(got, cat(pattern(1, 5 * P, 7, 0), zeros(size - 5 * P - 7)), 5 * P));

  // The whole file: no page left, all zero.
  tf.ctl->zero(0, size);
  ASSERT_EQ(cache.punch(*tf.f, 0, kHuge), 0);
  EXPECT_EQ(tf.f->pages(), 0u);  // the partial last page too: the range covers all of it
  Bytes all = read_bytes(cache, *tf.h, 0, size);
  EXPECT_TRUE(same_bytes(all, zeros(size)));
}

// ── write ──

TEST(WriteTest, OverwriteInsideAcrossAndExtending) {
  PageCache cache(test_config());
  const std::uint64_t size = 4 * P + 100;
  TestFile tf(cache, 1, size);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, size), 5);

  // Inside one page.
  Bytes w1 = pattern(9, 0, 200, 1);
  tf.ctl->write(P + 1000, w1);
  auto before = cache.counters();
  ASSERT_EQ(cache.write(*tf.f, P + 1000, w1.data(), w1.size()), 0);
  EXPECT_EQ(delta(cache.counters(), before, Ctr::written_pages), 1u);
  EXPECT_EQ(tf.f->pages(), 5u);
  std::uint64_t reads = tf.ctl->reads.load();
  EXPECT_TRUE(reads_right(cache, tf, 0, size));
  EXPECT_EQ(tf.ctl->reads.load(), reads) << "a write replaces cached pages, it does not drop them";

  // Across pages 1-4, unaligned both ends.
  Bytes w2 = pattern(9, 0, 2 * P + 50, 2);
  tf.ctl->write(2 * P - 25, w2);
  before = cache.counters();
  ASSERT_EQ(cache.write(*tf.f, 2 * P - 25, w2.data(), w2.size()), 0);
  EXPECT_EQ(delta(cache.counters(), before, Ctr::written_pages), 4u);
  EXPECT_EQ(tf.f->size(), size);
  EXPECT_TRUE(reads_right(cache, tf, 0, size));
  EXPECT_EQ(tf.ctl->reads.load(), reads);

  // Extending past EOF with a gap: size grows, the cached last page's bytes
  // past the old EOF read zero, the gap reads zero.
  Bytes w3 = pattern(9, 0, 100, 3);
  const std::uint64_t pos = size + 5000;
  tf.ctl->write(pos, w3);
  ASSERT_EQ(cache.write(*tf.f, pos, w3.data(), w3.size()), 0);
  EXPECT_EQ(tf.f->size(), pos + 100);
  Bytes got = read_bytes(cache, *tf.h, 4 * P, P);
  EXPECT_EQ(tf.ctl->reads.load(), reads) << "page 4 should still be cached";
  EXPECT_TRUE(same_bytes(got, tf.expect(4 * P, P), 4 * P));
  EXPECT_TRUE(same_bytes(Bytes(got.begin() + 100, got.end()), zeros(P - 100), 4 * P + 100));
  EXPECT_TRUE(reads_right(cache, tf, 0, pos + 100 + P));
  got = read_bytes(cache, *tf.h, pos - 10, 200);
  EXPECT_TRUE(same_bytes(got, cat(zeros(10), w3), pos - 10));
}

// Write-allocate without filling partial pages: the whole pages a write
// covers are created, its partial edge pages stay uncached.
TEST(WriteTest, PartialUncachedPagesStayUncachedWithoutFill) {
  PageCacheConfig cfg = test_config();
  cfg.write_fill_partial = false;
  PageCache cache(cfg);
  const std::uint64_t size = 4 * P;
  TestFile tf(cache, 1, size);
  Bytes w = pattern(9, 0, 3 * P, 1);
  tf.ctl->write(P / 2, w);
  ASSERT_EQ(cache.write(*tf.f, P / 2, w.data(), w.size()), 0);
  EXPECT_EQ(tf.f->pages(), 2u);  // pages 1 and 2
  EXPECT_EQ(tf.ctl->reads.load(), 0u);
  EXPECT_TRUE(reads_right(cache, tf, 0, size));
}

// A write that finds a page still being filled drops it: the fill read the
// old bytes, and publishing them would make the write vanish.
TEST(WriteTest, PageBeingFilledIsDroppedNoStaleBytes) {
  PageCacheConfig cfg = test_config();
  cfg.readahead_max_pages = 0;
  PageCache cache(cfg);
  TestFile tf(cache, 1, 2 * P);

  tf.ctl->close_gate();
  ssize_t r = 0;
  Bytes got;
  std::thread reader([&] { got = read_bytes(cache, *tf.h, 0, P, &r); });
  ASSERT_TRUE(wait_until([&] { return tf.ctl->held() == 1; }, kLongWait));
  Bytes w = pattern(9, 0, 300, 1);
  tf.ctl->write(1000, w);
  EXPECT_EQ(cache.write(*tf.f, 1000, w.data(), w.size()), 0);
  EXPECT_EQ(tf.f->pages(), 0u);
  tf.ctl->open_gate();
  reader.join();
  Bytes want = tf.expect(0, P);
  EXPECT_EQ(r, static_cast<ssize_t>(P));
  EXPECT_TRUE(same_bytes(got, want));
  EXPECT_TRUE(same_bytes(read_bytes(cache, *tf.h, 0, P), want));
  EXPECT_EQ(tf.f->pages(), 1u);
}

// ── invalidate, set_size ──

TEST(InvalidateTest, RangeThenAll) {
  PageCache cache(test_config());
  const std::uint64_t size = 4 * P;
  TestFile tf(cache, 1, size);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, size), 4);

  // The backing file changes from outside: the cache still has generation 0.
  tf.ctl->set_bytes(pattern(1, 0, size, 1));
  EXPECT_TRUE(same_bytes(read_bytes(cache, *tf.h, 0, size), pattern(1, 0, size, 0)));

  auto before = cache.counters();
  cache.invalidate(*tf.f, P + 5, P);  // touches pages 1 and 2
  EXPECT_EQ(delta(cache.counters(), before, Ctr::removed_pages), 2u);
  EXPECT_EQ(tf.f->pages(), 2u);
  Bytes want = cat(cat(pattern(1, 0, P, 0), pattern(1, P, 2 * P, 1)), pattern(1, 3 * P, P, 0));
  EXPECT_TRUE(same_bytes(read_bytes(cache, *tf.h, 0, size), want));

  cache.invalidate(*tf.f, 3 * P, kHuge);  // off + len overflows: to the end
  EXPECT_EQ(tf.f->pages(), 3u);
  cache.invalidate(*tf.f);
  EXPECT_EQ(tf.f->pages(), 0u);
  EXPECT_TRUE(same_bytes(read_bytes(cache, *tf.h, 0, size), pattern(1, 0, size, 1)));
}

TEST(SetSizeTest, GrowAndShrinkWithoutTouchingPages) {
  PageCache cache(test_config());
  TestFile tf(cache, 1, 2 * P);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, 2 * P), 2);

  // Grown from outside, with new bytes in the old range too.
  tf.ctl->set_bytes(pattern(1, 0, 3 * P + 10, 1));
  cache.invalidate(*tf.f);
  cache.set_size(*tf.f, 3 * P + 10);
  EXPECT_EQ(tf.f->size(), 3 * P + 10);
  ssize_t r = 0;
  Bytes got = read_bytes(cache, *tf.h, 0, 5 * P, &r);
  EXPECT_EQ(r, static_cast<ssize_t>(3 * P + 10));
  EXPECT_TRUE(same_bytes(got, pattern(1, 0, 3 * P + 10, 1)));

  std::uint64_t pages = tf.f->pages();
  cache.set_size(*tf.f, P);
  EXPECT_EQ(tf.f->pages(), pages);
  got = read_bytes(cache, *tf.h, 0, 5 * P, &r);
  EXPECT_EQ(r, static_cast<ssize_t>(P));
  EXPECT_TRUE(same_bytes(got, pattern(1, 0, P, 1)));
}

// ── deletion ──

TEST(DeleteTest, SetDeletingFreesPagesNotDeferred) {
  PageCache cache(test_config());
  TestFile tf(cache, 1, 8 * P);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, 8 * P), 8);
  // For contrast: removing a page of a live file defers it.
  auto p0 = cache.pool_counters();
  cache.invalidate(*tf.f, 0, P);
  auto p1 = cache.pool_counters();
  EXPECT_EQ(p1.deferred - p0.deferred, 1u);
  EXPECT_EQ(p1.not_deferred - p0.not_deferred, 0u);

  tf.h.reset();  // no handle may exist
  cache.set_deleting(*tf.f);
  auto p2 = cache.pool_counters();
  EXPECT_EQ(tf.f->pages(), 0u);
  EXPECT_EQ(p2.not_deferred - p1.not_deferred, 7u) << alloc::test::describe(p2);
  EXPECT_EQ(p2.deferred - p1.deferred, 0u);
  EXPECT_EQ(cache.counters().pages_cached, 0u);

  ASSERT_EQ(cache.prefetch(*tf.f, 0, 2 * P), 0) << "a deleting file takes no new pages";
}

TEST(DeleteTest, LastReferenceDropFreesNotDeferred) {
  PageCache cache(test_config());
  auto tf = std::make_unique<TestFile>(cache, 1, 6 * P);
  ASSERT_EQ(cache.prefetch(*tf->f, 0, 6 * P), 6);
  auto p0 = cache.pool_counters();
  tf.reset();
  auto p1 = cache.pool_counters();
  EXPECT_EQ(p1.not_deferred - p0.not_deferred, 6u) << alloc::test::describe(p1);
  EXPECT_EQ(p1.deferred - p0.deferred, 0u);
  EXPECT_EQ(p1.live(), p0.live() - 6);
}

}  // namespace
}  // namespace norefs::cache::test
