// SPDX-License-Identifier: LGPL-2.1-or-later
#include "tools/ctl/sample_waiting.h"

#include <time.h>

namespace norefs::tools {
namespace {

std::uint64_t to_ns(const timespec& ts) {
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000 +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace

WaitingSamples sample_waiting(const alloc::StatsReader& reader, unsigned interval_us,
                              double seconds, const OnSample& on_sample) {
  WaitingSamples r;
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  std::uint64_t next = to_ns(now);
  const std::uint64_t start = next;
  const std::uint64_t end = next + static_cast<std::uint64_t>(seconds * 1e9);
  do {
    next += std::uint64_t{interval_us} * 1000;
    timespec deadline{static_cast<time_t>(next / 1000000000), static_cast<long>(next % 1000000000)};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr);
    std::uint64_t w = reader.waiting();
    r.sum += w;
    if (r.samples == 0 || w < r.min) r.min = w;
    r.samples++;
    if (w > r.peak) r.peak = w;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (on_sample) on_sample(to_ns(now) - start, w);
  } while (to_ns(now) < end);
  return r;
}

}  // namespace norefs::tools
