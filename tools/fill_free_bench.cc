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
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/fill_free.h"
#include "tools/progress.h"

using norefs::alloc::kPageSize;
using norefs::alloc::TcacheMode;
using norefs::tools::FillFreeParams;
using norefs::tools::FillFreeResult;

namespace {

struct Variant {
  std::string name;    // e.g. "deferred", "deferred-noexp", "immediate"
  std::string tcache;  // private | none
  norefs::alloc::PagePoolConfig cfg;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double mib(double pages) { return pages * static_cast<double>(kPageSize) / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "fill_free_bench: pages/s and pages waiting for a grace period, deferred vs immediate"};
  std::vector<unsigned> threads{1, 2, 4};
  double seconds = 1.0;
  unsigned rounds = 3;
  std::size_t fill_pages = 1024, expedite_pages = 1024;
  std::vector<std::string> tcaches{"private"};
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
  app.add_option("--tcache", tcaches, "arena tcache modes: private,none")
      ->delimiter(',')
      ->check(CLI::IsMember({"private", "none"}));
  app.add_option("--gp-interval-us", gp_interval_us, "min us between grace periods")
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
    Variant imm{"immediate", tc, base};
    imm.cfg.defer = false;
    imm.cfg.expedite = false;
    variants.push_back(imm);
    Variant d{"deferred", tc, base};
    variants.push_back(d);
    Variant ne = d;
    ne.name = "deferred-noexp";
    ne.cfg.expedite = false;
    variants.push_back(ne);
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
        std::snprintf(line, sizeof line,
                      "round %u/%u  %zu/%zu  %s %s %u thread%s: %.0f pages/s, mean wait %.2f MiB",
                      r + 1, rounds, ++k, per_round, variants[v].name.c_str(),
                      variants[v].tcache.c_str(), n, n == 1 ? "" : "s", x.pages_per_sec,
                      mib(x.mean_waiting));
        progress.update(line);
      }
    }
    progress.keep("round " + std::to_string(r + 1) + "/" + std::to_string(rounds) + " done");
  }

  nlohmann::json rows = nlohmann::json::array();
  std::printf("\n%-3s %-15s %-7s %10s %19s %7s %12s %12s %7s %10s\n", "N", "variant", "tcache",
              "pages/s", "(min-max, rounds)", "vs imm", "mean wait", "peak wait", "GP/s",
              "expedite/s");
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
      double prate = median(rate), mwait = median(wait);
      double rmin = *std::min_element(rate.begin(), rate.end());
      double rmax = *std::max_element(rate.begin(), rate.end());
      if (var.name == "immediate") imm_rate[{var.tcache, n}] = prate;
      double vs = prate / imm_rate[{var.tcache, n}];
      std::printf("%-3u %-15s %-7s %10.0f %9.0f-%-9.0f %6.2fx %8.2f MiB %8.2f MiB %7.0f %10.0f\n",
                  n, var.name.c_str(), var.tcache.c_str(), prate, rmin, rmax, vs, mib(mwait),
                  mib(static_cast<double>(peak)), static_cast<double>(gps) / secs,
                  static_cast<double>(exps) / secs);
      if (fails) std::printf("    (%lu allocation failures)\n", static_cast<unsigned long>(fails));
      rows.push_back({{"threads", n},
                      {"variant", var.name},
                      {"tcache", var.tcache},
                      {"pages_per_sec", prate},
                      {"pages_per_sec_min", rmin},
                      {"pages_per_sec_max", rmax},
                      {"ratio_to_immediate", vs},
                      {"mean_waiting_pages", mwait},
                      {"peak_waiting_pages", peak},
                      {"grace_periods_per_sec", static_cast<double>(gps) / secs},
                      {"expedites_per_sec", static_cast<double>(exps) / secs},
                      {"rounds", rs.size()}});
    }
  }

  // The targets, for the first tcache mode given.
  unsigned n_target = *std::max_element(threads.begin(), threads.end());
  auto find = [&](const std::string& name) -> const nlohmann::json* {
    for (const auto& row : rows) {
      if (row["threads"] == n_target && row["variant"] == name && row["tcache"] == tcaches[0])
        return &row;
    }
    return nullptr;
  };
  const auto *imm = find("immediate"), *def = find("deferred"), *noexp = find("deferred-noexp");
  if (imm && def && noexp) {
    double rate_ratio =
        (*def)["pages_per_sec"].get<double>() / (*imm)["pages_per_sec"].get<double>();
    double d_wait = (*def)["mean_waiting_pages"].get<double>();
    double wait_ratio = (*noexp)["mean_waiting_pages"].get<double>() / std::max(d_wait, 1e-9);
    std::printf("\ntargets at N=%u (%s tcache):\n", n_target, tcaches[0].c_str());
    std::printf("  deferred pages/s / immediate pages/s = %.3f (target >= 0.90: %s)\n", rate_ratio,
                rate_ratio >= 0.9 ? "met" : "NOT met");
    std::printf("  mean waiting without expedite / with = %.1fx (target >= 20x: %s)\n", wait_ratio,
                wait_ratio >= 20 ? "met" : "NOT met");
  }

  if (!csv_path.empty()) {
    std::ofstream f(csv_path);
    f << "threads,variant,tcache,pages_per_sec,pages_per_sec_min,pages_per_sec_max,"
         "ratio_to_immediate,mean_waiting_pages,peak_waiting_pages,grace_periods_per_sec,"
         "expedites_per_sec,rounds\n";
    for (const auto& row : rows) {
      f << row["threads"] << ',' << row["variant"].get<std::string>() << ','
        << row["tcache"].get<std::string>() << ',' << row["pages_per_sec"] << ','
        << row["pages_per_sec_min"] << ',' << row["pages_per_sec_max"] << ','
        << row["ratio_to_immediate"] << ',' << row["mean_waiting_pages"] << ','
        << row["peak_waiting_pages"] << ',' << row["grace_periods_per_sec"] << ','
        << row["expedites_per_sec"] << ',' << row["rounds"] << '\n';
    }
    if (!f) {
      std::fprintf(stderr, "fill_free_bench: cannot write %s\n", csv_path.c_str());
      return 1;
    }
  }
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << rows.dump(2) << '\n';
    if (!f) {
      std::fprintf(stderr, "fill_free_bench: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
}
