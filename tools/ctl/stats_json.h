// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/ctl/stats_json.h — the two counter blocks of a norefs daemon
// (alloc/stats_block.h, cache/cache_stats.h) as JSON objects, every counter
// in the block's own order plus the derived numbers a user asks for first
// (hits, hit ratio, fast-path share, stops by reason with their share).
// norefs_alloc_stat and norefsctl print these; tests can call them.
#pragma once

#include <nlohmann/json.hpp>

#include "alloc/stats_block.h"
#include "cache/cache_stats.h"

namespace norefs::tools {

// Every field of alloc::Counters, plus `live` and the config bits spelled out.
nlohmann::ordered_json alloc_counters_json(const alloc::Counters& c);

// Every counter of the cache block by its counter_name(), then:
//   hits = fast_pages + slow_hits, hit_ratio = hits / (hits + misses),
//   fast_share = fast_pages / hits, the header's gauges, and "stops": one
//   {count, share} per Stop, share = count / all stops.
nlohmann::ordered_json cache_counters_json(const cache::CacheCounters& c);

// "defer,expedite,..." for alloc::ConfigBits.
std::string alloc_config_name(std::uint64_t config);

}  // namespace norefs::tools
