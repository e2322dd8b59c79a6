// SPDX-License-Identifier: LGPL-2.1-or-later
#include "tools/ctl/stats_json.h"

#include <string>

#include "cache/page_cache.h"

namespace norefs::tools {
namespace {

double ratio(std::uint64_t num, std::uint64_t den) {
  return den ? static_cast<double>(num) / static_cast<double>(den) : 0.0;
}

}  // namespace

std::string alloc_config_name(std::uint64_t config) {
  static constexpr std::pair<std::uint64_t, const char*> kBits[] = {
      {alloc::kCfgDefer, "defer"},
      {alloc::kCfgExpedite, "expedite"},
      {alloc::kCfgTcacheNone, "tcache_none"},
      {alloc::kCfgCheck, "check"},
  };
  std::string s;
  for (auto [bit, name] : kBits) {
    if (config & bit) s += (s.empty() ? "" : ",") + std::string(name);
  }
  return s.empty() ? "none" : s;
}

nlohmann::ordered_json alloc_counters_json(const alloc::Counters& c) {
  return {{"pending", c.pending},
          {"inflight", c.inflight},
          {"waiting", c.waiting},
          {"peak_waiting", c.peak_waiting},
          {"allocated", c.allocated},
          {"live", c.live()},
          {"deferred", c.deferred},
          {"immediate", c.immediate},
          {"not_deferred", c.not_deferred},
          {"freed_after_gp", c.freed_after_gp},
          {"grace_periods", c.grace_periods},
          {"gp_started", c.gp_started},
          {"gp_completed", c.gp_completed},
          {"expedites", c.expedites},
          {"expedited_pages", c.expedited_pages},
          {"make_way_yields", c.make_way_yields},
          {"check_violations", c.check_violations},
          {"threads", c.threads},
          {"slots", c.slots},
          {"arena_active_bytes", c.arena_active_bytes},
          {"arena_resident_bytes", c.arena_resident_bytes},
          {"config", c.config},
          {"config_name", alloc_config_name(c.config)},
          {"remote_readers",
           {{"slots_in_use", c.remote.slots_in_use},
            {"slots_peak", c.remote.slots_peak},
            {"grace_periods", c.remote.grace_periods},
            {"waited", c.remote.waited},
            {"reclaimed_dead", c.remote.reclaimed_dead},
            {"blocking_pid", c.remote.blocking_pid},
            {"blocking_ms", c.remote.blocking_ms},
            {"membarriers", c.remote.membarriers}}}};
}

nlohmann::ordered_json cache_counters_json(const cache::CacheCounters& c) {
  using cache::Ctr;
  nlohmann::ordered_json j;
  auto path = static_cast<cache::ReadPath>(c.read_path);
  j["read_path"] = c.read_path <= static_cast<std::uint64_t>(cache::ReadPath::stackcopy)
                       ? std::string(cache::read_path_name(path))
                       : "unknown(" + std::to_string(c.read_path) + ")";
  j["batch"] = c.batch;
  j["slots"] = c.slots;
  for (std::size_t i = 0; i < static_cast<std::size_t>(Ctr::stop0); i++) {
    j[std::string(cache::counter_name(i))] = c.v[i];
  }
  const std::uint64_t hits = c.hits(), misses = c[Ctr::misses];
  j["hits"] = hits;
  j["hit_ratio"] = ratio(hits, hits + misses);
  j["fast_share"] = ratio(c[Ctr::fast_pages], hits);
  j["pages_cached"] = c.pages_cached;
  j["active_pages"] = c.active_pages;
  j["limit_pages"] = c.limit_pages;
  std::uint64_t all_stops = 0;
  for (std::size_t s = 0; s < cache::kStops; s++) all_stops += c.stops(static_cast<cache::Stop>(s));
  nlohmann::ordered_json stops;
  for (std::size_t s = 0; s < cache::kStops; s++) {
    auto stop = static_cast<cache::Stop>(s);
    stops[std::string(cache::stop_name(stop))] = {{"count", c.stops(stop)},
                                                  {"share", ratio(c.stops(stop), all_stops)}};
  }
  j["stops_total"] = all_stops;
  j["stops"] = std::move(stops);
  return j;
}

}  // namespace norefs::tools
