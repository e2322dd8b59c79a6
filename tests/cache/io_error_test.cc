// SPDX-License-Identifier: LGPL-2.1-or-later
//
// I/O errors from the backing file (TestBacking's injected -EIO): a read
// that got nothing returns -EIO, one that got some bytes returns them; the
// error is counted; no page of the failed range stays cached (a later read
// must not find zeros or half-read pages); a reader waiting for the failed
// fill retries and fails or succeeds on its own; once the error is gone,
// the same reads return the right bytes.
#include <cerrno>
#include <thread>

#include "cache_test_util.h"

namespace norefs::cache::test {
namespace {

class IoErrorTest : public ::testing::TestWithParam<ReadPath> {};

TEST_P(IoErrorTest, NothingReadReturnsEioAndCachesNothing) {
  PageCache cache(test_config(GetParam()));
  const std::uint64_t size = 8 * P;
  TestFile tf(cache, 4, size);
  tf.ctl->error = -EIO;

  for (auto [pos, len] : {std::pair<std::uint64_t, std::size_t>{0, 3 * P}, {P + 5, 100}}) {
    SCOPED_TRACE(testing::Message() << "pos " << pos << " len " << len);
    auto before = cache.counters();
    ssize_t r = 0;
    read_bytes(cache, *tf.h, pos, len, &r);
    auto after = cache.counters();
    EXPECT_EQ(r, -EIO);
    EXPECT_GE(delta(after, before, Ctr::io_errors), 1u) << describe(after);
    EXPECT_EQ(delta(after, before, Ctr::bytes), 0u);
    EXPECT_EQ(delta(after, before, Ctr::readahead_pages), 0u);
    EXPECT_EQ(tf.f->pages(), 0u);
    EXPECT_EQ(after.pages_cached, 0u);
  }
  EXPECT_EQ(cache.prefetch(*tf.f, 0, size), -EIO);
  EXPECT_EQ(tf.f->pages(), 0u);

  tf.ctl->error = 0;
  auto before = cache.counters();
  EXPECT_TRUE(reads_right(cache, tf, 0, 3 * P));
  EXPECT_TRUE(reads_right(cache, tf, P + 5, 100));
  EXPECT_EQ(delta(cache.counters(), before, Ctr::io_errors), 0u);
  EXPECT_GT(tf.f->pages(), 0u);
}

TEST_P(IoErrorTest, ErrorAfterSomeBytesReturnsThem) {
  PageCacheConfig cfg = test_config(GetParam());
  cfg.readahead_max_pages = 0;
  PageCache cache(cfg);
  const std::uint64_t size = 4 * P;
  TestFile tf(cache, 4, size);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, 2 * P), 2);
  tf.ctl->error = -EIO;

  auto before = cache.counters();
  ssize_t r = 0;
  Bytes got = read_bytes(cache, *tf.h, 100, size, &r);
  auto after = cache.counters();
  EXPECT_EQ(r, static_cast<ssize_t>(2 * P - 100));
  EXPECT_TRUE(same_bytes(got, pattern(4, 100, 2 * P - 100, 0), 100));
  EXPECT_GE(delta(after, before, Ctr::io_errors), 1u);
  EXPECT_EQ(tf.f->pages(), 2u);

  tf.ctl->error = 0;
  EXPECT_TRUE(reads_right(cache, tf, 100, size));
  EXPECT_EQ(tf.f->pages(), 4u);
}

// One bad page inside a readahead window: the backing fails the window's
// read as a whole, yet readers of the good pages get their bytes (the
// reader's page is read alone after the window failed, as
// filemap_read_folio() does); only a reader of the bad page gets -EIO, and
// a read that reaches it returns what came before.
TEST_P(IoErrorTest, BadPageFailsOnlyItsReaders) {
  PageCache cache(test_config(GetParam()));  // readahead on
  const std::uint64_t size = 16 * P;
  TestFile tf(cache, 4, size);
  tf.ctl->bad_page = 2;

  auto before = cache.counters();
  ssize_t r = 0;
  Bytes got = read_bytes(cache, *tf.h, 0, P, &r);  // a window of 4 pages: 0-3
  EXPECT_EQ(r, static_cast<ssize_t>(P));
  EXPECT_TRUE(same_bytes(got, pattern(4, 0, P, 0), 0));
  got = read_bytes(cache, *tf.h, P, 2 * P, &r);  // pages 1-2: stops at 2
  EXPECT_EQ(r, static_cast<ssize_t>(P));
  EXPECT_TRUE(same_bytes(got, pattern(4, P, P, 0), P));
  read_bytes(cache, *tf.h, 2 * P + 5, 100, &r);
  EXPECT_EQ(r, -EIO);
  EXPECT_TRUE(reads_right(cache, tf, 8 * P + 1, 3 * P));  // past it
  auto after = cache.counters();
  EXPECT_GE(delta(after, before, Ctr::io_errors), 3u) << describe(after);
  EXPECT_EQ(tf.f->pages(), after.pages_cached);

  tf.ctl->bad_page = ~std::uint64_t{0};
  EXPECT_TRUE(reads_right(cache, tf, 0, size));
  EXPECT_EQ(tf.f->pages(), size / P);
}

INSTANTIATE_TEST_SUITE_P(Paths, IoErrorTest, ::testing::ValuesIn(kAllPaths), path_param_name);

// Reader A's fill is held at the backing; reader B waits for it; the fill
// fails.  B does not take the failed page: it retries with a fill of its
// own, which fails too while the error lasts.
TEST(IoErrorTest, WaiterOfFailedFillRetries) {
  PageCacheConfig cfg = test_config();
  cfg.readahead_max_pages = 0;
  PageCache cache(cfg);
  TestFile tf(cache, 4, 2 * P);
  FileHandle h2(tf.f);

  tf.ctl->close_gate();
  ssize_t ra = 0, rb = 0;
  std::thread a([&] { read_bytes(cache, *tf.h, 0, P, &ra); });
  ASSERT_TRUE(wait_until([&] { return tf.ctl->held() == 1; }, kLongWait));
  std::thread b([&] { read_bytes(cache, h2, 10, 10, &rb); });
  bool waited = wait_until([&] { return cache.counters()[Ctr::waits] == 1; }, kLongWait);
  tf.ctl->error = -EIO;
  tf.ctl->open_gate();
  a.join();
  b.join();
  ASSERT_TRUE(waited);
  EXPECT_EQ(ra, -EIO);
  EXPECT_EQ(rb, -EIO);
  EXPECT_GE(cache.counters()[Ctr::io_errors], 2u);
  EXPECT_EQ(tf.f->pages(), 0u);

  tf.ctl->error = 0;
  EXPECT_TRUE(reads_right(cache, tf, 0, 2 * P));
}

}  // namespace
}  // namespace norefs::cache::test
