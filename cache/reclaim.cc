// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/reclaim.cc — the LRU lists, eviction under the memory limit, and
// the last step of removal.  Lock order and the contract: reclaim.h.
#include "cache/reclaim.h"

#include <algorithm>

#include "alloc/die.h"
#include "cache/page_cache.h"
#include "cache/sync_point.h"

namespace norefs::cache {

// Reclaim takes the inactive tail whatever its referenced bit (unmapped
// page-cache pages are not given a second chance by reference bits) and
// refills the inactive list from the active tail when it is the shorter.
// Circular lists through Page::lru_prev/lru_next with a dummy head each;
// lru_next == nullptr means "on no list".  The `active` flag of a page on a
// list says which, and is changed only under lru_mu_.
struct Reclaim::Lru {
  Page inactive, active;
  std::size_t nr_inactive = 0, nr_active = 0;
  Lru() {
    for (Page* h : {&inactive, &active}) h->lru_prev = h->lru_next = h;
  }
  static void link_head(Page* head, Page* p) {
    p->lru_next = head->lru_next;
    p->lru_prev = head;
    head->lru_next->lru_prev = p;
    head->lru_next = p;
  }
  static void unlink(Page* p) {
    p->lru_prev->lru_next = p->lru_next;
    p->lru_next->lru_prev = p->lru_prev;
    p->lru_prev = p->lru_next = nullptr;
  }
  std::size_t& nr(bool act) { return act ? nr_active : nr_inactive; }
};

Reclaim::Reclaim(std::size_t limit_pages, unsigned limit_wait_ms, alloc::PagePool& pool,
                 CacheStats& stats, RefMode ref_mode)
    : limit_pages_(limit_pages),
      limit_wait_ms_(limit_wait_ms),
      pool_(pool),
      stats_(stats),
      ref_mode_(ref_mode),
      lru_(std::make_unique<Lru>()) {}

Reclaim::~Reclaim() = default;

// ── LRU ──

void Reclaim::add(Page* p) {
  std::lock_guard lk(lru_mu_);
  Lru::link_head(&lru_->inactive, p);
  lru_->nr_inactive++;
  publish_counts();
}

void Reclaim::del(Page* p) {
  std::lock_guard lk(lru_mu_);
  if (!p->lru_next) return;
  bool act = pg::load(*p) & pg::kActive;
  Lru::unlink(p);
  lru_->nr(act)--;
  publish_counts();
}

void Reclaim::replace(Page* old, Page* p) {
  std::lock_guard lk(lru_mu_);
  pg::set_flags(*p, pg::load(*old) & (pg::kReferenced | pg::kActive));
  if (!old->lru_next) NOREFS_DIE("replacing a page that is on no list");
  p->lru_prev = old->lru_prev;
  p->lru_next = old->lru_next;
  p->lru_prev->lru_next = p;
  p->lru_next->lru_prev = p;
  old->lru_prev = old->lru_next = nullptr;
}

void Reclaim::mark_accessed(Page* p) {
  std::uint64_t s = pg::load(*p);
  if (pg::mark_accessed_is_noop(s)) return;
  if (!(s & pg::kReferenced)) {
    pg::set_flags(*p, pg::kReferenced);
    return;
  }
  std::lock_guard lk(lru_mu_);
  s = pg::load(*p);
  if (!p->lru_next || (s & pg::kActive)) return;
  Lru::unlink(p);
  lru_->nr_inactive--;
  pg::clear_flags(*p, pg::kReferenced);
  pg::set_flags(*p, pg::kActive);
  Lru::link_head(&lru_->active, p);
  lru_->nr_active++;
  publish_counts();
}

std::size_t Reclaim::pages() {
  std::lock_guard lk(lru_mu_);
  return lru_->nr_active + lru_->nr_inactive;
}

// Context: lru_mu_ held.  Single writer (the lock): relaxed stores.
void Reclaim::publish_counts() {
  auto& h = stats_.header();
  h.pages_cached.store(lru_->nr_active + lru_->nr_inactive, std::memory_order_relaxed);
  h.active_pages.store(lru_->nr_active, std::memory_order_relaxed);
}

// ── Removal's last step ──

void Reclaim::free_removed(RemovedList& pages) {
  if (!pages.empty()) sync_point::hit("remove:after_unlink");
  for (auto [p, frozen] : pages) {
    if (!frozen && !pg::put(*p, ref_mode_)) continue;  // a reader still holds it
    // Relaxed read of rcu_free: we set it on this thread, or the final put
    // ordered it (alloc/page.h).
    if (p->rcu_free()) {
      pool_.free(p);
    } else {
      pool_.free_not_deferred(p);
    }
    pool_.make_way();
  }
  pages.clear();
}

// ── Eviction under the limit ──

std::size_t Reclaim::shrink(std::size_t want, CacheSlot& st) {
  RemovedList out;
  std::size_t got = 0, skipped = 0;
  {
    std::lock_guard lk(lru_mu_);
    std::size_t budget = 2 * (lru_->nr_active + lru_->nr_inactive);
    while (got < want && budget-- > 0) {
      // Refill the inactive list from the active tail while it is the
      // shorter (shrink_active_list()).
      if (lru_->nr_active > lru_->nr_inactive || lru_->nr_inactive == 0) {
        if (lru_->nr_active == 0) break;
        Page* a = lru_->active.lru_prev;
        Lru::unlink(a);
        lru_->nr_active--;
        pg::clear_flags(*a, pg::kActive);
        Lru::link_head(&lru_->inactive, a);
        lru_->nr_inactive++;
        continue;
      }
      Page* p = lru_->inactive.lru_prev;
      auto* f = static_cast<CachedFile*>(p->owner);
      // Reverse lock order: only try.  The file is alive: its pages are on
      // the list, and its teardown must take lru_mu_ to remove them.
      bool locked = f->mu_.try_lock();
      if (!locked || !pg::is_uptodate(*p) || !pg::freeze(*p, ref_mode_)) {
        if (locked) f->mu_.unlock();
        Lru::unlink(p);  // rotate: look at it again after the others
        Lru::link_head(&lru_->inactive, p);
        skipped++;
        continue;
      }
      if (f->index_.erase(p->index) != p) NOREFS_DIE("page index and LRU disagree");
      Lru::unlink(p);
      lru_->nr_inactive--;
      if (!f->deleting_) p->set_rcu_free();
      f->mu_.unlock();
      out.push_back({p, true});
      got++;
    }
    publish_counts();
  }
  bump(st, Ctr::evicted, got);
  bump(st, Ctr::evict_skipped, skipped);
  free_removed(out);
  return got;
}

// Makes room for `pages` new pages under the limit, which counts every page
// not yet back in the arena (cached, held, or waiting for a grace period).
// Evicted pages wait for a grace period before they count less, so we evict
// a little more than asked (the next fills find room without waiting) and,
// if what waits is what keeps us over, wait for it: synchronous
// back-pressure, the hard bound.  False if nothing can be evicted or
// waited for.  Context: reserve_mu_ held if there is a limit (a
// Reservation), no other lock, not in a read-side section.
bool Reclaim::reserve(std::size_t pages, CacheSlot& st) {
  const std::size_t limit = limit_pages_;
  if (limit == 0 || pages == 0) return true;
  if (pages > limit) return false;
  for (int attempt = 0; attempt < 4; attempt++) {
    alloc::Counters c = pool_.counters();
    std::uint64_t live = c.live();
    if (live + pages <= limit) return true;
    std::uint64_t need = live + pages - limit;
    if (c.waiting < need) {
      std::size_t slack = std::max<std::size_t>(limit / 32, 1);
      shrink(need - c.waiting + slack, st);
    }
    c = pool_.counters();
    if (c.live() + pages <= limit) return true;
    if (c.waiting == 0) continue;  // held pages may come back to the LRU
    // A drain that gave up, with no grace period completed since: waiting
    // again would only stall every allocation (the hard bound holds
    // anyway; the page stays uncached).
    if (blocked_at_gp_ != 0 && c.gp_completed + 1 == blocked_at_gp_) {
      bump(st, Ctr::limit_blocked);
      return false;
    }
    bump(st, Ctr::limit_drains);
    if (!pool_.drain_for(limit_wait_ms_)) {
      blocked_at_gp_ = pool_.counters().gp_completed + 1;
      bump(st, Ctr::limit_blocked);
      return false;
    }
    blocked_at_gp_ = 0;
  }
  return pool_.counters().live() + pages <= limit;
}

}  // namespace norefs::cache
