// SPDX-License-Identifier: LGPL-2.1-or-later
//
// norefsctl — control and statistics of a running norefs mount, through the
// ioctls of fs/control.h on a path inside the mount.
//
//   norefsctl stats    <path> [--json] [--watch MS]
//   norefsctl sample   <path> [--interval-ms 2] [--seconds S] [--csv F] [--json]
//   norefsctl evict    <file> [--json]
//   norefsctl prefetch <file> [--offset N] [--length N] [--measure] [--json]
//
// A thin main: the ioctls and the prefetch measurement are tools/ctl.h, the
// JSON of the counter blocks tools/stats_json.h, the 2 ms sampler
// tools/sample_waiting.h.  Exit 1 on any error, with a message; 2 on bad
// usage.

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <exception>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "alloc/page.h"
#include "alloc/stats_block.h"
#include "cache/cache_stats.h"
#include "tools/ctl.h"
#include "tools/sample_waiting.h"
#include "tools/stats_json.h"

namespace ctl = norefs::tools::ctl;
using nlohmann::ordered_json;
using norefs::alloc::kPageSize;

namespace {

double ms(std::uint64_t ns) { return static_cast<double>(ns) / 1e6; }
double mib(std::uint64_t pages) { return static_cast<double>(pages) * kPageSize / 1048576.0; }

void print_config(const std::string& path, const ctl::MountInfo& mi) {
  std::printf("norefsctl: %s: daemon pid %lu, alloc stats %s, cache stats %s\n", path.c_str(),
              static_cast<unsigned long>(mi.pid), mi.alloc_stats.c_str(), mi.cache_stats.c_str());
}

// ---- stats ----------------------------------------------------------------

ordered_json stats_json(const ctl::MountInfo& mi, const norefs::alloc::StatsReader& a,
                        const norefs::cache::CacheStatsReader& c) {
  ordered_json j;
  j["daemon"] = {{"pid", mi.pid}, {"alloc_stats", mi.alloc_stats}, {"cache_stats", mi.cache_stats}};
  j["time_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  j["alloc"] = norefs::tools::alloc_counters_json(a.sum());
  j["cache"] = norefs::tools::cache_counters_json(c.sum());
  return j;
}

std::string fmt_value(const ordered_json& v) {
  if (v.is_number_float()) {
    char b[32];
    std::snprintf(b, sizeof b, "%.4f", v.get<double>());
    return b;
  }
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// One line per counter; with `prev` (watch mode) also the rate since then.
void print_stats_table(const ordered_json& j, const ordered_json* prev) {
  double dt = prev ? static_cast<double>(j["time_ms"].get<long long>() -
                                         (*prev)["time_ms"].get<long long>()) /
                         1000.0
                   : 0;
  auto line = [&](const std::string& name, const ordered_json& v, const ordered_json* pv,
                  const std::string& note) {
    std::string rate;
    if (pv && dt > 0 && v.is_number_unsigned() && pv->is_number_unsigned()) {
      char b[48];
      std::snprintf(b, sizeof b, "%+.0f/s",
                    (static_cast<double>(v.get<std::uint64_t>()) -
                     static_cast<double>(pv->get<std::uint64_t>())) /
                        dt);
      rate = b;
    }
    std::printf("  %-22s %20s %14s  %s\n", name.c_str(), fmt_value(v).c_str(), rate.c_str(),
                note.c_str());
  };
  for (const char* section : {"alloc", "cache"}) {
    std::printf("%s:\n", section);
    for (auto& [k, v] : j[section].items()) {
      if (k == "stops") continue;
      const ordered_json* pv = prev ? &(*prev)[section][k] : nullptr;
      std::string note;
      if (k == "hits") note = "fast_pages + slow_hits";
      if (k == "hit_ratio") note = "hits / (hits + misses)";
      if (k == "fast_share") note = "fast_pages / hits";
      if (k == "limit_pages" && v.get<std::uint64_t>() == 0) note = "no limit";
      if ((k == "waiting" || k == "peak_waiting" || k == "pages_cached") &&
          v.is_number_unsigned()) {
        char b[32];
        std::snprintf(b, sizeof b, "%.2f MiB", mib(v.get<std::uint64_t>()));
        note = b;
      }
      line(k, v, pv, note);
    }
  }
  std::printf("fast-path stops (%s in all):\n", fmt_value(j["cache"]["stops_total"]).c_str());
  for (auto& [k, v] : j["cache"]["stops"].items()) {
    char share[32];
    std::snprintf(share, sizeof share, "%5.1f %%", 100.0 * v["share"].get<double>());
    line(k, v["count"], prev ? &(*prev)["cache"]["stops"][k]["count"] : nullptr, share);
  }
}

int cmd_stats(const std::string& path, bool json, unsigned watch_ms) {
  ctl::Fd fd(path);
  ctl::MountInfo mi = ctl::info(fd);
  norefs::alloc::StatsReader a(mi.alloc_stats);
  norefs::cache::CacheStatsReader c(mi.cache_stats);
  if (!json) print_config(path, mi);
  std::optional<ordered_json> prev;
  for (;;) {
    ordered_json j = stats_json(mi, a, c);
    if (json) {
      // Watch mode prints JSON lines: one object per sample.
      std::printf("%s\n", j.dump(watch_ms ? -1 : 2).c_str());
    } else {
      if (watch_ms) {
        std::time_t t = std::time(nullptr);
        char ts[32];
        std::strftime(ts, sizeof ts, "%H:%M:%S", std::localtime(&t));
        std::printf("---- %s\n", ts);
      }
      print_stats_table(j, prev ? &*prev : nullptr);
    }
    std::fflush(stdout);
    if (!watch_ms) return 0;
    prev = std::move(j);
    std::this_thread::sleep_for(std::chrono::milliseconds(watch_ms));
  }
}

// ---- sample ---------------------------------------------------------------

int cmd_sample(const std::string& path, unsigned interval_ms, double seconds,
               const std::string& csv, bool json) {
  ctl::Fd fd(path);
  ctl::MountInfo mi = ctl::info(fd);
  norefs::alloc::StatsReader a(mi.alloc_stats);
  if (!json) {
    print_config(path, mi);
    std::printf("sampling pages waiting for a grace period every %u ms for %.3g s%s%s\n",
                interval_ms, seconds, csv.empty() ? "" : ", samples to ", csv.c_str());
  }
  std::ofstream out;
  if (!csv.empty()) {
    out.open(csv);
    if (!out) throw ctl::CtlError(csv + ": cannot write", errno);
    out << "elapsed_ms,waiting_pages\n";
  }
  norefs::tools::OnSample each;
  if (out.is_open()) {
    each = [&out](std::uint64_t ns, std::uint64_t w) { out << ms(ns) << ',' << w << '\n'; };
  }
  norefs::tools::WaitingSamples w =
      norefs::tools::sample_waiting(a, interval_ms * 1000, seconds, each);
  // The pool's own peak: the largest pending+inflight any of its sweeps saw,
  // since it started (the samples see only what is waiting at each tick).
  std::uint64_t pool_peak = a.sum().peak_waiting;
  if (json) {
    std::printf("%s\n", ordered_json{{"pid", mi.pid},
                                     {"interval_ms", interval_ms},
                                     {"seconds", seconds},
                                     {"samples", w.samples},
                                     {"min_waiting_pages", w.min},
                                     {"mean_waiting_pages", w.mean()},
                                     {"max_waiting_pages", w.peak},
                                     {"pool_peak_waiting_pages", pool_peak}}
                            .dump(2)
                            .c_str());
  } else {
    std::printf("%-10s %12s %10s\n", "", "pages", "MiB");
    std::printf("%-10s %12lu %10.2f\n", "min", static_cast<unsigned long>(w.min), mib(w.min));
    std::printf("%-10s %12.1f %10.2f\n", "mean", w.mean(), w.mean() * kPageSize / 1048576.0);
    std::printf("%-10s %12lu %10.2f\n", "max", static_cast<unsigned long>(w.peak), mib(w.peak));
    std::printf("%-10s %12lu %10.2f   (the pool's own peak since it started)\n", "peak",
                static_cast<unsigned long>(pool_peak), mib(pool_peak));
    std::printf("%lu samples\n", static_cast<unsigned long>(w.samples));
  }
  return 0;
}

// ---- evict ----------------------------------------------------------------

int cmd_evict(const std::string& path, bool json) {
  ctl::Fd fd(path);
  std::uint64_t pages = ctl::evict(fd);
  if (json) {
    std::printf("%s\n", ordered_json{{"file", path}, {"evicted_pages", pages}}.dump().c_str());
  } else {
    std::printf("%s: evicted %lu pages (%.2f MiB)\n", path.c_str(),
                static_cast<unsigned long>(pages), mib(pages));
  }
  return 0;
}

// ---- prefetch -------------------------------------------------------------

ordered_json read_json(const ctl::RangeRead& r) {
  return {{"bytes", r.bytes},
          {"pages_read", r.pages_read},
          {"misses", r.misses},
          {"hits", r.hits},
          {"ms", ms(r.wall_ns)}};
}

int cmd_prefetch(const std::string& path, std::uint64_t offset, std::uint64_t length, bool measure,
                 bool json) {
  ctl::Fd fd(path);
  ctl::MountInfo mi = ctl::info(fd);
  norefs::cache::CacheStatsReader c(mi.cache_stats);
  if (!json) {
    print_config(path, mi);
    std::printf("prefetch offset %lu length %s%s\n", static_cast<unsigned long>(offset),
                length ? std::to_string(length).c_str() : "to EOF",
                measure ? ", measured against the read without it" : "");
  }
  if (!measure) {
    ctl::Prefetch p = ctl::prefetch(fd, offset, length, &c);
    if (json) {
      std::printf("%s\n", ordered_json{{"file", path},
                                       {"offset", offset},
                                       {"length", length},
                                       {"pages_read", p.pages_read},
                                       {"daemon_ms", ms(p.daemon_ns)},
                                       {"wall_ms", ms(p.wall_ns)},
                                       {"counter_pages", p.counter_pages}}
                              .dump(2)
                              .c_str());
    } else {
      std::printf(
          "read %lu pages (%.2f MiB) from the backing file in %.3f ms (%.3f ms "
          "round trip)\n",
          static_cast<unsigned long>(p.pages_read), mib(p.pages_read), ms(p.daemon_ns),
          ms(p.wall_ns));
    }
    return 0;
  }
  ctl::PrefetchMeasure m = ctl::measure_prefetch(fd, offset, length, c);
  if (json) {
    std::printf(
        "%s\n",
        ordered_json{{"file", path},
                     {"offset", m.offset},
                     {"length", m.length},
                     {"without_prefetch",
                      {{"evicted_pages", m.evicted_without}, {"read", read_json(m.read_without)}}},
                     {"with_prefetch",
                      {{"evicted_pages", m.evicted_with},
                       {"advice",
                        {{"pages_read", m.advice.pages_read},
                         {"counter_pages", m.advice.counter_pages},
                         {"daemon_ms", ms(m.advice.daemon_ns)},
                         {"wall_ms", ms(m.advice.wall_ns)}}},
                       {"read", read_json(m.read_with)}}}}
            .dump(2)
            .c_str());
    return 0;
  }
  std::printf("range [%lu, %lu): %lu pages\n", static_cast<unsigned long>(m.offset),
              static_cast<unsigned long>(m.offset + m.length),
              static_cast<unsigned long>((m.length + kPageSize - 1) / kPageSize));
  std::printf("%-18s %10s | %-25s | %-25s\n", "", "evict", "      the advice",
              "    the later read");
  std::printf("%-18s %10s | %12s %12s | %12s %12s\n", "", "pages", "pages read", "time ms",
              "pages read", "time ms");
  std::printf("%-18s %10lu | %12s %12s | %12lu %12.3f\n", "without prefetch",
              static_cast<unsigned long>(m.evicted_without), "-", "-",
              static_cast<unsigned long>(m.read_without.pages_read), ms(m.read_without.wall_ns));
  std::printf("%-18s %10lu | %12lu %12.3f | %12lu %12.3f\n", "with prefetch",
              static_cast<unsigned long>(m.evicted_with),
              static_cast<unsigned long>(m.advice.pages_read), ms(m.advice.wall_ns),
              static_cast<unsigned long>(m.read_with.pages_read), ms(m.read_with.wall_ns));
  std::printf(
      "advice: %.3f ms in the daemon, readahead_pages counter +%lu; "
      "later read: misses %lu without, %lu with\n",
      ms(m.advice.daemon_ns), static_cast<unsigned long>(m.advice.counter_pages),
      static_cast<unsigned long>(m.read_without.misses),
      static_cast<unsigned long>(m.read_with.misses));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"norefsctl: statistics and control of a running norefs mount"};
  app.require_subcommand(1);

  std::string path, csv;
  bool json = false, measure = false;
  unsigned watch_ms = 0, interval_ms = 2;
  double seconds = 1.0;
  std::uint64_t offset = 0, length = 0;

  auto* stats = app.add_subcommand("stats", "print every counter of the mount's daemon");
  stats->add_option("path", path, "a file or directory in the mount")->required();
  stats->add_flag("--json", json, "print JSON (JSON lines with --watch)");
  stats->add_option("--watch", watch_ms, "repeat every MS milliseconds, with rates")
      ->check(CLI::Range(1u, 3600000u));

  auto* sample = app.add_subcommand("sample", "sample pages waiting for a grace period");
  sample->add_option("path", path, "a file or directory in the mount")->required();
  sample->add_option("--interval-ms", interval_ms, "sampling interval (default 2)")
      ->check(CLI::Range(1u, 60000u));
  sample->add_option("--seconds", seconds, "how long to sample (default 1)")
      ->check(CLI::Range(0.001, 86400.0));
  sample->add_option("--csv", csv, "write every sample to this CSV file");
  sample->add_flag("--json", json, "print JSON");

  auto* ev = app.add_subcommand("evict", "evict a file's cached pages");
  ev->add_option("file", path, "a regular file in the mount")->required();
  ev->add_flag("--json", json, "print JSON");

  auto* pf = app.add_subcommand("prefetch", "read a range of a file into the cache now");
  pf->add_option("file", path, "a regular file in the mount")->required();
  pf->add_option("--offset", offset, "first byte (default 0)");
  pf->add_option("--length", length, "bytes (default 0: to the end of the file)");
  pf->add_flag("--measure", measure,
               "then read the range and compare with evict + read without the prefetch");
  pf->add_flag("--json", json, "print JSON");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is a ParseError too: exit 0 for it, 2 (bad usage) for the rest.
    return app.exit(e) == 0 ? 0 : 2;
  }

  try {
    if (stats->parsed()) return cmd_stats(path, json, watch_ms);
    if (sample->parsed()) return cmd_sample(path, interval_ms, seconds, csv, json);
    if (ev->parsed()) return cmd_evict(path, json);
    if (pf->parsed()) return cmd_prefetch(path, offset, length, measure, json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "norefsctl: %s\n", e.what());
    return 1;
  }
  return 2;
}
