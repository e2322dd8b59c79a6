// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/cache_stats.h — the page cache's counters, per thread, readable live
// by another process.
//
// A counter block like the pool's (alloc/counter_block.h: the layout, the
// writer, the reader, why relaxed is enough): a header and one slot per
// thread.  Each slot has one writer, the thread it belongs to, which
// updates its counters with bump() (relaxed load + relaxed store, no RMW,
// no line shared with another thread): the fast path writes no shared
// memory.  Readers map the file read-only and sum the slots.
//
// A thread takes its slot on first use and hands it back when it exits
// (alloc/thread_slots.h: the one thread-exit protocol); its counts stay in
// the slot, and the next thread to read adopts it.  So slots are bounded by
// the peak number of live threads.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "alloc/counter_block.h"
#include "alloc/thread_slots.h"

namespace norefs::cache {

// Why the fast path stopped and handed the read to the reference path
// (cache/read_loop.h).  Every stop is counted by reason.
enum class Stop : std::uint8_t {
  missing,       // no page at the index
  not_uptodate,  // the page is being filled
  readahead,     // the page carries the readahead mark: the next window starts
  drop_behind,   // the page is drop-behind: the reference path ends it
  past_eof,      // the read goes past i_size
  accessed,      // marking the page accessed would change its flags
  interrupted,   // the request was interrupted
  batch,         // the batch limit of pages per read-side section
  changed,       // stackcopy only: the re-check after the copy failed
  kCount,
};
inline constexpr std::size_t kStops = static_cast<std::size_t>(Stop::kCount);
std::string_view stop_name(Stop s);

// Per-thread counters.  `fast_pages` and `slow_hits` are both hits: no hit
// is invisible (the series' known problem 8).
enum class Ctr : std::uint8_t {
  reads,            // read calls
  bytes,            // bytes returned
  fast_pages,       // page visits served by the fast path (hits)
  fast_reads,       // read calls served entirely by the fast path
  slow_hits,        // page visits the reference path found cached (hits)
  misses,           // page visits that found no page (or a dead one) and filled
  waits,            // page visits that waited for a fill in progress
  sync_readahead,   // windows read synchronously on a miss
  async_readahead,  // windows started by the readahead mark
  readahead_pages,  // pages read from the backing file into the cache
  uncached_reads,   // page visits served from the backing file without caching
  zero_copy_reads,  // read_iov calls answered straight from pages
  evicted,          // pages evicted: under the memory limit, or by evict() (fadvise)
  evict_skipped,    // eviction candidates skipped (held by a reference reader)
  limit_drains,     // times the limit waited for a grace period (drain)
  limit_blocked,    // times the limit gave up: grace periods made no progress in limit_wait_ms
  io_errors,        // failed reads of the backing file
  written_pages,    // pages replaced by write()
  removed_pages,    // pages removed by truncate/punch/invalidate
  write_alloc,      // pages write() created (write-allocate): whole pages, no backing read
  write_fill,       // partial pages write() created by reading the backing file
  write_skipped,    // pages of a write left uncached: no room under the limit or no memory
  stop0,            // stop0 + Stop: fast-path stops by reason
  kCount = stop0 + kStops,
};
inline constexpr std::size_t kCounters = static_cast<std::size_t>(Ctr::kCount);
std::string_view counter_name(std::size_t i);
inline Ctr stop_counter(Stop s) {
  return static_cast<Ctr>(static_cast<std::size_t>(Ctr::stop0) + static_cast<std::size_t>(s));
}

using alloc::Counter;

struct alignas(64) CacheSlot {
  Counter v[kCounters];
};

inline constexpr std::uint64_t kCacheStatsMagic = 0x6e6f726566736373ULL;  // "norefscs"
// 2: write_alloc, write_fill, write_skipped; 3: the common BlockHeader of
// alloc/counter_block.h; 4: limit_blocked.
inline constexpr std::uint64_t kCacheStatsVersion = 4;

struct alignas(64) CacheStatsHeader {
  static constexpr std::uint64_t kMagic = kCacheStatsMagic, kVersion = kCacheStatsVersion;
  static constexpr const char* kWhat = "cache stats block";

  alloc::BlockHeader block;
  Counter ncounters;  // kCounters of the writer, before the magic: readers refuse a mismatch
  // Written once by the PageCache constructor.
  Counter read_path;    // ReadPath of the cache
  Counter limit_pages;  // the memory bound (cached + waiting), 0 = none
  Counter batch;        // fast-path batch limit
  // Written under the LRU lock.
  Counter pages_cached;  // pages in every index
  Counter active_pages;  // of which on the active list
};

// A sum: what a user wants to see.
struct CacheCounters {
  std::array<std::uint64_t, kCounters> v{};
  std::uint64_t pages_cached = 0, active_pages = 0, limit_pages = 0, batch = 0;
  std::uint64_t read_path = 0, slots = 0;
  std::uint64_t operator[](Ctr c) const { return v[static_cast<std::size_t>(c)]; }
  std::uint64_t stops(Stop s) const { return (*this)[stop_counter(s)]; }
  std::uint64_t hits() const { return (*this)[Ctr::fast_pages] + (*this)[Ctr::slow_hits]; }
};

// The writable block and its slot registry, owned by a PageCache.
class CacheStats {
 public:
  // Anonymous shared mapping when `path` is empty; else creates `path` (0600,
  // O_EXCL; unlinked by the destructor).  Throws std::system_error.
  CacheStats(const std::string& path, std::size_t max_slots);
  CacheStats(const CacheStats&) = delete;
  CacheStats& operator=(const CacheStats&) = delete;

  CacheStatsHeader& header() { return block_.header(); }
  CacheCounters sum() const;
  const std::string& path() const { return block_.path(); }

  // This thread's slot.  First call per thread: takes a free slot (aborts
  // with a message past max_slots).  Inline: every read takes it, and the
  // common case is one compare with this thread's last cache.
  CacheSlot& slot();

 private:
  CacheSlot& slot_slow();

  alloc::CounterBlock<CacheStatsHeader, CacheSlot> block_;
  // After block_: destroyed first, so that no thread exit reaches block_'s
  // slots once it is going.
  alloc::SlotRegistry registry_;
  const std::uint64_t id_;  // registry_.id(), copied here for slot()
};

namespace detail {
// The cache this thread used last and its slot there: slot()'s fast path.
// Trivial and constinit, so that reading it is a plain thread-local load
// (no initialisation guard, no wrapper call).  Only its thread touches it.
// Registry ids start at 1: {0, nullptr} matches no cache.  Cleared at thread
// exit before the slot goes back (SlotRegistry::Hooks::forget).
struct LastSlot {
  std::uint64_t id = 0;
  CacheSlot* slot = nullptr;
};
extern constinit thread_local LastSlot last_slot;
}  // namespace detail

inline CacheSlot& CacheStats::slot() {
  const detail::LastSlot& last = detail::last_slot;
  if (last.id == id_) [[likely]]
    return *last.slot;
  return slot_slow();
}

// Relaxed single-writer update: see the block comment.
inline void bump(CacheSlot& s, Ctr c, std::uint64_t n = 1) {
  alloc::counter_add(s.v[static_cast<std::size_t>(c)], n);
}

// Read-only view of a block, in this process or another.
class CacheStatsReader {
 public:
  // Throws std::system_error (open/mmap) or std::runtime_error (not a norefs
  // cache stats block, or another version or layout).
  explicit CacheStatsReader(const std::string& path);
  CacheCounters sum() const;

 private:
  alloc::CounterBlockReader<CacheStatsHeader, CacheSlot> block_;
};

CacheCounters sum_cache_counters(const CacheStatsHeader& h, const CacheSlot* slots);

}  // namespace norefs::cache
