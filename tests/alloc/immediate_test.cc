// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Property 8: with defer=false every page goes back to the arena inside
// free(); with defer=true a page whose rcu_free bit is clear does too.
// Property 9: free_not_deferred() never waits, even with rcu_free set.
//
// Every check here runs while a reader holds a read-side section: no grace
// period can end, so "counted as freed right after the call" proves the call
// did not wait for one (a free that waited would hang the test instead).  The
// same setup with a deferred page shows that the reader does hold pages back.
#include <thread>

#include "test_util.h"

namespace norefs::alloc::test {
namespace {

class ImmediateTest : public ::testing::TestWithParam<TcacheMode> {
 protected:
  PagePoolConfig config(bool defer) const {
    PagePoolConfig cfg;
    cfg.defer = defer;
    cfg.tcache = GetParam();
    return cfg;
  }
};

TEST_P(ImmediateTest, DeferOffFreesAtOnce) {
  PagePool pool(config(false));
  ReaderThread reader;
  for (std::uint64_t i = 1; i <= 50; i++) {
    Page* p = must_alloc(pool);
    ASSERT_NE(p, nullptr);
    p->set_rcu_free();
    pool.free(p);
    Counters c = pool.counters();
    ASSERT_EQ(c.immediate, i) << describe(c);
    ASSERT_EQ(c.deferred, 0u) << describe(c);
    ASSERT_EQ(c.waiting, 0u) << describe(c);
    ASSERT_EQ(c.live(), 0u) << describe(c);
  }
  EXPECT_FALSE(pool.counters().config & kCfgDefer);
}

TEST_P(ImmediateTest, RcuFreeClearIsFreedAtOnceEvenWithDefer) {
  PagePool pool(config(true));
  {
    ReaderThread reader;
    for (std::uint64_t i = 1; i <= 50; i++) {
      Page* p = must_alloc(pool);
      ASSERT_NE(p, nullptr);
      ASSERT_FALSE(p->rcu_free());
      pool.free(p);
      Counters c = pool.counters();
      ASSERT_EQ(c.immediate, i) << describe(c);
      ASSERT_EQ(c.deferred, 0u) << describe(c);
      ASSERT_EQ(c.waiting, 0u) << describe(c);
      ASSERT_EQ(c.live(), 0u) << describe(c);
    }
    // The contrast: the same pool, the same reader, the bit set -> it waits.
    Page* p = must_alloc(pool);
    ASSERT_NE(p, nullptr);
    free_rcu(pool, p);
    Counters c = pool.counters();
    EXPECT_EQ(c.deferred, 1u) << describe(c);
    EXPECT_EQ(c.immediate, 50u) << describe(c);
    EXPECT_EQ(c.live(), 1u) << describe(c);
    EXPECT_EQ(c.freed_after_gp, 0u) << describe(c);
  }
  pool.drain();
  Counters c = pool.counters();
  EXPECT_EQ(c.freed_after_gp, 1u) << describe(c);
  EXPECT_EQ(c.live(), 0u) << describe(c);
  EXPECT_TRUE(c.config & kCfgDefer);
}

TEST_P(ImmediateTest, FreeNotDeferredNeverWaits) {
  for (bool defer : {true, false}) {
    SCOPED_TRACE(defer ? "defer=true" : "defer=false");
    PagePool pool(config(defer));
    ReaderThread reader;
    for (std::uint64_t i = 1; i <= 50; i++) {
      Page* p = must_alloc(pool);
      ASSERT_NE(p, nullptr);
      if (i % 2) p->set_rcu_free();  // with and without the bit
      pool.free_not_deferred(p);
      Counters c = pool.counters();
      ASSERT_EQ(c.not_deferred, i) << describe(c);
      ASSERT_EQ(c.immediate, 0u) << describe(c);
      ASSERT_EQ(c.deferred, 0u) << describe(c);
      ASSERT_EQ(c.waiting, 0u) << describe(c);
      ASSERT_EQ(c.live(), 0u) << describe(c);
    }
  }
}

// free() and free_not_deferred() from a thread other than the allocating one.
TEST_P(ImmediateTest, FreedAtOnceFromAnotherThread) {
  PagePool pool(config(true));
  ReaderThread reader;
  std::vector<Page*> pages;
  for (int i = 0; i < 20; i++) pages.push_back(must_alloc(pool));
  std::thread([&] {
    for (int i = 0; i < 20; i++) {
      if (i % 2) {
        pool.free(pages[i]);
      } else {
        pages[i]->set_rcu_free();
        pool.free_not_deferred(pages[i]);
      }
    }
  }).join();
  Counters c = pool.counters();
  EXPECT_EQ(c.immediate, 10u) << describe(c);
  EXPECT_EQ(c.not_deferred, 10u) << describe(c);
  EXPECT_EQ(c.live(), 0u) << describe(c);
}

// page_pool.h: free() may be called "inside a read-side section or not: it
// never waits for a grace period".  A thread inside a section frees enough
// deferred pages to complete batches and queue expedite work (whose grace
// period waits for this very section): a free() that waited would
// self-deadlock here.
TEST_P(ImmediateTest, FreeInsideReadSectionNeverWaits) {
  PagePoolConfig cfg = config(true);
  cfg.expedite_pages = 16;
  PagePool pool(cfg);
  std::uint64_t n = 0;
  std::thread([&] {
    for (int round = 0; round < 5; round++) {
      rcu::ReadGuard section;
      for (int i = 0; i < 100; i++) {
        free_rcu(pool, must_alloc(pool));
        n++;
        Page* p = must_alloc(pool);
        if (i % 2) {
          pool.free(p);
        } else {
          pool.free_not_deferred(p);
        }
        pool.make_way();
      }
      EXPECT_TRUE(rcu::in_read_section());
    }
  }).join();
  pool.drain();
  Counters c = pool.counters();
  EXPECT_EQ(c.deferred, n) << describe(c);
  EXPECT_EQ(c.freed_after_gp, n) << describe(c);
  EXPECT_EQ(c.live(), 0u) << describe(c);
}

INSTANTIATE_TEST_SUITE_P(Tcaches, ImmediateTest,
                         ::testing::Values(TcacheMode::private_, TcacheMode::none),
                         [](const auto& tp) { return std::string(tcache_name(tp.param)); });

}  // namespace
}  // namespace norefs::alloc::test
