// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Property 2: the guarantee of page_pool.h, observed the way a reader would.
// A reader finds a page in an "index" under rcu::read_lock(); the writer
// unlinks it, marks it rcu_free and frees it.  While the reader is still
// inside, the page must not reach the arena: its data (poisoned on free)
// still holds the canary and the counters still count it live.  After the
// reader leaves, drain() frees it.
//
// Controls: the same scenario with defer=false, and with
// debug_skip_grace_period=true, must show the reader a poisoned page —
// proof that the canary check sees a broken engine.
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "test_util.h"

namespace norefs::alloc::test {
namespace {

constexpr std::uint8_t kCanary = 0xa5;
static_assert(kCanary != kPoisonByte);

struct CanaryCase {
  const char* name;
  TcacheMode tcache = TcacheMode::private_;
  std::size_t expedite_pages = 1024;
  bool defer = true;
  bool skip_gp = false;
  // True: a correct engine; the canary must survive.  False: a control.
  bool safe = true;
};

struct CanaryOutcome {
  std::size_t intact = 0;    // canary bytes the reader saw, inside, after the free
  std::size_t poisoned = 0;  // kPoisonByte bytes it saw
  Counters base;             // just before the free
  Counters inside;           // just before the reader looked
  std::uint64_t max_freed_after_gp_inside = 0;
  int extra_deferred = 0, extra_immediate = 0;
  Counters after;  // after read_unlock() and drain()
};

class CanaryTest : public ::testing::TestWithParam<CanaryCase> {};

CanaryOutcome run_canary(const CanaryCase& cc) {
  PagePoolConfig cfg;
  cfg.tcache = cc.tcache;
  cfg.expedite_pages = cc.expedite_pages;
  cfg.defer = cc.defer;
  cfg.debug_skip_grace_period = cc.skip_gp;
  cfg.poison_on_free = true;
  PagePool pool(cfg);
  CanaryOutcome out;

  Page* page = must_alloc(pool);
  if (page == nullptr) return out;
  std::memset(page->data, kCanary, kPageSize);
  std::atomic<Page*> index{page};
  std::atomic<int> phase{0};
  std::atomic<std::size_t> intact{0}, poisoned{0};

  std::thread reader([&] {
    rcu::read_lock();
    Page* p = index.load(std::memory_order_acquire);
    const std::byte* data = p ? p->data : nullptr;
    phase.store(1, std::memory_order_release);
    while (phase.load(std::memory_order_acquire) < 2) std::this_thread::sleep_for(1ms);
    std::size_t ok = 0, bad = 0;
    if (data != nullptr) {
      for (std::size_t i = 0; i < kPageSize; i++) {
        auto b = static_cast<std::uint8_t>(data[i]);
        ok += b == kCanary;
        bad += b == kPoisonByte;
      }
    }
    intact = ok;
    poisoned = bad;
    rcu::read_unlock();
    phase.store(3, std::memory_order_release);
  });
  while (phase.load(std::memory_order_acquire) < 1) std::this_thread::yield();

  out.base = pool.counters();
  index.store(nullptr, std::memory_order_release);  // unlink
  page->set_rcu_free();
  pool.free(page);

  // Give the engine time and every chance to free the page early: pages freed
  // at once and deferred on this thread (the owner frees its own completed
  // batch on its next free()), and with a small expedite_pages, expedite works.
  // A correct engine holds the canary however long this takes.
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    Page* q = pool.alloc();
    if (q != nullptr) {
      pool.free(q);
      out.extra_immediate++;
    }
    q = pool.alloc();
    if (q != nullptr) {
      free_rcu(pool, q);
      out.extra_deferred++;
    }
    Counters c = pool.counters();
    if (c.freed_after_gp > out.max_freed_after_gp_inside) {
      out.max_freed_after_gp_inside = c.freed_after_gp;
    }
    auto elapsed = std::chrono::steady_clock::now() - start;
    bool canary_gone =
        c.freed_after_gp > out.base.freed_after_gp ||
        c.immediate > out.base.immediate + static_cast<std::uint64_t>(out.extra_immediate);
    if (elapsed >= 150ms && (cc.safe || canary_gone)) break;
    if (elapsed >= 5s) break;  // a control whose engine never broke: its checks fail below
    std::this_thread::sleep_for(1ms);
  }
  out.inside = pool.counters();
  phase.store(2, std::memory_order_release);
  while (phase.load(std::memory_order_acquire) < 3) std::this_thread::yield();
  reader.join();
  out.intact = intact;
  out.poisoned = poisoned;

  pool.drain();
  out.after = pool.counters();
  return out;
}

// Controls that make the engine free a page a reader is still reading are a
// data race by construction; which thread poisons the page is up to the
// engine, so TSan may rightly report it.  The defer=false control poisons
// inside free(), before the hand-off to the reader, and runs everywhere.
#ifdef NOREFS_TEST_TSAN
#define SKIP_RACY_CONTROL_UNDER_TSAN(cc) \
  if ((cc).skip_gp) GTEST_SKIP() << "racy by construction under TSan; runs in the other builds"
#else
#define SKIP_RACY_CONTROL_UNDER_TSAN(cc) (void)(cc)
#endif

TEST_P(CanaryTest, PageOutlivesReadSection) {
  const CanaryCase& cc = GetParam();
  SKIP_RACY_CONTROL_UNDER_TSAN(cc);
  CanaryOutcome o = run_canary(cc);
  if (cc.safe) {
    EXPECT_EQ(o.intact, kPageSize)
        << "the reader saw " << o.poisoned << " poisoned bytes while inside its read-side section";
    EXPECT_EQ(o.poisoned, 0u);
    EXPECT_EQ(o.max_freed_after_gp_inside, o.base.freed_after_gp)
        << "a deferred page reached the arena while a reader that began before it was freed "
           "was still inside: "
        << describe(o.inside);
    EXPECT_EQ(o.inside.freed_after_gp, o.base.freed_after_gp) << describe(o.inside);
    // The canary page and every extra deferred page are still live.
    EXPECT_EQ(o.inside.live(), 1u + o.extra_deferred) << describe(o.inside);
    EXPECT_EQ(o.inside.deferred, o.base.deferred + 1 + o.extra_deferred) << describe(o.inside);
    // After the reader left, drain() frees everything.
    EXPECT_GT(o.after.freed_after_gp, o.base.freed_after_gp) << describe(o.after);
    EXPECT_EQ(o.after.freed_after_gp, o.after.deferred) << describe(o.after);
    EXPECT_EQ(o.after.waiting, 0u) << describe(o.after);
    EXPECT_EQ(o.after.live(), 0u) << describe(o.after);
  } else {
    EXPECT_GT(o.poisoned, 0u) << "control: the broken engine (" << cc.name
                              << ") should have poisoned the page under the reader; the canary "
                                 "check cannot detect breakage. inside: "
                              << describe(o.inside);
    EXPECT_LT(o.intact, kPageSize);
    EXPECT_EQ(o.after.live(), 0u) << describe(o.after);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CanaryTest,
    ::testing::Values(CanaryCase{.name = "driver"},
                      CanaryCase{.name = "driver_tcache_none", .tcache = TcacheMode::none},
                      CanaryCase{.name = "driver_expedite", .expedite_pages = 4},
                      CanaryCase{.name = "control_defer_off", .defer = false, .safe = false},
                      CanaryCase{.name = "control_skip_gp_driver", .skip_gp = true, .safe = false}),
    [](const auto& tp) { return std::string(tp.param.name); });

// A reader thread for one canary page: enters a read-side section, finds the
// page in `index`, and checks the page's bytes only when told to, still inside.
class CanaryReader {
 public:
  explicit CanaryReader(std::atomic<Page*>& index)
      : thread_([this, &index] {
          rcu::read_lock();
          Page* p = index.load(std::memory_order_acquire);
          const std::byte* data = p ? p->data : nullptr;
          phase_.store(1, std::memory_order_release);
          while (phase_.load(std::memory_order_acquire) < 2) std::this_thread::sleep_for(1ms);
          std::size_t ok = 0, bad = 0;
          for (std::size_t i = 0; data != nullptr && i < kPageSize; i++) {
            auto b = static_cast<std::uint8_t>(data[i]);
            ok += b == kCanary;
            bad += b == kPoisonByte;
          }
          intact_ = ok;
          poisoned_ = bad;
          rcu::read_unlock();
        }) {
    while (phase_.load(std::memory_order_acquire) < 1) std::this_thread::yield();
  }
  ~CanaryReader() { check_and_leave(); }
  // Checks the page (still inside), then leaves the section.
  void check_and_leave() {
    phase_.store(2, std::memory_order_release);
    if (thread_.joinable()) thread_.join();
  }
  std::size_t intact() const { return intact_; }
  std::size_t poisoned() const { return poisoned_; }

 private:
  std::atomic<int> phase_{0};
  std::size_t intact_ = 0, poisoned_ = 0;
  std::thread thread_;
};

// A grace period frees what was queued before it began, nothing queued
// after.  Setup (for liburcu's two-phase synchronize()): a long reader R0
// holds back the grace periods that another slot's pages started (its batch
// and, at eight pages, its expedite work); a canary reader R enters only
// after those have certainly started, finds the page; then the page is
// freed into this thread's slot, and R0 leaves.  Those grace periods now end
// without having waited for R, and the canary page must still wait for one
// that does.
struct ExpediteCase {
  const char* name;
  bool skip_gp;  // control
};

class ExpediteCanaryTest : public ::testing::TestWithParam<ExpediteCase> {};

TEST_P(ExpediteCanaryTest, ExpediteGracePeriodFreesOnlyWhatItCovers) {
  const ExpediteCase& ec = GetParam();
  SKIP_RACY_CONTROL_UNDER_TSAN(ec);
  PagePoolConfig cfg;
  cfg.expedite_pages = 8;
  cfg.poison_on_free = true;
  cfg.check = true;
  cfg.debug_skip_grace_period = ec.skip_gp;
  PagePool pool(cfg);
  Page* page = must_alloc(pool);
  ASSERT_NE(page, nullptr);
  std::memset(page->data, kCanary, kPageSize);
  std::atomic<Page*> index{page};

  auto r0 = std::make_unique<ReaderThread>();
  // Another thread's slot: one page in flight, eight pending -> expedite.
  std::thread([&] {
    for (int i = 0; i < 9; i++) free_rcu(pool, must_alloc(pool));
  }).join();
  // The worker takes the pending list, then runs a grace period held by R0.
  wait_until([&] { return pool.counters().pending == 0; }, 5000ms);
  std::this_thread::sleep_for(50ms);  // let synchronize() get to waiting for R0

  std::optional<CanaryReader> reader(std::in_place, index);
  Counters base = pool.counters();
  index.store(nullptr, std::memory_order_release);
  free_rcu(pool, page);
  r0.reset();  // the expedite grace period can end now
  // Until a grace period that began before the unlink has ended (or a
  // bound), then a pause in which a broken engine frees the canary page too.
  // Meanwhile this thread keeps freeing, so that it frees its own batch as
  // soon as the engine thinks that batch is ready.
  int extra = 0;
  auto churn = [&] {
    free_rcu(pool, must_alloc(pool));
    extra++;
  };
  wait_until(
      [&] {
        churn();
        return pool.counters().gp_completed > base.gp_completed;
      },
      ec.skip_gp ? 0ms : 2000ms);  // the controls number no grace periods
  wait_until(
      [&] {
        churn();
        return false;
      },
      ec.skip_gp ? 300ms : 150ms);
  Counters inside = pool.counters();
  reader->check_and_leave();
  if (!ec.skip_gp) {
    EXPECT_EQ(reader->intact(), kPageSize)
        << "the canary page was freed while a reader that found it was inside: "
        << describe(inside);
    EXPECT_GE(inside.live(), 1u + extra) << describe(inside);
  } else {
    EXPECT_GT(reader->poisoned(), 0u)
        << "control: the broken engine should have poisoned the page: " << describe(inside);
  }
  reader.reset();
  pool.drain();
  Counters c = pool.counters();
  EXPECT_EQ(c.live(), 0u) << describe(c);
  if (!ec.skip_gp) {
    EXPECT_EQ(c.check_violations, 0u) << describe(c);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ExpediteCanaryTest,
                         ::testing::Values(ExpediteCase{"driver", false},
                                           ExpediteCase{"control_skip_gp_driver", true}),
                         [](const auto& tp) { return std::string(tp.param.name); });

// The destructor "waits for every grace period": a pool destroyed while a
// reader still holds one of its pages must not hand the page (or the arena)
// back until the reader leaves.
TEST(CanaryShutdownTest, DestructorWaitsForReaders) {
  PagePoolConfig cfg;
  cfg.poison_on_free = true;
  auto pool = std::make_unique<PagePool>(cfg);
  Page* page = must_alloc(*pool);
  ASSERT_NE(page, nullptr);
  std::memset(page->data, kCanary, kPageSize);
  std::atomic<Page*> index{page};
  std::atomic<int> phase{0};
  std::atomic<std::size_t> intact{0};
  std::thread reader([&] {
    rcu::read_lock();
    Page* p = index.load(std::memory_order_acquire);
    const std::byte* data = p->data;
    phase.store(1, std::memory_order_release);
    while (phase.load(std::memory_order_acquire) < 2) std::this_thread::sleep_for(1ms);
    std::size_t ok = 0;
    for (std::size_t i = 0; i < kPageSize; i++) ok += static_cast<std::uint8_t>(data[i]) == kCanary;
    intact = ok;
    rcu::read_unlock();
  });
  while (phase.load(std::memory_order_acquire) < 1) std::this_thread::yield();
  index.store(nullptr, std::memory_order_release);
  free_rcu(*pool, page);

  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    pool.reset();
    destroyed.store(true, std::memory_order_release);
  });
  std::this_thread::sleep_for(150ms);
  EXPECT_FALSE(destroyed.load(std::memory_order_acquire))
      << "~PagePool() returned while a reader was inside a section that can see its page";
  phase.store(2, std::memory_order_release);
  reader.join();
  destroyer.join();
  EXPECT_EQ(intact.load(), kPageSize);
  EXPECT_TRUE(destroyed.load());
}

}  // namespace
}  // namespace norefs::alloc::test
