// SPDX-License-Identifier: LGPL-2.1-or-later
#include "cache/cache_stats.h"

#include <stdexcept>
#include <vector>

namespace norefs::cache {
namespace {

constexpr std::string_view kStopNames[kStops] = {
    "missing",  "not_uptodate", "readahead", "drop_behind", "past_eof",
    "accessed", "interrupted",  "batch",     "changed",
};
constexpr std::string_view kCounterNames[static_cast<std::size_t>(Ctr::stop0)] = {
    "reads",          "bytes",           "fast_pages",     "fast_reads",      "slow_hits",
    "misses",         "waits",           "sync_readahead", "async_readahead", "readahead_pages",
    "uncached_reads", "zero_copy_reads", "evicted",        "evict_skipped",   "limit_drains",
    "limit_blocked",  "io_errors",       "written_pages",  "removed_pages",   "write_alloc",
    "write_fill",     "write_skipped",
};

}  // namespace

std::string_view stop_name(Stop s) { return kStopNames[static_cast<std::size_t>(s)]; }

std::string_view counter_name(std::size_t i) {
  static const std::vector<std::string> stop_counters = [] {
    std::vector<std::string> v;
    for (auto n : kStopNames) v.push_back("stop_" + std::string(n));
    return v;
  }();
  auto first_stop = static_cast<std::size_t>(Ctr::stop0);
  return i < first_stop ? kCounterNames[i] : std::string_view(stop_counters[i - first_stop]);
}

constinit thread_local detail::LastSlot detail::last_slot;

CacheStats::CacheStats(const std::string& path, std::size_t max_slots)
    : block_(path, max_slots,
             [](CacheStatsHeader& h) { h.ncounters.store(kCounters, std::memory_order_relaxed); }),
      registry_(max_slots,
                "cache stats: more than " + std::to_string(max_slots) +
                    " threads read at once (raise PageCacheConfig::max_threads)",
                {.forget = [] { detail::last_slot = {}; }}, &block_.nslots()),
      id_(registry_.id()) {}

CacheSlot& CacheStats::slot_slow() {
  CacheSlot* s = &block_.slot(registry_.acquire());
  detail::last_slot = {id_, s};
  return *s;
}

CacheCounters CacheStats::sum() const {
  return sum_cache_counters(block_.header(), block_.slots());
}

// All loads relaxed: see the block comment in the header.
CacheCounters sum_cache_counters(const CacheStatsHeader& h, const CacheSlot* slots) {
  auto rd = [](const Counter& c) { return c.load(std::memory_order_relaxed); };
  CacheCounters c;
  c.slots = rd(h.block.nslots);
  for (std::uint64_t i = 0; i < c.slots; i++) {
    for (std::size_t k = 0; k < kCounters; k++) c.v[k] += rd(slots[i].v[k]);
  }
  c.pages_cached = rd(h.pages_cached);
  c.active_pages = rd(h.active_pages);
  c.limit_pages = rd(h.limit_pages);
  c.batch = rd(h.batch);
  c.read_path = rd(h.read_path);
  return c;
}

CacheStatsReader::CacheStatsReader(const std::string& path) : block_(path) {
  // Relaxed: written before the magic, which the block's reader loaded with
  // acquire.
  if (block_.header().ncounters.load(std::memory_order_relaxed) != kCounters) {
    throw std::runtime_error(path + ": a norefs cache stats block with another set of counters (" +
                             std::to_string(kCounters) + " expected)");
  }
}

CacheCounters CacheStatsReader::sum() const {
  return sum_cache_counters(block_.header(), block_.slots());
}

}  // namespace norefs::cache
