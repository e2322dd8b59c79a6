// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The deterministic evict race (design.md, "Page lifecycle"; page_cache.h,
// the lockless read protocol): a noref reader is held at the sync point
// read:fast:before_copy — inside its read-side section, after it found the
// page and checked it, before it copies.  Meanwhile this thread evicts the
// file and takes pages from the same cache's pool for other content.
//
//  - Deferral on (the default): the evicted page waits for a grace period
//    that cannot end while the reader is inside its section, so its memory
//    is not handed out again, and the reader copies the right bytes.
//  - Deferral off (`pool.defer = false`, the unsafe control): the page goes
//    straight back to the arena, the next allocation on this thread gets
//    it, and the reader copies the intruder's bytes.  The test asserts that
//    this bad read happens: it proves the first case tests something.
//
// Nothing here may wait for a grace period while the reader is held (it
// would wait for the held reader): no drain(), no limit_pages.
#include <cstring>
#include <thread>

#include "cache_test_util.h"

namespace norefs::cache::test {
namespace {

class EvictRaceTest : public ::testing::TestWithParam<bool> {};

TEST_P(EvictRaceTest, ReaderHeldBetweenLookupAndCopy) {
  const bool defer = GetParam();
  if (!sync_point::kEnabled) GTEST_SKIP() << "needs -DNOREFS_SYNC_POINTS=ON";
#ifdef NOREFS_TEST_TSAN
  // The control makes the reader copy memory this thread rewrote after it
  // was freed: the race TSan exists to report.
  if (!defer) GTEST_SKIP() << "the unsafe control is a race by design";
#endif
  PageCacheConfig cfg = test_config();
  cfg.pool.defer = defer;
  cfg.readahead_max_pages = 0;
  PageCache cache(cfg);
  TestFile victim(cache, 1, P);
  TestFile other(cache, 2, 64 * P);
  ASSERT_EQ(cache.prefetch(*victim.f, 0, P), 1);
  ASSERT_TRUE(warm(cache, victim, 0, P));
  const std::byte* victim_data = page_data(cache, *victim.h, 0);
  ASSERT_NE(victim_data, nullptr) << "the victim page is not on the fast path";

  SyncPointScope scope;
  Holder holder;
  std::vector<alloc::Page*> taken;
  ssize_t r = 0;
  Bytes got;
  std::thread reader;
  // Whatever is asserted below: let the reader go, join it, give the pages
  // back (the pool aborts on a leak), in that order.
  struct Cleanup {
    std::function<void()> fn;
    ~Cleanup() { fn(); }
  } cleanup{[&] {
    holder.release();
    if (reader.joinable()) reader.join();
    sync_point::clear();
    for (alloc::Page* p : taken) cache.pool().free(p);
  }};

  sync_point::set("read:fast:before_copy", holder.callback());
  reader = std::thread([&] {
    Holder::hold_me();
    got = read_bytes(cache, *victim.h, 0, P, &r);
  });
  ASSERT_TRUE(holder.wait_held());

  EXPECT_EQ(cache.evict(*victim.f), 1u);
  EXPECT_EQ(victim.f->pages(), 0u);
  const Bytes intruder = pattern(2, 0, P, 9);
  auto take = [&] {
    alloc::Page* p = cache.pool().alloc();
    if (!p) return false;
    std::memcpy(p->data, intruder.data(), P);
    taken.push_back(p);
    return p->data == victim_data;
  };

  if (defer) {
    // However much this thread allocates, and however many pages another
    // file's fills take, the victim's memory is not among them.
    bool reused = false;
    for (int i = 0; i < 512; i++) reused |= take();
    EXPECT_TRUE(reads_right(cache, other, 0, 64 * P));
    for (int i = 0; i < 64; i++) reused |= take();
    EXPECT_FALSE(reused) << "a page freed under a reader was handed out again";
    EXPECT_GE(cache.pool_counters().waiting, 1u) << alloc::test::describe(cache.pool_counters());
  } else {
    bool reused = false;
    for (int i = 0; i < 4096 && !reused; i++) reused = take();
    ASSERT_TRUE(reused) << "the control never got the victim's memory back: it proves nothing";
  }

  holder.release();
  reader.join();
  EXPECT_EQ(r, static_cast<ssize_t>(P));
  if (defer) {
    EXPECT_TRUE(same_bytes(got, pattern(1, 0, P, 0)));
  } else {
    EXPECT_FALSE(same_bytes(got, pattern(1, 0, P, 0))) << "the unsafe control read right bytes";
    EXPECT_TRUE(same_bytes(got, intruder)) << "the bad read should be the intruder's bytes";
  }
}

INSTANTIATE_TEST_SUITE_P(Defer, EvictRaceTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "deferred" : "unsafe_control";
                         });

}  // namespace
}  // namespace norefs::cache::test
