// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/read_loop.h — the read loop's protocol and options.  The loop itself
// (cache/read_loop.cc) is PageCache::read() and read_iov(); its stop
// reasons and counters are in cache/cache_stats.h.
//
// ── The lockless read protocol (written once; every use points here) ──────
//
// A fast-path (noref) reader, for each page, inside one rcu::ReadGuard:
//   isize0 = i_size (acquire), once per batch, before any lookup
//   p = index.lookup(idx)                  stop `missing` if none
//   s = pg::load(*p) (acquire)             stop `not_uptodate`, `readahead`,
//                                          `drop_behind`, `accessed` (the exact
//                                          mark_accessed no-op test, page.h)
//   isize1 = i_size (acquire), after the uptodate test; stop `past_eof`
//   copy bytes [pos, min(page end, isize0, isize1)) from p->data
// and writes no shared memory at all (its counters are per thread).
//
// Why the bytes are right:
//  - Memory: p was in the index when looked up under the section, so its
//    memory is not reused before read_unlock() (alloc/page_pool.h: removal
//    sets rcu_free before the last put, and such pages wait for a grace
//    period).  Eviction may freeze p under us; that changes no byte.
//  - Content: pages are immutable once uptodate (cache/page.h).  Every
//    change of bytes replaces the page (copy-on-write) under the file's
//    lock; uptodate is published with a release RMW after the bytes.
//  - Size: writers change the index first and store i_size (release)
//    after, under the file's lock; truncate down stores the smaller i_size
//    first and removes or zeroes pages after.  A reader that copies up to
//    isize0 looked the page up after reading isize0 (acquire), so it sees
//    the index at least as new as that size: it never pairs a page removed
//    before a size change with the bytes that change exposed.  Re-reading
//    i_size after the uptodate test (isize1, as filemap_read() does) keeps
//    a truncate that happened meanwhile from exposing bytes past the new
//    end.  A read returns, for each byte, a value the file held at that
//    offset at some moment during the read: never bytes that were never in
//    the file.  (Like the kernel, a read that races a size change may see
//    the old or the new end, and a read spanning several pages is not
//    atomic across them.)
// At the batch limit the fast path leaves its section and starts the next
// batch (the kernel's loop between batches); every other stop hands the
// next page to the reference path.
// The reference path does the same checks holding a reference instead of
// the section (lookup + try_get + re-lookup under the section), so it may
// sleep (fill, wait for a fill, I/O).  It continues from exactly where the
// fast path stopped; stopping is never an error.
//
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <functional>

namespace norefs::cache {

struct ReadOptions {
  // Checked before every page; set by whoever learns the request was
  // interrupted.  The fast path stops (`interrupted`); the reference path
  // returns what was read, or -EINTR if nothing was.
  const std::atomic<bool>* interrupted = nullptr;
  // RWF_DONTCACHE: pages this read brings in are drop-behind, and are
  // removed once read.
  bool drop_behind = false;
};

// read_iov's sender: called inside the read-side section with iovecs that
// point into cache pages; they are valid only until it returns.  read_iov
// touches neither the handle nor the file after calling it, so the sender
// may complete the request (after which the handle may be freed).
using IovSender = std::function<void(const iovec* iov, int iovcnt)>;

}  // namespace norefs::cache
