// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/fill_free.h — the fill-and-free load: the userspace form of the
// series' hole-punch loop ("N processes each fallocate() and hole-punch
// 64 MiB of a memfd in a loop").  N threads each allocate `fill_pages`
// pages, touch them, mark them rcu_free (as if they had left a page cache
// index) and free them, calling make_way() after every page like a removal
// loop, as fast as they can for `seconds`.  A sampler reads the pool's
// published counters every `sample_us` (from the stats block, as another
// process would) and keeps the mean and peak of what waits.
#pragma once

#include <cstdint>
#include <string>

#include "alloc/page_pool.h"

namespace norefs::tools {

struct FillFreeParams {
  alloc::PagePoolConfig pool;
  unsigned threads = 1;
  std::size_t fill_pages = 1024;  // pages held per fill (4 MiB)
  double seconds = 1.0;
  unsigned sample_us = 2000;
};

struct FillFreeResult {
  std::uint64_t pages = 0;  // pages allocated and freed, all threads
  double seconds = 0;       // measured wall time of the load
  double pages_per_sec = 0;
  double mean_waiting = 0;         // pages, over samples
  std::uint64_t peak_waiting = 0;  // pages, max over samples
  std::uint64_t samples = 0;
  std::uint64_t grace_periods = 0, expedites = 0, make_way_yields = 0;
  std::uint64_t alloc_failures = 0;
};

// Runs one measurement with a fresh pool.  `stats_path` is where the pool
// publishes its counters for the sampler (must not exist).
FillFreeResult run_fill_free(const FillFreeParams& p, const std::string& stats_path);

}  // namespace norefs::tools
