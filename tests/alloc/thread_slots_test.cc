// SPDX-License-Identifier: LGPL-2.1-or-later
//
// SlotRegistry (alloc/thread_slots.h) on its own: the thread-exit protocol
// that the pool and the cache's counters share.  A thread keeps its index
// until it exits; at exit `forget` runs first, then `on_release` (only while
// the registry is open) and the index is reused; after close() no hook runs.
#include <atomic>
#include <latch>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "alloc/thread_slots.h"
#include "test_util.h"

namespace norefs::alloc::test {
namespace {

// Hook calls, as the owner would see them.
struct Calls {
  std::atomic<int> taken{0}, released{0};
};
std::atomic<int> forgets_seen{0};  // forget calls, all threads

SlotRegistry::Hooks hooks_for(Calls& c) {
  return {.on_take = [&c](std::size_t) { c.taken++; },
          .on_release = [&c](std::size_t) { c.released++; },
          .forget = [] { forgets_seen++; }};
}

TEST(ThreadSlotsTest, AThreadKeepsItsIndexUntilItExits) {
  Calls c;
  std::atomic<std::uint64_t> published{0};
  SlotRegistry r(4, "too many", hooks_for(c), &published);
  EXPECT_NE(r.id(), 0u);
  EXPECT_FALSE(r.find().has_value());
  std::size_t mine = r.acquire();
  EXPECT_EQ(r.acquire(), mine) << "a second acquire() on one thread took another slot";
  EXPECT_EQ(r.find(), mine);
  EXPECT_TRUE(r.held(mine));
  EXPECT_EQ(c.taken.load(), 1);
  EXPECT_EQ(r.used(), 1u);
  EXPECT_EQ(published.load(), 1u);
}

TEST(ThreadSlotsTest, ExitedThreadsHandTheirIndexBack) {
  Calls c;
  std::atomic<std::uint64_t> published{0};
  SlotRegistry r(2, "too many", hooks_for(c), &published);
  const int before = forgets_seen.load();
  std::set<std::size_t> seen;
  // Ten threads one after another through two slots: each exit hands its
  // slot back, so no acquire() dies and no index beyond the first is used.
  for (int i = 0; i < 10; i++) {
    std::size_t got = 0;
    std::thread([&] { got = r.acquire(); }).join();
    seen.insert(got);
    EXPECT_FALSE(r.held(got)) << "the exited thread still holds " << got;
  }
  EXPECT_EQ(seen.size(), 1u);
  EXPECT_EQ(r.used(), 1u);
  EXPECT_EQ(published.load(), 1u);
  EXPECT_EQ(c.taken.load(), 10);
  EXPECT_EQ(c.released.load(), 10);
  EXPECT_EQ(forgets_seen.load() - before, 10) << "forget did not run at every thread exit";
}

TEST(ThreadSlotsTest, LiveThreadsHoldDistinctIndices) {
  Calls c;
  SlotRegistry r(3, "too many", hooks_for(c));
  std::latch took(3), done(1);
  std::vector<std::size_t> got(3);
  std::vector<std::thread> ts;
  for (int t = 0; t < 3; t++) {
    ts.emplace_back([&, t] {
      got[t] = r.acquire();
      took.count_down();
      done.wait();
    });
  }
  took.wait();
  EXPECT_EQ(std::set<std::size_t>(got.begin(), got.end()).size(), 3u);
  for (std::size_t i : got) EXPECT_TRUE(r.held(i));
  done.count_down();
  for (auto& t : ts) t.join();
  EXPECT_EQ(c.released.load(), 3);
}

// close() first, then the thread exits: its slot stays where it is and no
// hook runs (the owner may already be gone); forget still runs.
TEST(ThreadSlotsTest, NoHookRunsAfterClose) {
  Calls c;
  SlotRegistry r(2, "too many", hooks_for(c));
  std::latch took(1), closed(1);
  std::thread t([&] {
    r.acquire();
    took.count_down();
    closed.wait();
    // forget runs in this thread's exit, after this lambda: count it there.
  });
  took.wait();
  const int before = forgets_seen.load();
  r.close();
  closed.count_down();
  t.join();
  EXPECT_EQ(c.released.load(), 0) << "on_release ran after close()";
  EXPECT_EQ(forgets_seen.load() - before, 1);
}

// A thread that outlives its registry: its exit must not touch the
// destroyed registry (ASan: use-after-free), and it can take a slot of a
// new one, very likely at the same address.
TEST(ThreadSlotsTest, AThreadOutlivesItsRegistry) {
  Calls c1, c2;
  std::latch took(1), destroyed(1), took2(1);
  auto r1 = std::make_unique<SlotRegistry>(1, "too many", hooks_for(c1));
  std::unique_ptr<SlotRegistry> r2;
  std::thread t([&] {
    r1->acquire();
    took.count_down();
    destroyed.wait();
    r2->acquire();
    took2.count_down();
  });
  took.wait();
  r1.reset();
  r2 = std::make_unique<SlotRegistry>(1, "too many", hooks_for(c2));
  destroyed.count_down();
  took2.wait();
  t.join();
  EXPECT_EQ(c1.released.load(), 0);
  EXPECT_EQ(c2.released.load(), 1);
}

// Two live threads on a registry of one slot: the second acquire() dies.
void take_one_slot_too_many() {
  Calls c;
  SlotRegistry r(1, "one thread too many here", hooks_for(c));
  std::latch took(1), done(1);
  std::thread holder([&] {
    r.acquire();
    took.count_down();
    done.wait();
  });
  took.wait();
  r.acquire();  // the second live thread
  done.count_down();
  holder.join();
}

TEST(ThreadSlotsDeathTest, OneThreadMoreThanCapacityDies) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(take_one_slot_too_many(), "one thread too many here");
}

}  // namespace
}  // namespace norefs::alloc::test
