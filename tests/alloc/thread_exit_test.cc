// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Property 6: a thread that exits hands its slot back with its lists on it;
// nothing is lost, the pool keeps draining them, and slots are recycled, so
// more short-lived threads than max_threads may use the pool one after
// another.  counters().threads counts live slot owners only.
#include <atomic>
#include <latch>
#include <thread>
#include <vector>

#include "test_util.h"

namespace norefs::alloc::test {
namespace {

class ThreadExitTest : public ::testing::Test {
 protected:
  static PagePoolConfig config() {
    PagePoolConfig cfg;
    cfg.check = true;
    return cfg;
  }
  static int pages() { return 100; }
};

// Threads free deferred pages and exit while a reader holds a section, so
// their lists are certainly non-empty when they exit.  drain() from a thread
// that never used the pool then frees them all.
TEST_F(ThreadExitTest, ExitedThreadsListsAreDrained) {
  PagePool pool(config());
  constexpr int kThreads = 4;
  const int n = pages();
  const std::uint64_t threads_before = pool.counters().threads;
  Counters all_alive, after_exit;
  {
    ReaderThread reader;
    std::latch freed(kThreads), checked(1);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; t++) {
      threads.emplace_back([&] {
        for (int i = 0; i < n; i++) free_rcu(pool, must_alloc(pool));
        freed.count_down();
        checked.wait();
      });
    }
    freed.wait();
    all_alive = pool.counters();
    checked.count_down();
    for (auto& t : threads) t.join();
    after_exit = pool.counters();
  }
  const std::uint64_t total = static_cast<std::uint64_t>(kThreads) * n;
  EXPECT_EQ(all_alive.threads, threads_before + kThreads) << describe(all_alive);
  EXPECT_EQ(after_exit.threads, threads_before) << describe(after_exit);
  EXPECT_EQ(after_exit.deferred, total) << describe(after_exit);
  EXPECT_EQ(after_exit.freed_after_gp, 0u) << describe(after_exit);
  EXPECT_EQ(after_exit.live(), total)
      << "pages lost when their thread exited: " << describe(after_exit);

  pool.drain();
  Counters c = pool.counters();
  EXPECT_EQ(c.waiting, 0u) << describe(c);
  EXPECT_EQ(c.freed_after_gp, c.deferred) << describe(c);
  EXPECT_EQ(c.deferred, total) << describe(c);
  EXPECT_EQ(c.live(), 0u) << describe(c);
  EXPECT_EQ(c.check_violations, 0u) << describe(c);
}

// Nobody calls drain(): the engine itself keeps freeing the lists that exited
// threads left behind.  (A correct engine does it within milliseconds; the
// bound only stops a broken one from hanging the test.)
TEST_F(ThreadExitTest, ExitedThreadsListsAreFreedWithoutDrain) {
  PagePool pool(config());
  const int n = pages();
  {
    ReaderThread reader;
    run_threads(3, [&](int) {
      for (int i = 0; i < n; i++) free_rcu(pool, must_alloc(pool));
    });
    EXPECT_EQ(pool.counters().live(), 3u * n);
  }
  bool freed = wait_until([&] { return pool.counters().live() == 0; }, 20000ms);
  Counters c = pool.counters();
  EXPECT_TRUE(freed) << "lists of exited threads were not freed without drain(): " << describe(c);
  EXPECT_EQ(c.freed_after_gp, 3u * n) << describe(c);
  pool.drain();
}

// max_threads = 4 and 32 threads: eight waves of four at once.  The first
// waves free under a long reader, so later threads adopt slots that still
// hold lists.  Every count is exact afterwards.
void slots_are_recycled(PagePoolConfig cfg) {
  cfg.max_threads = 4;
  PagePool pool(cfg);
  constexpr int kWaves = 8, kPerWave = 4;
  constexpr int kRcu = 5, kImmediate = 3, kNotDeferred = 2;
  auto work = [&](int) {
    for (int i = 0; i < kRcu; i++) free_rcu(pool, must_alloc(pool));
    for (int i = 0; i < kImmediate; i++) pool.free(must_alloc(pool));
    for (int i = 0; i < kNotDeferred; i++) {
      Page* p = must_alloc(pool);
      p->set_rcu_free();
      pool.free_not_deferred(p);
    }
  };
  Counters held;
  {
    ReaderThread reader;
    for (int w = 0; w < kWaves / 2; w++) run_threads(kPerWave, work);
    held = pool.counters();
  }
  for (int w = kWaves / 2; w < kWaves; w++) run_threads(kPerWave, work);
  // And 32 more, one after another.
  for (int i = 0; i < 32; i++) std::thread(work, i).join();

  const std::uint64_t threads = kWaves * kPerWave + 32;
  EXPECT_EQ(held.freed_after_gp, 0u) << describe(held);
  EXPECT_EQ(held.live(), std::uint64_t{(kWaves / 2) * kPerWave * kRcu}) << describe(held);
  Counters exited = pool.counters();
  EXPECT_EQ(exited.threads, 0u) << "every user thread has exited: " << describe(exited);
  pool.drain();  // (makes this thread a user: drain() frees pages itself)
  Counters c = pool.counters();
  // "Slots are bounded by the peak number of live threads": at most four
  // users here (the pool's own threads never take one) -- not 64.
  EXPECT_LE(c.slots, 4u) << "slots were not recycled: " << describe(c);
  EXPECT_EQ(c.allocated, threads * (kRcu + kImmediate + kNotDeferred)) << describe(c);
  EXPECT_EQ(c.deferred, threads * kRcu) << describe(c);
  EXPECT_EQ(c.freed_after_gp, threads * kRcu) << describe(c);
  EXPECT_EQ(c.immediate, threads * kImmediate) << describe(c);
  EXPECT_EQ(c.not_deferred, threads * kNotDeferred) << describe(c);
  EXPECT_EQ(c.waiting, 0u) << describe(c);
  EXPECT_EQ(c.live(), 0u) << describe(c);
  EXPECT_EQ(c.check_violations, 0u) << describe(c);
}

// In a child: a pool that miscounts slots aborts ("more than N threads").
TEST_F(ThreadExitTest, SlotsAreRecycledBeyondMaxThreads) {
  NOREFS_EXPECT_IN_CHILD(slots_are_recycled(config()));
}

// max_threads bounds the threads that use the pool.  The pool's own threads
// (driver, expedite worker) free pages on the
// users' behalf and must not take a user's place: with max_threads = 2 and
// two user threads alive, the deferred pages those two leave behind must
// still be freed (nobody else calls into the pool, only counters() is read).
void own_threads_do_not_take_user_slots(PagePoolConfig cfg) {
  cfg.max_threads = 2;
  cfg.expedite_pages = 16;
  PagePool pool(cfg);
  std::latch freed(2), done(1);
  std::vector<std::thread> users;
  for (int t = 0; t < 2; t++) {
    users.emplace_back([&] {
      for (int i = 0; i < 40; i++) free_rcu(pool, must_alloc(pool));
      freed.count_down();
      done.wait();  // alive, holding its slot, not calling into the pool
    });
  }
  freed.wait();
  bool all_freed = wait_until([&] { return pool.counters().live() == 0; }, 20000ms);
  Counters c = pool.counters();
  EXPECT_TRUE(all_freed) << describe(c);
  EXPECT_EQ(c.threads, 2u) << "live slot owners should be the two user threads: " << describe(c);
  done.count_down();
  for (auto& t : users) t.join();
}

TEST_F(ThreadExitTest, PoolsOwnThreadsDoNotTakeUserSlots) {
  NOREFS_EXPECT_IN_CHILD(own_threads_do_not_take_user_slots(config()));
}

// "Threads that may use the pool at once.  One more aborts with a message."
TEST(ThreadExitDeathTest, OneThreadMoreThanMaxThreadsAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        PagePoolConfig cfg;
        cfg.max_threads = 2;
        PagePool pool(cfg);
        std::atomic<bool> done{false};
        std::latch in(2);
        std::vector<std::thread> holders;
        std::vector<Page*> pages(3, nullptr);
        for (int t = 0; t < 2; t++) {
          holders.emplace_back([&, t] {
            pages[t] = pool.alloc();
            in.count_down();
            while (!done.load()) std::this_thread::sleep_for(1ms);
          });
        }
        in.wait();
        std::thread([&] { pages[2] = pool.alloc(); }).join();  // the third at once
        done = true;
        for (auto& t : holders) t.join();
        for (Page* p : pages) {
          if (p != nullptr) pool.free(p);
        }
      },
      "");
}

}  // namespace
}  // namespace norefs::alloc::test
