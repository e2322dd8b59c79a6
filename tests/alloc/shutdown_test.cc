// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Property 7: destroying a pool with pages pending and in flight (freed with
// rcu_free set, never drained) neither aborts nor leaks: the destructor drains
// every list first.  Under ASan, LeakSanitizer checks the heap side at exit;
// a stats reader mapped before the destruction (its mapping outlives the
// unlinked file) shows that every page reached the arena.  A pool destroyed
// while a page is still allocated aborts.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <latch>
#include <memory>
#include <optional>
#include <thread>

#include "test_util.h"

namespace norefs::alloc::test {
namespace {

// The tests here run in a child (NOREFS_EXPECT_IN_CHILD) where the failure
// mode is an abort or a crash in ~PagePool(): it then fails that test only.
void destroy_with_pages_pending_and_in_flight() {
  const int n = 300;
  PagePoolConfig cfg;
  cfg.stats_path = unique_stats_path("shutdown");
  cfg.check = true;
  std::optional<StatsReader> stats;
  Counters before;
  {
    PagePool pool(cfg);
    stats.emplace(cfg.stats_path);
    // An exited thread's slot with lists on it, and a live one (this thread).
    std::thread([&] {
      for (int i = 0; i < n; i++) free_rcu(pool, must_alloc(pool));
    }).join();
    run_threads(2, [&](int) {
      for (int i = 0; i < n; i++) free_rcu(pool, must_alloc(pool));
    });
    for (int i = 0; i < n; i++) free_rcu(pool, must_alloc(pool));
    for (int i = 0; i < 10; i++) pool.free(must_alloc(pool));
    before = pool.counters();
  }  // no drain(): ~PagePool() must do it
  struct stat st {};
  int rc = stat(cfg.stats_path.c_str(), &st);
  int err = errno;
  EXPECT_EQ(rc, -1) << "stats file left behind";
  EXPECT_EQ(err, ENOENT);

  EXPECT_EQ(before.deferred, 4u * n) << describe(before);
  Counters after = stats->sum();
  EXPECT_EQ(after.deferred, 4u * n) << describe(after);
  EXPECT_EQ(after.freed_after_gp, after.deferred)
      << "pages still waiting when the pool was destroyed were not freed: " << describe(after);
  EXPECT_EQ(after.waiting, 0u) << describe(after);
  EXPECT_EQ(after.live(), 0u) << describe(after);
  EXPECT_EQ(after.check_violations, 0u) << describe(after);
}

TEST(ShutdownTest, DestroyWithPagesPendingAndInFlight) {
  NOREFS_EXPECT_IN_CHILD(destroy_with_pages_pending_and_in_flight());
}

// Destroyed at once, while the engine is certainly busy: the pages were freed
// under a reader, which leaves only when the destructor has started.
void destroy_right_after_reader_leaves() {
  auto pool = std::make_unique<PagePool>();
  auto reader = std::make_unique<ReaderThread>();
  for (int i = 0; i < 50; i++) free_rcu(*pool, must_alloc(*pool));
  std::thread releaser([&] {
    std::this_thread::sleep_for(20ms);
    reader->release();
  });
  pool.reset();
  releaser.join();
}

TEST(ShutdownTest, DestroyRightAfterReaderLeaves) {
  NOREFS_EXPECT_IN_CHILD(destroy_right_after_reader_leaves());
}

TEST(ShutdownTest, DestroyUnusedPool) {
  for (int i = 0; i < 3; i++) {
    PagePool pool;
    Counters c = pool.counters();
    EXPECT_EQ(c.allocated, 0u) << describe(c);
  }
}

// "Context: no other thread uses the pool any more" -- threads may still be
// alive, just done with it.  Here the only user slot (max_threads = 1) is
// held by an idle thread whose batch is still waiting when the pool goes
// (it freed under a reader that left just before; an active owner's batch
// is left to the owner), so ~PagePool() must free that batch itself,
// without becoming a second user.  In a child: the failure mode is an abort.
void destroy_while_idle_threads_hold_every_user_slot() {
  PagePoolConfig cfg;
  cfg.max_threads = 1;
  auto pool = std::make_unique<PagePool>(cfg);
  auto reader = std::make_unique<ReaderThread>();
  std::latch freed(1), pool_gone(1);
  std::thread user([&] {
    for (int i = 0; i < 20; i++) free_rcu(*pool, must_alloc(*pool));
    freed.count_down();
    pool_gone.wait();  // alive, idle, holding its slot
  });
  freed.wait();
  Counters c = pool->counters();
  EXPECT_EQ(c.live(), 20u) << describe(c);
  reader.reset();
  pool.reset();
  pool_gone.count_down();
  user.join();
}

TEST(ShutdownTest, DestroyWhileIdleThreadsHoldEveryUserSlot) {
  NOREFS_EXPECT_IN_CHILD(destroy_while_idle_threads_hold_every_user_slot());
}

// drain() from a thread that never used the pool, while the only user slot
// is held by an idle thread: drain() frees the waiting pages without taking
// a slot of its own (one more user would abort, max_threads = 1).  In a
// child: the failure mode is an abort.
void drain_while_idle_threads_hold_every_user_slot() {
  PagePoolConfig cfg;
  cfg.max_threads = 1;
  PagePool pool(cfg);
  std::latch freed(1), drained(1);
  std::thread user([&] {
    for (int i = 0; i < 20; i++) free_rcu(pool, must_alloc(pool));
    freed.count_down();
    drained.wait();  // alive, idle, holding the only user slot
  });
  freed.wait();
  pool.drain();
  Counters c = pool.counters();
  EXPECT_EQ(c.live(), 0u) << describe(c);
  EXPECT_EQ(c.waiting, 0u) << describe(c);
  EXPECT_EQ(c.threads, 1u) << describe(c);
  drained.count_down();
  user.join();
}

TEST(ShutdownTest, DrainFromAnotherThreadWhileIdleThreadsHoldEveryUserSlot) {
  NOREFS_EXPECT_IN_CHILD(drain_while_idle_threads_hold_every_user_slot());
}

TEST(ShutdownDeathTest, DestroyWithAnAllocatedPageAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        PagePool pool;
        Page* p = pool.alloc();
        (void)p;
      },
      "");
}

TEST(ShutdownDeathTest, DestroyWithAPageAllocatedByAnotherThreadAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        PagePool pool;
        for (int i = 0; i < 10; i++) free_rcu(pool, pool.alloc());
        std::thread([&] { (void)pool.alloc(); }).join();
      },
      "");
}

}  // namespace
}  // namespace norefs::alloc::test
