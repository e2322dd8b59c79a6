// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/ctl/sample_waiting.h — samples a pool's pages waiting for a grace period
// at a fixed period (absolute CLOCK_MONOTONIC deadlines, so a slow sample
// does not drift the rest) from its published counters, as another process
// would.  Used by fill_free_bench, norefs_alloc_stat and norefsctl.
#pragma once

#include <cstdint>
#include <functional>

#include "alloc/stats_block.h"

namespace norefs::tools {

struct WaitingSamples {
  std::uint64_t samples = 0;
  std::uint64_t sum = 0;   // pages, summed over samples
  std::uint64_t peak = 0;  // pages
  std::uint64_t min = 0;   // pages, the smallest sample
  double mean() const {
    return samples ? static_cast<double>(sum) / static_cast<double>(samples) : 0;
  }
};

// Called with each sample: nanoseconds since the start, pages waiting.
using OnSample = std::function<void(std::uint64_t elapsed_ns, std::uint64_t waiting)>;

// Samples every `interval_us` for `seconds` (at least one sample).
WaitingSamples sample_waiting(const alloc::StatsReader& reader, unsigned interval_us,
                              double seconds, const OnSample& on_sample = {});

}  // namespace norefs::tools
