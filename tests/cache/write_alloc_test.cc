// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Write-allocate (PageCache::write, page_cache.cc): a write leaves its bytes
// cached.  Each test applies the write to the backing file first and then
// to the cache, as a caller must; the backing file's read counter proves
// which bytes came from the cache (a right answer from a refill would hide
// a wrong page), and the exact bytes are checked around page boundaries and
// at the end of the file.
#include <cerrno>
#include <random>
#include <thread>

#include "cache_test_util.h"

namespace norefs::cache::test {
namespace {

PageCacheConfig write_config(bool fill_partial, ReadPath path = ReadPath::noref) {
  PageCacheConfig c = test_config(path);
  c.write_fill_partial = fill_partial;
  return c;
}

// Backing first, then the cache.
int do_write(PageCache& cache, TestFile& tf, std::uint64_t pos, const Bytes& w) {
  tf.ctl->write(pos, w);
  return cache.write(*tf.f, pos, w.data(), w.size());
}

TEST(WriteAllocTest, WholePagesServedFromCacheWithoutBackingRead) {
  PageCache cache(write_config(true));
  TestFile tf(cache, 1, 8 * P);
  Bytes w = pattern(9, 0, 4 * P, 1);
  auto before = cache.counters();
  ASSERT_EQ(do_write(cache, tf, 2 * P, w), 0);
  auto after = cache.counters();
  EXPECT_EQ(delta(after, before, Ctr::write_alloc), 4u) << describe(after);
  EXPECT_EQ(delta(after, before, Ctr::write_fill), 0u);
  EXPECT_EQ(tf.f->pages(), 4u);
  EXPECT_EQ(tf.ctl->reads.load(), 0u) << "a whole-page write needs no backing read";
  ASSERT_EQ(cache.pool_counters().live(), 4u);

  before = cache.counters();
  EXPECT_TRUE(reads_right(cache, tf, 2 * P, 4 * P));
  after = cache.counters();
  EXPECT_EQ(tf.ctl->reads.load(), 0u) << "written pages must be served from the cache";
  EXPECT_EQ(delta(after, before, Ctr::misses), 0u) << describe(after);
  EXPECT_EQ(after.hits() - before.hits(), 4u);
}

// Partial edge pages: read from the backing file (fill) or left uncached.
TEST(WriteAllocTest, PartialEdgePagesFilledFromBackingOrLeft) {
  for (bool fill : {true, false}) {
    SCOPED_TRACE(fill ? "fill" : "no fill");
    PageCache cache(write_config(fill));
    TestFile tf(cache, 1, 6 * P);
    Bytes w = pattern(9, 0, 3 * P, 1);  // [P/2, 3P + P/2): pages 0..3, 0 and 3 partial
    auto before = cache.counters();
    ASSERT_EQ(do_write(cache, tf, P / 2, w), 0);
    auto after = cache.counters();
    EXPECT_EQ(delta(after, before, Ctr::write_alloc), 2u) << describe(after);
    EXPECT_EQ(delta(after, before, Ctr::write_fill), fill ? 2u : 0u) << describe(after);
    EXPECT_EQ(tf.ctl->reads.load(), fill ? 2u : 0u);
    EXPECT_EQ(tf.f->pages(), fill ? 4u : 2u);
    std::uint64_t reads = tf.ctl->reads.load();
    // Bytes around both boundaries of the write and of every page it touches.
    for (std::uint64_t at : {P / 2 - 1, P - 1, 2 * P - 3, 3 * P + P / 2 - 2}) {
      EXPECT_TRUE(reads_right(cache, tf, at, 4)) << at;
    }
    EXPECT_TRUE(reads_right(cache, tf, P / 2, 3 * P));
    if (fill) {
      EXPECT_TRUE(reads_right(cache, tf, 0, 4 * P));
      EXPECT_EQ(tf.ctl->reads.load(), reads) << "filled edge pages must be served from the cache";
    }
  }
}

// Writes past the end: a page whose other bytes lie past the old end of
// the file (the gap) or past the new end is known without a backing read.
TEST(WriteAllocTest, GrowthByWriteAtEofExactBytes) {
  for (bool fill : {true, false}) {
    SCOPED_TRACE(fill ? "fill" : "no fill");
    PageCache cache(write_config(fill));
    TestFile tf(cache, 1, P + 100);
    // Starts mid-page past the old end, ends mid-page: page 2 is known
    // (head in the gap, tail past the new end).
    Bytes w1 = pattern(9, 0, 300, 1);
    ASSERT_EQ(do_write(cache, tf, 2 * P + 10, w1), 0);
    EXPECT_EQ(tf.f->size(), 2 * P + 310);
    EXPECT_EQ(tf.ctl->reads.load(), 0u);
    EXPECT_EQ(tf.f->pages(), 1u);
    Bytes got = read_bytes(cache, *tf.h, 2 * P, P);
    EXPECT_EQ(tf.ctl->reads.load(), 0u);
    EXPECT_TRUE(same_bytes(got, tf.expect(2 * P, P), 2 * P));
    EXPECT_EQ(got.size(), 310u) << "a read stops at the end of the file";
    // Growing the file again exposes the cached page's bytes past the old
    // end: they must be zero.
    tf.ctl->resize(3 * P);
    ASSERT_EQ(cache.truncate(*tf.f, 3 * P), 0);
    got = read_bytes(cache, *tf.h, 2 * P + 310, P - 310);
    EXPECT_EQ(tf.ctl->reads.load(), 0u);
    EXPECT_TRUE(same_bytes(got, zeros(P - 310), 2 * P + 310));

    // Appending to a partial last page whose head is old data: known only
    // through the backing file.
    Bytes w2 = pattern(9, 0, 5000, 2);
    ASSERT_EQ(do_write(cache, tf, 3 * P - 20, w2), 0);  // page 2 cached: copied; page 3 known
    EXPECT_EQ(tf.f->size(), 3 * P - 20 + 5000);
    EXPECT_EQ(tf.ctl->reads.load(), 0u);
    Bytes w3 = pattern(9, 0, 100, 3);
    ASSERT_EQ(do_write(cache, tf, P + 50, w3), 0);  // page 1: head and tail are old data
    EXPECT_EQ(tf.ctl->reads.load(), fill ? 1u : 0u);
    EXPECT_TRUE(reads_right(cache, tf, 0, 5 * P));
    EXPECT_TRUE(reads_right(cache, tf, 3 * P - 21, 30));
    EXPECT_TRUE(reads_right(cache, tf, 4 * P - 30, 200));
  }
}

// Random writes over a file, checked byte for byte after each, on every
// read path: what is cached is never different from the backing file.
class WriteAllocPathTest : public ::testing::TestWithParam<ReadPath> {};

TEST_P(WriteAllocPathTest, RandomWritesExactBytes) {
  for (bool fill : {true, false}) {
    SCOPED_TRACE(fill ? "fill" : "no fill");
    PageCache cache(write_config(fill, GetParam()));
    TestFile tf(cache, 1, 5 * P + 123);
    std::mt19937_64 rng(42);
    const int rounds = kSanitized ? 40 : 150;
    for (int i = 0; i < rounds; i++) {
      std::uint64_t size = tf.f->size();
      std::uint64_t pos = rng() % (size + 2 * P);
      std::size_t len = 1 + rng() % (3 * P);
      ASSERT_EQ(do_write(cache, tf, pos, pattern(2 + i % 90, pos, len, i)), 0);
      ASSERT_TRUE(reads_right(cache, tf, 0, tf.f->size() + P)) << "round " << i;
      std::uint64_t at = rng() % tf.f->size();
      ASSERT_TRUE(reads_right(cache, tf, at, 1 + rng() % (2 * P))) << "round " << i;
    }
  }
}

// Readers on every path while a writer rewrites the file's words: every
// 8-byte word a reader sees is the file's word at that offset from some
// generation written so far (never another offset's, never poison, never
// zero), and the limit holds whenever the writer pauses.
TEST_P(WriteAllocPathTest, ConcurrentReadersDuringWritesUnderLimit) {
  PageCacheConfig cfg = write_config(true, GetParam());
  cfg.async_readahead = true;
  cfg.limit_pages = 24;
  PageCache cache(cfg);
  constexpr std::uint64_t kFileSize = 64 * P;
  constexpr std::uint32_t kFile = 3;
  TestFile tf(cache, kFile, kFileSize);
  std::atomic<std::uint32_t> gen{0};
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> bad{0}, over{0}, write_errors{0}, read_errors{0};
  std::string first_bad;
  ssize_t first_read_error = 0;
  std::mutex bad_mu;
  auto check = [&](std::uint64_t pos, const Bytes& b, std::uint32_t max_gen) {
    for (std::uint64_t o = (pos + 7) & ~std::uint64_t{7}; o + 8 <= pos + b.size(); o += 8) {
      std::uint64_t v = 0;
      std::memcpy(&v, b.data() + (o - pos), 8);  // little-endian, as pattern()
      std::uint32_t g = static_cast<std::uint32_t>(v >> 32) & 0xffffff;
      if ((v >> 56) != kFile || (v & 0xffffffffu) != o / 8 || g > max_gen) {
        if (bad.fetch_add(1) == 0) {
          std::lock_guard lk(bad_mu);
          std::ostringstream os;
          os << "word at " << o << " = 0x" << std::hex << v;
          first_bad = os.str();
        }
      }
    }
  };
  std::thread writer([&] {
    std::mt19937_64 rng(7);
    const int writes = kSanitized ? 150 : 600;
    for (int i = 1; i <= writes; i++) {
      std::uint64_t pos = (rng() % kFileSize) & ~std::uint64_t{7};
      std::size_t len = std::min<std::uint64_t>(8 * (1 + rng() % (P / 2)), kFileSize - pos);
      gen.store(static_cast<std::uint32_t>(i));  // before the bytes exist anywhere
      // -ENOMEM under the limit drops pages instead of copying them: allowed.
      int e = do_write(cache, tf, pos, pattern(kFile, pos, len, static_cast<std::uint32_t>(i)));
      if (e != 0 && e != -ENOMEM) write_errors.fetch_add(1);
      if (i % 16 == 0 && cache.pool_counters().live() > cfg.limit_pages) over.fetch_add(1);
      if (i % 64 == 0) {  // zeros: a reader may see them
        tf.ctl->zero(pos, 8 * P);
        (void)cache.punch(*tf.f, pos, 8 * P);
      }
    }
    stop.store(true);
  });
  // Punched ranges read as zero for a while: readers accept an all-zero word.
  auto check_or_zero = [&](std::uint64_t pos, Bytes b, std::uint32_t max_gen) {
    for (std::uint64_t o = (pos + 7) & ~std::uint64_t{7}; o + 8 <= pos + b.size(); o += 8) {
      std::size_t k = o - pos;
      std::uint64_t v = 0;
      std::memcpy(&v, b.data() + k, 8);
      if (v == 0) std::memcpy(b.data() + k, pattern(kFile, o, 8, 0).data(), 8);
    }
    check(pos, b, max_gen);
  };
  run_threads(2, [&](int t) {
    FileHandle h(tf.f);
    std::mt19937_64 rng(100 + t);
    while (!stop.load()) {
      std::uint64_t pos = rng() % kFileSize;
      std::size_t len = 1 + rng() % (3 * P);
      Bytes buf(len);
      ssize_t r = cache.read(h, pos, len, buf.data());
      std::uint32_t g = gen.load();  // after the read: bounds every generation it saw
      if (r < 0) {
        if (read_errors.fetch_add(1) == 0) {
          std::lock_guard lk(bad_mu);
          first_read_error = r;
        }
        continue;
      }
      buf.resize(static_cast<std::size_t>(r));
      check_or_zero(pos, std::move(buf), g);
    }
  });
  writer.join();
  EXPECT_EQ(bad.load(), 0u) << first_bad;
  EXPECT_EQ(write_errors.load(), 0u);
  EXPECT_EQ(read_errors.load(), 0u) << "first: " << first_read_error;
  EXPECT_EQ(over.load(), 0u) << "pages live over the limit of " << cfg.limit_pages;
  cache.pool().drain();
  EXPECT_LE(cache.pool_counters().live(), cfg.limit_pages);
  EXPECT_TRUE(reads_right(cache, tf, 0, kFileSize));
  auto c = cache.counters();
  EXPECT_GT(c[Ctr::write_alloc], 0u) << describe(c);
}

INSTANTIATE_TEST_SUITE_P(AllPaths, WriteAllocPathTest, ::testing::ValuesIn(kAllPaths),
                         path_param_name);

// Under a limit: a write larger than the limit succeeds, caches at most the
// limit, and never takes more pages than it.
TEST(WriteAllocTest, LimitNeverExceededWriteStillSucceeds) {
  PageCacheConfig cfg = write_config(true);
  cfg.limit_pages = 16;
  PageCache cache(cfg);
  TestFile tf(cache, 1, 0);
  for (int i = 0; i < 8; i++) {
    std::uint64_t pos = static_cast<std::uint64_t>(i) * 40 * P + (i % 2 ? 100 : 0);
    ASSERT_EQ(do_write(cache, tf, pos, pattern(9, pos, 40 * P, i)), 0);
    EXPECT_LE(cache.pool_counters().live(), cfg.limit_pages) << "write " << i;
    EXPECT_LE(cache.counters().pages_cached, cfg.limit_pages) << "write " << i;
  }
  auto c = cache.counters();
  EXPECT_GT(c[Ctr::write_skipped], 0u) << describe(c);
  EXPECT_GT(c[Ctr::write_alloc], 0u) << describe(c);
  EXPECT_TRUE(reads_right(cache, tf, 0, tf.f->size()));
  EXPECT_LE(cache.pool_counters().live(), cfg.limit_pages);
}

}  // namespace
}  // namespace norefs::cache::test
