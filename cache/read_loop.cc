// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/read_loop.cc — the read loop, shaped like filemap_read(): the
// no-reference fast path copies as far as it can, at most `batch` pages per
// read-side section; on any reason to stop, the reference path continues
// from exactly there.  The protocol and why it is safe: read_loop.h.
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "alloc/rcu.h"
#include "cache/copy.h"
#include "cache/fast_path.h"
#include "cache/page_cache.h"
#include "cache/sync_point.h"

namespace norefs::cache {

namespace rcu = alloc::rcu;

namespace {

// read_iov's sink: iovecs into the pages, used inside the read-side section.
struct IovSink {
  iovec* iov;
  int cnt = 0;
  void put(const std::byte* src, std::size_t n) { iov[cnt++] = {const_cast<std::byte*>(src), n}; }
};

bool interrupted(const ReadOptions& opt) {
  // Relaxed: a hint polled per page; whoever sets it publishes nothing else.
  return opt.interrupted && opt.interrupted->load(std::memory_order_relaxed);
}

}  // namespace

std::string_view read_path_name(ReadPath p) {
  switch (p) {
    case ReadPath::noref:
      return "noref";
    case ReadPath::ref:
      return "ref";
    case ReadPath::ref_fetchadd:
      return "ref-fetchadd";
    case ReadPath::stackcopy:
      return "stackcopy";
  }
  return "?";
}

std::optional<ReadPath> parse_read_path(std::string_view s) {
  for (auto p : {ReadPath::noref, ReadPath::ref, ReadPath::ref_fetchadd, ReadPath::stackcopy}) {
    if (s == read_path_name(p)) return p;
  }
  return std::nullopt;
}

// The noref fast path on this cache's file (cache/fast_path.h).  Context:
// rcu::read_lock() held by the caller.
template <class Sink>
[[gnu::always_inline]] inline FastResult PageCache::fast_locked(FileHandle& h, std::uint64_t pos,
                                                                std::size_t len, Sink& sink,
                                                                const ReadOptions& opt,
                                                                CacheSlot& st) {
  return fast_read(*h.file().shared_, pos, len, sink, config_.batch, opt.interrupted, st);
}

// Linus' 2024 stack copy: no reference, no deferral needed for the bytes it
// returns, but a re-check after the copy (same page at the index, same
// generation, still uptodate) and a retry through the reference path if it
// fails.  Only for reads inside one page of at most stackcopy_max bytes.
//
// The copy may read a page that is being freed and reused: with deferral off
// that is a read of memory another thread may be writing, which the re-check
// then rejects (the seqlock pattern); the fence orders the copy before the
// re-check's loads.
FastResult PageCache::fast_stackcopy(FileHandle& h, std::uint64_t pos, std::size_t len,
                                     std::byte* dst, const ReadOptions& opt, CacheSlot& st) {
  CachedFile& f = h.file();
  FastResult r;
  const std::uint64_t isize0 = f.size();
  if (pos >= isize0 || len == 0) {
    r.complete = true;
    return r;
  }
  if (interrupted(opt)) {
    r.stop = Stop::interrupted;
    return r;
  }
  alignas(16) std::byte buf[1024];
  std::size_t off = pos & (kPageSize - 1);
  std::size_t n;
  {
    rcu::ReadGuard g;
    Page* p = f.index_.lookup(pos >> kPageShift);
    if (!p) {
      r.stop = Stop::missing;
      return r;
    }
    std::uint64_t s = pg::load(*p);
    r.stop = page_stop(s);
    if (r.stop != Stop::kCount) return r;
    std::uint64_t end = std::min(isize0, f.size());
    if (pos >= end) {
      r.stop = Stop::past_eof;
      return r;
    }
    n = std::min({len, kPageSize - off, static_cast<std::size_t>(end - pos)});
    sync_point::hit("read:stackcopy:before_copy");
    copy_bytes(buf, p->data + off, n);
    // Acquire fence: the loads below are ordered after the copy's loads
    // (read_seqcount_retry's smp_rmb).
    std::atomic_thread_fence(std::memory_order_acquire);
    std::uint64_t s2 = pg::load(*p);
    if (f.index_.lookup(pos >> kPageShift) != p || pg::generation(s2) != pg::generation(s) ||
        !(s2 & pg::kUptodate)) {
      r.stop = Stop::changed;
      return r;
    }
  }
  copy_bytes(dst, buf, n);
  bump(st, Ctr::fast_pages);
  r.n = n;
  r.complete = n == len || pos + n >= isize0;
  return r;
}

// Lookup + conditional reference + re-lookup: filemap_get_read_batch() for
// one page.  Returns a held page or nullptr if the index has none.
Page* PageCache::get_page(CachedFile& f, std::uint64_t idx) {
  for (unsigned attempt = 0;; attempt++) {
    rcu::ReadGuard g;
    Page* p = f.index_.lookup(idx);
    if (!p) return nullptr;
    if (!pg::try_get(*p, ref_mode_)) {
      // Frozen: an evictor is taking it out under the file's lock.  Retry;
      // the index will have moved on (xas_reset + retry in the kernel).
      if (attempt > 16) std::this_thread::yield();
      continue;
    }
    if (f.index_.lookup(idx) == p) return p;
    put_page(p);  // removed meanwhile: the count we took may be its last
  }
}

void PageCache::put_page(Page* p) {
  if (pg::put(*p, ref_mode_)) pool_.free(p);
}

// Waits for a fill in progress.  False if the page will not become
// uptodate (the fill failed, the page was removed) or the request was
// interrupted meanwhile (an interruptible wait, like folio_put_wait_locked()
// with TASK_KILLABLE): the caller looks again, and sees the interruption.
bool PageCache::wait_uptodate(CachedFile& f, Page* p, const ReadOptions& opt) {
  std::unique_lock lk(f.mu_);
  while (!pg::is_uptodate(*p) && f.index_.lookup(p->index) == p) {
    if (interrupted(opt)) return false;
    // The interrupt flag is set without the lock: poll it.
    f.filled_.wait_for(lk, std::chrono::milliseconds(10));
  }
  return pg::is_uptodate(*p);
}

ssize_t PageCache::read_uncached(CachedFile& f, std::uint64_t pos, std::size_t len, std::byte* dst,
                                 CacheSlot& st) {
  std::uint64_t isize = f.size();
  if (pos >= isize) return 0;
  std::size_t n =
      std::min({len, kPageSize - (pos & (kPageSize - 1)), static_cast<std::size_t>(isize - pos)});
  iovec v{dst, n};
  ssize_t r = f.backing_->read(&v, 1, pos);
  if (r < 0) {
    bump(st, Ctr::io_errors);
    return r;
  }
  bump(st, Ctr::uncached_reads);
  return r;
}

// The reference path for one page: today's read path, unchanged in spirit.
// Returns bytes copied (0 at EOF) or -errno.
ssize_t PageCache::slow_page(FileHandle& h, std::uint64_t pos, std::size_t len, std::byte* dst,
                             bool mark, const ReadOptions& opt, CacheSlot& st) {
  CachedFile& f = h.file();
  const std::uint64_t idx = pos >> kPageShift;
  const std::uint64_t req_pages = ((pos + len - 1) >> kPageShift) - idx + 1;
  bool missed = false;
  for (;;) {
    const std::uint64_t isize0 = f.size();
    if (pos >= isize0) return 0;
    // Before every page, cached or not (filemap_get_pages()' signal check).
    if (interrupted(opt)) return -EINTR;
    Page* p = get_page(f, idx);
    if (!p) {
      if (!missed) bump(st, Ctr::misses);
      missed = true;
      int err = readahead_.sync(h, idx, req_pages, opt, st);
      if (err == -ENOMEM) return read_uncached(f, pos, len, dst, st);
      if (err < 0) return err;
      continue;
    }
    std::uint64_t s = pg::load(*p);
    if ((s & pg::kReadahead) && pg::test_and_clear_readahead(*p)) {
      readahead_.async(h, idx, req_pages, opt, st);
    }
    if (!(s & pg::kUptodate)) {
      bump(st, Ctr::waits);
      if (!wait_uptodate(f, p, opt)) {  // failed, removed, or interrupted
        put_page(p);
        continue;
      }
    } else if (!missed) {
      bump(st, Ctr::slow_hits);
    }
    if (mark) reclaim_.mark_accessed(p);
    sync_point::hit("read:slow:before_copy");
    std::uint64_t end = std::min(isize0, f.size());
    ssize_t n = 0;
    if (pos < end) {
      std::size_t off = pos & (kPageSize - 1);
      n = static_cast<ssize_t>(
          std::min({len, kPageSize - off, static_cast<std::size_t>(end - pos)}));
      copy_bytes(dst, p->data + off, static_cast<std::size_t>(n));
    }
    // filemap_end_dropbehind_read(): a drop-behind page leaves once read.
    bool drop = pg::load(*p) & pg::kDropBehind;
    put_page(p);
    if (drop) {
      std::unique_lock lk(f.mu_);
      RemovedList out;
      Page* q = f.index_.lookup(idx);
      if (q && (pg::load(*q) & pg::kDropBehind) && pg::freeze(*q, ref_mode_)) {
        remove_locked(f, q, true, out);
      }
      lk.unlock();
      reclaim_.free_removed(out);
    }
    return n;
  }
}

// The loop.  `done` bytes of the request are already in buf; if `stopped`
// is a reason (not kCount), the fast path has just stopped at pos + done.
ssize_t PageCache::read_from(FileHandle& h, std::uint64_t pos, std::size_t len, std::byte* buf,
                             std::size_t done, Stop stopped, const ReadOptions& opt,
                             CacheSlot& st) {
  // The first page of a read is marked accessed only if the previous read
  // through this handle ended in another page (pos_same_folio() in
  // filemap_read()); the following pages always.  When the fast path
  // stopped because marking would change the flags, the page is marked
  // regardless: otherwise a page read again and again through one handle
  // would never saturate and the fast path would stop on it forever.
  const std::uint64_t prev = h.ra.prev_pos.load(std::memory_order_relaxed);
  const bool same_as_prev = prev > 0 && ((prev - 1) >> kPageShift) == (pos >> kPageShift);
  const bool fast =
      config_.read_path == ReadPath::noref || config_.read_path == ReadPath::stackcopy;
  bool by_reference = false;  // the reference path read part of this request
  int err = 0;
  while (done < len) {
    if (fast && stopped == Stop::kCount) {
      FastResult r;
      if (config_.read_path == ReadPath::noref) {
        BufferSink sink{buf + done};
        rcu::ReadGuard g;
        r = fast_locked(h, pos + done, len - done, sink, opt, st);
      } else if (done == 0 && len <= config_.stackcopy_max &&
                 (pos & (kPageSize - 1)) + len <= kPageSize) {
        r = fast_stackcopy(h, pos, len, buf, opt, st);
      }  // else: too large for the stack copy (the request, not what is
         // left of it), the reference path reads it
      done += r.n;
      if (r.complete) break;
      if (r.stop != Stop::kCount) bump(st, stop_counter(r.stop));
      // The batch limit bounds a read-side section; like the kernel's loop
      // between batches, leave the section and take the next batch.
      if (r.stop == Stop::batch) continue;
      stopped = r.stop;
    }
    bool mark = stopped == Stop::accessed || done > 0 || !same_as_prev;
    stopped = Stop::kCount;
    by_reference = true;
    ssize_t n = slow_page(h, pos + done, len - done, buf + done, mark, opt, st);
    if (n < 0) {
      err = static_cast<int>(n);
      break;
    }
    if (n == 0) break;  // EOF
    done += static_cast<std::size_t>(n);
    if (interrupted(opt)) break;
  }
  h.ra.prev_pos.store(pos + done, std::memory_order_relaxed);
  // Served entirely by the fast path, in several batches or by the stack
  // copy (read() counts a request done in one batch itself).
  if (fast && !by_reference) bump(st, Ctr::fast_reads);
  bump(st, Ctr::bytes, done);
  if (done == 0 && err != 0) return err;
  return static_cast<ssize_t>(done);
}

// The fast path's first batch served the whole read of n bytes (the caller
// has stored the handle's prev_pos).  Touches only this thread's counters:
// read_iov() calls it after its reply is out, when the handle may be gone.
inline ssize_t PageCache::fast_served(std::size_t n, CacheSlot& st) {
  bump(st, Ctr::fast_reads);
  bump(st, Ctr::bytes, n);
  return static_cast<ssize_t>(n);
}

// The fast path's first batch stopped short with r.n bytes in buf: count
// why, and the loop continues from there (a batch stop is no reason: the
// loop starts the next batch).
ssize_t PageCache::fast_stopped(FileHandle& h, std::uint64_t pos, std::size_t len, std::byte* buf,
                                const FastResult& r, const ReadOptions& opt, CacheSlot& st) {
  bump(st, stop_counter(r.stop));
  return read_from(h, pos, len, buf, r.n, r.stop == Stop::batch ? Stop::kCount : r.stop, opt, st);
}

ssize_t PageCache::read(FileHandle& h, std::uint64_t pos, std::size_t len, std::byte* buf,
                        const ReadOptions& opt) {
  CacheSlot& st = stats_.slot();
  bump(st, Ctr::reads);
  if (config_.read_path == ReadPath::noref) {
    // The common case in one section, with no call in between: the whole
    // read served by the fast path.
    BufferSink sink{buf};
    FastResult r;
    {
      rcu::ReadGuard g;
      r = fast_locked(h, pos, len, sink, opt, st);
    }
    if (!r.complete) return fast_stopped(h, pos, len, buf, r, opt, st);
    h.ra.prev_pos.store(pos + r.n, std::memory_order_relaxed);
    return fast_served(r.n, st);
  }
  return read_from(h, pos, len, buf, 0, Stop::kCount, opt, st);
}

ssize_t PageCache::read_iov(FileHandle& h, std::uint64_t pos, std::size_t len, std::byte* buf,
                            const IovSender& send, bool* sent, const ReadOptions& opt) {
  *sent = false;
  std::uint64_t pages = len == 0 ? 0 : ((pos + len - 1) >> kPageShift) - (pos >> kPageShift) + 1;
  if (config_.read_path != ReadPath::noref || pages > config_.batch) {
    return read(h, pos, len, buf, opt);
  }
  CacheSlot& st = stats_.slot();
  bump(st, Ctr::reads);
  iovec iov[kMaxBatch];
  IovSink sink{iov};
  FastResult r;
  {
    rcu::ReadGuard g;
    r = fast_locked(h, pos, len, sink, opt, st);
    if (r.complete) {
      // Everything that touches the handle happens before send(): once the
      // reply is out, the client may close the handle and the daemon free
      // it on another thread.
      h.ra.prev_pos.store(pos + r.n, std::memory_order_relaxed);
      send(iov, sink.cnt);
    } else {
      // Not all of it: what the fast path found goes into buf while the
      // section still holds the pages, and the loop continues from there.
      std::byte* d = buf;
      for (int i = 0; i < sink.cnt; i++) {
        copy_bytes(d, static_cast<const std::byte*>(iov[i].iov_base), iov[i].iov_len);
        d += iov[i].iov_len;
      }
    }
  }
  if (!r.complete) return fast_stopped(h, pos, len, buf, r, opt, st);
  *sent = true;
  bump(st, Ctr::zero_copy_reads);
  return fast_served(r.n, st);
}

}  // namespace norefs::cache
