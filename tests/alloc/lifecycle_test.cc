// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Pools come and go while threads live on (a process may create one per
// mount, and every test here creates its own on the same main thread): a
// thread's slot belongs to one pool, and a thread that used a destroyed pool
// must be able to use a new one, possibly at the same address, and exit
// without touching the old one (ASan: use-after-free).
#include <latch>
#include <memory>
#include <optional>
#include <thread>

#include "test_util.h"

namespace norefs::alloc::test {
namespace {

TEST(LifecycleTest, SequentialPoolsOnOneThread) {
  for (int round = 0; round < 6; round++) {
    SCOPED_TRACE(round);
    PagePoolConfig cfg;
    cfg.tcache = round % 2 ? TcacheMode::none : TcacheMode::private_;
    PagePool pool(cfg);  // very likely at the address of the previous round's
    Page* a = must_alloc(pool);
    Page* b = must_alloc(pool);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_TRUE(pool.owns(a));
    EXPECT_TRUE(pool.owns(b->data));
    free_rcu(pool, a);
    pool.free(b);
    pool.drain();
    Counters c = pool.counters();
    EXPECT_EQ(c.allocated, 2u) << describe(c);
    EXPECT_EQ(c.deferred, 1u) << describe(c);
    EXPECT_EQ(c.immediate, 1u) << describe(c);
    EXPECT_EQ(c.live(), 0u) << describe(c);
    EXPECT_GE(c.threads, 1u) << "this thread owns a slot of the new pool: " << describe(c);
  }
}

TEST(LifecycleTest, TwoPoolsOnOneThread) {
  PagePool a;
  PagePoolConfig cfg;
  cfg.tcache = TcacheMode::none;
  PagePool b(cfg);
  for (int i = 0; i < 100; i++) {
    Page* pa = must_alloc(a);
    Page* pb = must_alloc(b);
    ASSERT_NE(pa, nullptr);
    ASSERT_NE(pb, nullptr);
    ASSERT_TRUE(a.owns(pa->data));
    ASSERT_TRUE(b.owns(pb->data));
    ASSERT_FALSE(a.owns(pb->data));
    ASSERT_FALSE(b.owns(pa->data));
    free_rcu(a, pa);
    if (i % 2) {
      free_rcu(b, pb);
    } else {
      b.free(pb);
    }
  }
  a.drain();
  b.drain();
  Counters ca = a.counters(), cb = b.counters();
  EXPECT_EQ(ca.allocated, 100u) << describe(ca);
  EXPECT_EQ(ca.deferred, 100u) << describe(ca);
  EXPECT_EQ(ca.live(), 0u) << describe(ca);
  EXPECT_EQ(cb.allocated, 100u) << describe(cb);
  EXPECT_EQ(cb.deferred, 50u) << describe(cb);
  EXPECT_EQ(cb.immediate, 50u) << describe(cb);
  EXPECT_EQ(cb.live(), 0u) << describe(cb);
}

// A worker thread uses pool A, A is destroyed (the worker idle), pool B is
// created, the worker uses B, then exits.
TEST(LifecycleTest, ThreadOutlivesItsPool) {
  std::optional<PagePool> pool;
  pool.emplace();
  std::latch used_a(1), a_gone(1), used_b(1);
  std::thread worker([&] {
    for (int i = 0; i < 20; i++) free_rcu(*pool, must_alloc(*pool));
    used_a.count_down();
    a_gone.wait();
    for (int i = 0; i < 20; i++) free_rcu(*pool, must_alloc(*pool));
    pool->free(must_alloc(*pool));
    used_b.count_down();
  });
  used_a.wait();
  pool.reset();    // A: the worker's slot still has pages queued on it
  pool.emplace();  // B, likely at A's address
  a_gone.count_down();
  used_b.wait();
  worker.join();
  pool->drain();
  Counters c = pool->counters();
  EXPECT_EQ(c.allocated, 21u) << describe(c);
  EXPECT_EQ(c.deferred, 20u) << describe(c);
  EXPECT_EQ(c.freed_after_gp, 20u) << describe(c);
  EXPECT_EQ(c.immediate, 1u) << describe(c);
  EXPECT_EQ(c.live(), 0u) << describe(c);
}

}  // namespace
}  // namespace norefs::alloc::test
