// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/readahead_queue.h — the asynchronous readahead worker's queue
// (internal to cache/: readahead.cc runs it, page_cache.cc owns it).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "cache/page_cache.h"

namespace norefs::cache {

struct PageCache::ReadaheadQueue {
  struct Work {
    std::shared_ptr<CachedFile> file;  // keeps the file (and its backing) alive
    std::uint64_t start, n, mark;
    bool drop_behind;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Work> q;  // guarded by mu
  bool stop = false;   // guarded by mu
  std::thread worker;
};

}  // namespace norefs::cache
