// SPDX-License-Identifier: LGPL-2.1-or-later
//
// norefs_pread_scaling's report (tools/bench/pread_scaling.h): the issue's
// targets evaluated from the rows, the configuration line, the table, CSV
// and JSON.  The measurement is pread_scaling.cc's.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tools/bench/pread_scaling.h"
#include "tools/lib/report.h"

namespace norefs::tools {

using cache::kStops;
using cache::Stop;
using report::si;

namespace {

std::string join_u(const std::vector<unsigned>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); i++) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

std::vector<PreadTarget> evaluate_pread_targets(const std::vector<PreadRow>& rows) {
  auto find = [&](std::size_t size, PreadVariant v, unsigned n, PreadPath path) -> const PreadRow* {
    for (const auto& r : rows) {
      if (r.size == size && r.variant == v && r.threads == n && r.path == path && !r.rounds.empty())
        return &r;
    }
    return nullptr;
  };
  char buf[512];
  report::Targets out;
  const auto shared = PreadVariant::shared;

  {  // (a) 16 B of one shared page, 2 threads: noref >= 3x ref.
    report::Target& t =
        out.add("a", "16-byte reads of one shared page, 2 threads: noref reads/s >= 3x ref's", 3.0);
    const PreadRow *n = find(16, shared, 2, PreadPath::noref),
                   *r = find(16, shared, 2, PreadPath::ref);
    if (n && r) {
      double v = n->reads_per_sec / r->reads_per_sec;
      std::snprintf(buf, sizeof buf,
                    "noref %s reads/s / ref %s reads/s = %.2fx (same-round ratios %.2f-%.2f; "
                    "CPU ns/read %.1f vs %.1f, threads got %.0f%% / %.0f%% of their CPUs)",
                    si(n->reads_per_sec).c_str(), si(r->reads_per_sec).c_str(), v,
                    n->ratio_to_ref_min, n->ratio_to_ref_max, n->cpu_ns_per_read,
                    r->cpu_ns_per_read, 100 * n->cpu_share, 100 * r->cpu_share);
      t.measure(v, v >= t.threshold, buf);
    }
  }
  {  // (b) noref at 2 threads >= 1.9x its own 1-thread reads/s.
    report::Target& t = out.add(
        "b", "16-byte reads of one shared page: noref at 2 threads >= 1.9x noref at 1", 1.9);
    const PreadRow *two = find(16, shared, 2, PreadPath::noref),
                   *one = find(16, shared, 1, PreadPath::noref);
    if (two && one) {
      double v = two->reads_per_sec / one->reads_per_sec;
      // Information beside the target: per CPU-second, what 2 threads read
      // compared with 1 (x2 = the scaling if each had a whole CPU).
      double per_cpu = one->cpu_ns_per_read / two->cpu_ns_per_read;
      std::snprintf(buf, sizeof buf,
                    "2 threads %s reads/s / 1 thread %s reads/s = %.2fx (threads got %.0f%% / "
                    "%.0f%% of their CPUs; reads per CPU-second at 2 threads %.2fx of 1 thread's, "
                    "so %.2fx with two whole CPUs)",
                    si(two->reads_per_sec).c_str(), si(one->reads_per_sec).c_str(), v,
                    100 * two->cpu_share, 100 * one->cpu_share, per_cpu, 2 * per_cpu);
      t.measure(v, v >= t.threshold, buf);
    }
  }
  {  // (c) 1 thread: noref ns/read <= 0.95x ref's.
    report::Target& t = out.add("c", "16-byte reads, 1 thread: noref ns/read <= 0.95x ref's", 0.95);
    const PreadRow *n = find(16, shared, 1, PreadPath::noref),
                   *r = find(16, shared, 1, PreadPath::ref);
    if (n && r) {
      double v = n->ns_per_read / r->ns_per_read;
      std::snprintf(buf, sizeof buf,
                    "noref %.1f ns/read / ref %.1f ns/read = %.3fx (CPU ns/read %.1f / %.1f = "
                    "%.3fx)",
                    n->ns_per_read, r->ns_per_read, v, n->cpu_ns_per_read, r->cpu_ns_per_read,
                    n->cpu_ns_per_read / r->cpu_ns_per_read);
      t.measure(v, v <= t.threshold, buf);
    }
  }
  // (d) 64 KiB and 1 MiB: noref no slower than ref, for every variant and
  // thread count measured.  Noise: the larger relative half-range over
  // rounds of the two rows; "within noise" counts as met and says so.
  for (std::size_t size : {std::size_t{65536}, std::size_t{1048576}}) {
    for (const auto& n : rows) {
      if (n.size != size || n.path != PreadPath::noref || n.rounds.empty()) continue;
      const PreadRow* r = find(size, n.variant, n.threads, PreadPath::ref);
      if (!r) continue;
      report::Target& t =
          out.add("d",
                  pread_size_name(size) + " reads, " + std::string(pread_variant_name(n.variant)) +
                      ", " + std::to_string(n.threads) +
                      " thread(s): noref no slower than ref (ratio >= 1.0 within noise)",
                  1.0);
      double v = n.reads_per_sec / r->reads_per_sec;
      auto half_range = [](const PreadRow& x) {
        return x.reads_per_sec > 0
                   ? (x.reads_per_sec_max - x.reads_per_sec_min) / (2 * x.reads_per_sec)
                   : 0.0;
      };
      double noise = std::max(half_range(n), half_range(*r));
      bool met = v >= 1.0 - noise;
      std::snprintf(buf, sizeof buf, "noref %s reads/s / ref %s reads/s = %.3fx (noise +-%.1f%%%s)",
                    si(n.reads_per_sec).c_str(), si(r->reads_per_sec).c_str(), v, 100 * noise,
                    met && v < 1.0 ? ", met only within noise" : "");
      t.measure(v, met, buf);
    }
  }
  out.add_if_none("d", "64K and 1M reads: noref no slower than ref (ratio >= 1.0 within noise)",
                  1.0);
  // (e) One thread, one shared page: what the fast path adds to the floor
  // (noref ns/read minus floor ns/read, same round) at most 10 ns, for
  // each small size measured.
  for (std::size_t size : {1, 4, 8, 16, 64, 256}) {
    const PreadRow *n = find(size, shared, 1, PreadPath::noref),
                   *f = find(size, shared, 1, PreadPath::floor);
    if (!n || !f) continue;
    report::Target& t = out.add("e",
                                std::to_string(size) +
                                    "-byte reads, 1 thread: noref ns/read - floor ns/read "
                                    "<= 10 ns",
                                10.0);
    std::snprintf(buf, sizeof buf,
                  "noref %.1f ns/read, floor %.1f ns/read: +%.1f ns (median of same-round "
                  "differences), %.2fx the floor",
                  n->ns_per_read, f->ns_per_read, n->ns_over_floor, n->times_floor);
    t.measure(n->ns_over_floor, n->ns_over_floor <= t.threshold, buf);
  }
  out.add_if_none("e", "1-256-byte reads, 1 thread: noref ns/read - floor ns/read <= 10 ns", 10.0);
  {  // (f) 4 KiB, one thread: noref at most 1.3x the floor's time.
    report::Target& t = out.add("f", "4K reads, 1 thread: noref ns/read <= 1.3x floor's", 1.3);
    const PreadRow *n = find(4096, shared, 1, PreadPath::noref),
                   *f = find(4096, shared, 1, PreadPath::floor);
    if (n && f) {
      std::snprintf(buf, sizeof buf,
                    "noref %.1f ns/read, floor %.1f ns/read: %.2fx (same-round ratios %.2f-%.2f)",
                    n->ns_per_read, f->ns_per_read, n->times_floor, n->times_floor_min,
                    n->times_floor_max);
      t.measure(n->times_floor, n->times_floor <= t.threshold, buf);
    }
  }
  {  // (g) A reader in another process, 1 thread: ns/read <= 1.2x noref's.
    report::Target& t = out.add(
        "g", "16-byte reads of one shared page, 1 process: noref-remote ns/read <= 1.2x noref's",
        1.2);
    const PreadRow *r = find(16, shared, 1, PreadPath::noref_remote),
                   *n = find(16, shared, 1, PreadPath::noref);
    if (r && n) {
      // Same-round ratios of the ns/read (the inverse of the reads/s ratios).
      std::vector<double> v;
      for (std::size_t i = 0; i < r->rounds.size() && i < n->rounds.size(); i++) {
        if (n->rounds[i].ns_per_read > 0)
          v.push_back(r->rounds[i].ns_per_read / n->rounds[i].ns_per_read);
      }
      const report::Spread sp = report::spread(v);
      double ratio = r->ns_per_read / n->ns_per_read;
      std::snprintf(buf, sizeof buf,
                    "noref-remote %.1f ns/read / noref %.1f ns/read = %.3fx (same-round ratios "
                    "%.3f-%.3f; CPU ns/read %.1f / %.1f)",
                    r->ns_per_read, n->ns_per_read, ratio, sp.min, sp.max, r->cpu_ns_per_read,
                    n->cpu_ns_per_read);
      t.measure(ratio, ratio <= t.threshold, buf);
    }
  }
  {  // (h) 2 reader processes on one shared page: >= 1.9x one's reads/s.
    report::Target& t = out.add(
        "h", "16-byte reads of one shared page: noref-remote at 2 processes >= 1.9x at 1", 1.9);
    const PreadRow *two = find(16, shared, 2, PreadPath::noref_remote),
                   *one = find(16, shared, 1, PreadPath::noref_remote);
    if (two && one) {
      double v = two->reads_per_sec / one->reads_per_sec;
      double per_cpu = one->cpu_ns_per_read / two->cpu_ns_per_read;
      std::snprintf(buf, sizeof buf,
                    "2 processes %s reads/s / 1 process %s reads/s = %.2fx (readers got %.0f%% / "
                    "%.0f%% of their CPUs; reads per CPU-second at 2 %.2fx of 1's, so %.2fx "
                    "with two whole CPUs)",
                    si(two->reads_per_sec).c_str(), si(one->reads_per_sec).c_str(), v,
                    100 * two->cpu_share, 100 * one->cpu_share, per_cpu, 2 * per_cpu);
      t.measure(v, v >= t.threshold, buf);
    }
  }
  return out.take();
}

std::string describe_pread_config(const PreadScalingParams& p, long cpus) {
  std::ostringstream os;
  os << "norefs_pread_scaling: paths=";
  for (std::size_t i = 0; i < p.paths.size(); i++) {
    os << (i ? "," : "") << pread_path_name(p.paths[i]);
  }
  os << " sizes=";
  for (std::size_t i = 0; i < p.sizes.size(); i++) os << (i ? "," : "") << p.sizes[i];
  os << " variants=";
  for (std::size_t i = 0; i < p.variants.size(); i++) {
    os << (i ? "," : "") << pread_variant_name(p.variants[i]);
  }
  os << " threads=" << join_u(p.threads) << "\n  seconds=" << p.seconds << " settle=" << p.settle
     << " rounds=" << p.rounds << " batch=" << p.batch << " defer=" << (p.defer ? "on" : "off")
     << " pin=" << (p.pin ? "on" : "off") << " backing=" << pread_backing_name(p.backing);
  if (p.backing == PreadBacking::file) os << " (" << p.tmp_dir << ")";
  os << " offset=0 file=max(size,4096) cpus=" << cpus << "\n";
  return os.str();
}

std::string format_pread_table(const PreadScalingResult& r) {
  using A = report::Table::Align;
  report::Table table({{"size", A::left},
                       {"variant", A::left},
                       {"thr", A::right},
                       {"path", A::left},
                       {"reads/s", A::right},
                       {"(min-max)", A::right},
                       {"ns/read", A::right},
                       {"cpu%", A::right},
                       {"cpu-ns", A::right},
                       {"vs ref", A::right},
                       {"(min-max)", A::right},
                       {"x floor", A::right},
                       {"+ns", A::right},
                       {"fast-path stops per Mread", A::left}});
  using report::fmt;
  const PreadRow* prev = nullptr;
  for (const auto& row : r.rows) {
    if (prev &&
        (prev->size != row.size || prev->variant != row.variant || prev->threads != row.threads)) {
      table.add_gap();
    }
    prev = &row;
    std::string stops;
    for (std::size_t s = 0; s < kStops; s++) {
      if (row.stops_per_mread[s] <= 0) continue;
      char b[64];
      std::snprintf(b, sizeof b, row.stops_per_mread[s] >= 100 ? "%s%s=%.0f" : "%s%s=%.3g",
                    stops.empty() ? "" : " ",
                    std::string(cache::stop_name(static_cast<Stop>(s))).c_str(),
                    row.stops_per_mread[s]);
      stops += b;
    }
    if (stops.empty()) stops = "-";
    if (!row.all_warm) stops += "  (NOT warm: no clean warm-up pass)";
    const bool has_ref = std::isfinite(row.ratio_to_ref),
               has_floor = std::isfinite(row.times_floor);
    table.add_row(
        {pread_size_name(row.size), std::string(pread_variant_name(row.variant)),
         std::to_string(row.threads), std::string(pread_path_name(row.path)), si(row.reads_per_sec),
         si(row.reads_per_sec_min) + "-" + si(row.reads_per_sec_max), fmt("%.1f", row.ns_per_read),
         fmt("%.0f", 100 * row.cpu_share), fmt("%.1f", row.cpu_ns_per_read),
         has_ref ? fmt("%.2fx", row.ratio_to_ref) : "-",
         has_ref ? fmt("%.2f", row.ratio_to_ref_min) + fmt("-%.2f", row.ratio_to_ref_max) : "-",
         has_floor ? fmt("%.2fx", row.times_floor) : "-",
         has_floor ? fmt("%+.1f", row.ns_over_floor) : "-", stops});
  }
  return table.str();
}

std::string format_pread_targets(const PreadScalingResult& r) {
  return report::format_targets(
      "targets (from the medians of " + std::to_string(r.params.rounds) + " round(s)):", r.targets,
      "its sizes, variants, threads or paths were not in this run");
}

namespace {

// The rows for CSV and JSON: the same names in both.  In the CSV the stops
// are one column each (stops_per_mread_<stop>) and `rounds` is their count;
// the JSON keeps the stops as an object and puts every round in `rounds`.
report::Records pread_records(const PreadScalingResult& r) {
  report::Records rec({"size",
                       "variant",
                       "threads",
                       "path",
                       "rounds",
                       "reads_per_sec",
                       "reads_per_sec_min",
                       "reads_per_sec_max",
                       "ns_per_read",
                       "cpu_share",
                       "cpu_ns_per_read",
                       "ratio_to_ref",
                       "ratio_to_ref_min",
                       "ratio_to_ref_max",
                       "times_floor",
                       "times_floor_min",
                       "times_floor_max",
                       "ns_over_floor",
                       "fast_read_fraction",
                       "warm",
                       "stops_per_mread"});
  for (const auto& row : r.rows) {
    nlohmann::ordered_json stops = nlohmann::ordered_json::object();
    for (std::size_t s = 0; s < kStops; s++) {
      stops[std::string(cache::stop_name(static_cast<Stop>(s)))] = row.stops_per_mread[s];
    }
    rec.add({row.size,
             pread_variant_name(row.variant),
             row.threads,
             pread_path_name(row.path),
             row.rounds.size(),
             row.reads_per_sec,
             row.reads_per_sec_min,
             row.reads_per_sec_max,
             row.ns_per_read,
             row.cpu_share,
             row.cpu_ns_per_read,
             row.ratio_to_ref,
             row.ratio_to_ref_min,
             row.ratio_to_ref_max,
             row.times_floor,
             row.times_floor_min,
             row.times_floor_max,
             row.ns_over_floor,
             row.fast_read_fraction,
             row.all_warm,
             stops});
  }
  return rec;
}

}  // namespace

std::string pread_csv(const PreadScalingResult& r) { return pread_records(r).csv(); }

std::string pread_json(const PreadScalingResult& r) {
  using report::finite_or_null;
  const PreadScalingParams& p = r.params;
  nlohmann::json cfg = {{"seconds", p.seconds},
                        {"settle", p.settle},
                        {"rounds", p.rounds},
                        {"batch", p.batch},
                        {"defer", p.defer},
                        {"pin", p.pin},
                        {"backing", pread_backing_name(p.backing)},
                        {"sizes", p.sizes},
                        {"threads", p.threads},
                        {"cpus", r.cpus}};
  for (PreadPath path : p.paths) cfg["paths"].push_back(pread_path_name(path));
  for (PreadVariant v : p.variants) cfg["variants"].push_back(pread_variant_name(v));
  nlohmann::json rows = pread_records(r).json();
  for (std::size_t i = 0; i < r.rows.size(); i++) {
    nlohmann::json rounds = nlohmann::json::array();
    for (const auto& m : r.rows[i].rounds) {
      nlohmann::json ms = nlohmann::json::object();
      for (std::size_t s = 0; s < kStops; s++) {
        ms[std::string(cache::stop_name(static_cast<Stop>(s)))] = m.stops[s];
      }
      rounds.push_back({{"reads", m.reads},
                        {"seconds", m.seconds},
                        {"reads_per_sec", m.reads_per_sec},
                        {"ns_per_read", finite_or_null(m.ns_per_read)},
                        {"thread_reads_min", m.thread_reads_min},
                        {"thread_reads_max", m.thread_reads_max},
                        {"cpu_seconds", m.cpu_seconds},
                        {"cpu_share", m.cpu_share},
                        {"cpu_ns_per_read", finite_or_null(m.cpu_ns_per_read)},
                        {"cache_reads", m.cache_reads},
                        {"fast_reads", m.fast_reads},
                        {"slow_hits", m.slow_hits},
                        {"misses", m.misses},
                        {"waits", m.waits},
                        {"short_reads", m.short_reads},
                        {"stops", ms},
                        {"warm_passes", m.warm_passes},
                        {"warm", m.warm}});
    }
    rows[i]["rounds"] = rounds;  // the count in the CSV, every round here
  }
  return nlohmann::json{
             {"config", cfg}, {"rows", rows}, {"targets", report::targets_json(r.targets)}}
             .dump(2) +
         "\n";
}

}  // namespace norefs::tools
