// SPDX-License-Identifier: LGPL-2.1-or-later
//
// fill_free_bench — deferred vs immediate vs deferred-without-expedite page
// freeing under the fill-and-free load (tools/fill_free.h), N threads.  All
// variants run interleaved in each round so that machine drift hits all
// alike; the table shows medians over rounds (peak: max over rounds).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/fill_free.h"
#include "tools/progress.h"
#include "tools/report.h"

using norefs::alloc::GpEngine;
using norefs::alloc::kPageSize;
using norefs::alloc::TcacheMode;
using norefs::tools::FillFreeParams;
using norefs::tools::FillFreeResult;

namespace {

struct Variant {
  std::string name;    // e.g. "deferred", "deferred-noexp", "immediate"
  std::string engine;  // driver | call_rcu | - (immediate)
  std::string tcache;  // private | none
  norefs::alloc::PagePoolConfig cfg;
};

double mib(double pages) { return pages * static_cast<double>(kPageSize) / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "fill_free_bench: pages/s and pages waiting for a grace period, deferred vs immediate"};
  std::vector<unsigned> threads{1, 2, 4};
  double seconds = 1.0;
  unsigned rounds = 3;
  std::size_t fill_pages = 1024, expedite_pages = 1024;
  std::vector<std::string> engines{"driver"}, tcaches{"private"};
  std::string csv_path, json_path;
  unsigned sample_us = 2000;
  unsigned gp_interval_us = norefs::alloc::PagePoolConfig{}.gp_interval_us;
  app.add_option("-t,--threads", threads, "thread counts")
      ->delimiter(',')
      ->check(CLI::Range(1u, 1024u));
  app.add_option("-s,--seconds", seconds, "seconds per measurement")
      ->check(CLI::Range(0.05, 600.0));
  app.add_option("-r,--rounds", rounds, "rounds (interleaved)")->check(CLI::Range(1u, 100u));
  app.add_option("--fill-pages", fill_pages, "pages held per fill")
      ->check(CLI::Range(1ul, 1ul << 22));
  app.add_option("--expedite-pages", expedite_pages, "expedite threshold")
      ->check(CLI::Range(1ul, 1ul << 30));
  app.add_option("--engines", engines, "grace-period engines: driver,call_rcu")
      ->delimiter(',')
      ->check(CLI::IsMember({"driver", "call_rcu"}));
  app.add_option("--tcache", tcaches, "arena tcache modes: private,none")
      ->delimiter(',')
      ->check(CLI::IsMember({"private", "none"}));
  app.add_option("--gp-interval-us", gp_interval_us, "driver engine: min us between grace periods")
      ->check(CLI::Range(0u, 1000000u));
  app.add_option("--sample-us", sample_us, "sampling interval (us)")
      ->check(CLI::Range(100u, 1000000u));
  app.add_option("--csv", csv_path, "also write rows as CSV to this file");
  app.add_option("--json", json_path, "also write rows as JSON to this file");
  CLI11_PARSE(app, argc, argv);

  std::vector<Variant> variants;
  for (const auto& tc : tcaches) {
    norefs::alloc::PagePoolConfig base;
    base.tcache = tc == "none" ? TcacheMode::none : TcacheMode::private_;
    base.expedite_pages = expedite_pages;
    base.gp_interval_us = gp_interval_us;
    Variant imm{"immediate", "-", tc, base};
    imm.cfg.defer = false;
    imm.cfg.expedite = false;
    variants.push_back(imm);
    for (const auto& en : engines) {
      Variant d{"deferred", en, tc, base};
      d.cfg.gp_engine = en == "call_rcu" ? GpEngine::call_rcu : GpEngine::driver;
      variants.push_back(d);
      Variant ne = d;
      ne.name = "deferred-noexp";
      ne.cfg.expedite = false;
      variants.push_back(ne);
    }
  }

  std::printf("fill_free_bench: threads=");
  for (size_t i = 0; i < threads.size(); i++) std::printf("%s%u", i ? "," : "", threads[i]);
  std::printf(
      " seconds=%.2f rounds=%u fill_pages=%zu (%.1f MiB) expedite_pages=%zu gp_interval=%u us "
      "sample=%u us cpus=%ld\n",
      seconds, rounds, fill_pages, mib(static_cast<double>(fill_pages)), expedite_pages,
      gp_interval_us, sample_us, sysconf(_SC_NPROCESSORS_ONLN));

  // results[(variant index, threads)] = one result per round
  std::map<std::pair<size_t, unsigned>, std::vector<FillFreeResult>> results;
  unsigned run = 0;
  // Progress on stderr: a line per measurement (overwritten on a terminal).
  norefs::tools::Progress progress;
  const std::size_t per_round = threads.size() * variants.size();
  for (unsigned r = 0; r < rounds; r++) {
    std::size_t k = 0;
    for (unsigned n : threads) {
      for (size_t v = 0; v < variants.size(); v++) {
        FillFreeParams p;
        p.pool = variants[v].cfg;
        p.threads = n;
        p.fill_pages = fill_pages;
        p.seconds = seconds;
        p.sample_us = sample_us;
        std::string path =
            "/dev/shm/norefs-fill-free-" + std::to_string(getpid()) + "-" + std::to_string(run++);
        const FillFreeResult& x =
            results[{v, n}].emplace_back(norefs::tools::run_fill_free(p, path));
        char line[200];
        std::snprintf(
            line, sizeof line,
            "round %u/%u  %zu/%zu  %s %s %s %u thread%s: %.0f pages/s, mean wait %.2f MiB", r + 1,
            rounds, ++k, per_round, variants[v].name.c_str(), variants[v].engine.c_str(),
            variants[v].tcache.c_str(), n, n == 1 ? "" : "s", x.pages_per_sec, mib(x.mean_waiting));
        progress.update(line);
      }
    }
    progress.keep("round " + std::to_string(r + 1) + "/" + std::to_string(rounds) + " done");
  }

  using A = norefs::tools::report::Table::Align;
  norefs::tools::report::Table table({{"N", A::left},
                                      {"variant", A::left},
                                      {"engine", A::left},
                                      {"tcache", A::left},
                                      {"pages/s", A::right},
                                      {"(min-max, rounds)", A::left},
                                      {"vs imm", A::right},
                                      {"mean wait", A::right},
                                      {"peak wait", A::right},
                                      {"GP/s", A::right},
                                      {"expedite/s", A::right}});
  norefs::tools::report::Records rows(
      {"threads", "variant", "engine", "tcache", "pages_per_sec", "pages_per_sec_min",
       "pages_per_sec_max", "ratio_to_immediate", "mean_waiting_pages", "peak_waiting_pages",
       "grace_periods_per_sec", "expedites_per_sec", "rounds"});
  auto fmt = [](const char* f, double v) {
    char b[64];
    std::snprintf(b, sizeof b, f, v);
    return std::string(b);
  };
  // The rows the targets compare: N = the largest, the first engine and tcache mode given.
  unsigned n_target = *std::max_element(threads.begin(), threads.end());
  struct Picked {
    double pages_per_sec = 0, mean_waiting = 0;
    bool found = false;
  } t_imm, t_def, t_noexp;
  std::map<std::pair<std::string, unsigned>, double> imm_rate;  // (tcache, N) -> pages/s
  for (unsigned n : threads) {
    for (size_t v = 0; v < variants.size(); v++) {
      const auto& rs = results[{v, n}];
      std::vector<double> rate, wait;
      std::uint64_t peak = 0, gps = 0, exps = 0, fails = 0;
      double secs = 0;
      for (const auto& x : rs) {
        rate.push_back(x.pages_per_sec);
        wait.push_back(x.mean_waiting);
        peak = std::max(peak, x.peak_waiting);
        gps += x.grace_periods;
        exps += x.expedites;
        fails += x.alloc_failures;
        secs += x.seconds;
      }
      const Variant& var = variants[v];
      const norefs::tools::report::Spread pr = norefs::tools::report::spread(rate);
      double mwait = norefs::tools::report::median(wait);
      if (var.name == "immediate") imm_rate[{var.tcache, n}] = pr.median;
      double vs = pr.median / imm_rate[{var.tcache, n}];
      table.add_row({std::to_string(n), var.name, var.engine, var.tcache, fmt("%.0f", pr.median),
                     fmt("%.0f", pr.min) + "-" + fmt("%.0f", pr.max), fmt("%.2fx", vs),
                     fmt("%.2f MiB", mib(mwait)), fmt("%.2f MiB", mib(static_cast<double>(peak))),
                     fmt("%.0f", static_cast<double>(gps) / secs),
                     fmt("%.0f", static_cast<double>(exps) / secs)});
      if (fails) table.add_note("    (" + std::to_string(fails) + " allocation failures)");
      rows.add({n, var.name, var.engine, var.tcache, pr.median, pr.min, pr.max, vs, mwait, peak,
                static_cast<double>(gps) / secs, static_cast<double>(exps) / secs, rs.size()});
      if (n == n_target && var.tcache == tcaches[0] &&
          (var.name == "immediate" || var.engine == engines[0])) {
        Picked& t = var.name == "immediate" ? t_imm : var.name == "deferred" ? t_def : t_noexp;
        t = {pr.median, mwait, true};
      }
    }
  }
  std::printf("\n%s", table.str().c_str());

  // The targets.
  norefs::tools::report::Targets targets;
  char detail[256];
  {
    auto& t = targets.add("rate", "deferred pages/s >= 0.90x immediate's", 0.9);
    if (t_imm.found && t_def.found) {
      double v = t_def.pages_per_sec / t_imm.pages_per_sec;
      std::snprintf(detail, sizeof detail, "deferred %.0f pages/s / immediate %.0f pages/s = %.3f",
                    t_def.pages_per_sec, t_imm.pages_per_sec, v);
      t.measure(v, v >= t.threshold, detail);
    }
  }
  {
    auto& t = targets.add("wait", "mean pages waiting without expedite >= 20x with expedite", 20);
    if (t_def.found && t_noexp.found) {
      double v = t_noexp.mean_waiting / std::max(t_def.mean_waiting, 1e-9);
      std::snprintf(detail, sizeof detail,
                    "mean waiting without expedite %.2f MiB / with %.2f MiB = %.1fx",
                    mib(t_noexp.mean_waiting), mib(t_def.mean_waiting), v);
      t.measure(v, v >= t.threshold, detail);
    }
  }
  std::vector<norefs::tools::report::Target> tlist = targets.take();
  std::printf("\n%s", norefs::tools::report::format_targets(
                          "targets at N=" + std::to_string(n_target) + " (" + engines[0] +
                              " engine, " + tcaches[0] + " tcache):",
                          tlist, "the immediate, deferred or deferred-noexp row is missing")
                          .c_str());

  bool ok = true;
  if (!csv_path.empty())
    ok = norefs::tools::report::write_file("fill_free_bench", csv_path, rows.csv()) && ok;
  if (!json_path.empty()) {
    nlohmann::json j = {{"rows", rows.json()},
                        {"targets", norefs::tools::report::targets_json(tlist)}};
    ok = norefs::tools::report::write_file("fill_free_bench", json_path, j.dump(2) + "\n") && ok;
  }
  return ok ? 0 : 1;
}
