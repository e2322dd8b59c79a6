// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Property 3: batch boundary.  Several threads allocate and free rcu_free
// pages while grace periods run; check mode stamps each queued page with the
// grace periods started at queue time and counts any page freed before a
// grace period that started after that.  A correct engine never does
// (check_violations == 0) and its counters are exact after drain().
//
// Each run has two phases:
//  A. a reader holds one read-side section across the whole phase, so no
//     grace period that starts during it can end: no page queued during A
//     may reach the arena before the reader leaves (freed_after_gp stays 0).
//  B. no long reader; grace periods complete all the time while the workers
//     free, and a churn thread enters and leaves short sections.
// Control: debug_skip_grace_period=true frees cut batches without waiting,
// and check mode must see it (check_violations > 0).
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "test_util.h"

namespace norefs::alloc::test {
namespace {

struct BatchCase {
  bool skip_gp;
  int threads;
  int pages_a;   // per thread, phase A
  int rounds_b;  // per thread, phase B
  int pages_per_round_b;
};

std::string batch_name(const BatchCase& b) { return b.skip_gp ? "control_skip_gp" : "driver"; }

class BatchBoundaryTest : public ::testing::TestWithParam<BatchCase> {};

TEST_P(BatchBoundaryTest, NoPageFreedBeforeItsGracePeriod) {
  const BatchCase& bc = GetParam();
  PagePoolConfig cfg;
  cfg.check = true;
  cfg.debug_skip_grace_period = bc.skip_gp;
  PagePool pool(cfg);

  auto worker = [&](int t, int rounds, int per_round) {
    std::vector<Page*> held;
    for (int r = 0; r < rounds; r++) {
      for (int i = 0; i < per_round; i++) {
        Page* p = pool.alloc();
        if (p == nullptr) {
          ADD_FAILURE() << "alloc() returned nullptr";
          return;
        }
        p->data[0] = std::byte(t);
        p->data[kPageSize - 1] = std::byte(r);
        held.push_back(p);
      }
      for (Page* p : held) free_rcu(pool, p);
      held.clear();
    }
  };

  // Phase A: one reader inside across all the frees.
  Counters inside;
  std::uint64_t max_freed_inside = 0;
  {
    ReaderThread reader;
    run_threads(bc.threads, [&](int t) { worker(t, 1, bc.pages_a); });
    // Give the engine time to cut, stamp and (if broken) free what it holds.
    auto over = [&] {
      Counters c = pool.counters();
      if (c.freed_after_gp > max_freed_inside) max_freed_inside = c.freed_after_gp;
      return bc.skip_gp && c.freed_after_gp > 0;
    };
    // Control: until the broken engine frees something (phase B may still
    // show it if not).  Correct engine: a fixed pause, nothing may move.
    wait_until(over, bc.skip_gp ? 5000ms : 100ms);
    over();
    inside = pool.counters();
  }

  // Phase B: grace periods complete while the workers free.
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      rcu::ReadGuard g;
      std::this_thread::yield();
    }
  });
  run_threads(bc.threads, [&](int t) { worker(t, bc.rounds_b, bc.pages_per_round_b); });
  stop = true;
  churn.join();
  pool.drain();
  Counters c = pool.counters();

  const std::uint64_t total =
      static_cast<std::uint64_t>(bc.threads) *
      (bc.pages_a + static_cast<std::uint64_t>(bc.rounds_b) * bc.pages_per_round_b);
  if (!bc.skip_gp) {
    EXPECT_EQ(max_freed_inside, 0u)
        << "pages queued while a reader was inside reached the arena before it left: "
        << describe(inside);
    EXPECT_EQ(inside.live(), static_cast<std::uint64_t>(bc.threads) * bc.pages_a)
        << describe(inside);
    EXPECT_EQ(c.check_violations, 0u) << describe(c);
    EXPECT_EQ(c.allocated, total) << describe(c);
    EXPECT_EQ(c.deferred, total) << describe(c);
    EXPECT_EQ(c.freed_after_gp, total) << describe(c);
    EXPECT_EQ(c.immediate, 0u) << describe(c);
    EXPECT_EQ(c.not_deferred, 0u) << describe(c);
    EXPECT_EQ(c.waiting, 0u) << describe(c);
    EXPECT_EQ(c.pending, 0u) << describe(c);
    EXPECT_EQ(c.inflight, 0u) << describe(c);
    EXPECT_EQ(c.live(), 0u) << describe(c);
    EXPECT_LE(c.gp_completed, c.gp_started) << describe(c);
  } else {
    EXPECT_GT(c.check_violations, 0u)
        << "control: batches freed without a grace period went unnoticed by check mode: "
        << describe(c) << " (phase A: " << describe(inside) << ")";
    EXPECT_EQ(c.live(), 0u) << describe(c);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, BatchBoundaryTest,
                         ::testing::Values(BatchCase{false, 4, 200, 20, 25},
                                           BatchCase{true, 4, 200, 20, 25}),
                         [](const auto& tp) { return batch_name(tp.param); });

}  // namespace
}  // namespace norefs::alloc::test
