// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/page_cache.cc — files and the operations that change them.
// Protocol: read_loop.h; lock order and page states: page_cache.h; the LRU
// lists, eviction and the limit: reclaim.h.
#include "cache/page_cache.h"

#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>
#include <vector>

#include "alloc/die.h"
#include "alloc/rcu.h"

namespace norefs::cache {

namespace rcu = alloc::rcu;

namespace {
SharedFile* new_shared_file(alloc::SharedAlloc heap, std::uint64_t size) {
  void* mem = heap.alloc(sizeof(SharedFile), alignof(SharedFile));
  if (!mem) throw std::bad_alloc();
  return new (mem) SharedFile(heap, size);
}
}  // namespace

CachedFile::CachedFile(PageCache& cache, std::unique_ptr<Backing> backing, std::uint64_t size)
    : cache_(cache),
      backing_(std::move(backing)),
      shared_(new_shared_file(cache.pool_.shared_alloc(), size)),
      size_(shared_->size),
      index_(shared_->index) {}

CachedFile::~CachedFile() {
  // No handle and no queued readahead holds the file: no reader can.
  cache_.set_deleting(*this);
  alloc::SharedAlloc heap = cache_.pool_.shared_alloc();
  shared_->~SharedFile();
  heap.free(shared_, sizeof(SharedFile), alignof(SharedFile));
  cache_.files_.fetch_sub(1, std::memory_order_relaxed);
}

std::uint64_t CachedFile::pages() const {
  std::lock_guard lk(mu_);
  return index_.size();
}

namespace {
// The pool's configuration, with the shared region sized for the limit when
// the caller left it to us: the limit's pages and descriptors four times
// over (jemalloc grows its address space by doubling and keeps what it
// retains), plus 256 MiB for index nodes, files and jemalloc's metadata.
alloc::PagePoolConfig pool_config(const PageCacheConfig& c) {
  alloc::PagePoolConfig p = c.pool;
  if (p.region_bytes == 0 && c.limit_pages != 0) {
    p.region_bytes = 4 * c.limit_pages * (kPageSize + sizeof(Page)) + (std::size_t{256} << 20);
  }
  return p;
}
}  // namespace

PageCache::PageCache(const PageCacheConfig& config)
    : config_(config),
      ref_mode_(config.read_path == ReadPath::ref_fetchadd ? RefMode::FetchAdd : RefMode::Cas),
      stats_(config.stats_path, config.max_threads),
      pool_(pool_config(config)),
      reclaim_(config.limit_pages, config.limit_wait_ms, pool_, stats_, ref_mode_),
      readahead_(*this, config.readahead_max_pages, config.async_readahead) {
  if (config.batch == 0 || config.batch > kMaxBatch) {
    throw std::invalid_argument("batch must be 1.." + std::to_string(kMaxBatch));
  }
  if (config.stackcopy_max > 1024) throw std::invalid_argument("stackcopy_max must be <= 1024");
  if (config.readahead_max_pages > 1024) {
    throw std::invalid_argument("readahead_max_pages must be <= 1024");
  }
  auto& h = stats_.header();
  h.read_path.store(static_cast<std::uint64_t>(config.read_path), std::memory_order_relaxed);
  h.limit_pages.store(config.limit_pages, std::memory_order_relaxed);
  h.batch.store(config.batch, std::memory_order_relaxed);
}

PageCache::~PageCache() {
  readahead_.stop();  // drops queued work and the files it held
  if (std::int64_t n = files_.load(std::memory_order_relaxed); n != 0) {
    NOREFS_DIE("PageCache destroyed with " + std::to_string(n) + " files still open");
  }
  if (reclaim_.pages() != 0) NOREFS_DIE("PageCache destroyed with pages");
  rcu::barrier();  // index nodes retired through call_rcu
}

std::shared_ptr<CachedFile> PageCache::open_file(std::unique_ptr<Backing> backing,
                                                 std::uint64_t size) {
  auto* f = new CachedFile(*this, std::move(backing), size);
  files_.fetch_add(1, std::memory_order_relaxed);
  return std::shared_ptr<CachedFile>(f);
}

// ── Removal ──

// Context: f.mu_ held.  Unlinks p from the index and the LRU, sets rcu_free
// (the page may be under a lockless reader) unless the file is being
// deleted, and queues it for free_removed().  `frozen`: the caller froze p,
// so there is no cache reference to drop and the page is ours to free.
void PageCache::remove_locked(CachedFile& f, Page* p, bool frozen, RemovedList& out) {
  Page* q = f.index_.erase(p->index);
  if (q != p) NOREFS_DIE("page index and page disagree at removal");
  reclaim_.del(p);
  if (!f.deleting_) p->set_rcu_free();
  out.push_back({p, frozen});
}

// Context: f.mu_ held; p uptodate and in the index.  Replaces p with a copy
// whose bytes [off, off+n) are `src` (zero if null): copy-on-write, so that
// a reader of p never sees a byte change.  False if no page could be had.
bool PageCache::replace_locked(CachedFile& f, Page* p, std::size_t off, const void* src,
                               std::size_t n, RemovedList& out) {
  Page* np = pool_.alloc();
  if (!np) return false;
  std::memcpy(np->data, p->data, kPageSize);
  if (src) {
    std::memcpy(np->data + off, src, n);
  } else {
    std::memset(np->data + off, 0, n);
  }
  pg::init_cached(*np, ++f.gen_);
  np->index = p->index;
  np->owner = &f;
  reclaim_.replace(p, np);  // before the index: an evictor that finds np
                            // cannot take f.mu_, which we hold
  pg::mark_uptodate(*np);   // release: the bytes before the page is reachable
  f.index_.replace(p->index, p, np);
  if (!f.deleting_) p->set_rcu_free();
  out.push_back({p, false});
  return true;
}

// Context: f.mu_ held.  The pages of [first, last] in index order.
std::vector<Page*> PageCache::pages_in(CachedFile& f, std::uint64_t first, std::uint64_t last) {
  std::vector<Page*> v;
  f.index_.for_each(first, last, [&](std::uint64_t, Page* p) { v.push_back(p); });
  return v;
}

// Context: f.mu_ held.  Bytes [from, to) of page p (page-relative) become
// `src` (zero if null): a partial page of a write, a truncate or a punch.
// A page still being filled is dropped (its filler will not publish it); so
// is one we cannot copy (no memory): the next read refills it.
int PageCache::update_locked(CachedFile& f, Page* p, std::size_t from, std::size_t to,
                             const void* src, bool room, RemovedList& out) {
  if (pg::is_uptodate(*p) && room && replace_locked(f, p, from, src, to - from, out)) return 0;
  remove_locked(f, p, false, out);
  return pg::is_uptodate(*p) ? -ENOMEM : 0;
}

// Pages of [first, last] in the index now, seen locklessly: what a change
// of that range may need to copy, for reserve().
std::size_t PageCache::count_cached(CachedFile& f, std::uint64_t first, std::uint64_t last) {
  std::size_t n = 0;
  rcu::ReadGuard g;
  for (std::uint64_t i = first; i <= last && n < kMaxBatch; i++) n += f.index_.lookup(i) != nullptr;
  return n;
}

// Write-allocate, like the kernel's page cache: a write leaves its bytes
// cached.  A page of the range whose every byte is known once the write is
// done is created uptodate from `data` with no backing read: a whole page,
// or an edge page whose other bytes lie past the file's end (they read as
// zero).  The other edge pages (at most two per write) are read from the
// backing file, which already holds the write (the Context of the changes),
// if config_.write_fill_partial; else they stay uncached.  Pages already
// cached are replaced (copy-on-write).  Under a limit the new pages are
// reserved like a fill's; what finds no room stays uncached (write_skipped):
// the write has reached the backing file, the cache just holds less.
// Ranges longer than kMaxBatch pages go in steps of kMaxBatch, each its own
// reservation and critical section; the size moves after each step's pages.
int PageCache::write(CachedFile& f, std::uint64_t pos, const void* data, std::size_t len) {
  if (len == 0) return 0;
  CacheSlot& st = stats_.slot();
  const std::uint64_t end = pos + len;
  const std::uint64_t first = pos >> kPageShift, last = (end - 1) >> kPageShift;
  const auto* bytes = static_cast<const std::byte*>(data);
  int err = 0;
  for (std::uint64_t step = first; step <= last; step += kMaxBatch) {
    std::uint64_t step_last = std::min(last, step + kMaxBatch - 1);
    if (int e = write_pages(f, pos, end, bytes, step, step_last, st)) err = e;
  }
  return err;
}

// Reads page `idx` of the backing file into a new page (zero past its end),
// for a partial page of a write.  nullptr on no memory, no room or an I/O
// error: the page then stays uncached.  Context: no lock held; the caller's
// writer lock keeps the backing file's bytes as the write left them.
Page* PageCache::read_for_write(CachedFile& f, std::uint64_t idx, CacheSlot& st) {
  Page* p = nullptr;
  {
    Reclaim::Reservation res(reclaim_, st);
    if (res.take(1)) p = pool_.alloc();
  }
  if (!p) return nullptr;
  std::size_t got = 0;
  while (got < kPageSize) {
    iovec iov{p->data + got, kPageSize - got};
    ssize_t r = f.backing_->read(&iov, 1, (idx << kPageShift) + got);
    if (r == -EINTR) continue;
    if (r < 0) {
      bump(st, Ctr::io_errors);
      pool_.free(p);  // rcu_free clear: never visible, straight back
      return nullptr;
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  if (got < kPageSize) std::memset(p->data + got, 0, kPageSize - got);
  return p;
}

// One step of write(): pages [first, last] of the write [pos, end).
int PageCache::write_pages(CachedFile& f, std::uint64_t pos, std::uint64_t end,
                           const std::byte* data, std::uint64_t first, std::uint64_t last,
                           CacheSlot& st) {
  // Stable: the caller serializes changes of f.
  const std::uint64_t old_size = f.size();
  const std::uint64_t new_size = std::max(old_size, end);
  // Page `idx`'s bytes outside the write are all past the end of the file
  // (before the write for those in front of it, after it for those behind).
  auto known = [&](std::uint64_t idx) {
    std::uint64_t base = idx << kPageShift;
    bool head = pos <= base || base >= old_size;
    bool tail = end >= base + kPageSize || end >= old_size;
    return head && tail;
  };

  // Partial pages not cached now: read from the backing file first, outside
  // every lock.  A page that appears meanwhile wins (it is updated below)
  // and ours goes back.
  Page* filled[2] = {nullptr, nullptr};
  std::uint64_t filled_idx[2] = {first, last};
  if (config_.write_fill_partial) {
    for (int k = 0; k < 2; k++) {
      std::uint64_t idx = filled_idx[k];
      if ((k == 1 && last == first) || known(idx)) continue;
      bool cached;
      {
        rcu::ReadGuard g;
        cached = f.index_.lookup(idx) != nullptr;
      }
      if (!cached) filled[k] = read_for_write(f, idx, st);
    }
  }

  // Room for a page per page of the range (a copy or a new one), less the
  // ones read above; failing that, for as many as the limit allows, or at
  // least for the copies of the cached ones.
  std::size_t want = last - first + 1 - (filled[0] != nullptr) - (filled[1] != nullptr);
  Reclaim::Reservation res(reclaim_, st);
  std::size_t room = want;
  if (config_.limit_pages) {
    room = std::min(want, config_.limit_pages);
    if (!res.take(room)) {
      std::size_t copies = count_cached(f, first, last);
      room = res.take(copies) ? copies : 0;
    }
  }
  int err = 0;
  std::uint64_t created = 0, from_backing = 0, skipped = 0;
  RemovedList out;
  {
    std::lock_guard lk(f.mu_);
    // The copies of cached pages take the room first (a cached page that
    // cannot be copied is dropped); new pages get what is left.
    std::size_t copies = 0;
    f.index_.for_each(first, last, [&](std::uint64_t, Page* p) { copies += pg::is_uptodate(*p); });
    std::size_t new_room = room > copies ? room - copies : 0;
    room = std::min(room, copies);
    for (std::uint64_t idx = first; idx <= last; idx++) {
      const std::uint64_t base = idx << kPageShift;
      const std::uint64_t from = std::max(pos, base), to = std::min(end, base + kPageSize);
      const std::byte* src = data + (from - pos);
      Page* read = idx == first ? filled[0] : idx == last ? filled[1] : nullptr;
      if (idx == first) filled[0] = nullptr;
      if (idx == last) filled[1] = nullptr;
      Page* p = f.index_.lookup(idx);
      if (p && pg::is_uptodate(*p)) {
        // Cached: copy-on-write, or drop it if no copy can be had.
        bool copy = room > 0;
        if (copy) room--;
        if (int e = update_locked(f, p, from - base, to - base, src, copy, out)) err = e;
        if (read) pool_.free(read);  // never visible: straight back
        continue;
      }
      // Being filled: its filler read the bytes before the write and will
      // not publish a page that has left the index.
      if (p) remove_locked(f, p, false, out);
      Page* np = read;
      if (!np && known(idx) && new_room > 0 && !f.deleting_) {
        np = pool_.alloc();
        if (np) {
          new_room--;
          std::memset(np->data, 0, from - base);
          std::memcpy(np->data + (from - base), src, to - from);
          std::memset(np->data + (to - base), 0, base + kPageSize - to);
        }
      }
      if (!np) {
        skipped += known(idx) || config_.write_fill_partial;
        continue;
      }
      if (f.deleting_) {
        pool_.free(np);
        continue;
      }
      pg::init_cached(*np, ++f.gen_);
      np->index = idx;
      np->owner = &f;
      pg::mark_uptodate(*np);           // release: the bytes before the page is reachable
      if (!f.index_.insert(idx, np)) {  // no memory for an index node
        pool_.free(np);                 // never visible: straight back
        skipped++;
        continue;
      }
      (read ? from_backing : created)++;
      reclaim_.add(np);
    }
    // After the index: a reader that sees the new size sees the new pages.
    std::uint64_t step_end = std::min(new_size, (last + 1) << kPageShift);
    // Relaxed load: f.mu_ is held and every store of the size is under it.
    if (step_end > f.size_.load(std::memory_order_relaxed)) {
      f.size_.store(step_end, std::memory_order_release);
    }
  }
  bump(st, Ctr::written_pages, out.size());
  bump(st, Ctr::write_alloc, created);
  bump(st, Ctr::write_fill, from_backing);
  bump(st, Ctr::write_skipped, skipped);
  reclaim_.free_removed(out);
  return err;
}

int PageCache::truncate(CachedFile& f, std::uint64_t size) {
  CacheSlot& st = stats_.slot();
  Reclaim::Reservation res(reclaim_, st);
  bool room = res.take(1);
  int err = 0;
  RemovedList out;
  {
    std::lock_guard lk(f.mu_);
    std::uint64_t old = f.size_.load(std::memory_order_relaxed);
    if (size < old) {
      // Size first: from here no reader copies past `size` (isize1), and the
      // pages past it may go.
      f.size_.store(size, std::memory_order_release);
      std::uint64_t first_gone = (size + kPageSize - 1) >> kPageShift;
      for (Page* p : pages_in(f, first_gone, ~std::uint64_t{0})) remove_locked(f, p, false, out);
      if (std::size_t off = size & (kPageSize - 1)) {
        if (Page* p = f.index_.lookup(size >> kPageShift)) {
          err = update_locked(f, p, off, kPageSize, nullptr, room, out);
        }
      }
    } else if (size > old) {
      // Cached bytes past the old end are zero already (fills zero past the
      // backing file's end; truncate zeroes the partial page): only the
      // size moves, after everything else.
      f.size_.store(size, std::memory_order_release);
    }
  }
  bump(st, Ctr::removed_pages, out.size());
  reclaim_.free_removed(out);
  return err;
}

int PageCache::punch(CachedFile& f, std::uint64_t off, std::uint64_t len) {
  if (len == 0) return 0;
  CacheSlot& st = stats_.slot();
  const std::uint64_t end = off + len < off ? ~std::uint64_t{0} : off + len;
  Reclaim::Reservation res(reclaim_, st);
  bool room = res.take(2);
  int err = 0;
  RemovedList out;
  {
    std::lock_guard lk(f.mu_);
    for (Page* p : pages_in(f, off >> kPageShift, (end - 1) >> kPageShift)) {
      std::uint64_t base = p->index << kPageShift;
      std::uint64_t from = std::max(off, base), to = std::min(end, base + kPageSize);
      if (from == base && to == base + kPageSize) {
        remove_locked(f, p, false, out);
      } else if (int e = update_locked(f, p, from - base, to - base, nullptr, room, out)) {
        err = e;
      }
    }
  }
  bump(st, Ctr::removed_pages, out.size());
  reclaim_.free_removed(out);
  return err;
}

void PageCache::invalidate(CachedFile& f, std::uint64_t off, std::uint64_t len) {
  std::uint64_t last =
      len == 0 || off + len < off ? ~std::uint64_t{0} : (off + len - 1) >> kPageShift;
  RemovedList out;
  {
    std::lock_guard lk(f.mu_);
    for (Page* p : pages_in(f, off >> kPageShift, last)) remove_locked(f, p, false, out);
  }
  bump(stats_.slot(), Ctr::removed_pages, out.size());
  reclaim_.free_removed(out);
}

void PageCache::set_size(CachedFile& f, std::uint64_t size) {
  std::lock_guard lk(f.mu_);
  f.size_.store(size, std::memory_order_release);
}

void PageCache::set_deleting(CachedFile& f) {
  RemovedList out;
  {
    std::lock_guard lk(f.mu_);
    f.deleting_ = true;
    for (Page* p : pages_in(f, 0, ~std::uint64_t{0})) remove_locked(f, p, false, out);
  }
  reclaim_.free_removed(out);
}

std::size_t PageCache::evict(CachedFile& f) {
  RemovedList out;
  {
    std::lock_guard lk(f.mu_);
    for (Page* p : pages_in(f, 0, ~std::uint64_t{0})) {
      if (pg::is_uptodate(*p) && pg::freeze(*p, ref_mode_)) remove_locked(f, p, true, out);
    }
  }
  std::size_t n = out.size();
  bump(stats_.slot(), Ctr::evicted, n);
  reclaim_.free_removed(out);
  return n;
}

std::size_t PageCache::shrink(std::size_t pages) { return reclaim_.shrink(pages, stats_.slot()); }

}  // namespace norefs::cache
