// SPDX-License-Identifier: LGPL-2.1-or-later
//
// alloc/page_pool.h — page allocation and the RCU-deferred free engine.
//
// The guarantee (design.md, "Page lifecycle"): the memory of a page found in
// an index under rcu::read_lock() is not reused, purged or unmapped before
// that reader's rcu::read_unlock().  Everything here exists to give that
// guarantee while keeping what waits for a grace period small.
//
// Shape (the kernel series' patches 1, 2, 6, 7 and 8, per thread instead of
// per CPU):
//
//  free(page)  ── rcu_free clear, or defer off ──────────────> arena
//      │ rcu_free set
//      v
//  slot.pending ──cut──> slot.inflight (one batch, stamped with a cookie)
//      │                    │ grace period `cookie` completes
//      │                    v
//      │                  arena  (freed by the owner on its next free(), or
//      │                          by the driver if the owner went idle)
//      │ pending >= expedite_pages
//      v
//  expedite worker: takes the whole pending list, synchronize(), then
//  frees it — or, if the owner is still freeing, hands it back on
//  slot.done for the owner to free on its next free().
//
// Owner-first freeing.  Whoever waited for a grace period (the driver or the
// expedite worker) frees the completed list itself
// only if the slot's owner has not freed anything during the last sweep
// epoch (5-10 ms) or has exited; otherwise the owner frees it, with its own
// warm tcache and without cross-thread arena traffic (known problem 5 of
// the series: frees moved to a kworker are cold and charged to no one).
// Measured: 0.24x -> 0.73x of immediate's pages/s at 1 thread for batches.
// Only the waiting moves off the owner; it never waits for a grace period.
//
// Slots.  Each thread that uses the pool gets a slot: a pending list, at most
// one in-flight batch, a private jemalloc tcache (TcacheMode::private_), and
// its counters (in the StatsBlock).  The slot lock — short, per slot, taken by
// the owner on each deferred free and by the driver and expedite worker when
// they visit — makes "cut pending into the batch" and "stamp it with the
// cookie of the grace period it needs" one step, so no page joins a batch
// whose grace period has already started.  A page waits one to two grace
// periods (grace_period.h).
//
// Threads come and go (libfuse creates and destroys workers).  A thread gets
// a slot on first use; at thread exit it hands the slot back (thread_slots.h:
// the protocol): the lists stay in it, the driver keeps draining them, and
// the next new thread may adopt the slot with whatever is still on it.  So
// nothing is lost when a thread exits and slots are bounded by the peak
// number of live threads.
//
// The driver: one thread of ours runs GracePeriods::synchronize() whenever a
// batch waits, at most once per gp_interval_us, and after each one sweeps:
// frees the completed batches of idle or exited owners and cuts the pending
// lists behind them.  (A second engine that handed each batch to liburcu's
// call_rcu was measured far worse without expedite and no better with it,
// and retired: docs/benchmarks.md#fill-and-free.)
//
// Lock order (the whole process, one table: docs/design.md#lock-order):
// the slot lock, the slot registry's mutex (thread_slots.h), the expedite
// queue lock and the driver's wake lock are all leaves: none is taken while
// another is held.  No lock here is taken inside a read-side section, and
// none is held across synchronize().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "alloc/page.h"
#include "alloc/page_arena.h"
#include "alloc/stats_block.h"

namespace norefs::alloc {

struct PagePoolConfig {
  // false: every page goes straight back to the arena.  The baseline, and the
  // unsafe control of the evict-race checker.  Never for production.
  bool defer = true;
  // false: the series' patches 1-6 alone, nothing bounds a slot's lists.
  bool expedite = true;
  // A slot's pending list at this length is handed to the expedite worker.
  std::size_t expedite_pages = 1024;
  // At most one grace period per this many microseconds
  // (0: back to back).  Pages freed meanwhile gather into larger batches, so
  // fewer grace periods (each two membarrier IPI rounds to every running
  // thread of the process) serve the same frees; expedite bounds what
  // waits meanwhile.  The default is measured in tools/bench/fill_free_bench
  // (README).
  unsigned gp_interval_us = 1000;
  TcacheMode tcache = TcacheMode::private_;
  // Stamp every queued page with the grace periods started when it was
  // queued, and count (stats: check_violations) any page freed before a
  // grace period that started after that.  One extra load per page.
  bool check = false;
  // Fill a page with kPoisonByte just before it goes back to the arena, so
  // that a reader of freed memory sees it.  For tests and checkers.
  bool poison_on_free = false;
  // Test control only: cut batches are freed without waiting for their grace
  // period.  Lets a test prove that the check mode detects a broken engine.
  bool debug_skip_grace_period = false;
  // Where the counters are published (StatsBlock); empty = anonymous.
  std::string stats_path;
  // Threads that may use the pool at once.  One more aborts with a message.
  std::size_t max_threads = 1024;
  // The arena's dirty_decay_ms (page_arena.h): how long freed page memory
  // stays resident before it goes back to the kernel.  -2: jemalloc's
  // default (10 s).  Chosen from measurements in docs/punch-wait.md.
  long dirty_decay_ms = 1000;
  // With dirty_decay_ms >= 0: the driver advances the arena's decay at most
  // this often (and at least every idle tick, 10 ms, once due), so that an
  // idle pool's memory comes back too.  0: never (only jemalloc's ticks).
  unsigned decay_tick_ms = 100;
  // How often the driver refreshes the arena's jemalloc statistics.
  unsigned arena_stats_interval_ms = 1000;
  // Address space of the shared region the arena lives in
  // (alloc/shared_region.h): the most page memory, descriptors and shared
  // allocations the pool can ever hold, with jemalloc's growth slack.  It
  // costs no memory until used.  0: kDefaultRegionBytes.
  std::size_t region_bytes = 0;
};

inline constexpr std::size_t kDefaultRegionBytes = std::size_t{64} << 30;

inline constexpr std::uint8_t kPoisonByte = 0x6b;

class PagePool {
 public:
  // Throws std::system_error if the stats block cannot be created.
  explicit PagePool(const PagePoolConfig& config = {});
  // Drains every list, waits for every grace period, destroys the arena.
  // Context: no other thread uses the pool any more.  Every page allocated
  // must have been freed; a leak is reported on stderr and aborts.
  ~PagePool();
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  // A page with a zero state and kPageSize bytes of (unzeroed) data, or
  // nullptr when memory is exhausted.
  Page* alloc();

  // The one free function.  Called by whoever drops the last reference.
  // rcu_free set -> waits for a grace period; clear -> arena now.
  // Context: any thread, inside a read-side section or not: it never waits
  // for a grace period.  (It may free this thread's completed batch; that is
  // safe inside a section too, because a section still running cannot have
  // begun before that batch's grace period did, and so cannot have found
  // its pages, which were unlinked before that.)
  void free(Page* page);

  // For pages of a file being deleted or forgotten: no handle exists, so no
  // lockless reader can (the rule in design.md).  Never deferred.
  void free_not_deferred(Page* page);

  // Removal loops call this every page or so: if this thread's expedite work
  // is queued and has not started, yield so that it runs (patch 8).
  void make_way();

  // Waits until every page freed before the call has reached the arena.
  // Context: not inside a read-side section.
  void drain();
  // The same, for about `ms` milliseconds: returns true when everything
  // came back or grace periods kept completing until then (the caller
  // re-checks what it needs), false if one did not complete within `ms`.
  // The grace periods run on the driver, at once (no gp_interval_us
  // pacing), so a grace period that cannot end — a reader in another
  // process stopped inside its section (alloc/reader_registry.h) — keeps
  // the driver waiting, never the caller.  Context: as drain().
  bool drain_for(unsigned ms);

  Counters counters() const;
  const PagePoolConfig& config() const;
  // Refreshes and returns the arena's jemalloc statistics.  Slow (~30 us,
  // locks every bin): at human intervals only.
  ArenaStats arena_stats() const;
  // True if `p` is memory of this pool's arena (arenas.lookup).  Slow.
  bool owns(const void* p) const;
  const std::string& stats_path() const;
  // The region every page lives in, and allocations in it for what other
  // processes read (page_arena.h).
  const SharedRegion& region() const;
  SharedAlloc shared_alloc() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace norefs::alloc
