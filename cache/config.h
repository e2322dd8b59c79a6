// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/config.h — what a PageCache is built with: its read path and
// PageCacheConfig.  Apart from page_cache.h so that code that only builds a
// configuration (fs/options.h) does not pull in the page index and liburcu.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "alloc/page.h"
#include "alloc/page_pool.h"

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
  // Under the limit, how long an allocation waits for pages that wait for a
  // grace period before it gives up and the page stays uncached
  // (Ctr::limit_blocked).  While grace periods make no progress at all (a
  // reader in another process stopped inside its section) allocations do
  // not wait again until one completes.
  unsigned limit_wait_ms = 100;
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

}  // namespace norefs::cache
