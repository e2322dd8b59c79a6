// SPDX-License-Identifier: LGPL-2.1-or-later
//
// alloc/page_arena.h — a dedicated jemalloc arena for cache pages.
//
// One manual arena (arenas.create) holds every page's data (kPageSize bytes,
// page aligned) and every page descriptor (64 bytes), and what the cache
// keeps for lockless readers in other processes (SharedAlloc: the page
// index's nodes, each file's fast-path state).  Memory goes back to this
// arena only.
//
// Its memory is the shared region's (alloc/shared_region.h): the arena's
// extent hooks carve every extent from the region and give purged memory
// back by punching it out of the memfd, which is what returns a shared
// mapping's pages to the kernel (jemalloc's default, MADV_DONTNEED, does
// not).  The hooks, one by one, in page_arena.cc.
//
// Thread caches.  jemalloc's automatic tcache ignores MALLOCX_ARENA on a hit
// and would hand out other arenas' memory (jemalloc#1535; measured 14/64 in
// rcu-and-jemalloc.md §3.5), and a free through it parks our pages where
// malloc() picks them up.  So the automatic tcache is never used with this
// arena: every call passes either MALLOCX_TCACHE_NONE or a private tcache
// created for one thread and used only for this arena (TcacheMode), on
// allocation and on free alike.  tools/bench/fill_free_bench measures both.
//
// Statistics.  jemalloc's stats refresh (`epoch`) locks every bin of every
// arena, ~30 us: stats() is for human intervals (the PagePool refreshes it once
// a second), never for 2 ms sampling.  Cheap counters live in PagePool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "alloc/page.h"
#include "alloc/shared_region.h"

namespace norefs::alloc {

// Allocations in an arena's memory for structures a lockless reader in
// another process follows.  A value (the arena's index), so that a
// structure in the region can hold it without pointing into a heap.
// Always MALLOCX_TCACHE_NONE: see "Thread caches" above.
class SharedAlloc {
 public:
  explicit SharedAlloc(unsigned arena) : arena_(arena) {}
  // nullptr on exhaustion.
  void* alloc(std::size_t size, std::size_t align) const;
  void free(void* p, std::size_t size, std::size_t align) const;

 private:
  unsigned arena_;
};

enum class TcacheMode {
  none,     // MALLOCX_TCACHE_NONE: every call goes to the arena's bins
  private_  // one tcache.create'd cache per thread, for this arena only
};

struct ArenaStats {
  std::uint64_t active_bytes = 0;    // stats.arenas.<i>.pactive * page size
  std::uint64_t resident_bytes = 0;  // stats.arenas.<i>.resident
};

class PageArena {
 public:
  // The arena over a new shared region of `region_bytes` of address space.
  // Throws std::system_error if the region cannot be made.
  explicit PageArena(std::size_t region_bytes);
  // Destroys the arena.  Context: every page and descriptor has been freed and
  // every tcache given out by tcache_create() destroyed.
  ~PageArena();
  PageArena(const PageArena&) = delete;
  PageArena& operator=(const PageArena&) = delete;

  unsigned index() const { return index_; }
  const SharedRegion& region() const { return region_; }
  SharedAlloc shared_alloc() const { return SharedAlloc(index_); }

  // `tcache` is a private tcache id from tcache_create(), or kNoTcache.
  static constexpr int kNoTcache = -1;
  // nullptr when the arena cannot grow (ENOMEM).
  std::byte* alloc_data(int tcache);
  void free_data(std::byte* data, int tcache);
  Page* alloc_descriptor(int tcache);
  void free_descriptor(Page* page, int tcache);

  int tcache_create();
  void tcache_flush(int tcache);
  void tcache_destroy(int tcache);

  // arena.<i>.dirty_decay_ms: how long freed pages stay resident (dirty)
  // before they are given back to the kernel; -1 never, 0 at once.
  // jemalloc's default is 10000.  Setting it purges what is already older.
  void set_dirty_decay_ms(long ms);
  // arena.<i>.decay: purges what the decay curve says is due.  Without
  // jemalloc's background thread decay advances only when the arena
  // allocates or frees, so an idle arena keeps its dirty pages: the pool's
  // driver calls this on a timer (PagePoolConfig::decay_tick_ms).
  void decay();
  // True if jemalloc says `p` lives in this arena (arenas.lookup).  Slow: tests.
  bool owns(const void* p) const;
  // Refreshes jemalloc's statistics and reads this arena's.  Slow (see above).
  ArenaStats stats() const;

 private:
  int flags(int tcache, std::size_t align) const;
  struct Hooks;
  SharedRegion region_;  // first: outlives the arena, which lives in it
  std::unique_ptr<Hooks> hooks_;
  unsigned index_ = 0;
};

}  // namespace norefs::alloc
