// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Property 10: after a mixed workload and drain(), the counters balance
// exactly: every allocated page went back by exactly one of the three ways,
// every deferred page after its grace period, nothing waits; and the
// grace-period counters obey grace_period.h (completed <= started).
#include <atomic>
#include <thread>
#include <vector>

#include "test_util.h"

namespace norefs::alloc::test {
namespace {

TEST(CountersTest, ExactAfterQuiescence) {
  PagePoolConfig cfg;
  cfg.check = true;
  cfg.expedite_pages = 32;
  PagePool pool(cfg);

  constexpr int kThreads = 3;
  constexpr int rounds = 20;
  constexpr int kPerRound = 24;
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      rcu::ReadGuard g;
      std::this_thread::yield();
    }
  });
  run_threads(kThreads, [&](int t) {
    std::vector<Page*> held;
    for (int r = 0; r < rounds; r++) {
      for (int i = 0; i < kPerRound; i++) {
        Page* p = must_alloc(pool);
        if (p == nullptr) return;
        p->data[0] = std::byte(t);
        held.push_back(p);
      }
      for (int i = 0; i < kPerRound; i++) {
        switch (i % 4) {
          case 0:
            pool.free(held[i]);  // rcu_free clear: immediate
            break;
          case 1:
            held[i]->set_rcu_free();
            pool.free_not_deferred(held[i]);
            break;
          default:
            free_rcu(pool, held[i]);
            break;
        }
        if (i % 8 == 7) pool.make_way();
      }
      held.clear();
    }
  });
  // The main thread too: a long run of deferred frees (expedite territory),
  // while a reader holds them back, until the pool has recorded a peak.
  // (peak_waiting is sampled by the driver, so it gets time; pages cannot
  // leave while the reader is in.)
  std::uint64_t peak_seen = 0;
  {
    ReaderThread reader;
    for (int i = 0; i < 100; i++) free_rcu(pool, must_alloc(pool));
    wait_until([&] { return (peak_seen = pool.counters().peak_waiting) > 0; }, 20000ms);
  }
  EXPECT_GT(peak_seen, 0u) << "nothing recorded a peak while 100 pages waited";
  stop = true;
  churn.join();
  pool.drain();

  Counters c = pool.counters();
  const std::uint64_t per_kind = static_cast<std::uint64_t>(kThreads) * rounds * kPerRound / 4;
  EXPECT_EQ(c.allocated, 4 * per_kind + 100) << describe(c);
  EXPECT_EQ(c.immediate, per_kind) << describe(c);
  EXPECT_EQ(c.not_deferred, per_kind) << describe(c);
  EXPECT_EQ(c.deferred, 2 * per_kind + 100) << describe(c);
  EXPECT_EQ(c.allocated, c.immediate + c.not_deferred + c.freed_after_gp) << describe(c);
  EXPECT_EQ(c.deferred, c.freed_after_gp) << describe(c);
  EXPECT_EQ(c.pending, 0u) << describe(c);
  EXPECT_EQ(c.inflight, 0u) << describe(c);
  EXPECT_EQ(c.waiting, 0u) << describe(c);
  EXPECT_EQ(c.live(), 0u) << describe(c);
  EXPECT_GT(c.peak_waiting, 0u) << describe(c);
  EXPECT_LE(c.peak_waiting, c.deferred) << describe(c);
  EXPECT_LE(c.expedited_pages, c.freed_after_gp) << describe(c);
  EXPECT_EQ(c.check_violations, 0u) << describe(c);
  EXPECT_LE(c.gp_completed, c.gp_started) << describe(c);
  EXPECT_GT(c.grace_periods, 0u) << describe(c);
  EXPECT_GT(c.gp_completed, 0u) << describe(c);
  EXPECT_GE(c.slots, 1u) << describe(c);
}

// drain() waits for pages freed before it, not for nothing: on an idle pool it
// returns, repeatedly, and changes no count.
TEST(CountersTest, DrainOnIdlePool) {
  PagePool pool;
  pool.drain();
  free_rcu(pool, must_alloc(pool));
  pool.drain();
  Counters a = pool.counters();
  pool.drain();
  pool.drain();
  Counters b = pool.counters();
  EXPECT_EQ(a.freed_after_gp, 1u) << describe(a);
  EXPECT_EQ(b.freed_after_gp, 1u) << describe(b);
  EXPECT_EQ(b.allocated, 1u) << describe(b);
  EXPECT_EQ(b.live(), 0u) << describe(b);
}

TEST(CountersTest, ConfigIsReported) {
  PagePoolConfig cfg;
  PagePool plain(cfg);
  EXPECT_EQ(plain.config().expedite_pages, cfg.expedite_pages);
  EXPECT_EQ(plain.counters().config, std::uint64_t{kCfgDefer | kCfgExpedite});

  cfg.defer = true;
  cfg.expedite = false;
  cfg.tcache = TcacheMode::none;
  cfg.check = true;
  cfg.expedite_pages = 77;
  PagePool odd(cfg);
  EXPECT_EQ(odd.counters().config, std::uint64_t{kCfgDefer | kCfgTcacheNone | kCfgCheck});
  EXPECT_EQ(odd.config().expedite_pages, 77u);
  EXPECT_TRUE(odd.stats_path().empty());
}

}  // namespace
}  // namespace norefs::alloc::test
