// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/page_index.h: the per-file 64-way radix tree.
//
//  - Single-threaded: insert/lookup/erase/replace at the boundaries of the
//    node levels and of the 64-bit index space, holes inside and beyond the
//    tree's range, for_each over every range between interesting points
//    (crossing node boundaries, first > last, the top of the index space),
//    and a randomized model test against std::map.
//  - Node lifetime: erasing everything retires every node (through
//    rcu::call), the destructor frees what is left.  rcu::barrier() runs the
//    callbacks; under ASan, LeakSanitizer then finds any node that was only
//    unlinked (checked in the test itself, and again at exit).
//  - Lockless readers under rcu::ReadGuard against one writer that inserts,
//    replaces and erases, freeing pages through a PagePool with
//    poison_on_free: a reader that ever used a freed or reused page, or a
//    node freed under it (ASan), sees a wrong key or pattern.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "alloc/page_pool.h"
#include "alloc/rcu.h"
#include "cache/page.h"
#include "cache/page_index.h"

#include "sanitizers.h"

namespace norefs::cache {
namespace {

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

// Where the indexes of these tests keep their nodes: one arena for the
// binary, as a page pool would give them.  Never destroyed: nodes retired
// by the last test may still be queued on liburcu's call_rcu worker at
// exit, and unmapping the region under it would fault.
alloc::SharedAlloc heap() {
  static alloc::PageArena* const arena = new alloc::PageArena(std::size_t{1} << 30);
  return arena->shared_alloc();
}

// Indices at node-level boundaries and at both ends of the index space.
const std::vector<std::uint64_t> kBoundaryKeys = {
    0, 1, 63, 64, 4095, 4096, std::uint64_t{1} << 32, std::uint64_t{1} << 63, kMax};

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Page descriptors for the single-threaded tests (no data needed): stable
// addresses, index = the key they were made for.
class Pages {
 public:
  Page* make(std::uint64_t key) {
    Page* p;
    if (!free_.empty()) {
      p = free_.back();
      free_.pop_back();
    } else {
      p = &pages_.emplace_back();
    }
    p->index = key;
    return p;
  }
  void recycle(Page* p) { free_.push_back(p); }

 private:
  std::deque<Page> pages_;
  std::vector<Page*> free_;
};

struct TooManyVisits {};

// for_each(first, last) as a vector, in visiting order.  Gives up (and
// fails) past `cap` visits, so that a wraparound bug fails instead of
// looping forever.
std::vector<std::pair<std::uint64_t, Page*>> collect(const PageIndex& idx, std::uint64_t first,
                                                     std::uint64_t last, std::size_t cap) {
  std::vector<std::pair<std::uint64_t, Page*>> out;
  try {
    idx.for_each(first, last, [&](std::uint64_t i, Page* p) {
      out.emplace_back(i, p);
      if (out.size() > cap) throw TooManyVisits{};
    });
  } catch (const TooManyVisits&) {
    ADD_FAILURE() << "for_each(" << hex(first) << ", " << hex(last) << ") made more than " << cap
                  << " visits (wraparound?)";
  }
  return out;
}

std::vector<std::pair<std::uint64_t, Page*>> expected_range(const std::map<std::uint64_t, Page*>& m,
                                                            std::uint64_t first,
                                                            std::uint64_t last) {
  std::vector<std::pair<std::uint64_t, Page*>> out;
  if (first > last) return out;
  for (auto it = m.lower_bound(first); it != m.end() && it->first <= last; ++it) out.push_back(*it);
  return out;
}

// Checks the index against the model: size, every key, and a full for_each.
void expect_matches(const PageIndex& idx, const std::map<std::uint64_t, Page*>& model) {
  EXPECT_EQ(idx.size(), model.size());
  for (const auto& [k, p] : model) EXPECT_EQ(idx.lookup(k), p) << hex(k);
  auto all = collect(idx, 0, kMax, model.size() + 1);
  EXPECT_EQ(all, expected_range(model, 0, kMax));
}

// Runs every rcu::call() callback queued so far (retired nodes), then, under
// ASan, asks LeakSanitizer whether anything is unreachable: a node unlinked
// but never retired, or retired nodes never freed.
// Nodes come from a page arena's shared region (the sanitizers' allocators
// do not see them); PageIndex counts them.  Every test starts and ends with
// none alive.
void expect_no_leaked_nodes() {
  alloc::rcu::barrier();
  EXPECT_EQ(PageIndex::live_nodes(), 0) << "index nodes still allocated";
}

// ---------------------------------------------------------------------------

TEST(PageIndexTest, EmptyIndex) {
  PageIndex idx(heap());
  EXPECT_EQ(idx.size(), 0u);
  for (std::uint64_t k : kBoundaryKeys) {
    EXPECT_EQ(idx.lookup(k), nullptr) << hex(k);
    EXPECT_EQ(idx.erase(k), nullptr) << hex(k);
  }
  EXPECT_TRUE(collect(idx, 0, kMax, 0).empty());
  EXPECT_EQ(idx.size(), 0u);
}

TEST(PageIndexTest, SingleKeyAtEachBoundary) {
  Pages pages;
  for (std::uint64_t k : kBoundaryKeys) {
    SCOPED_TRACE(hex(k));
    PageIndex idx(heap());
    Page* p = pages.make(k);
    ASSERT_TRUE(idx.insert(k, p));
    EXPECT_EQ(idx.size(), 1u);
    EXPECT_EQ(idx.lookup(k), p);
    // Neighbours and the ends of the space are holes.
    for (std::uint64_t other :
         {k - 1, k + 1, k - 64, k + 64, k ^ (std::uint64_t{1} << 40), std::uint64_t{0}, kMax}) {
      if (other != k) {
        EXPECT_EQ(idx.lookup(other), nullptr) << "lookup " << hex(other);
      }
    }
    auto all = collect(idx, 0, kMax, 2);
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].first, k);
    EXPECT_EQ(all[0].second, p);
    EXPECT_TRUE(collect(idx, k, k, 2).size() == 1);
    if (k > 0) {
      EXPECT_TRUE(collect(idx, 0, k - 1, 2).empty());
    }
    if (k < kMax) {
      EXPECT_TRUE(collect(idx, k + 1, kMax, 2).empty());
    }

    EXPECT_EQ(idx.erase(k), p);
    EXPECT_EQ(idx.size(), 0u);
    EXPECT_EQ(idx.lookup(k), nullptr);
    EXPECT_EQ(idx.erase(k), nullptr);
    EXPECT_TRUE(collect(idx, 0, kMax, 1).empty());
    // The emptied tree grows again from nothing.
    ASSERT_TRUE(idx.insert(k, p));
    EXPECT_EQ(idx.lookup(k), p);
    EXPECT_EQ(idx.erase(k), p);
  }
  expect_no_leaked_nodes();
}

// All boundary keys in one tree, inserted in several orders (smallest first:
// the root grows level by level; largest first: the root starts at the top).
TEST(PageIndexTest, AllBoundaryKeysTogether) {
  std::vector<std::vector<std::uint64_t>> orders;
  orders.push_back(kBoundaryKeys);
  orders.emplace_back(kBoundaryKeys.rbegin(), kBoundaryKeys.rend());
  std::mt19937_64 rng(7);
  for (int i = 0; i < 4; i++) {
    orders.push_back(kBoundaryKeys);
    std::shuffle(orders.back().begin(), orders.back().end(), rng);
  }
  Pages pages;
  for (std::size_t o = 0; o < orders.size(); o++) {
    SCOPED_TRACE("order " + std::to_string(o));
    PageIndex idx(heap());
    std::map<std::uint64_t, Page*> model;
    for (std::uint64_t k : orders[o]) {
      Page* p = pages.make(k);
      ASSERT_TRUE(idx.insert(k, p));
      model[k] = p;
      expect_matches(idx, model);
    }
    // Holes next to every key, inside the tree's range.
    for (std::uint64_t k : kBoundaryKeys) {
      for (std::uint64_t other : {k - 1, k + 1, k + 2, k - 2}) {
        if (!model.count(other)) {
          EXPECT_EQ(idx.lookup(other), nullptr) << hex(other);
        }
      }
    }
    // Erase in another order; the rest stays reachable.
    std::vector<std::uint64_t> erase_order = orders[(o + 1) % orders.size()];
    for (std::uint64_t k : erase_order) {
      Page* p = model[k];
      EXPECT_EQ(idx.erase(k), p) << hex(k);
      model.erase(k);
      pages.recycle(p);
      expect_matches(idx, model);
      EXPECT_EQ(idx.lookup(k), nullptr);
    }
    EXPECT_EQ(idx.size(), 0u);
  }
  expect_no_leaked_nodes();
}

TEST(PageIndexTest, LookupAndEraseOfAbsentIndices) {
  Pages pages;
  struct Case {
    std::uint64_t key;
    std::vector<std::uint64_t> holes_inside;  // within the root's range
    std::vector<std::uint64_t> beyond;        // past the root's range
    std::uint64_t range_end;                  // 1 + the root's last index; 0: all
  };
  constexpr std::uint64_t kTopBit = std::uint64_t{1} << 63;
  const Case cases[] = {
      // Root of shift 0: [0, 63].
      {5, {0, 4, 6, 63}, {64, 65, 4096, std::uint64_t{1} << 32, std::uint64_t{1} << 63, kMax}, 64},
      // Root of shift 12: [0, 2^18).
      {4096,
       {0, 4095, 4097, 4096 + 64, (std::uint64_t{1} << 18) - 1},
       {std::uint64_t{1} << 18, std::uint64_t{1} << 32, kMax},
       std::uint64_t{1} << 18},
      // Root of shift 30: [0, 2^36).
      {std::uint64_t{1} << 32,
       {0, (std::uint64_t{1} << 32) - 1, (std::uint64_t{1} << 32) + 1,
        (std::uint64_t{1} << 36) - 1},
       {std::uint64_t{1} << 36, std::uint64_t{1} << 63, kMax},
       std::uint64_t{1} << 36},
      // Root of shift 60: everything is inside.
      {kMax,
       {0, 1, kMax - 1, kMax - 64, std::uint64_t{1} << 63, (std::uint64_t{1} << 63) - 1},
       {},
       0},
      {std::uint64_t{1} << 63,
       {0, kMax, (std::uint64_t{1} << 63) - 1, (std::uint64_t{1} << 63) + 1},
       {},
       0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(hex(c.key));
    PageIndex idx(heap());
    Page* p = pages.make(c.key);
    ASSERT_TRUE(idx.insert(c.key, p));
    for (std::uint64_t h : c.holes_inside) {
      EXPECT_EQ(idx.lookup(h), nullptr) << "hole " << hex(h);
      EXPECT_EQ(idx.erase(h), nullptr) << "hole " << hex(h);
    }
    for (std::uint64_t b : c.beyond) {
      EXPECT_EQ(idx.lookup(b), nullptr) << "beyond " << hex(b);
      EXPECT_EQ(idx.erase(b), nullptr) << "beyond " << hex(b);
    }
    // Past the range, indices whose in-range bits are the key's: a walk that
    // ignored the range would land on the key's slot.
    if (c.range_end != 0) {
      for (std::uint64_t alias : {c.key + c.range_end, c.key + 5 * c.range_end, c.key | kTopBit}) {
        EXPECT_EQ(idx.lookup(alias), nullptr) << "alias " << hex(alias);
        EXPECT_EQ(idx.erase(alias), nullptr) << "alias " << hex(alias);
      }
    }
    // Failed erases changed nothing: the key is still there, and no node's
    // count of children was decremented -- if one were, erasing the key
    // below would retire its leaf while the neighbour still lives in it.
    EXPECT_EQ(idx.size(), 1u);
    EXPECT_EQ(idx.lookup(c.key), p);
    const std::uint64_t neighbour = c.key ^ 1;  // same leaf
    Page* q = pages.make(neighbour);
    ASSERT_TRUE(idx.insert(neighbour, q));
    EXPECT_EQ(idx.erase(c.key), p);
    EXPECT_EQ(idx.lookup(neighbour), q) << "the neighbour's leaf was retired under it";
    EXPECT_EQ(idx.size(), 1u);
    EXPECT_EQ(collect(idx, 0, kMax, 2),
              (std::vector<std::pair<std::uint64_t, Page*>>{{neighbour, q}}));
    EXPECT_EQ(idx.erase(neighbour), q);
    EXPECT_EQ(idx.size(), 0u);
    for (std::uint64_t h : c.holes_inside) EXPECT_EQ(idx.lookup(h), nullptr);
  }
  expect_no_leaked_nodes();
}

TEST(PageIndexTest, ReplaceSwapsInOneSlot) {
  Pages pages;
  PageIndex idx(heap());
  std::map<std::uint64_t, Page*> model;
  for (std::uint64_t k : kBoundaryKeys) {
    Page* p = pages.make(k);
    ASSERT_TRUE(idx.insert(k, p));
    model[k] = p;
  }
  for (std::uint64_t k : kBoundaryKeys) {
    SCOPED_TRACE(hex(k));
    Page* old = model[k];
    Page* b = pages.make(k);
    idx.replace(k, old, b);
    model[k] = b;
    EXPECT_EQ(idx.lookup(k), b);
    expect_matches(idx, model);  // size unchanged, neighbours untouched
    Page* c = pages.make(k);
    idx.replace(k, b, c);
    model[k] = c;
    EXPECT_EQ(idx.lookup(k), c);
    EXPECT_EQ(idx.size(), kBoundaryKeys.size());
  }
  for (std::uint64_t k : kBoundaryKeys) {
    EXPECT_EQ(idx.erase(k), model[k]);
    model.erase(k);
    expect_matches(idx, model);
  }
  expect_no_leaked_nodes();
}

// for_each over every range whose ends are interesting points (keys and
// their neighbours, node-boundary points, the ends of the space), against
// the model, on trees of several heights.
TEST(PageIndexTest, ForEachVisitsExactlyTheRangeInOrder) {
  std::vector<std::vector<std::uint64_t>> key_sets = {
      kBoundaryKeys,
      {0, 1, 2, 62, 63},                                    // root of shift 0
      {63, 64, 127, 128, 4095, 4096, 4097, 262143},         // shift 12
      {kMax, kMax - 1, kMax - 63, kMax - 64, kMax - 4096},  // all at the top
      {std::uint64_t{15} << 60, (std::uint64_t{15} << 60) - 1, std::uint64_t{1} << 60},
  };
  std::set<std::uint64_t> point_set = {0,
                                       1,
                                       2,
                                       62,
                                       63,
                                       64,
                                       65,
                                       127,
                                       128,
                                       4095,
                                       4096,
                                       4097,
                                       262143,
                                       262144,
                                       std::uint64_t{1} << 32,
                                       (std::uint64_t{1} << 32) - 1,
                                       (std::uint64_t{1} << 32) + 1,
                                       std::uint64_t{1} << 60,
                                       std::uint64_t{15} << 60,
                                       std::uint64_t{1} << 63,
                                       (std::uint64_t{1} << 63) - 1,
                                       (std::uint64_t{1} << 63) + 1,
                                       kMax - 4096,
                                       kMax - 64,
                                       kMax - 63,
                                       kMax - 1,
                                       kMax};
  for (const auto& ks : key_sets) {
    for (std::uint64_t k : ks) {
      point_set.insert(k);
      point_set.insert(k - 1);
      point_set.insert(k + 1);
    }
  }
  const std::vector<std::uint64_t> points(point_set.begin(), point_set.end());

  Pages pages;
  for (std::size_t s = 0; s < key_sets.size(); s++) {
    SCOPED_TRACE("key set " + std::to_string(s));
    PageIndex idx(heap());
    std::map<std::uint64_t, Page*> model;
    for (std::uint64_t k : key_sets[s]) {
      Page* p = pages.make(k);
      ASSERT_TRUE(idx.insert(k, p));
      model[k] = p;
    }
    int failures = 0;
    for (std::uint64_t first : points) {
      for (std::uint64_t last : points) {
        auto got = collect(idx, first, last, model.size() + 1);
        auto want = expected_range(model, first, last);
        if (got != want && ++failures <= 10) {
          ADD_FAILURE() << "for_each(" << hex(first) << ", " << hex(last) << ") visited "
                        << got.size() << " pages, expected " << want.size();
        }
      }
    }
    EXPECT_EQ(failures, 0);
    for (const auto& [k, p] : model) EXPECT_EQ(idx.erase(k), p);
  }
  expect_no_leaked_nodes();
}

TEST(PageIndexTest, ForEachOverADenseTreeCrossesNodes) {
  constexpr std::uint64_t kN = 3 * 4096 + 100;  // three full level-1 subtrees and some
  Pages pages;
  PageIndex idx(heap());
  std::map<std::uint64_t, Page*> model;
  for (std::uint64_t k = 0; k < kN; k++) {
    Page* p = pages.make(k);
    ASSERT_TRUE(idx.insert(k, p));
    model[k] = p;
  }
  EXPECT_EQ(idx.size(), kN);
  const std::pair<std::uint64_t, std::uint64_t> ranges[] = {{0, kMax},
                                                            {1, 62},
                                                            {63, 64},
                                                            {60, 4100},
                                                            {4095, 4096},
                                                            {100, 3 * 4096 + 5},
                                                            {4096, 2 * 4096 - 1},
                                                            {kN - 1, kMax},
                                                            {kN, kMax},
                                                            {5, 4},
                                                            {kMax, 0}};
  for (auto [first, last] : ranges) {
    EXPECT_EQ(collect(idx, first, last, kN + 1), expected_range(model, first, last))
        << hex(first) << ".." << hex(last);
  }
  // fn sees ascending indices even when every slot is full.
  std::uint64_t prev = 0, n = 0;
  bool ascending = true;
  idx.for_each(0, kMax, [&](std::uint64_t i, Page* p) {
    if (n++ && i <= prev) ascending = false;
    if (p->index != i) ascending = false;
    prev = i;
  });
  EXPECT_TRUE(ascending);
  EXPECT_EQ(n, kN);
  for (std::uint64_t k = 0; k < kN; k++) ASSERT_EQ(idx.erase(k), model[k]);
  EXPECT_EQ(idx.size(), 0u);
  expect_no_leaked_nodes();
}

TEST(PageIndexTest, SizeTracksInsertsAndErases) {
  Pages pages;
  PageIndex idx(heap());
  std::uint64_t n = 0;
  for (std::uint64_t k : kBoundaryKeys) {
    ASSERT_TRUE(idx.insert(k, pages.make(k)));
    EXPECT_EQ(idx.size(), ++n);
  }
  for (std::uint64_t k : kBoundaryKeys) {
    idx.replace(k, idx.lookup(k), pages.make(k));
    EXPECT_EQ(idx.size(), n) << "replace keeps the size";
  }
  EXPECT_EQ(idx.erase(2), nullptr);
  EXPECT_EQ(idx.erase(kMax - 1), nullptr);
  EXPECT_EQ(idx.size(), n) << "erasing a hole keeps the size";
  for (std::uint64_t k : kBoundaryKeys) {
    ASSERT_NE(idx.erase(k), nullptr);
    EXPECT_EQ(idx.size(), --n);
  }
  expect_no_leaked_nodes();
}

// ---------------------------------------------------------------------------
// Randomized model test.

// Keys that exercise the structure: dense small, node boundaries, the 2^32
// region, the top of the space, and anything.
std::uint64_t random_key(std::mt19937_64& rng) {
  std::uint64_t r = rng();
  switch (r % 10) {
    case 0:
    case 1:
    case 2:
      return (r >> 8) % 300;
    case 3:
      return ((r >> 8) % 64) * 64 + ((r >> 20) % 3) - 1;  // 64k-1, 64k, 64k+1
    case 4:
      return ((r >> 8) % 16) * 4096 + ((r >> 20) % 3) - 1;
    case 5:
      return (std::uint64_t{1} << 32) + (r >> 8) % 200 - 100;
    case 6:
      return kMax - (r >> 8) % 200;
    case 7:
      return (std::uint64_t{1} << 63) + (r >> 8) % 130 - 65;
    default:
      return rng();
  }
}

TEST(PageIndexModelTest, RandomOperationsAgainstStdMap) {
  constexpr int kOps = 6500;  // ends 500 ops after the last emptying: non-empty
  std::mt19937_64 rng(0x5eed'2024'cafeULL);
  Pages pages;
  PageIndex idx(heap());
  std::map<std::uint64_t, Page*> model;
  int inserts = 0, replaces = 0, erases = 0, erase_misses = 0, ranges = 0, emptied = 0;

  auto pick_key = [&]() {
    // Half the time a key that is present (if any), so erases and replaces hit.
    if (!model.empty() && rng() % 2) {
      return std::next(model.begin(), static_cast<long>(rng() % model.size()))->first;
    }
    return random_key(rng);
  };

  for (int op = 0; op < kOps; op++) {
    SCOPED_TRACE("op " + std::to_string(op));
    std::uint64_t k = pick_key();
    switch (rng() % 8) {
      case 0:
      case 1:
      case 2: {  // insert, or replace if present
        auto it = model.find(k);
        Page* p = pages.make(k);
        if (it == model.end()) {
          ASSERT_TRUE(idx.insert(k, p));
          model[k] = p;
          inserts++;
        } else {
          idx.replace(k, it->second, p);
          pages.recycle(it->second);
          it->second = p;
          replaces++;
        }
        break;
      }
      case 3:
      case 4:
      case 5: {  // erase
        auto it = model.find(k);
        Page* want = it == model.end() ? nullptr : it->second;
        ASSERT_EQ(idx.erase(k), want) << hex(k);
        if (want) {
          model.erase(it);
          pages.recycle(want);
          erases++;
        } else {
          erase_misses++;
        }
        break;
      }
      case 6: {  // lookup, present or not
        auto it = model.find(k);
        ASSERT_EQ(idx.lookup(k), it == model.end() ? nullptr : it->second) << hex(k);
        ASSERT_EQ(idx.lookup(k + 1), model.count(k + 1) ? model[k + 1] : nullptr) << hex(k + 1);
        break;
      }
      case 7: {  // for_each over a range (sometimes empty, sometimes first > last)
        std::uint64_t last = rng() % 4 == 0 ? random_key(rng) : k + rng() % 5000;
        if (last < k && rng() % 2) last = kMax;  // overflowed k + n: to the top
        ASSERT_EQ(collect(idx, k, last, model.size() + 1), expected_range(model, k, last))
            << hex(k) << ".." << hex(last);
        ranges++;
        break;
      }
    }
    ASSERT_EQ(idx.size(), model.size());
    if (op % 500 == 499) {
      expect_matches(idx, model);
      if (HasFailure()) return;
    }
    if (op % 2000 == 1999) {  // empty it once in a while: the root is retired and regrown
      for (auto& [key, p] : model) {
        ASSERT_EQ(idx.erase(key), p);
        pages.recycle(p);
      }
      model.clear();
      EXPECT_EQ(idx.size(), 0u);
      EXPECT_TRUE(collect(idx, 0, kMax, 1).empty());
      emptied++;
    }
  }
  expect_matches(idx, model);
  // Not vacuous: every kind of operation happened many times.
  EXPECT_GT(inserts, 500);
  EXPECT_GT(replaces, 100);
  EXPECT_GT(erases, 500);
  EXPECT_GT(erase_misses, 50);
  EXPECT_GT(ranges, 300);
  EXPECT_EQ(emptied, kOps / 2000);
  RecordProperty("final_size", static_cast<int>(model.size()));
  // Leave the rest to the destructor (next test covers erase-all).
}

// ---------------------------------------------------------------------------
// Node lifetime.

TEST(PageIndexTest, EraseEverythingRetiresEveryNode) {
  Pages pages;
  // Dense over several leaves and two interior levels, plus sparse keys that
  // make the tree tall.
  std::vector<std::uint64_t> keys;
  for (std::uint64_t k = 0; k < 2 * 4096 + 70; k++) keys.push_back(k);
  for (std::uint64_t k : {std::uint64_t{1} << 20, std::uint64_t{1} << 32, std::uint64_t{1} << 45,
                          std::uint64_t{1} << 63, kMax - 1, kMax}) {
    keys.push_back(k);
  }
  std::mt19937_64 rng(11);
  PageIndex idx(heap());
  for (int round = 0; round < 4; round++) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::map<std::uint64_t, Page*> model;
    for (std::uint64_t k : keys) {
      Page* p = pages.make(k);
      ASSERT_TRUE(idx.insert(k, p));
      model[k] = p;
    }
    ASSERT_EQ(idx.size(), keys.size());
    std::vector<std::uint64_t> order = keys;
    if (round == 1) std::reverse(order.begin(), order.end());
    if (round >= 2) std::shuffle(order.begin(), order.end(), rng);
    for (std::uint64_t k : order) {
      ASSERT_EQ(idx.erase(k), model[k]) << hex(k);
      pages.recycle(model[k]);
    }
    EXPECT_EQ(idx.size(), 0u);
    for (std::uint64_t k : keys) EXPECT_EQ(idx.lookup(k), nullptr) << hex(k);
    for (std::uint64_t k : kBoundaryKeys) EXPECT_EQ(idx.lookup(k), nullptr) << hex(k);
    EXPECT_TRUE(collect(idx, 0, kMax, 1).empty());
    // Every node retired: once their callbacks have run nothing is left.
    expect_no_leaked_nodes();
  }
  // The same index is usable after being emptied.
  Page* p = pages.make(77);
  ASSERT_TRUE(idx.insert(77, p));
  EXPECT_EQ(idx.lookup(77), p);
  EXPECT_EQ(idx.erase(77), p);
  expect_no_leaked_nodes();
}

// An index emptied by erase must hold no node at all, not even an interior
// node whose count of children stayed above zero (the destructor would free
// it, so a leak check at the end cannot tell).
TEST(PageIndexTest, AnEmptiedIndexHoldsNoNodes) {
  std::vector<std::uint64_t> keys;
  for (std::uint64_t k = 0; k < 4096 + 130; k++) keys.push_back(k);
  for (std::uint64_t k :
       {std::uint64_t{1} << 20, std::uint64_t{1} << 40, std::uint64_t{1} << 63, kMax - 1, kMax}) {
    keys.push_back(k);
  }
  std::vector<Page> pages(keys.size());
  std::mt19937_64 rng(5);
  std::vector<std::uint64_t> order = keys;
  PageIndex idx(heap());
  for (int round = 0; round < 3; round++) {
    for (std::size_t i = 0; i < keys.size(); i++) ASSERT_TRUE(idx.insert(keys[i], &pages[i]));
    // 67 leaves and more.
    EXPECT_GT(PageIndex::live_nodes(), 67) << "round " << round;
    if (round == 1) std::reverse(order.begin(), order.end());
    if (round == 2) std::shuffle(order.begin(), order.end(), rng);
    for (std::uint64_t k : order) ASSERT_NE(idx.erase(k), nullptr);
    ASSERT_EQ(idx.size(), 0u);
    alloc::rcu::barrier();
    EXPECT_EQ(PageIndex::live_nodes(), 0) << "round " << round << ": nodes held by an empty index";
  }
}

TEST(PageIndexTest, DestructorFreesRemainingNodes) {
  Pages pages;
  {
    PageIndex idx(heap());
    for (std::uint64_t k = 0; k < 5000; k += 3) ASSERT_TRUE(idx.insert(k, pages.make(k)));
    for (std::uint64_t k : {std::uint64_t{1} << 32, std::uint64_t{1} << 63, kMax}) {
      ASSERT_TRUE(idx.insert(k, pages.make(k)));
    }
    // Some nodes retired, the rest still linked at destruction.
    for (std::uint64_t k = 0; k < 2048; k += 3) ASSERT_NE(idx.erase(k), nullptr);
    ASSERT_NE(idx.erase(std::uint64_t{1} << 63), nullptr);
  }
  expect_no_leaked_nodes();
}

// ---------------------------------------------------------------------------
// Lockless readers against one writer.

std::uint64_t pattern_of(std::uint64_t key) {
  return (key * 0x9e3779b97f4a7c15ULL) ^ 0xa5a5a5a5a5a5a5a5ULL;
}
std::uint32_t gen_of(std::uint64_t key) { return static_cast<std::uint32_t>(key * 7 + 1); }

constexpr std::size_t kPatternBytes = 64;

class ConcurrentIndexTest : public ::testing::TestWithParam<RefMode> {};

INSTANTIATE_TEST_SUITE_P(Modes, ConcurrentIndexTest,
                         ::testing::Values(RefMode::Cas, RefMode::FetchAdd),
                         [](const ::testing::TestParamInfo<RefMode>& param) {
                           return std::string(param.param == RefMode::Cas ? "Cas" : "FetchAdd");
                         });

// Two readers loop over the key range under rcu::ReadGuard; each page they
// find must carry its key (page->index, the pattern in its data, the
// generation in its state) and be uptodate.  Every few lookups a reader
// takes the reference path instead: try_get, re-check the index, leave the
// read-side section and read the page again under the reference alone, put
// (and free, if that put was the last).  The writer, under a mutex standing
// for the owner's lock, inserts, replaces and erases (single keys, whole
// leaves, everything), and removes pages the cache's way: unlink,
// set_rcu_free(), put the cache's reference, free on the last put.  The pool
// poisons freed data; the writer reuses freed pages for other keys.  So a
// page used after its free shows poison or another key, and a node freed
// under a reader is an ASan use-after-free.
TEST_P(ConcurrentIndexTest, LocklessReadersSeeOnlyLivePagesOfTheirKey) {
  const RefMode mode = GetParam();
#ifdef NOREFS_TEST_TSAN
  constexpr int kWriterOps = 12000;
#else
  constexpr int kWriterOps = 40000;
#endif
  constexpr int kReaders = 2;

  std::vector<std::uint64_t> keys;
  for (std::uint64_t k = 0; k < 200; k++) keys.push_back(k);                           // 4 leaves
  for (std::uint64_t k = 0; k < 64; k++) keys.push_back(4096 * 3 + k);                 // 1 leaf
  for (std::uint64_t k = 0; k < 8; k++) keys.push_back((std::uint64_t{1} << 36) + k);  // grows
  for (std::uint64_t k = 0; k < 4; k++) keys.push_back(kMax - k);                      // the top
  for (std::uint64_t k : keys) {
    std::uint64_t pat = pattern_of(k), poison;
    std::memset(&poison, alloc::kPoisonByte, sizeof poison);
    ASSERT_NE(pat, poison);
  }

  alloc::PagePoolConfig cfg;  // defaults: deferral on
  cfg.poison_on_free = true;
  alloc::PagePool pool(cfg);
  PageIndex idx(heap());
  std::mutex mu;  // the owner's lock

  auto make_page = [&](std::uint64_t key) {
    Page* p = pool.alloc();
    if (!p) return p;
    p->index = key;
    for (std::size_t off = 0; off < kPatternBytes; off += 8) {
      std::uint64_t v = pattern_of(key) + off;
      std::memcpy(p->data + off, &v, 8);
    }
    pg::init_cached(*p, gen_of(key));
    pg::mark_uptodate(*p);
    return p;
  };
  // Context: `p` unlinked from the index.
  auto remove_page = [&](Page* p) {
    p->set_rcu_free();
    if (pg::put(*p, mode)) pool.free(p);
  };
  // What a reader checks; returns a description of the first mismatch.
  auto check_page = [](const Page* p, std::uint64_t key) -> const char* {
    if (p->index != key) return "page->index";
    for (std::size_t off = 0; off < kPatternBytes; off += 8) {
      std::uint64_t v;
      std::memcpy(&v, p->data + off, 8);
      if (v != pattern_of(key) + off) return "data pattern";
    }
    std::uint64_t s = pg::load(*p);
    if (!(s & pg::kUptodate)) return "uptodate";
    if (pg::generation(s) != (gen_of(key) & ((1u << 23) - 1))) return "generation";
    return nullptr;
  };

  std::atomic<bool> done{false};
  std::atomic<int> started{0};
  std::atomic<long> hits{0}, ref_hits{0}, ref_recheck_misses{0}, reader_frees{0}, bad{0};
  std::mutex bad_mu;
  std::string first_bad;

  auto reader = [&](int id) {
    std::mt19937_64 rng(1000 + id);
    auto report = [&](const char* what, std::uint64_t key, bool ref_path) {
      if (bad.fetch_add(1) == 0) {
        std::lock_guard<std::mutex> g(bad_mu);
        first_bad = std::string(what) + " wrong for key " + hex(key) +
                    (ref_path ? " (reference path)" : " (noref path)");
      }
    };
    auto pass = [&] {
      long local_hits = 0;
      for (std::size_t i = 0; i < keys.size(); i++) {
        std::uint64_t key = keys[(i + id * keys.size() / 2) % keys.size()];
        bool ref_path = rng() % 8 == 0;
        Page* held = nullptr;
        {
          alloc::rcu::ReadGuard g;
          Page* p = idx.lookup(key);
          if (!p) continue;
          local_hits++;
          if (const char* w = check_page(p, key)) report(w, key, false);
          if (ref_path && pg::try_get(*p, mode)) {
            if (idx.lookup(key) == p) {
              held = p;
            } else {  // removed meanwhile: drop the reference we got
              ref_recheck_misses.fetch_add(1, std::memory_order_relaxed);
              if (pg::put(*p, mode)) {
                pool.free(p);
                reader_frees.fetch_add(1, std::memory_order_relaxed);
              }
            }
          }
        }
        if (held) {
          // Outside the read-side section: only our reference keeps it.
          ref_hits.fetch_add(1, std::memory_order_relaxed);
          if (const char* w = check_page(held, key)) report(w, key, true);
          if (pg::put(*held, mode)) {
            pool.free(held);
            reader_frees.fetch_add(1, std::memory_order_relaxed);
          }
        }
      }
      hits.fetch_add(local_hits, std::memory_order_relaxed);
    };
    started.fetch_add(1);
    while (!done.load(std::memory_order_acquire)) pass();
    pass();  // one full pass over the final tree
  };

  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; r++) readers.emplace_back(reader, r);
  while (started.load() < kReaders) std::this_thread::yield();

  std::mt19937_64 rng(0xfeed);
  std::vector<Page*> present(keys.size(), nullptr);
  int inserts = 0, replaces = 0, erases = 0, block_erases = 0, alloc_failures = 0;
  // A lambda, so that a failed ASSERT ends the writer but not the test: the
  // readers must still be stopped and joined.
  auto writer = [&] {
    for (int op = 0; op < kWriterOps; op++) {
      std::lock_guard<std::mutex> g(mu);
      if (op % 1000 == 999) {  // everything: the root is retired
        for (std::size_t i = 0; i < keys.size(); i++) {
          if (!present[i]) continue;
          Page* p = idx.erase(keys[i]);
          ASSERT_EQ(p, present[i]);
          present[i] = nullptr;
          remove_page(p);
        }
        ASSERT_EQ(idx.size(), 0u);
        continue;
      }
      if (op % 97 == 96) {  // a whole leaf (or the sparse tail): its node is retired
        std::size_t begin = (rng() % 5) * 64;
        for (std::size_t i = begin; i < std::min(begin + 64 + 12, keys.size()); i++) {
          if (!present[i]) continue;
          Page* p = idx.erase(keys[i]);
          ASSERT_EQ(p, present[i]);
          present[i] = nullptr;
          remove_page(p);
        }
        block_erases++;
        continue;
      }
      std::size_t i = rng() % keys.size();
      if (!present[i]) {
        Page* p = make_page(keys[i]);
        if (!p) {
          alloc_failures++;
          continue;
        }
        ASSERT_TRUE(idx.insert(keys[i], p));
        present[i] = p;
        inserts++;
      } else if (rng() % 2) {
        Page* p = make_page(keys[i]);
        if (!p) {
          alloc_failures++;
          continue;
        }
        idx.replace(keys[i], present[i], p);
        remove_page(present[i]);
        present[i] = p;
        replaces++;
      } else {
        Page* p = idx.erase(keys[i]);
        ASSERT_EQ(p, present[i]);
        present[i] = nullptr;
        remove_page(p);
        erases++;
      }
    }
    // Leave a populated tree for the readers' last pass.
    {
      std::lock_guard<std::mutex> g(mu);
      for (std::size_t i = 0; i < keys.size(); i += 3) {
        if (present[i]) continue;
        Page* p = make_page(keys[i]);
        ASSERT_NE(p, nullptr);
        ASSERT_TRUE(idx.insert(keys[i], p));
        present[i] = p;
      }
    }
  };
  writer();
  done.store(true, std::memory_order_release);
  for (auto& t : readers) t.join();

  EXPECT_EQ(bad.load(), 0) << first_bad;
  EXPECT_GT(hits.load(), 0);
  EXPECT_EQ(alloc_failures, 0);
  EXPECT_GT(inserts, 0);
  EXPECT_GT(replaces, 0);
  EXPECT_GT(erases, 0);
  EXPECT_GT(block_erases, 0);
  RecordProperty("hits", static_cast<int>(hits.load()));
  RecordProperty("ref_hits", static_cast<int>(ref_hits.load()));
  RecordProperty("ref_recheck_misses", static_cast<int>(ref_recheck_misses.load()));
  RecordProperty("reader_frees", static_cast<int>(reader_frees.load()));

  // Tear down: every page out and freed before the pool goes.
  for (std::size_t i = 0; i < keys.size(); i++) {
    if (!present[i]) continue;
    Page* p = idx.erase(keys[i]);
    EXPECT_EQ(p, present[i]);
    if (p) remove_page(p);
    present[i] = nullptr;
  }
  EXPECT_EQ(idx.size(), 0u);
  pool.drain();
  alloc::Counters c = pool.counters();
  EXPECT_EQ(c.live(), 0u) << "a page was never freed (or freed twice)";
  EXPECT_EQ(c.immediate, 0u) << "every cached page leaves through the deferred path";
  alloc::rcu::barrier();
}

}  // namespace
}  // namespace norefs::cache
