// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/page_cache.h — the page cache: files, handles, the read loop, the
// operations that change a file, readahead, eviction under a memory limit.
// Usable as a library without FUSE; the daemon, the tools and the tests all
// use this API.
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
// ── Lock order ─────────────────────────────────────────────────────────────
//   caller's writer lock of the file (the daemon's, like i_rwsem)
//     -> PageCache::reserve_mu_ (with a limit only)
//     -> CachedFile::mu_ -> PageCache::lru_mu_
//   Eviction holds lru_mu_ and only try-locks CachedFile::mu_ (reverse
//   order, so it never waits).  No lock is taken inside a read-side section
//   by the fast path; the reference path takes none inside one either.
//   Nothing waits for a grace period holding any of them, except that
//   reserve() drains holding reserve_mu_, which no reader ever waits for
//   inside a read-side section.
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
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "alloc/page_pool.h"
#include "cache/backing.h"
#include "cache/cache_stats.h"
#include "cache/page.h"
#include "cache/page_index.h"

namespace norefs::cache {

using alloc::kPageShift;
using alloc::kPageSize;

// The four read paths (design.md, "Read paths to compare").
enum class ReadPath : std::uint8_t { noref, ref, ref_fetchadd, stackcopy };
std::string_view read_path_name(ReadPath p);
std::optional<ReadPath> parse_read_path(std::string_view s);  // "noref", "ref", ...

inline constexpr unsigned kMaxBatch = 256;

struct PageCacheConfig {
  ReadPath read_path = ReadPath::noref;
  // Page memory and the deferred free; `pool.defer = false` with noref is
  // the unsafe control.
  alloc::PagePoolConfig pool;
  // Fast path: at most this many pages per read-side section
  // (FOLIO_BATCH_SIZE), 1..kMaxBatch.
  unsigned batch = 31;
  // Hard bound on cache memory in pages, counting pages still waiting for a
  // grace period.  0: unbounded.
  std::size_t limit_pages = 0;
  // Readahead window maximum in pages (the kernel's default ra_pages is 32,
  // 128 KiB).  0: no readahead, a miss reads only the pages requested.
  unsigned readahead_max_pages = 32;
  // Start the next window on a readahead mark from a worker thread (true),
  // or synchronously in the reader (false; for deterministic tests).
  bool async_readahead = true;
  // stackcopy: reads up to this many bytes inside one page take the stack
  // copy (Kirill's patch used 1024); larger ones take the reference path.
  std::size_t stackcopy_max = 1024;
  // Where the cache's counters are published (CacheStats); empty = anonymous.
  std::string stats_path;
  // Write-allocate (write()): a partial page of a write that is not cached
  // is read from the backing file and cached (true), or left uncached
  // (false).  Whole pages are always cached.  Measured in docs/punch-wait.md.
  bool write_fill_partial = true;
  // Threads that may read at once (stats slots).
  std::size_t max_threads = 1024;
};

class PageCache;

// Per-handle readahead state and previous position: like the kernel's
// struct file_ra_state, per open handle, not per file.  Several threads may
// use one handle at once (as with a shared fd); the fields are then hints
// that race, each read and written whole (relaxed atomics).
struct ReadaheadState {
  std::atomic<std::uint64_t> start{0};       // first page of the current window
  std::atomic<std::uint64_t> size{0};        // pages in the window
  std::atomic<std::uint64_t> async_size{0};  // marked page = start + size - async_size
  std::atomic<std::uint64_t> prev_pos{0};    // end of the previous read (ki_pos)
};

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
  CachedFile(PageCache& cache, std::unique_ptr<Backing> backing, std::uint64_t size);

  PageCache& cache_;
  std::unique_ptr<Backing> backing_;
  std::atomic<std::uint64_t> size_;
  mutable std::mutex mu_;           // index writes, fill publication, gen_, deleting_
  std::condition_variable filled_;  // notified under mu_ when a fill ends
  PageIndex index_;
  std::uint32_t gen_ = 0;  // page generations (stackcopy's ABA check); mu_
  bool deleting_ = false;  // removals not deferred; mu_
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

 private:
  friend class CachedFile;
  struct FastResult;
  template <class Sink>
  FastResult fast_locked(FileHandle& h, std::uint64_t pos, std::size_t len, Sink& sink,
                         const ReadOptions& opt, CacheSlot& st);
  FastResult fast_stackcopy(FileHandle& h, std::uint64_t pos, std::size_t len, std::byte* dst,
                            const ReadOptions& opt, CacheSlot& st);
  ssize_t read_from(FileHandle& h, std::uint64_t pos, std::size_t len, std::byte* buf,
                    std::size_t done, Stop stopped, const ReadOptions& opt, CacheSlot& st);
  ssize_t slow_page(FileHandle& h, std::uint64_t pos, std::size_t len, std::byte* dst, bool mark,
                    const ReadOptions& opt, CacheSlot& st);
  ssize_t read_uncached(CachedFile& f, std::uint64_t pos, std::size_t len, std::byte* dst,
                        CacheSlot& st);
  Page* get_page(CachedFile& f, std::uint64_t idx);
  bool wait_uptodate(CachedFile& f, Page* p, const ReadOptions& opt);
  void mark_accessed(Page* p);
  void put_page(Page* p);

  // Readahead (readahead.cc).
  int sync_readahead(FileHandle& h, std::uint64_t idx, std::uint64_t req_pages,
                     const ReadOptions& opt, CacheSlot& st);
  void async_readahead(FileHandle& h, std::uint64_t idx, std::uint64_t req_pages,
                       const ReadOptions& opt, CacheSlot& st);
  ssize_t fill(CachedFile& f, std::uint64_t start, std::uint64_t n, std::uint64_t mark,
               bool drop_behind, CacheSlot& st);
  void start_readahead_worker();
  void stop_readahead_worker();
  void readahead_worker();

  // Removal and eviction (page_cache.cc).  *_locked: Context: f.mu_ held.
  struct Removed {
    Page* page;
    bool frozen;  // no cache reference left to drop: the remover frees it
  };
  using PageList = std::vector<Removed>;
  static std::vector<Page*> pages_in(CachedFile& f, std::uint64_t first, std::uint64_t last);
  std::size_t count_cached(CachedFile& f, std::uint64_t first, std::uint64_t last);
  void remove_locked(CachedFile& f, Page* p, bool frozen, PageList& out);
  bool replace_locked(CachedFile& f, Page* p, std::size_t off, const void* src, std::size_t n,
                      PageList& out);
  int update_locked(CachedFile& f, Page* p, std::size_t from, std::size_t to, const void* src,
                    bool room, PageList& out);
  int write_pages(CachedFile& f, std::uint64_t pos, std::uint64_t end, const std::byte* data,
                  std::uint64_t first, std::uint64_t last, CacheSlot& st);
  Page* read_for_write(CachedFile& f, std::uint64_t idx, CacheSlot& st);
  void free_removed(PageList& pages);
  std::size_t shrink(std::size_t want, CacheSlot& st);
  bool reserve(std::size_t pages, CacheSlot& st);
  void lru_add(Page* p);
  void lru_del(Page* p);
  void lru_del_locked(Page* p);
  void lru_replace(Page* old, Page* p);
  void publish_lru_counts();

  PageCacheConfig config_;
  RefMode ref_mode_;
  mutable CacheStats stats_;
  alloc::PagePool pool_;

  struct Lru;
  std::unique_ptr<Lru> lru_;  // guarded by lru_mu_
  std::mutex lru_mu_;
  // With a limit: held from reserve() until the pages it made room for are
  // allocated, so that two reservations never count the same room.
  std::mutex reserve_mu_;

  struct ReadaheadQueue;
  std::unique_ptr<ReadaheadQueue> ra_queue_;
  std::atomic<std::int64_t> files_{
      0};  // live CachedFiles; relaxed: a count for the destructor's check
};

}  // namespace norefs::cache
