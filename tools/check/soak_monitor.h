// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/check/soak_monitor.h — the soak's watcher of one norefs mount
// (tools/check/soak.sh, docs/soak.md).
//
// It asks the mount for its counter blocks (NOREFS_IOC_INFO, then closes
// the descriptor: it holds nothing in the mount, which can be unmounted
// under it), maps both, and until the daemon exits:
//  - every `interval_us` (2 ms), on absolute deadlines, samples the pages
//    the limit bounds — every page not back in the arena: cached, held by a
//    reader, or waiting for a grace period — with
//    alloc::sum_live_lower_bound(), which never overstates, so a sample
//    above `cache_size` is a real excess, never a torn sum; and, for the
//    report, pages cached and pages waiting;
//  - every `status_every_ms`, writes a status file (JSON, replaced
//    atomically) for the soak's progress lines.
// The daemon's exit is seen through a pidfd.  Mappings outlive the unlink
// of the block files, so after the exit it reads the final counters and
// checks that they are consistent (final_counter_checks()).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "alloc/stats_block.h"
#include "cache/cache_stats.h"

namespace norefs::tools {

// One consistency check of the counters a daemon left after its exit.
struct CounterCheck {
  std::string name;  // what must hold, in words
  bool ok = false;
  std::string detail;  // the numbers it compared
};

// The counters of a daemon that has exited after a clean unmount (its pool
// drained, its cache emptied) must satisfy, with `limit_pages` its bound:
//  - nothing waits: pending = inflight = 0;
//  - every page is back in the arena: allocated = immediate + not_deferred
//    + freed_after_gp (live() = 0);
//  - every page queued for a grace period was freed after one: deferred =
//    freed_after_gp, and check_violations = 0;
//  - the pool's own peak of waiting pages is within the bound;
//  - the cache is empty: pages_cached = active_pages = 0;
//  - each page leaves a file's index once, so pages evicted + removed +
//    replaced by writes <= pages allocated, and pages read from the backing
//    file <= pages allocated;
//  - fast_reads <= reads, zero_copy_reads <= fast_reads, and every batch
//    stop came after `batch` fast pages: stop_batch * batch <= fast_pages;
//  - no backing I/O error (the soak's backing never fails).
// (hits is not checked against fast_pages + slow_hits: it is defined as
// that sum, cache_stats.h, and no counter holds it separately.)
std::vector<CounterCheck> final_counter_checks(const alloc::Counters& a,
                                               const cache::CacheCounters& c,
                                               std::uint64_t limit_pages);

struct MonitorParams {
  std::string mount;  // a path in the mount
  unsigned interval_us = 2000;
  unsigned status_every_ms = 1000;
  std::string status_path;  // empty: none
  // Set (by a signal handler) to stop before the daemon exits: the run is
  // then reported as aborted.
  const std::atomic<bool>* stop = nullptr;
};

struct OverLimitSample {
  double elapsed_s = 0;
  std::int64_t live = 0;
};

struct MonitorResult {
  std::uint64_t daemon_pid = 0;
  std::uint64_t limit_pages = 0;
  std::string read_path;
  // Sampling.
  std::uint64_t samples = 0;
  std::uint64_t late_samples = 0;  // taken more than one interval after their deadline
  double max_gap_ms = 0;           // longest time between two samples
  std::uint64_t over_limit = 0;    // samples with live pages above the limit
  std::vector<OverLimitSample> first_over;
  std::int64_t max_live = 0;
  std::uint64_t max_cached = 0, max_waiting = 0, max_cached_plus_waiting = 0;
  double seconds = 0;
  // The end.
  bool daemon_exited = false;  // false: stopped by `stop` first
  alloc::Counters alloc_final;
  cache::CacheCounters cache_final;
  std::vector<CounterCheck> checks;
  bool ok() const;
};

// Throws ctl::CtlError or std::system_error if the mount cannot be asked or
// its blocks mapped, std::runtime_error if it has no cache_size limit.
MonitorResult run_monitor(const MonitorParams& p);

std::string monitor_json(const MonitorParams& p, const MonitorResult& r);
std::string format_monitor_report(const MonitorResult& r);

}  // namespace norefs::tools
