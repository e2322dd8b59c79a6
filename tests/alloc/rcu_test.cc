// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Property 12: the rcu wrapper and the grace-period cookies.
//  - a fresh thread can enter a read-side section with no explicit
//    registration, and that section really holds grace periods back;
//  - in_read_section() follows nesting;
//  - threads that registered lazily and exited do not stall grace periods;
//  - GracePeriods: a cookie is polled true once a grace period that began
//    after it ended, never before; a reader inside holds it back.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <thread>

#include "alloc/grace_period.h"
#include "test_util.h"

namespace norefs::alloc::test {
namespace {

TEST(RcuTest, InReadSectionFollowsNesting) {
  auto check = [] {
    EXPECT_FALSE(rcu::in_read_section());
    rcu::read_lock();
    EXPECT_TRUE(rcu::in_read_section());
    rcu::read_lock();
    EXPECT_TRUE(rcu::in_read_section());
    rcu::read_unlock();
    EXPECT_TRUE(rcu::in_read_section()) << "the outer section is still open";
    rcu::read_unlock();
    EXPECT_FALSE(rcu::in_read_section());
    {
      rcu::ReadGuard outer;
      {
        rcu::ReadGuard inner;
        EXPECT_TRUE(rcu::in_read_section());
      }
      EXPECT_TRUE(rcu::in_read_section());
    }
    EXPECT_FALSE(rcu::in_read_section());
  };
  check();                    // this thread
  std::thread(check).join();  // a fresh thread: no register_thread() call anywhere
}

// The reader registers lazily in read_lock(); if it did not, liburcu would not
// know about it and synchronize() would return while it is inside.
TEST(RcuTest, FreshThreadsSectionHoldsGracePeriodBack) {
  std::atomic<int> phase{0};
  std::thread reader([&] {
    rcu::read_lock();
    phase = 1;
    while (phase.load() < 2) std::this_thread::sleep_for(1ms);
    rcu::read_unlock();
  });
  while (phase.load() < 1) std::this_thread::yield();
  std::atomic<bool> synced{false};
  std::thread writer([&] {
    rcu::synchronize();
    synced = true;
  });
  std::this_thread::sleep_for(150ms);
  EXPECT_FALSE(synced.load()) << "synchronize() returned while a reader was inside";
  phase = 2;
  reader.join();
  writer.join();
  EXPECT_TRUE(synced.load());
}

// Threads register on first read_lock() and must unregister at exit: a dead
// registered reader would leave liburcu with a dangling entry.
TEST(RcuTest, ExitedReadersDoNotStallGracePeriods) {
  for (int i = 0; i < 16; i++) {
    std::thread([] {
      rcu::ReadGuard g;
      EXPECT_TRUE(rcu::in_read_section());
    }).join();
  }
  run_threads(8, [](int) {
    for (int i = 0; i < 100; i++) rcu::ReadGuard g;
  });
  rcu::synchronize();
  rcu::synchronize();
  SUCCEED();
}

struct Callback {
  rcu::Head head;
  std::atomic<bool>* ran;
};

void on_callback(rcu::Head* head) {
  rcu::callback_begins(head);
  auto* cb = reinterpret_cast<Callback*>(reinterpret_cast<char*>(head) - offsetof(Callback, head));
  cb->ran->store(true);
  delete cb;
}

TEST(RcuTest, CallbacksWaitForReadersAndBarrierWaitsForCallbacks) {
  std::atomic<bool> ran{false};
  {
    ReaderThread reader;
    // Allocated on one thread, used and deleted by the callback on liburcu's
    // worker: under TSan this also checks the call()/callback_begins()
    // annotation of rcu.h.
    std::thread([&] { rcu::call(&(new Callback{{}, &ran})->head, on_callback); }).join();
    std::this_thread::sleep_for(100ms);
    EXPECT_FALSE(ran.load()) << "a call_rcu callback ran while a reader was inside";
  }
  rcu::barrier();
  EXPECT_TRUE(ran.load()) << "barrier() returned before the queued callback ran";
}

TEST(GracePeriodsTest, CookieIsPolledAfterSynchronize) {
  auto header = std::make_unique<StatsHeader>();  // value-initialized: all zero
  GracePeriods gp(*header);
  EXPECT_EQ(gp.started(), 0u);
  EXPECT_EQ(gp.completed(), 0u);

  std::uint64_t c1 = gp.cookie();
  EXPECT_FALSE(gp.poll(c1)) << "no grace period has run yet";
  gp.synchronize();
  EXPECT_TRUE(gp.poll(c1));
  EXPECT_EQ(gp.started(), 1u);
  EXPECT_EQ(gp.completed(), 1u);
  EXPECT_EQ(header->grace_periods.load(), 1u);

  // A cookie taken after that grace period needs another one.
  std::uint64_t c2 = gp.cookie();
  EXPECT_GT(c2, c1);
  EXPECT_FALSE(gp.poll(c2));
  EXPECT_TRUE(gp.poll(c1)) << "once polled true, always true";
  gp.synchronize();
  EXPECT_TRUE(gp.poll(c2));
  EXPECT_LE(gp.completed(), gp.started());

  // Several cookies taken before one grace period are all satisfied by it.
  std::uint64_t a = gp.cookie(), b = gp.cookie();
  EXPECT_EQ(a, b) << "no grace period started in between";
  gp.synchronize();
  EXPECT_TRUE(gp.poll(a));
  EXPECT_TRUE(gp.poll(b));
  EXPECT_EQ(header->grace_periods.load(), 3u);
}

TEST(GracePeriodsTest, ReaderInsideHoldsCookieBack) {
  auto header = std::make_unique<StatsHeader>();
  GracePeriods gp(*header);
  auto reader = std::make_unique<ReaderThread>();
  std::uint64_t cookie = gp.cookie();
  std::atomic<bool> done{false};
  std::thread writer([&] {
    gp.synchronize();
    done = true;
  });
  std::this_thread::sleep_for(150ms);
  EXPECT_FALSE(gp.poll(cookie)) << "cookie polled true while a reader that began before it "
                                   "is still inside";
  EXPECT_FALSE(done.load());
  EXPECT_EQ(gp.completed(), 0u);
  reader.reset();  // leaves its section
  writer.join();
  EXPECT_TRUE(gp.poll(cookie));
}

// Concurrent synchronize() callers (driver + expedite worker): completed is a
// CAS-max and never passes started; every caller's grace period is counted.
TEST(GracePeriodsTest, ConcurrentSynchronizeKeepsCountersConsistent) {
  auto header = std::make_unique<StatsHeader>();
  GracePeriods gp(*header);
  std::atomic<int> bad{0};
  run_threads(4, [&](int) {
    for (int i = 0; i < 25; i++) {
      std::uint64_t c = gp.cookie();
      gp.synchronize();
      if (!gp.poll(c)) bad++;
      if (gp.completed() > gp.started()) bad++;
    }
  });
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(gp.started(), 100u);
  EXPECT_EQ(gp.completed(), 100u);
  EXPECT_EQ(header->grace_periods.load(), 100u);
}

}  // namespace
}  // namespace norefs::alloc::test
