// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/page_cache.h — the page cache's API: files, handles, reads, the
// operations that change a file, advice.  Usable as a library without FUSE;
// the daemon, the tools and the tests all use this API.
//
// Where each concern lives (open the right one first):
//   cache/read_loop.h   the lockless read protocol and the read options
//                       (the loop: read_loop.cc; stop reasons: cache_stats.h)
//   cache/config.h      PageCacheConfig
//   cache/readahead.h   the readahead window and its worker (the fill:
//                       readahead.cc)
//   cache/reclaim.h     the LRU lists, eviction, the memory limit's
//                       reservations, removal's last step
//   page_cache.cc       files and the operations that change them
//
// ── Lock order ─────────────────────────────────────────────────────────────
//   One table for the whole process: docs/design.md#lock-order.  Here:
//   caller's writer lock -> Reclaim's reserve_mu_ -> CachedFile::mu_ ->
//   Reclaim's lru_mu_; eviction only try-locks a CachedFile::mu_.
//
// ── Page states in a file's index ─────────────────────────────────────────
//   !uptodate: being filled by a readahead; the filler holds a reference
//              and marks it uptodate under mu_ if it is still in the index.
//   uptodate:  immutable; on the LRU lists.  write() may also insert a
//              page uptodate (write-allocate): bytes first, then the
//              uptodate bit (release), then the index, all under mu_.
//   Every removal (truncate, punch, write's replace, eviction,
//   invalidation, deletion) unlinks under mu_, sets rcu_free (unless the
//   file is being deleted: no handle, no reader), then drops the cache's
//   reference; whoever drops the last one frees.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "alloc/page_pool.h"
#include "cache/backing.h"
#include "cache/cache_stats.h"
#include "cache/config.h"
#include "cache/fast_path.h"
#include "cache/page.h"
#include "cache/page_index.h"
#include "cache/read_loop.h"
#include "cache/readahead.h"
#include "cache/reclaim.h"
#include "cache/shared_file.h"

namespace norefs::cache {

using alloc::kPageShift;
using alloc::kPageSize;

class PageCache;

// A cached file.  Created by PageCache::open_file(); lives while any handle
// or queued readahead holds it.  Its pages go (not deferred: no handle can
// exist) when the last owner drops it.
class CachedFile {
 public:
  ~CachedFile();
  CachedFile(const CachedFile&) = delete;
  CachedFile& operator=(const CachedFile&) = delete;

  // i_size.  Acquire pairs with the release stores in write()/truncate():
  // see the protocol above.
  std::uint64_t size() const { return size_.load(std::memory_order_acquire); }
  // Pages in the index (takes mu_).
  std::uint64_t pages() const;
  Backing& backing() { return *backing_; }
  PageCache& cache() { return cache_; }

 private:
  friend class PageCache;
  friend class Reclaim;  // eviction: try-locks mu_, erases from index_
  // Throws std::bad_alloc if the shared region has no room for its SharedFile.
  CachedFile(PageCache& cache, std::unique_ptr<Backing> backing, std::uint64_t size);

  PageCache& cache_;
  std::unique_ptr<Backing> backing_;
  // In the shared region (cache/shared_file.h); size_ and index_ name its
  // fields: the fast path's whole view of the file.
  SharedFile* const shared_;
  std::atomic<std::uint64_t>& size_;
  PageIndex& index_;
  mutable std::mutex mu_;           // index writes, fill publication, gen_, deleting_
  std::condition_variable filled_;  // notified under mu_ when a fill ends
  std::uint32_t gen_ = 0;           // page generations (stackcopy's ABA check); mu_
  bool deleting_ = false;           // removals not deferred; mu_
};

// An open handle: the file and its readahead state.
class FileHandle {
 public:
  explicit FileHandle(std::shared_ptr<CachedFile> file) : file_(std::move(file)) {}
  CachedFile& file() const { return *file_; }
  const std::shared_ptr<CachedFile>& shared_file() const { return file_; }
  ReadaheadState ra;

 private:
  std::shared_ptr<CachedFile> file_;
};

class PageCache {
 public:
  // Throws std::system_error (stats files) or std::invalid_argument (config).
  explicit PageCache(const PageCacheConfig& config = {});
  // Context: every file and handle is gone.  Drains every page.
  ~PageCache();
  PageCache(const PageCache&) = delete;
  PageCache& operator=(const PageCache&) = delete;

  std::shared_ptr<CachedFile> open_file(std::unique_ptr<Backing> backing, std::uint64_t size);

  // ── Reads (the read loop: read_loop.cc) ──
  // Reads up to `len` bytes at `pos` into `buf`.  Returns bytes read (short
  // only at EOF, on interruption or an error after some bytes) or -errno
  // (-EIO from the backing file, -EINTR) if nothing was read.
  ssize_t read(FileHandle& h, std::uint64_t pos, std::size_t len, std::byte* buf,
               const ReadOptions& opt = {});
  // The same, but if the fast path can serve the whole read in one batch,
  // calls `send` with iovecs into the pages while the section is held, sets
  // *sent and returns the byte count without copying.  Otherwise the bytes
  // are in `buf` (len bytes) as with read(), *sent is false.
  ssize_t read_iov(FileHandle& h, std::uint64_t pos, std::size_t len, std::byte* buf,
                   const IovSender& send, bool* sent, const ReadOptions& opt = {});

  // ── Changes.  Context for all: the caller serializes changes of one file
  // (its writer lock) and has already applied the change to the backing
  // file, so that a fill racing with it reads the new bytes or is
  // discarded.  Returns 0 or -ENOMEM (the affected pages are then dropped
  // instead of updated: still consistent). ──
  // Bytes [pos, pos+len) now hold `data`; i_size grows to pos+len if less.
  // Write-allocate: the written pages are cached (page_cache.cc); what finds
  // no room under the limit stays uncached.
  int write(CachedFile& f, std::uint64_t pos, const void* data, std::size_t len);
  // i_size becomes `size`; bytes past it leave the cache (the partial last
  // page is zeroed past the end).
  int truncate(CachedFile& f, std::uint64_t size);
  // Bytes [off, off+len) read as zero: whole pages removed, partial ones
  // zeroed.  i_size unchanged.
  int punch(CachedFile& f, std::uint64_t off, std::uint64_t len);
  // Drops every page overlapping [off, off+len) (len 0: to the end), e.g.
  // when the backing file changed there in a way the cache cannot mirror.
  void invalidate(CachedFile& f, std::uint64_t off = 0, std::uint64_t len = 0);
  // i_size, set without touching pages (after invalidate(), for a backing
  // file changed from outside).
  void set_size(CachedFile& f, std::uint64_t size);
  // The file is being deleted: no handle exists or will.  Removes every
  // page; removals from now on are not deferred.
  void set_deleting(CachedFile& f);

  // ── Advice ──
  // fadvise(DONTNEED): evicts the file's pages that no reference-path
  // reader holds.  Returns pages evicted.
  std::size_t evict(CachedFile& f);
  // MADV_WILLNEED: reads [off, off+len) into the cache now.  Returns pages
  // read from the backing file, or -errno.
  ssize_t prefetch(CachedFile& f, std::uint64_t off, std::uint64_t len);
  // Evicts up to `pages` pages from the LRU lists.  Returns pages evicted.
  std::size_t shrink(std::size_t pages);

  // ── Statistics ──
  CacheCounters counters() const { return stats_.sum(); }
  alloc::Counters pool_counters() const { return pool_.counters(); }
  alloc::PagePool& pool() { return pool_; }
  const PageCacheConfig& config() const { return config_; }
  RefMode ref_mode() const { return ref_mode_; }
  const std::string& stats_path() const { return stats_.path(); }
  // What a reader in another process maps (alloc/shared_region.h), and
  // where in it a file's fast-path state is (cache/fast_path.h).
  const alloc::SharedRegion& region() const { return pool_.region(); }
  static const SharedFile& shared_file(const CachedFile& f) { return *f.shared_; }

 private:
  friend class CachedFile;
  template <class Sink>
  FastResult fast_locked(FileHandle& h, std::uint64_t pos, std::size_t len, Sink& sink,
                         const ReadOptions& opt, CacheSlot& st);
  FastResult fast_stackcopy(FileHandle& h, std::uint64_t pos, std::size_t len, std::byte* dst,
                            const ReadOptions& opt, CacheSlot& st);
  // The two ends of a read whose first batch the fast path took, shared by
  // read() and read_iov(): served whole, or continued by the loop.
  ssize_t fast_served(std::size_t n, CacheSlot& st);
  ssize_t fast_stopped(FileHandle& h, std::uint64_t pos, std::size_t len, std::byte* buf,
                       const FastResult& r, const ReadOptions& opt, CacheSlot& st);
  ssize_t read_from(FileHandle& h, std::uint64_t pos, std::size_t len, std::byte* buf,
                    std::size_t done, Stop stopped, const ReadOptions& opt, CacheSlot& st);
  ssize_t slow_page(FileHandle& h, std::uint64_t pos, std::size_t len, std::byte* dst, bool mark,
                    const ReadOptions& opt, CacheSlot& st);
  ssize_t read_uncached(CachedFile& f, std::uint64_t pos, std::size_t len, std::byte* dst,
                        CacheSlot& st);
  Page* get_page(CachedFile& f, std::uint64_t idx);
  bool wait_uptodate(CachedFile& f, Page* p, const ReadOptions& opt);
  void put_page(Page* p);

  // The fill (readahead.cc): reads pages [start, start+n) that are not
  // cached into the cache, the one at `mark` with the readahead mark.
  friend class Readahead;
  ssize_t fill(CachedFile& f, std::uint64_t start, std::uint64_t n, std::uint64_t mark,
               bool drop_behind, CacheSlot& st);

  // Changes and removal (page_cache.cc).  *_locked: Context: f.mu_ held.
  static std::vector<Page*> pages_in(CachedFile& f, std::uint64_t first, std::uint64_t last);
  std::size_t count_cached(CachedFile& f, std::uint64_t first, std::uint64_t last);
  void remove_locked(CachedFile& f, Page* p, bool frozen, RemovedList& out);
  bool replace_locked(CachedFile& f, Page* p, std::size_t off, const void* src, std::size_t n,
                      RemovedList& out);
  int update_locked(CachedFile& f, Page* p, std::size_t from, std::size_t to, const void* src,
                    bool room, RemovedList& out);
  int write_pages(CachedFile& f, std::uint64_t pos, std::uint64_t end, const std::byte* data,
                  std::uint64_t first, std::uint64_t last, CacheSlot& st);
  Page* read_for_write(CachedFile& f, std::uint64_t idx, CacheSlot& st);

  PageCacheConfig config_;
  RefMode ref_mode_;
  mutable CacheStats stats_;
  alloc::PagePool pool_;
  Reclaim reclaim_;
  Readahead readahead_;  // after everything its worker uses
  std::atomic<std::int64_t> files_{
      0};  // live CachedFiles; relaxed: a count for the destructor's check
};

}  // namespace norefs::cache
