// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/reclaim.h — where cached pages leave: the LRU lists, eviction
// (shrink), room under the memory limit (reserve and its RAII
// Reservation), and the last step of every removal (free_removed).
// Internal to cache/: PageCache owns one; the files' index and lock are
// CachedFile's (page_cache.h), taken here only as eviction needs them.
//
// ── Lock order ─────────────────────────────────────────────────────────────
//   One table for the whole process: docs/design.md#lock-order.  Here:
//   reserve_mu_ -> CachedFile::mu_ -> lru_mu_; shrink() holds lru_mu_ and
//   only try-locks a CachedFile::mu_ (the reverse order, so it never waits).
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "alloc/page_pool.h"
#include "cache/cache_stats.h"
#include "cache/page.h"

namespace norefs::cache {

// A page taken out of a file's index, on its way back to the pool.
struct Removed {
  Page* page;
  bool frozen;  // no cache reference left to drop: the remover frees it
};
using RemovedList = std::vector<Removed>;

class Reclaim {
 public:
  // `limit_pages`: the hard bound of PageCacheConfig (0: none);
  // `limit_wait_ms`: PageCacheConfig's, how long reserve() waits for a drain.
  Reclaim(std::size_t limit_pages, unsigned limit_wait_ms, alloc::PagePool& pool, CacheStats& stats,
          RefMode ref_mode);
  ~Reclaim();
  Reclaim(const Reclaim&) = delete;
  Reclaim& operator=(const Reclaim&) = delete;

  // ── The LRU lists.  Two, like the kernel's classic LRU for file pages:
  // new pages enter the inactive list; mark_accessed() on a referenced
  // inactive page activates it.  Each takes lru_mu_. ──
  // Context for add/del/replace: the page's file's mu_ held.
  void add(Page* p);
  void del(Page* p);  // no-op for a page on no list
  // `p` takes `old`'s place in its list, with its referenced and active
  // flags (a copy-on-write replacement).
  void replace(Page* old, Page* p);
  // folio_mark_accessed() for the two lists; its exact no-op test is
  // pg::mark_accessed_is_noop().  Context: the caller holds a reference.
  void mark_accessed(Page* p);
  // Pages on the lists.
  std::size_t pages();

  // ── Eviction and the limit ──
  // Evicts up to `want` pages from the inactive tail (refilled from the
  // active tail).  Returns pages evicted.  Context: no lock held.
  std::size_t shrink(std::size_t want, CacheSlot& st);
  // Room under the limit for one step: holds reserve_mu_ for its lifetime
  // when there is a limit (the caller allocates what it reserved before the
  // reservation ends, so two reservations never count the same room), no
  // lock otherwise.  take() makes room (reserve()); without a limit it
  // always succeeds.
  class Reservation {
   public:
    Reservation(Reclaim& r, CacheSlot& st) : r_(r), st_(st), lk_(r.reserve_mu_, std::defer_lock) {
      if (r.limit_pages_) lk_.lock();
    }
    bool take(std::size_t pages) { return r_.reserve(pages, st_); }

   private:
    Reclaim& r_;
    CacheSlot& st_;
    std::unique_lock<std::mutex> lk_;
  };

  // ── Removal's last step.  Context: no lock held.  Drops the cache
  // references of pages a removal took out of an index (frozen ones have
  // none) and gives back to the pool those that no reader holds: deferred
  // if rcu_free is set, at once otherwise. ──
  void free_removed(RemovedList& pages);

 private:
  struct Lru;
  bool reserve(std::size_t pages, CacheSlot& st);
  void publish_counts();  // Context: lru_mu_ held.

  const std::size_t limit_pages_;
  const unsigned limit_wait_ms_;
  // The pool's gp_completed when a drain last gave up, +1 (0: none did).
  // While no grace period has completed since, reserve() does not wait
  // again.  Guarded by reserve_mu_.
  std::uint64_t blocked_at_gp_ = 0;
  alloc::PagePool& pool_;
  CacheStats& stats_;
  const RefMode ref_mode_;
  std::mutex lru_mu_;
  std::unique_ptr<Lru> lru_;  // guarded by lru_mu_
  // With a limit: held by a Reservation (see there).
  std::mutex reserve_mu_;
};

}  // namespace norefs::cache
