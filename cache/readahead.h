// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/readahead.h — on-demand readahead in the shape of mm/readahead.c:
// the per-handle window (ReadaheadState) and the policy that moves it
// (Readahead, which owns the asynchronous worker and its queue).  The fill
// that reads pages into the cache is PageCache's (readahead.cc).
//
// Per handle: the current window [start, start+size) and async_size, the
// pages at its end whose first carries the readahead mark.
//  - A miss in sequence with the previous read (same or next page), or at
//    page 0 of a fresh handle, starts a window of get_init_ra_size(request)
//    pages and marks the page `async_size` from its end.
//  - A random miss reads just the pages asked for, with no mark: the window
//    collapses.
//  - A reader that finds the mark clears it (one reader wins) and starts the
//    next window, get_next_ra_size() pages (x4 while small, then x2, up to
//    the maximum), asynchronously on the readahead worker; its first page
//    carries the mark, so a sequential reader keeps one window ahead.
// The fast path stops on a marked page (reason `readahead`): starting the
// next window writes flags and per-handle state.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "cache/cache_stats.h"
#include "cache/read_loop.h"

namespace norefs::cache {

class CachedFile;
class FileHandle;
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

class Readahead {
 public:
  static constexpr std::uint64_t kNoMark = ~std::uint64_t{0};

  // `max_pages`: the window's maximum (0: no readahead, a miss reads only
  // the pages asked for).  `async`: the next window is read by a worker
  // thread (true) or by the reader that found the mark (false).
  Readahead(PageCache& cache, std::uint64_t max_pages, bool async);
  ~Readahead() { stop(); }
  Readahead(const Readahead&) = delete;
  Readahead& operator=(const Readahead&) = delete;

  // A miss at page `idx` of a read of `req_pages` pages: sets the handle's
  // window and fills it now.  Returns 0 or -errno (-ENOMEM: no room).
  int sync(FileHandle& h, std::uint64_t idx, std::uint64_t req_pages, const ReadOptions& opt,
           CacheSlot& st);
  // The reader cleared the mark on page `idx`: the next window, queued for
  // the worker (dropped if the queue is full: readahead is advice).
  void async(FileHandle& h, std::uint64_t idx, std::uint64_t req_pages, const ReadOptions& opt,
             CacheSlot& st);
  // Stops the worker and drops queued work, releasing the files it held.
  // Idempotent; an async() after it queues nothing.
  void stop();

 private:
  struct Work {
    std::shared_ptr<CachedFile> file;  // keeps the file (and its backing) alive
    std::uint64_t start, n, mark;
    bool drop_behind;
  };
  void worker();

  PageCache& cache_;
  const std::uint64_t max_pages_;
  const bool async_;
  std::mutex mu_;  // a leaf lock: nothing is taken while it is held
  std::condition_variable cv_;
  std::deque<Work> q_;  // guarded by mu_
  bool stop_ = false;   // guarded by mu_
  std::thread worker_;
};

}  // namespace norefs::cache
