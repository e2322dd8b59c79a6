// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Property 1: every page's data and descriptor comes from the pool's own
// jemalloc arena, with the promised alignment, for both tcache modes; freed
// pages stay in that arena (never reach malloc()); the arena's statistics
// see held pages.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "test_util.h"

namespace norefs::alloc::test {
namespace {

std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

class ArenaTest : public ::testing::TestWithParam<TcacheMode> {
 protected:
  PagePoolConfig config() const {
    PagePoolConfig cfg;
    cfg.tcache = GetParam();
    return cfg;
  }
};

TEST_P(ArenaTest, PagesAndDescriptorsLiveInThePoolsArena) {
  PagePool pool(config());
  constexpr int kPages = 256;
  std::vector<Page*> pages;
  std::set<const void*> descriptors, datas;
  for (int i = 0; i < kPages; i++) {
    Page* p = must_alloc(pool);
    ASSERT_NE(p, nullptr);
    pages.push_back(p);
    ASSERT_NE(p->data, nullptr);
    EXPECT_TRUE(pool.owns(p)) << "descriptor " << i;
    EXPECT_TRUE(pool.owns(p->data)) << "data " << i;
    EXPECT_TRUE(pool.owns(p->data + kPageSize - 1)) << "last byte of data " << i;
    EXPECT_EQ(addr(p->data) % kPageSize, 0u) << "data " << i;
    EXPECT_EQ(addr(p) % 64, 0u) << "descriptor " << i;
    EXPECT_EQ(p->state.load(), 0u) << "a new page has a zero state";
    EXPECT_FALSE(p->rcu_free());
    descriptors.insert(p);
    datas.insert(p->data);
    std::memset(p->data, i & 0xff, kPageSize);
    p->index = static_cast<std::uint64_t>(i);
  }
  EXPECT_EQ(descriptors.size(), static_cast<std::size_t>(kPages));
  EXPECT_EQ(datas.size(), static_cast<std::size_t>(kPages));
  // No two pages overlap: each still holds its own pattern.
  std::vector<std::byte> expect(kPageSize);
  for (int i = 0; i < kPages; i++) {
    std::memset(expect.data(), i & 0xff, kPageSize);
    EXPECT_EQ(std::memcmp(pages[i]->data, expect.data(), kPageSize), 0) << "page " << i;
    EXPECT_EQ(pages[i]->index, static_cast<std::uint64_t>(i));
  }

  // Recycled pages (through the tcache mode under test) stay in the arena.
  for (int round = 0; round < 4; round++) {
    for (int i = 0; i < kPages; i++) {
      if (i % 2) {
        free_rcu(pool, pages[i]);
      } else {
        pool.free(pages[i]);
      }
    }
    if (round % 2) pool.drain();
    for (int i = 0; i < kPages; i++) {
      pages[i] = must_alloc(pool);
      ASSERT_NE(pages[i], nullptr);
      EXPECT_TRUE(pool.owns(pages[i])) << "round " << round << " descriptor " << i;
      EXPECT_TRUE(pool.owns(pages[i]->data)) << "round " << round << " data " << i;
      EXPECT_EQ(addr(pages[i]->data) % kPageSize, 0u);
      EXPECT_EQ(addr(pages[i]) % 64, 0u);
      EXPECT_EQ(pages[i]->state.load(), 0u) << "a recycled page must come back with a zero state";
    }
  }
  for (Page* p : pages) pool.free(p);
  pool.drain();
  Counters c = pool.counters();
  EXPECT_EQ(c.live(), 0u) << describe(c);
}

TEST_P(ArenaTest, PagesRecycledAcrossThreadsStayInTheArena) {
  PagePool pool(config());
  std::atomic<int> not_owned{0}, misaligned{0};
  run_threads(4, [&](int t) {
    std::vector<Page*> held;
    for (int round = 0; round < 6; round++) {
      for (int i = 0; i < 48; i++) {
        Page* p = pool.alloc();
        if (p == nullptr) {
          not_owned++;
          continue;
        }
        if (!pool.owns(p) || !pool.owns(p->data)) not_owned++;
        if (addr(p->data) % kPageSize || addr(p) % 64) misaligned++;
        p->data[0] = std::byte(t);
        held.push_back(p);
      }
      // Free alternately deferred and immediately, so that pages come back
      // through the driver/expedite threads as well as through this thread.
      for (std::size_t i = 0; i < held.size(); i++) {
        if ((i + round) % 2) {
          free_rcu(pool, held[i]);
        } else {
          pool.free(held[i]);
        }
      }
      held.clear();
    }
  });
  pool.drain();
  EXPECT_EQ(not_owned.load(), 0);
  EXPECT_EQ(misaligned.load(), 0);
  Counters c = pool.counters();
  EXPECT_EQ(c.allocated, 4u * 6 * 48) << describe(c);
  EXPECT_EQ(c.live(), 0u) << describe(c);
}

// jemalloc#1535: a free through the automatic tcache parks arena memory where
// malloc() picks it up.  After the pool has freed pages on this thread, the
// same size classes from malloc() must not come from the pool's arena.
TEST_P(ArenaTest, FreedPagesNeverReachMalloc) {
  if (!malloc_is_jemalloc()) {
    GTEST_SKIP() << "malloc() is not jemalloc's here (sanitizer build): owns() may only be "
                    "asked about jemalloc memory";
  }
  PagePoolConfig cfg = config();
  cfg.defer = false;  // straight back to the arena, on this thread
  PagePool pool(cfg);
  constexpr int kPages = 128;
  std::vector<Page*> pages;
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < kPages; i++) pages.push_back(must_alloc(pool));
    for (Page* p : pages) pool.free(p);
    pages.clear();
  }
  int owned = 0;
  std::vector<void*> blocks;
  for (int i = 0; i < 2 * kPages; i++) {
    void* a = std::malloc(kPageSize);
    void* b = std::aligned_alloc(kPageSize, kPageSize);
    void* c = std::malloc(sizeof(Page));
    auto* d = new Page;
    owned += pool.owns(a) + pool.owns(b) + pool.owns(c) + pool.owns(d);
    blocks.push_back(a);
    blocks.push_back(b);
    blocks.push_back(c);
    delete d;
  }
  for (void* b : blocks) std::free(b);
  EXPECT_EQ(owned, 0) << "malloc()/new handed out memory of the pool's arena";
}

TEST_P(ArenaTest, ArenaStatsGrowWhilePagesAreHeld) {
  PagePool pool(config());
  ArenaStats before = pool.arena_stats();
  constexpr int kPages = 256;
  std::vector<Page*> pages;
  for (int i = 0; i < kPages; i++) {
    pages.push_back(must_alloc(pool));
    std::memset(pages.back()->data, 1, kPageSize);  // make it resident too
  }
  ArenaStats during = pool.arena_stats();
  EXPECT_GE(during.active_bytes, before.active_bytes + kPages * kPageSize)
      << "before " << before.active_bytes << " during " << during.active_bytes;
  EXPECT_GE(during.resident_bytes, kPages * kPageSize);
  for (Page* p : pages) free_rcu(pool, p);
  pool.drain();
  EXPECT_EQ(pool.counters().live(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Tcache, ArenaTest,
                         ::testing::Values(TcacheMode::none, TcacheMode::private_),
                         [](const auto& tp) { return std::string(tcache_name(tp.param)); });

// owns() is not trivially true: pages of another pool, and (in the normal
// build) malloc()/new memory, are not the pool's.
TEST(ArenaOwnershipTest, OtherMemoryIsNotOwned) {
  PagePool pool;
  PagePool other;
  Page* mine = must_alloc(pool);
  Page* theirs = must_alloc(other);
  ASSERT_NE(mine, nullptr);
  ASSERT_NE(theirs, nullptr);
  EXPECT_TRUE(pool.owns(mine));
  EXPECT_TRUE(pool.owns(mine->data));
  EXPECT_TRUE(other.owns(theirs));
  EXPECT_TRUE(other.owns(theirs->data));
  EXPECT_FALSE(pool.owns(theirs));
  EXPECT_FALSE(pool.owns(theirs->data));
  EXPECT_FALSE(other.owns(mine));
  EXPECT_FALSE(other.owns(mine->data));
  if (malloc_is_jemalloc()) {
    void* m = std::malloc(kPageSize);
    void* a = std::aligned_alloc(kPageSize, kPageSize);
    auto* n = new Page;
    auto v = std::make_unique<std::vector<char>>(kPageSize);
    EXPECT_FALSE(pool.owns(m));
    EXPECT_FALSE(pool.owns(a));
    EXPECT_FALSE(pool.owns(n));
    EXPECT_FALSE(pool.owns(v->data()));
    std::free(m);
    std::free(a);
    delete n;
  } else {
    std::cerr << "[ note     ] malloc() is not jemalloc's (sanitizer build): the malloc/new "
                 "half of this test runs in the normal build only\n";
  }
  pool.free(mine);
  other.free(theirs);
}

}  // namespace
}  // namespace norefs::alloc::test
