// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/page.h — a cached page's state word and every transition on it.
//
// A cached page is an alloc::Page (alloc/page.h): descriptor + 4 KiB of data
// from the page arena.  Its whole state is one atomic 64-bit word, so that a
// lockless reader can test everything it needs with one load.  No other file
// does a raw RMW on this word: every transition is a named function below.
//
//   63        62 ............ 40  39..37  36  35  34  33  32   31      30 ........ 0
//  +---------+------------------+-------+---+---+---+---+---+-------+-------------+
//  |rcu_free | generation (23)  |  -    |db |act|ref|ra |utd|LOCKED | refcount(31)|
//  +---------+------------------+-------+---+---+---+---+---+-------+-------------+
//   alloc's   set at insert               drop-behind, active, referenced,
//                                         readahead mark, uptodate
//
// Lifecycle (design.md, "Page lifecycle"):
//   alloc -> fill data -> init_cached(gen) [refcount 1: the cache's reference]
//         -> index store -> mark_uptodate() [release]
//         -> readers: noref (no write at all), or try_get()/put()
//         -> removal: unlink from the index, set_rcu_free(), put() the cache's
//            reference; the last put() calls PagePool::free().
//
// Pages are immutable while in an index once uptodate: every change of a
// page's bytes (write, truncate's zeroing of the last page) replaces the page
// with a new one (copy-on-write), and the old one leaves the index by the
// ordinary removal path.  So a reader that found a page uptodate copies bytes
// that were the file's at some moment, whatever happens next.
//
// Refcount disciplines (one per cache, chosen with the read path):
//  - Cas (`ref`, today's kernel): the count is bits 0..30, zero means frozen
//    or dead; try_get() is a CAS loop that refuses zero.
//  - FetchAdd (`ref-fetchadd`, seeds/folio-refcount-scalability.txt): bit 31
//    is a dedicated LOCKED bit; try_get() is one fetch_add and fails if it
//    sees LOCKED, undoing with a best-effort CAS back to "locked zero"; a put
//    that reaches zero must win a CAS 0 -> LOCKED to free (a racing getter
//    that took 0 -> 1 owns the page instead).  Overflow: failed getters leave
//    increments on a locked count; fail_get_locked() resets it, and loops
//    until it has once the count passes kLockedLimit, so the count never
//    carries into LOCKED or the flags.
// Frozen: refcount 0 (Cas) or LOCKED (FetchAdd).  freeze() takes a page whose
// only reference is the cache's to frozen; eviction does that, and so skips
// pages a reference-path reader holds.  A noref reader may still be copying
// from a frozen page: the deferred free, not the refcount, protects it.
//
// Memory ordering.  mark_uptodate() is a release RMW; is_uptodate() readers
// load acquire: the page's bytes are visible to whoever sees the bit.
// try_get() acquires (it pairs with the release of the put() that may have
// preceded a reuse, as the kernel's folio_try_get does); put() is acq_rel:
// release for our accesses to the page, acquire for the freeing thread.
// Flag changes that publish nothing (referenced, active, readahead,
// drop-behind) are relaxed: they are hints read by the same word's loads.
#pragma once

#include <atomic>
#include <cstdint>

#include "alloc/page.h"

namespace norefs::cache {

using Page = alloc::Page;

enum class RefMode { Cas, FetchAdd };

namespace pg {

inline constexpr std::uint64_t kCountMask = (std::uint64_t{1} << 31) - 1;
inline constexpr std::uint64_t kLocked = std::uint64_t{1} << 31;
inline constexpr std::uint64_t kUptodate = std::uint64_t{1} << 32;
inline constexpr std::uint64_t kReadahead = std::uint64_t{1} << 33;
inline constexpr std::uint64_t kReferenced = std::uint64_t{1} << 34;
inline constexpr std::uint64_t kActive = std::uint64_t{1} << 35;
inline constexpr std::uint64_t kDropBehind = std::uint64_t{1} << 36;
inline constexpr unsigned kGenShift = 40;
inline constexpr std::uint64_t kGenMask = ((std::uint64_t{1} << 23) - 1) << kGenShift;
inline constexpr std::uint64_t kRcuFree = Page::kRcuFree;
// FetchAdd: past this many failed getters on a locked page, reset by loop.
inline constexpr std::uint64_t kLockedLimit = std::uint64_t{1} << 30;
static_assert((kGenMask & kRcuFree) == 0 && (kGenMask & kDropBehind) == 0);

inline std::uint64_t count(std::uint64_t s) { return s & kCountMask; }
inline std::uint32_t generation(std::uint64_t s) {
  return static_cast<std::uint32_t>((s & kGenMask) >> kGenShift);
}
inline bool frozen(std::uint64_t s, RefMode m) {
  return m == RefMode::Cas ? count(s) == 0 : (s & kLocked) != 0;
}

// Relaxed: the page is not yet visible to any other thread.
inline void init_cached(Page& p, std::uint32_t gen) {
  std::uint64_t g = (std::uint64_t{gen} << kGenShift) & kGenMask;
  p.state.store(g | 1, std::memory_order_relaxed);
}

// Acquire pairs with the release in mark_uptodate(): the bytes are complete.
inline std::uint64_t load(const Page& p) { return p.state.load(std::memory_order_acquire); }
inline bool is_uptodate(const Page& p) { return load(p) & kUptodate; }

// Release: publishes the page's bytes to every acquire load that sees the bit.
inline void mark_uptodate(Page& p) { p.state.fetch_or(kUptodate, std::memory_order_release); }

// Hints: relaxed, see the block comment.
inline void set_flags(Page& p, std::uint64_t f) { p.state.fetch_or(f, std::memory_order_relaxed); }
inline void clear_flags(Page& p, std::uint64_t f) {
  p.state.fetch_and(~f, std::memory_order_relaxed);
}
// Returns true if this call cleared the readahead mark (only one caller does).
inline bool test_and_clear_readahead(Page& p) {
  return p.state.fetch_and(~kReadahead, std::memory_order_relaxed) & kReadahead;
}

// The exact no-op predicate of folio_mark_accessed() for this cache's
// two-list (inactive/active) policy: marking accessed changes nothing iff
// the page is drop-behind (mark_accessed ignores those), or it is already
// referenced and active.  A not-referenced page would get `referenced`; a
// referenced inactive one would be activated.
inline bool mark_accessed_is_noop(std::uint64_t s) {
  return (s & kDropBehind) || ((s & kReferenced) && (s & kActive));
}

// Conditional reference.  Context: the caller found the page in an index
// under rcu::read_lock() (so its descriptor memory is live) and, after
// success, re-checks that the index still holds it (it may have been removed
// and the count may now be the removed page's last references).
inline bool try_get(Page& p, RefMode m) {
  if (m == RefMode::Cas) {
    std::uint64_t s = p.state.load(std::memory_order_relaxed);
    do {
      if (count(s) == 0) return false;
      // Acquire on success: see the block comment.  Relaxed on failure: we
      // only retry with the value we read.
    } while (!p.state.compare_exchange_weak(s, s + 1, std::memory_order_acquire,
                                            std::memory_order_relaxed));
    return true;
  }
  std::uint64_t s = p.state.fetch_add(1, std::memory_order_acquire) + 1;
  if (!(s & kLocked)) return true;
  // Locked: a count on a locked page means nothing, so reset it to a locked
  // zero.  Best effort, as in the patch: if the word moved since our add,
  // another failing getter will reset it.  Past kLockedLimit insist, so the
  // count never carries into LOCKED and the flags.  Relaxed: a failed getter
  // publishes and acquires nothing.
  while (!p.state.compare_exchange_weak(s, s & ~kCountMask, std::memory_order_relaxed,
                                        std::memory_order_relaxed)) {
    if (count(s) < kLockedLimit) break;
  }
  return false;
}

// Drops a reference.  Returns true if it was the last: the caller then calls
// PagePool::free(&p).  acq_rel: release our accesses to the page, acquire
// everyone else's before the free.
inline bool put(Page& p, RefMode m) {
  std::uint64_t s = p.state.fetch_sub(1, std::memory_order_acq_rel) - 1;
  if (count(s) != 0) return false;
  if (m == RefMode::Cas) return true;
  // FetchAdd: only the winner of 0 -> LOCKED frees; a getter that took the
  // count from 0 to 1 in between owns the page now.
  return p.state.compare_exchange_strong(s, s | kLocked, std::memory_order_acq_rel,
                                         std::memory_order_relaxed);
}

// Freezes a page whose only reference is the cache's (count == 1, not
// frozen).  Returns false if anyone else holds a reference.  Acquire: we now
// own the page's contents against reference-path readers.
inline bool freeze(Page& p, RefMode m) {
  std::uint64_t s = p.state.load(std::memory_order_relaxed);
  for (;;) {
    if (count(s) != 1 || (m == RefMode::FetchAdd && (s & kLocked))) return false;
    std::uint64_t frozen_s = m == RefMode::Cas ? (s & ~kCountMask) : ((s & ~kCountMask) | kLocked);
    if (p.state.compare_exchange_weak(s, frozen_s, std::memory_order_acquire,
                                      std::memory_order_relaxed)) {
      return true;
    }
  }
}

// A frozen page leaving the cache: no reference is left to put, so the
// freezer frees it.  set_rcu_free() first (Page::set_rcu_free): readers
// without a reference may still be copying.

}  // namespace pg
}  // namespace norefs::cache
