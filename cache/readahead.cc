// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/readahead.cc — filling the cache from the backing file: on-demand
// readahead in the shape of mm/readahead.c (class Readahead), and the fill
// that inserts pages not yet uptodate, reads them, and publishes them.
// The policy and its state: readahead.h.
#include "cache/readahead.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "cache/page_cache.h"

namespace norefs::cache {
namespace {

constexpr std::size_t kMaxQueued = 64;  // readahead is advice: beyond this, dropped

std::uint64_t roundup_pow2(std::uint64_t n) {
  std::uint64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// get_init_ra_size(): the first window for a request of `req` pages.
std::uint64_t init_size(std::uint64_t req, std::uint64_t max) {
  std::uint64_t n = roundup_pow2(req);
  if (n <= max / 32) {
    n *= 4;
  } else if (n <= max / 4) {
    n *= 2;
  } else {
    n = max;
  }
  return std::min(n, max);
}

// get_next_ra_size(): the window after one of `cur` pages.
std::uint64_t next_size(std::uint64_t cur, std::uint64_t max) {
  if (cur < max / 16) return std::min(4 * cur, max);
  if (cur <= max / 2) return std::min(2 * cur, max);
  return max;
}

}  // namespace

Readahead::Readahead(PageCache& cache, std::uint64_t max_pages, bool async)
    : cache_(cache), max_pages_(max_pages), async_(async) {
  if (async_) worker_ = std::thread([this] { worker(); });
}

void Readahead::stop() {
  std::deque<Work> dropped;
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    dropped.swap(q_);
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  // `dropped` releases its files here, outside the queue lock.
}

void Readahead::worker() {
  CacheSlot& st = cache_.stats_.slot();
  for (;;) {
    Work w;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !q_.empty(); });
      if (stop_) return;
      w = std::move(q_.front());
      q_.pop_front();
    }
    cache_.fill(*w.file, w.start, w.n, w.mark, w.drop_behind, st);  // errors: the reader retries
  }
}

int Readahead::sync(FileHandle& h, std::uint64_t idx, std::uint64_t req_pages,
                    const ReadOptions& opt, CacheSlot& st) {
  const std::uint64_t max = max_pages_;
  std::uint64_t start = idx, size = req_pages, async = 0;
  if (max > 0) {
    std::uint64_t prev = h.ra.prev_pos.load(std::memory_order_relaxed);
    std::uint64_t prev_idx = prev > 0 ? (prev - 1) >> kPageShift : 0;
    bool sequential =
        (prev == 0 && idx == 0) || (prev > 0 && (idx == prev_idx || idx == prev_idx + 1));
    if (sequential) {
      size = init_size(req_pages, max);
      async = size > req_pages ? size - req_pages : size;
    } else {
      size = std::min(req_pages, max);  // random: no window, no mark
    }
    // Relaxed: per-handle hints (ReadaheadState).
    h.ra.start.store(start, std::memory_order_relaxed);
    h.ra.size.store(size, std::memory_order_relaxed);
    h.ra.async_size.store(async, std::memory_order_relaxed);
  }
  bump(st, Ctr::sync_readahead);
  ssize_t r = cache_.fill(h.file(), start, size, async ? start + size - async : kNoMark,
                          opt.drop_behind, st);
  // A failed window may have failed for a page the reader did not ask for:
  // a backing that fails a request as a whole (a bio over a bad sector, a
  // FUSE server's EIO) takes the good pages of the window down with it.  As
  // filemap_read_folio() after a failed readahead, read the reader's own
  // page alone, so that only a reader of the bad page gets the error.
  if (r < 0 && r != -ENOMEM && size > 1) {
    r = cache_.fill(h.file(), idx, 1, kNoMark, opt.drop_behind, st);
  }
  return r < 0 ? static_cast<int>(r) : 0;
}

void Readahead::async(FileHandle& h, std::uint64_t idx, std::uint64_t req_pages,
                      const ReadOptions& opt, CacheSlot& st) {
  const std::uint64_t max = max_pages_;
  if (max == 0) return;
  std::uint64_t start = h.ra.start.load(std::memory_order_relaxed);
  std::uint64_t size = h.ra.size.load(std::memory_order_relaxed);
  std::uint64_t async = h.ra.async_size.load(std::memory_order_relaxed);
  if (size > 0 && idx == start + size - async) {
    start += size;  // the expected mark: the window moves on and grows
    size = next_size(size, max);
  } else {
    // A mark without this handle's window (another handle's, or after a
    // random read): ramp up from here.
    start = idx + 1;
    size = next_size(std::max<std::uint64_t>(req_pages, 4), max);
  }
  h.ra.start.store(start, std::memory_order_relaxed);
  h.ra.size.store(size, std::memory_order_relaxed);
  h.ra.async_size.store(size, std::memory_order_relaxed);
  bump(st, Ctr::async_readahead);
  if (!async_) {
    cache_.fill(h.file(), start, size, start, opt.drop_behind, st);
    return;
  }
  {
    std::lock_guard lk(mu_);
    if (stop_ || q_.size() >= kMaxQueued) return;
    q_.push_back({h.shared_file(), start, size, start, opt.drop_behind});
  }
  cv_.notify_one();
}

// Reads pages [start, start+n) that are not cached (clamped to the file's
// end) into the cache, the one at `mark` with the readahead mark.  Returns
// pages read, or -errno (-ENOMEM: no room under the limit even for one page,
// -EIO etc. from the backing file).  Context: no lock held, not in a
// read-side section.
ssize_t PageCache::fill(CachedFile& f, std::uint64_t start, std::uint64_t n, std::uint64_t mark,
                        bool drop_behind, CacheSlot& st) {
  std::uint64_t isize = f.size();
  if (isize == 0 || n == 0) return 0;
  std::uint64_t last = (isize - 1) >> kPageShift;
  if (start > last) return 0;
  n = std::min(n, last - start + 1);
  std::vector<Page*> pages;
  pages.reserve(n);
  {
    // The reservation and the allocations it made room for are one step.
    Reclaim::Reservation res(reclaim_, st);
    if (!res.take(n)) {
      if (n == 1 || !res.take(1)) return -ENOMEM;
      n = 1;
    }
    for (std::uint64_t i = 0; i < n; i++) {
      Page* p = pool_.alloc();
      if (!p) break;
      pages.push_back(p);
    }
  }
  if (pages.empty()) return -ENOMEM;
  n = pages.size();

  // Insert, not uptodate, with a second reference: ours, for the I/O.
  {
    std::lock_guard lk(f.mu_);
    for (std::uint64_t i = 0; i < n; i++) {
      Page* p = pages[i];
      std::uint64_t idx = start + i;
      if (f.deleting_ || f.index_.lookup(idx)) {
        pool_.free(p);  // already cached (rcu_free clear: straight back)
        pages[i] = nullptr;
        continue;
      }
      pg::init_cached(*p, ++f.gen_);
      p->index = idx;
      p->owner = &f;
      pg::try_get(*p, ref_mode_);  // 1 -> 2: nobody else can see it yet
      std::uint64_t flags =
          (idx == mark ? pg::kReadahead : 0) | (drop_behind ? pg::kDropBehind : 0);
      if (flags) pg::set_flags(*p, flags);
      if (!f.index_.insert(idx, p)) {
        pool_.free(p);
        pages[i] = nullptr;
        continue;
      }
      reclaim_.add(p);
    }
  }

  // Read runs of consecutive inserted pages; short reads are zero-filled
  // (past the backing file's end the file reads as zero).
  int err = 0;
  std::vector<iovec> iov;
  for (std::uint64_t i = 0; i < n;) {
    if (!pages[i]) {
      i++;
      continue;
    }
    std::uint64_t j = i;
    iov.clear();
    for (; j < n && pages[j]; j++) iov.push_back({pages[j]->data, kPageSize});
    std::size_t want = iov.size() * kPageSize, got = 0;
    while (got < want && err == 0) {
      // Advance past what the last call read.
      std::size_t skip = got / kPageSize, part = got % kPageSize;
      std::vector<iovec> rest(iov.begin() + static_cast<std::ptrdiff_t>(skip), iov.end());
      rest[0].iov_base = static_cast<std::byte*>(rest[0].iov_base) + part;
      rest[0].iov_len -= part;
      ssize_t r = f.backing_->read(rest.data(), static_cast<int>(rest.size()),
                                   ((start + i) << kPageShift) + got);
      if (r < 0) {
        if (r != -EINTR) err = static_cast<int>(r);
        continue;
      }
      if (r == 0) break;  // end of the backing file
      got += static_cast<std::size_t>(r);
    }
    for (std::uint64_t k = i; k < j && err == 0; k++) {
      std::size_t page_got = got > (k - i) * kPageSize ? got - (k - i) * kPageSize : 0;
      if (page_got < kPageSize) std::memset(pages[k]->data + page_got, 0, kPageSize - page_got);
    }
    i = j;
  }

  // Publish what is still ours to publish.  A change of the range (write,
  // truncate, punch, invalidate) removed pages it found not uptodate: those
  // are not published, and their bytes may be older than the change.
  std::uint64_t done = 0;
  RemovedList out;
  {
    std::lock_guard lk(f.mu_);
    for (Page* p : pages) {
      if (!p || f.index_.lookup(p->index) != p) continue;
      if (err) {
        remove_locked(f, p, false, out);
      } else {
        pg::mark_uptodate(*p);  // release: the bytes before the bit
        done++;
      }
    }
    f.filled_.notify_all();
  }
  reclaim_.free_removed(out);
  for (Page* p : pages) {
    if (p) put_page(p);
  }
  bump(st, Ctr::readahead_pages, done);
  if (err) {
    bump(st, Ctr::io_errors);
    return err;
  }
  return static_cast<ssize_t>(done);
}

ssize_t PageCache::prefetch(CachedFile& f, std::uint64_t off, std::uint64_t len) {
  CacheSlot& st = stats_.slot();
  std::uint64_t isize = f.size();
  if (len == 0 || off >= isize) return 0;
  std::uint64_t end = std::min(isize, off + len < off ? isize : off + len);
  std::uint64_t chunk = std::max<std::uint64_t>(config_.readahead_max_pages, 32);
  ssize_t total = 0;
  for (std::uint64_t idx = off >> kPageShift, last = (end - 1) >> kPageShift; idx <= last;
       idx += chunk) {
    ssize_t r = fill(f, idx, std::min(chunk, last - idx + 1), Readahead::kNoMark, false, st);
    if (r < 0) return total > 0 ? total : r;
    total += r;
  }
  return total;
}

}  // namespace norefs::cache
