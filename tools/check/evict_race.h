// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/check/evict_race.h — the evict-race checker: readers check every byte
// they read while their pages are evicted and the memory is reused at once.
//
// Content.  Every file's bytes are a function of (file id, offset): the
// 8-byte word at offset 8w of file f is mix(magic | f << 32 | w), mix being
// a bijection (splitmix64's finalizer), so a wrong word read back can be
// decoded: another file's data (which file, which offset), the churn
// pattern, the allocator's poison, zeros.  Files never change; they are only
// evicted and refilled, so the one valid value of each byte is known at
// every moment and the check is exact.  Fills write whole words (8-byte
// stores: TSan under GCC 12 misses byte-wise races); a read copies bytes, and
// the checker compares bytes.
//
// Threads (all at once, for `seconds`):
//  - `readers` readers, each with its own handle on every file, read random
//    (file, pos, len) ranges through the cache and compare every byte with
//    the content function, and the length with min(len, size - pos);
//  - one evictor loops over the files calling PageCache::evict() and/or
//    invalidate(), so that their pages leave the index and go back to the
//    pool: at once with defer off, after a grace period with defer on;
//    readers' misses refill them with pages from the same pool;
//  - `churners` threads allocate batches of pages from cache.pool(), write
//    the churn pattern into every word and free them (rcu_free clear:
//    straight back to the arena), so that freed memory is reused fast.
//    The evictor may churn too, right after each eviction, from its own
//    tcache, where the pages it has just freed are the first to come back.
//
// With defer on, a noref reader must never see a wrong byte (page_pool.h's
// guarantee).  With defer off and the noref path (the unsafe control) a
// reader that is copying a page when it is freed and reused copies the new
// owner's bytes: the checker should catch it.  It may also crash: the
// descriptor it found may be freed and reused meanwhile, its data pointer
// then anything (norefs_evict_race runs in a child process and reports a
// crash as an outcome of the control).  The ref path (a reference,
// then a re-lookup) and stackcopy (a re-check after the copy) should return
// the right bytes even with defer off, so bad reads there fail the run; but
// with defer off they too touch descriptors that were freed at once (the
// ref path's try_get() loads and CASes the state word of a page it found
// under the section; stackcopy loads it and the data pointer): in this
// userspace design, unlike the kernel's struct page, descriptors are not
// type-stable, so deferral protects them for every path, and only noref
// needs it for the bytes as well.  TSan reports those accesses.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "alloc/page_pool.h"
#include "alloc/stats_block.h"
#include "cache/backing.h"
#include "cache/cache_stats.h"
#include "cache/page_cache.h"

namespace norefs::tools {

enum class EvictMode { evict, invalidate, both };  // both: alternate per call
std::string_view evict_mode_name(EvictMode m);

struct EvictRaceParams {
  cache::ReadPath read_path = cache::ReadPath::noref;
  bool defer = true;    // PagePoolConfig::defer
  bool poison = false;  // PagePoolConfig::poison_on_free
  alloc::TcacheMode tcache = alloc::TcacheMode::private_;
  double seconds = 2.0;
  unsigned readers = 4;
  unsigned churners = 2;
  unsigned files = 8;
  std::size_t file_pages = 16;  // pages per file (the last page partial but in file 0)
  std::size_t max_read = std::size_t{4} * 4096;  // longest read, bytes
  std::size_t churn_pages = 64;                  // pages per churn batch
  // The evictor churns this many pages after each call: they come from its
  // tcache, where the pages it has just freed are first in line, so freed
  // memory is rewritten within microseconds.
  std::size_t evictor_churn_pages = 16;
  // The evictor sleeps this long after each call.  With 0 it spends its
  // time on evict() calls that find nothing (the readers have not refilled
  // the file yet), and evicts less.  Tuned with defer off on the 2-CPU
  // development machine (5 s runs): 0 us and no evictor churn detected
  // 5-7 bad reads/s; 100 us with evictor churn 16, 30-35/s.
  unsigned evict_pause_us = 100;
  EvictMode mode = EvictMode::both;
  std::size_t limit_pages = 0;  // PageCacheConfig::limit_pages (0: none)
  unsigned readahead_max_pages = 32;
  std::uint64_t seed = 1;
  unsigned keep_bad = 8;  // bad reads kept for the report
};

// What the first wrong word of a bad read holds.
enum class BadKind : std::uint8_t {
  length,      // the read returned another byte count (or an error)
  other_file,  // another file's data
  same_file,   // this file's data from another offset
  churn,       // the churn pattern: a page reused by a churn thread
  poison,      // kPoisonByte: a freed page (poison_on_free)
  zeros,
  unknown,  // none of the above (or the wrong bytes do not cover a word)
  kCount,
};
inline constexpr std::size_t kBadKinds = static_cast<std::size_t>(BadKind::kCount);
std::string_view bad_kind_name(BadKind k);

struct BadRead {
  double at_seconds = 0;  // since the start of the run
  unsigned reader = 0, file = 0;
  std::uint64_t pos = 0;
  std::size_t len = 0;
  ssize_t returned = 0;  // what read() returned
  std::size_t expected_len = 0;
  std::uint64_t offset = 0;  // file offset of the first wrong byte
  std::size_t nbytes = 0;    // bytes shown below (up to 8, from `offset`)
  std::array<std::uint8_t, 8> expected{}, got{};
  BadKind kind = BadKind::unknown;
  std::string what;  // decoded: "file 3 offset 12288", "churn pattern", ...
};

struct EvictRaceResult {
  double seconds = 0;  // measured
  std::uint64_t reads = 0, bytes_checked = 0, bad_reads = 0, bad_bytes = 0;
  std::array<std::uint64_t, kBadKinds> bad_by_kind{};
  std::uint64_t evict_calls = 0, invalidate_calls = 0;
  std::uint64_t pages_evicted = 0;      // returned by evict()
  std::uint64_t pages_invalidated = 0;  // removed_pages counted by invalidate()
  std::uint64_t churned_pages = 0;      // churn threads + evictor
  std::vector<BadRead> first_bad;       // up to keep_bad, earliest first
  cache::CacheCounters cache;           // at the end
  alloc::Counters pool;                 // at the end, before teardown
  std::uint64_t evictions() const { return pages_evicted + pages_invalidated; }
};

// Runs the checker with a fresh cache.  `progress`, if set, gets a line
// about once a second while it runs ("3/10 s: 1.21M reads, 0 bad, 20.3k
// pages evicted"; reads and evictions from the cache's counters).  Throws
// std::invalid_argument on a bad configuration.
EvictRaceResult run_evict_race(const EvictRaceParams& p,
                               const std::function<void(const std::string&)>& progress = {});

// The outcome: exit status and the sentence that says it.
//  0: defer on (or a path that needs no deferral) and no bad read; or the
//     unsafe control (defer off, noref) detected bad reads.
//  1: bad reads where none may be, or nothing was read.
//  2: inconclusive: the control detected nothing, or nothing was evicted.
struct EvictRaceVerdict {
  int exit_code = 0;
  bool control = false;  // defer off with the noref path: bad reads expected
  std::string message;
};
EvictRaceVerdict evict_race_verdict(const EvictRaceParams& p, const EvictRaceResult& r);
// The run died of signal `sig` (norefs_evict_race runs it in a child
// process).  With defer off a reader may copy from a page whose descriptor
// was freed and reused (its data pointer is then anything): for the unsafe
// control that is the broken guarantee showing as a crash (0); anywhere
// else a failure (1).
EvictRaceVerdict evict_race_crash_verdict(const EvictRaceParams& p, int sig);

std::string describe_evict_race_config(const EvictRaceParams& p);
std::string format_evict_race_report(const EvictRaceParams& p, const EvictRaceResult& r);
// {config, result (null if the run crashed), verdict}.
std::string evict_race_json(const EvictRaceParams& p, const EvictRaceResult* r,
                            const EvictRaceVerdict& v);

// The content function (exposed for tests): the word at byte offset 8*w of
// file `file`, and its decoding (false if `word` is no file's word).
std::uint64_t evict_race_word(unsigned file, std::uint64_t w);
bool evict_race_decode(std::uint64_t word, unsigned* file, std::uint64_t* w);
// Bytes [off, off+n) of file `file` (whole 8-byte stores where aligned), and
// a cache::Backing of `size` bytes that generates them (tools/check/partial_fault.h).
void evict_race_fill(unsigned file, std::uint64_t off, std::byte* dst, std::size_t n);
std::unique_ptr<cache::Backing> evict_race_backing(unsigned file, std::uint64_t size);

}  // namespace norefs::tools
