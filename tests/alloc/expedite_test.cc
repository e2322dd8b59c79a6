// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Property 4: a slot whose pending list reaches expedite_pages is handed to
// the expedite worker; with expedite off, never.
// Property 5: make_way() yields to this thread's queued expedite work, and is
// harmless on a thread that never freed anything.
//
// To make "the pending list reaches expedite_pages" independent of timing,
// the frees happen while a reader holds a read-side section: no grace period
// can end, so a slot keeps at most one batch in flight and everything else
// piles up on its pending list.
#include <atomic>
#include <chrono>
#include <thread>

#include "test_util.h"

namespace norefs::alloc::test {
namespace {

class ExpediteTest : public ::testing::Test {
 protected:
  static int pages() { return 640; }

  static Counters run(bool expedite) {
    PagePoolConfig cfg;
    cfg.expedite = expedite;
    cfg.expedite_pages = 64;
    cfg.check = true;
    PagePool pool(cfg);
    const int n = pages();
    {
      ReaderThread reader;
      for (int i = 0; i < n; i++) {
        Page* p = must_alloc(pool);
        if (p == nullptr) break;
        free_rcu(pool, p);
      }
      if (expedite) {
        // While the reader holds the slot's one-page batch, nothing else
        // can cut the pending list: more than one page in flight means the
        // expedite worker took the list (and now waits for the reader).
        // Without this wait a worker that wakes late finds the list already
        // cut by the engine, has nothing to do and counts nothing.
        bool taken = wait_until([&] { return pool.counters().inflight > 1; }, 20000ms);
        EXPECT_TRUE(taken) << "the expedite worker never took the pending list: "
                           << describe(pool.counters());
      }
      Counters c = pool.counters();
      // Expedited or not, nothing may be freed while the reader is inside.
      EXPECT_EQ(c.freed_after_gp, 0u) << describe(c);
      EXPECT_EQ(c.live(), static_cast<std::uint64_t>(n)) << describe(c);
    }
    pool.drain();
    if (expedite) {
      // drain() returns once the pages are back; the worker may count its
      // work a moment later.  (The bound only stops a broken engine.)
      wait_until([&] { return pool.counters().expedites > 0; }, 20000ms);
    }
    Counters c = pool.counters();
    EXPECT_EQ(c.deferred, static_cast<std::uint64_t>(n)) << describe(c);
    EXPECT_EQ(c.freed_after_gp, c.deferred) << describe(c);
    EXPECT_EQ(c.waiting, 0u) << describe(c);
    EXPECT_EQ(c.live(), 0u) << describe(c);
    EXPECT_EQ(c.check_violations, 0u) << describe(c);
    return c;
  }
};

TEST_F(ExpediteTest, LongPendingListIsExpedited) {
  Counters c = run(true);
  EXPECT_GT(c.expedites, 0u) << describe(c);
  EXPECT_GT(c.expedited_pages, 0u) << describe(c);
  EXPECT_LE(c.expedited_pages, c.freed_after_gp) << describe(c);
  EXPECT_TRUE(c.config & kCfgExpedite) << describe(c);
}

TEST_F(ExpediteTest, NoExpediteWhenDisabled) {
  Counters c = run(false);
  EXPECT_EQ(c.expedites, 0u) << describe(c);
  EXPECT_EQ(c.expedited_pages, 0u) << describe(c);
  EXPECT_FALSE(c.config & kCfgExpedite) << describe(c);
}

// The one property here that rests on the scheduler: right after a free()
// queues this thread's expedite work, the worker has usually not been woken
// yet, so make_way() finds the work queued and not started.  The bound is
// generous (one yield in 100000 iterations, or 30 s).
TEST(MakeWayTest, YieldsToQueuedExpediteWork) {
  PagePoolConfig cfg;
  cfg.expedite_pages = 2;
  PagePool pool(cfg);
  std::uint64_t freed = 0;
  auto deadline = std::chrono::steady_clock::now() + 30s;
  for (int i = 0; i < 100000 && std::chrono::steady_clock::now() < deadline; i++) {
    Page* p = must_alloc(pool);
    if (p == nullptr) break;
    free_rcu(pool, p);
    freed++;
    pool.make_way();
    if (pool.counters().make_way_yields > 0) break;
  }
  Counters c = pool.counters();
  EXPECT_GT(c.make_way_yields, 0u) << "after " << freed << " free()+make_way(): " << describe(c);
  pool.drain();
  c = pool.counters();
  EXPECT_EQ(c.freed_after_gp, freed) << describe(c);
  EXPECT_EQ(c.live(), 0u) << describe(c);
}

// Without expedite there is never expedite work to yield to.
TEST(MakeWayTest, NeverYieldsWithoutExpedite) {
  PagePoolConfig cfg;
  cfg.expedite = false;
  cfg.expedite_pages = 2;
  PagePool pool(cfg);
  for (int i = 0; i < 2000; i++) {
    Page* p = must_alloc(pool);
    if (p == nullptr) break;
    free_rcu(pool, p);
    pool.make_way();
  }
  pool.drain();
  Counters c = pool.counters();
  EXPECT_EQ(c.make_way_yields, 0u) << describe(c);
  EXPECT_EQ(c.expedites, 0u) << describe(c);
  EXPECT_EQ(c.live(), 0u) << describe(c);
}

TEST(MakeWayTest, HarmlessOnThreadsThatNeverFreed) {
  PagePoolConfig cfg;
  cfg.expedite_pages = 2;
  PagePool pool(cfg);
  pool.make_way();  // this thread has never touched the pool
  // A fresh thread that never touched the pool.
  std::thread([&] {
    for (int i = 0; i < 100; i++) pool.make_way();
  }).join();
  // A thread that allocated but never freed.
  Page* handed = nullptr;
  std::thread([&] {
    handed = pool.alloc();
    for (int i = 0; i < 100; i++) pool.make_way();
  }).join();
  ASSERT_NE(handed, nullptr);
  // Other threads' expedite work is none of make_way()'s business here.
  std::thread busy([&] {
    for (int i = 0; i < 200; i++) free_rcu(pool, must_alloc(pool));
  });
  for (int i = 0; i < 100; i++) pool.make_way();
  busy.join();
  Counters c = pool.counters();
  EXPECT_EQ(c.allocated, 201u) << describe(c);
  // Only threads without expedite work of their own called make_way().
  EXPECT_EQ(c.make_way_yields, 0u) << describe(c);
  pool.free(handed);  // freed by another thread than the one that allocated it
  pool.drain();
  c = pool.counters();
  EXPECT_EQ(c.live(), 0u) << describe(c);
  EXPECT_EQ(c.immediate, 1u) << describe(c);
  EXPECT_EQ(c.deferred, 200u) << describe(c);
}

}  // namespace
}  // namespace norefs::alloc::test
