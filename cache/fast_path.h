// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/fast_path.h — the no-reference fast path: one function, run by the
// daemon's readers (PageCache::read(), read_iov()) and by readers in other
// processes that map the shared region, with the same stop reasons, the
// same accessed-flag rule and the same counters.  The protocol it follows
// and why its bytes are right: cache/read_loop.h.
//
// It reads only what lives in the shared region (SharedFile, the index's
// nodes, page descriptors and data) and writes nothing shared: `st` is the
// calling thread's counter slot.  A stop means "continue elsewhere": the
// result says how far it got and why; the daemon continues on the
// reference path, a reader in another process through the daemon.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "cache/cache_stats.h"
#include "cache/copy.h"
#include "cache/page.h"
#include "cache/shared_file.h"
#include "cache/sync_point.h"

namespace norefs::cache {

using alloc::kPageShift;
using alloc::kPageSize;

struct FastResult {
  std::size_t n = 0;      // bytes delivered to the sink
  bool complete = false;  // the request is done (all bytes, or EOF)
  Stop stop = Stop::kCount;
};

// The sink that copies into a buffer (the other, read_iov's, collects
// iovecs: read_loop.cc).
struct BufferSink {
  std::byte* dst;
  void put(const std::byte* src, std::size_t n) {
    copy_bytes(dst, src, n);
    dst += n;
  }
};

namespace detail {

// Why the fast path may not take this page, by the flags of one acquire
// load; kCount if it may.  The common answer is one mask and one compare:
// uptodate, no readahead mark, not drop-behind, and referenced and active
// (so that marking it accessed changes nothing: pg::mark_accessed_is_noop()
// without drop-behind).  Anything else finds its reason in page_stop_slow().
inline Stop page_stop_slow(std::uint64_t s) {
  if (!(s & pg::kUptodate)) return Stop::not_uptodate;
  if (s & pg::kReadahead) return Stop::readahead;
  if (s & pg::kDropBehind) return Stop::drop_behind;
  if (!pg::mark_accessed_is_noop(s)) return Stop::accessed;
  return Stop::kCount;
}

}  // namespace detail

inline Stop page_stop(std::uint64_t s) {
  constexpr std::uint64_t kMask =
      pg::kUptodate | pg::kReadahead | pg::kDropBehind | pg::kReferenced | pg::kActive;
  constexpr std::uint64_t kServe = pg::kUptodate | pg::kReferenced | pg::kActive;
  if ((s & kMask) == kServe) [[likely]]
    return Stop::kCount;
  return detail::page_stop_slow(s);
}

// Copies up to `len` bytes at `pos` of `f` into `sink`, at most `batch`
// pages.  Context: inside a read-side section that every grace period of
// the daemon waits for (the daemon's rcu::ReadGuard, or a reader in another
// process: alloc/reader_registry.h), and an open handle of the file.
// `interrupted`, if not null, is polled before every page (relaxed: a hint
// whose setter publishes nothing else).  Always inlined: a small read
// spends a good part of its time in calls.
template <class Sink>
[[gnu::always_inline]] inline FastResult fast_read(const SharedFile& f, std::uint64_t pos,
                                                   std::size_t len, Sink& sink, unsigned batch,
                                                   const std::atomic<bool>* interrupted,
                                                   CacheSlot& st) {
  FastResult r;
  // Acquire: pairs with the writers' release stores of i_size (read_loop.h).
  const std::uint64_t isize0 = f.size.load(std::memory_order_acquire);
  unsigned pages = 0;
  for (;;) {
    if (r.n == len || pos >= isize0) {
      r.complete = true;
      break;
    }
    if (interrupted && interrupted->load(std::memory_order_relaxed)) {
      r.stop = Stop::interrupted;
      break;
    }
    if (pages == batch) {
      r.stop = Stop::batch;
      break;
    }
    Page* p = f.index.lookup(pos >> kPageShift);
    if (!p) {
      r.stop = Stop::missing;
      break;
    }
    r.stop = page_stop(pg::load(*p));
    if (r.stop != Stop::kCount) break;
    // Read again after the uptodate test (filemap_read()): a truncate that
    // happened meanwhile must not expose bytes past its end.
    std::uint64_t end = std::min(isize0, f.size.load(std::memory_order_acquire));
    if (pos >= end) {
      r.stop = Stop::past_eof;
      break;
    }
    std::size_t off = pos & (kPageSize - 1);
    std::size_t n = std::min({len - r.n, kPageSize - off, static_cast<std::size_t>(end - pos)});
    sync_point::hit("read:fast:before_copy");
    sink.put(p->data + off, n);
    r.n += n;
    pos += n;
    pages++;
  }
  bump(st, Ctr::fast_pages, pages);
  return r;
}

}  // namespace norefs::cache
