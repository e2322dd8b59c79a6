// SPDX-License-Identifier: LGPL-2.1-or-later
#include "tools/bench/fill_free.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "alloc/stats_block.h"
#include "tools/ctl/sample_waiting.h"

namespace norefs::tools {

FillFreeResult run_fill_free(const FillFreeParams& p, const std::string& stats_path) {
  alloc::PagePoolConfig cfg = p.pool;
  cfg.stats_path = stats_path;
  FillFreeResult r;
  alloc::PagePool pool(cfg);
  alloc::StatsReader reader(stats_path);

  std::atomic<bool> go{false}, done{false};
  std::vector<std::uint64_t> pages(p.threads, 0), failures(p.threads, 0);
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < p.threads; t++) {
    workers.emplace_back([&, t] {
      std::vector<alloc::Page*> held(p.fill_pages);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      std::uint64_t n = 0, failed = 0;
      while (!done.load(std::memory_order_relaxed)) {
        std::size_t got = 0;
        for (; got < p.fill_pages; got++) {
          alloc::Page* pg = pool.alloc();
          if (!pg) {
            failed++;
            break;
          }
          pg->data[0] = std::byte{1};  // fault it in, like fallocate would
          held[got] = pg;
        }
        for (std::size_t i = 0; i < got; i++) {
          held[i]->set_rcu_free();  // it "left the index"
          pool.free(held[i]);
          pool.make_way();
        }
        n += got;
      }
      pages[t] = n;
      failures[t] = failed;
    });
  }

  auto start = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  WaitingSamples waited = sample_waiting(reader, p.sample_us, p.seconds);
  done.store(true, std::memory_order_relaxed);
  for (auto& w : workers) w.join();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (unsigned t = 0; t < p.threads; t++) {
    r.pages += pages[t];
    r.alloc_failures += failures[t];
  }
  r.pages_per_sec = static_cast<double>(r.pages) / r.seconds;
  r.samples = waited.samples;
  r.mean_waiting = waited.mean();
  r.peak_waiting = waited.peak;
  alloc::Counters c = reader.sum();
  r.grace_periods = c.grace_periods;
  r.expedites = c.expedites;
  r.make_way_yields = c.make_way_yields;
  pool.drain();
  return r;
}

namespace {

double mib(double pages) {
  return pages * static_cast<double>(alloc::kPageSize) / (1024.0 * 1024.0);
}

using report::fmt;

}  // namespace

std::vector<FillFreeVariant> fill_free_variants(const FillFreeBenchParams& p) {
  std::vector<FillFreeVariant> variants;
  for (const auto& tc : p.tcaches) {
    alloc::PagePoolConfig base;
    base.tcache = tc == "none" ? alloc::TcacheMode::none : alloc::TcacheMode::private_;
    base.expedite_pages = p.expedite_pages;
    base.gp_interval_us = p.gp_interval_us;
    FillFreeVariant imm{"immediate", tc, base};
    imm.cfg.defer = false;
    imm.cfg.expedite = false;
    variants.push_back(imm);
    FillFreeVariant d{"deferred", tc, base};
    variants.push_back(d);
    FillFreeVariant ne = d;
    ne.name = "deferred-noexp";
    ne.cfg.expedite = false;
    variants.push_back(ne);
  }
  return variants;
}

FillFreeBenchResult run_fill_free_bench(const FillFreeBenchParams& p,
                                        const FillFreeProgress& progress) {
  FillFreeBenchResult res;
  res.params = p;
  res.cpus = sysconf(_SC_NPROCESSORS_ONLN);
  const std::vector<FillFreeVariant> variants = fill_free_variants(p);
  for (unsigned n : p.threads) {
    for (const auto& v : variants) {
      FillFreeRow row;
      row.threads = n;
      row.variant = v;
      res.rows.push_back(row);
    }
  }
  unsigned run = 0;
  for (unsigned r = 0; r < p.rounds; r++) {
    for (std::size_t i = 0; i < res.rows.size(); i++) {
      FillFreeRow& row = res.rows[i];
      FillFreeParams fp;
      fp.pool = row.variant.cfg;
      fp.threads = row.threads;
      fp.fill_pages = p.fill_pages;
      fp.seconds = p.seconds;
      fp.sample_us = p.sample_us;
      std::string path = p.stats_dir + "/norefs-fill-free-" + std::to_string(getpid()) + "-" +
                         std::to_string(run++);
      const FillFreeResult& x = row.rounds.emplace_back(run_fill_free(fp, path));
      if (progress) {
        char line[200];
        std::snprintf(line, sizeof line,
                      "round %u/%u  %zu/%zu  %s %s %u thread%s: %.0f pages/s, mean wait %.2f MiB",
                      r + 1, p.rounds, i + 1, res.rows.size(), row.variant.name.c_str(),
                      row.variant.tcache.c_str(), row.threads, row.threads == 1 ? "" : "s",
                      x.pages_per_sec, mib(x.mean_waiting));
        progress(line, false);
      }
    }
    if (progress) {
      progress("round " + std::to_string(r + 1) + "/" + std::to_string(p.rounds) + " done", true);
    }
  }
  aggregate_fill_free_rows(res.rows);
  res.targets = evaluate_fill_free_targets(p, res.rows);
  return res;
}

void aggregate_fill_free_rows(std::vector<FillFreeRow>& rows) {
  for (auto& row : rows) {
    std::vector<double> rate, wait;
    std::uint64_t gps = 0, exps = 0;
    double secs = 0;
    row.peak_waiting = 0;
    row.alloc_failures = 0;
    for (const auto& x : row.rounds) {
      rate.push_back(x.pages_per_sec);
      wait.push_back(x.mean_waiting);
      row.peak_waiting = std::max(row.peak_waiting, x.peak_waiting);
      gps += x.grace_periods;
      exps += x.expedites;
      row.alloc_failures += x.alloc_failures;
      secs += x.seconds;
    }
    const report::Spread s = report::spread(rate);
    row.pages_per_sec = s.median;
    row.pages_per_sec_min = s.min;
    row.pages_per_sec_max = s.max;
    row.mean_waiting = report::median(wait);
    row.grace_periods_per_sec = static_cast<double>(gps) / secs;
    row.expedites_per_sec = static_cast<double>(exps) / secs;
  }
  for (auto& row : rows) {
    row.ratio_to_immediate = std::numeric_limits<double>::quiet_NaN();
    for (const auto& imm : rows) {
      if (imm.variant.name == "immediate" && imm.variant.tcache == row.variant.tcache &&
          imm.threads == row.threads) {
        row.ratio_to_immediate = row.pages_per_sec / imm.pages_per_sec;
      }
    }
  }
}

std::vector<report::Target> evaluate_fill_free_targets(const FillFreeBenchParams& p,
                                                       const std::vector<FillFreeRow>& rows) {
  const unsigned n = p.threads.empty() ? 0 : *std::max_element(p.threads.begin(), p.threads.end());
  auto find = [&](const std::string& name) -> const FillFreeRow* {
    for (const auto& row : rows) {
      if (!p.tcaches.empty() && row.threads == n && row.variant.name == name &&
          row.variant.tcache == p.tcaches[0] && !row.rounds.empty()) {
        return &row;
      }
    }
    return nullptr;
  };
  const FillFreeRow *imm = find("immediate"), *def = find("deferred"),
                    *noexp = find("deferred-noexp");
  report::Targets out;
  char detail[256];
  {
    report::Target& t = out.add("rate", "deferred pages/s >= 0.90x immediate's", 0.9);
    if (imm && def) {
      double v = def->pages_per_sec / imm->pages_per_sec;
      std::snprintf(detail, sizeof detail, "deferred %.0f pages/s / immediate %.0f pages/s = %.3f",
                    def->pages_per_sec, imm->pages_per_sec, v);
      t.measure(v, v >= t.threshold, detail);
    }
  }
  {
    report::Target& t =
        out.add("wait", "mean pages waiting without expedite >= 20x with expedite", 20);
    if (def && noexp) {
      double v = noexp->mean_waiting / std::max(def->mean_waiting, 1e-9);
      std::snprintf(detail, sizeof detail,
                    "mean waiting without expedite %.2f MiB / with %.2f MiB = %.1fx",
                    mib(noexp->mean_waiting), mib(def->mean_waiting), v);
      t.measure(v, v >= t.threshold, detail);
    }
  }
  return out.take();
}

std::string describe_fill_free_config(const FillFreeBenchParams& p, long cpus) {
  std::string threads;
  for (unsigned n : p.threads) threads += (threads.empty() ? "" : ",") + std::to_string(n);
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "fill_free_bench: threads=%s seconds=%.2f rounds=%u fill_pages=%zu (%.1f MiB) "
                "expedite_pages=%zu gp_interval=%u us sample=%u us cpus=%ld\n",
                threads.c_str(), p.seconds, p.rounds, p.fill_pages,
                mib(static_cast<double>(p.fill_pages)), p.expedite_pages, p.gp_interval_us,
                p.sample_us, cpus);
  return buf;
}

std::string format_fill_free_table(const FillFreeBenchResult& r) {
  using A = report::Table::Align;
  report::Table table({{"N", A::left},
                       {"variant", A::left},
                       {"tcache", A::left},
                       {"pages/s", A::right},
                       {"(min-max, rounds)", A::left},
                       {"vs imm", A::right},
                       {"mean wait", A::right},
                       {"peak wait", A::right},
                       {"GP/s", A::right},
                       {"expedite/s", A::right}});
  for (const auto& row : r.rows) {
    table.add_row({std::to_string(row.threads), row.variant.name, row.variant.tcache,
                   fmt("%.0f", row.pages_per_sec),
                   fmt("%.0f", row.pages_per_sec_min) + "-" + fmt("%.0f", row.pages_per_sec_max),
                   fmt("%.2fx", row.ratio_to_immediate), fmt("%.2f MiB", mib(row.mean_waiting)),
                   fmt("%.2f MiB", mib(static_cast<double>(row.peak_waiting))),
                   fmt("%.0f", row.grace_periods_per_sec), fmt("%.0f", row.expedites_per_sec)});
    if (row.alloc_failures) {
      table.add_note("    (" + std::to_string(row.alloc_failures) + " allocation failures)");
    }
  }
  return table.str();
}

std::string format_fill_free_targets(const FillFreeBenchResult& r) {
  const FillFreeBenchParams& p = r.params;
  std::string n = p.threads.empty()
                      ? "-"
                      : std::to_string(*std::max_element(p.threads.begin(), p.threads.end()));
  return report::format_targets(
      "targets at N=" + n + " (" + (p.tcaches.empty() ? "-" : p.tcaches[0]) + " tcache):",
      r.targets, "the immediate, deferred or deferred-noexp row is missing");
}

namespace {

report::Records fill_free_records(const FillFreeBenchResult& r) {
  report::Records rec({"threads", "variant", "tcache", "pages_per_sec", "pages_per_sec_min",
                       "pages_per_sec_max", "ratio_to_immediate", "mean_waiting_pages",
                       "peak_waiting_pages", "grace_periods_per_sec", "expedites_per_sec",
                       "rounds"});
  for (const auto& row : r.rows) {
    rec.add({row.threads, row.variant.name, row.variant.tcache, row.pages_per_sec,
             row.pages_per_sec_min, row.pages_per_sec_max, row.ratio_to_immediate, row.mean_waiting,
             row.peak_waiting, row.grace_periods_per_sec, row.expedites_per_sec,
             row.rounds.size()});
  }
  return rec;
}

}  // namespace

std::string fill_free_csv(const FillFreeBenchResult& r) { return fill_free_records(r).csv(); }

std::string fill_free_json(const FillFreeBenchResult& r) {
  return nlohmann::json{{"rows", fill_free_records(r).json()},
                        {"targets", report::targets_json(r.targets)}}
             .dump(2) +
         "\n";
}

}  // namespace norefs::tools
