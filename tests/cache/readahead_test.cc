// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Readahead (readahead.cc): a sequential reader's window grows (x4, x2, up
// to the maximum) and stays ahead of it, so pages read in from the backing
// file grow much faster than misses; random reads read just what they ask
// for; the window and the previous position are per handle, not per file.
// Synchronous readahead (config.async_readahead = false) makes every count
// exact; one test runs the worker and checks only what does not depend on
// its timing.
#include <thread>

#include "cache_test_util.h"

namespace norefs::cache::test {
namespace {

TEST(ReadaheadTest, SequentialReadsGrowTheWindow) {
  PageCache cache(test_config());
  const std::uint64_t pages = 256;
  TestFile tf(cache, 6, pages * P);

  std::uint64_t last_size = 0;
  for (std::uint64_t i = 0; i < pages; i++) {
    ASSERT_TRUE(reads_right(cache, tf, i * P, P)) << "page " << i;
    std::uint64_t size = tf.h->ra.size.load();
    EXPECT_GE(size, last_size) << "window shrank at page " << i;
    last_size = size;
    EXPECT_EQ(tf.h->ra.prev_pos.load(), (i + 1) * P);
  }
  auto c = cache.counters();
  EXPECT_EQ(last_size, cache.config().readahead_max_pages);
  EXPECT_EQ(c[Ctr::misses], 1u) << describe(c);
  EXPECT_EQ(c[Ctr::sync_readahead], 1u);
  EXPECT_GE(c[Ctr::async_readahead], 5u);  // windows 4, 8, 16, 32, 32...
  EXPECT_EQ(c[Ctr::readahead_pages], pages);
  EXPECT_EQ(c.hits(), pages - 1);
}

// Page order with no two consecutive reads in the same or the next page.
std::uint64_t scattered(std::uint64_t k, std::uint64_t n, std::uint64_t base = 0) {
  return base + (k * 37 + 11) % n;
}

TEST(ReadaheadTest, RandomReadsReadOnlyWhatTheyAsk) {
  PageCache cache(test_config());
  const std::uint64_t pages = 97;
  TestFile tf(cache, 6, pages * P);
  for (std::uint64_t k = 0; k < pages; k++) {
    std::uint64_t idx = scattered(k, pages);
    ASSERT_TRUE(reads_right(cache, tf, idx * P + 8, 100)) << "page " << idx;
    EXPECT_EQ(tf.h->ra.size.load(), 1u);
    EXPECT_EQ(tf.h->ra.async_size.load(), 0u);
  }
  auto c = cache.counters();
  EXPECT_EQ(c[Ctr::misses], pages) << describe(c);
  EXPECT_EQ(c[Ctr::readahead_pages], pages);
  EXPECT_EQ(c[Ctr::async_readahead], 0u);
  EXPECT_EQ(c.stops(Stop::readahead), 0u);
}

TEST(ReadaheadTest, NoReadaheadWhenMaxIsZero) {
  PageCacheConfig cfg = test_config();
  cfg.readahead_max_pages = 0;
  PageCache cache(cfg);
  TestFile tf(cache, 6, 16 * P);
  for (std::uint64_t i = 0; i < 16; i++) ASSERT_TRUE(reads_right(cache, tf, i * P, P));
  auto c = cache.counters();
  EXPECT_EQ(c[Ctr::misses], 16u);
  EXPECT_EQ(c[Ctr::readahead_pages], 16u);
  EXPECT_EQ(c[Ctr::async_readahead], 0u);
  // A larger read still reads all it asks for in one fill.
  TestFile tf2(cache, 7, 40 * P);
  auto before = cache.counters();
  EXPECT_TRUE(reads_right(cache, tf2, 0, 40 * P));
  EXPECT_EQ(delta(cache.counters(), before, Ctr::misses), 1u);
  EXPECT_EQ(delta(cache.counters(), before, Ctr::readahead_pages), 40u);
}

// Two handles on one file: one reads sequentially through pages [0, 256),
// the other at random in [512, 1024), interleaved read by read.  The random
// one neither resets nor shrinks the sequential one's window, and each
// handle keeps its own previous position.
TEST(ReadaheadTest, StateIsPerHandle) {
  PageCache cache(test_config());
  TestFile tf(cache, 6, 1024 * P);
  FileHandle& seq = *tf.h;
  FileHandle rnd(tf.f);

  std::uint64_t last_size = 0;
  for (std::uint64_t i = 0; i < 256; i++) {
    SCOPED_TRACE(testing::Message() << "step " << i);
    auto before = cache.counters();
    ssize_t r = 0;
    Bytes got = read_bytes(cache, seq, i * P, P, &r);
    ASSERT_TRUE(same_bytes(got, pattern(6, i * P, P, 0), i * P));
    if (i > 0) {
      EXPECT_EQ(delta(cache.counters(), before, Ctr::misses), 0u);
    }
    EXPECT_GE(seq.ra.size.load(), last_size);
    last_size = seq.ra.size.load();
    EXPECT_EQ(seq.ra.prev_pos.load(), (i + 1) * P);

    std::uint64_t idx = scattered(i, 512, 512);
    before = cache.counters();
    got = read_bytes(cache, rnd, idx * P + 16, 64, &r);
    ASSERT_TRUE(same_bytes(got, pattern(6, idx * P + 16, 64, 0), idx * P + 16));
    EXPECT_EQ(delta(cache.counters(), before, Ctr::misses), 1u);
    EXPECT_EQ(delta(cache.counters(), before, Ctr::readahead_pages), 1u);
    EXPECT_EQ(rnd.ra.size.load(), 1u);
    EXPECT_EQ(rnd.ra.prev_pos.load(), idx * P + 80);
    EXPECT_EQ(seq.ra.prev_pos.load(), (i + 1) * P);
  }
  EXPECT_EQ(last_size, cache.config().readahead_max_pages);
  EXPECT_EQ(cache.counters()[Ctr::misses], 1u + 256u);
}

// prev_pos decides whether the first page of a read is marked accessed
// (pos_same_folio()): per handle.  On the reference path every visit
// marks unless the handle's previous read ended in the same page.
TEST(ReadaheadTest, PrevPosIsPerHandle) {
  PageCache cache(test_config(ReadPath::ref));
  TestFile tf(cache, 6, 2 * P);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, 2 * P), 2);
  FileHandle h2(tf.f);

  EXPECT_TRUE(reads_right(cache, tf, 0, 100));    // marked: referenced
  EXPECT_TRUE(reads_right(cache, tf, 100, 100));  // same page as before: not marked
  EXPECT_TRUE(reads_right(cache, tf, 200, 100));
  EXPECT_EQ(cache.counters().active_pages, 0u);
  ssize_t r = 0;
  Bytes got = read_bytes(cache, h2, 300, 100, &r);  // h2 has no previous read
  EXPECT_TRUE(same_bytes(got, pattern(6, 300, 100, 0), 300));
  EXPECT_EQ(cache.counters().active_pages, 1u);
  EXPECT_EQ(tf.h->ra.prev_pos.load(), 300u);
  EXPECT_EQ(h2.ra.prev_pos.load(), 400u);
}

// With the worker: the timing of its fills is not ours, so only the bytes
// and the counts that do not depend on it are checked.
TEST(ReadaheadTest, AsyncWorkerSequentialReadsAreExact) {
  PageCacheConfig cfg = test_config();
  cfg.async_readahead = true;
  PageCache cache(cfg);
  const std::uint64_t pages = 200;
  TestFile tf(cache, 6, pages * P + 99);
  for (std::uint64_t pos = 0; pos < pages * P + 99; pos += 3000) {
    ASSERT_TRUE(reads_right(cache, tf, pos, 3000)) << "at " << pos;
  }
  auto c = cache.counters();
  EXPECT_GE(c[Ctr::async_readahead], 1u) << describe(c);
  EXPECT_EQ(c[Ctr::io_errors], 0u);
  EXPECT_LE(c[Ctr::readahead_pages], pages + 1);
}

}  // namespace
}  // namespace norefs::cache::test
