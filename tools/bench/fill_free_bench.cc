// SPDX-License-Identifier: LGPL-2.1-or-later
//
// fill_free_bench — deferred vs immediate vs deferred-without-expedite page
// freeing under the fill-and-free load (tools/bench/fill_free.h), N threads.  All
// variants run interleaved in each round so that machine drift hits all
// alike; the table shows medians over rounds (peak: max over rounds).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "tools/bench/fill_free.h"
#include "tools/lib/guarded_main.h"
#include "tools/lib/progress.h"
#include "tools/lib/report.h"

static int run(int argc, char** argv) {
  CLI::App app{
      "fill_free_bench: pages/s and pages waiting for a grace period, deferred vs immediate"};
  norefs::tools::FillFreeBenchParams p;
  std::string csv_path, json_path;
  app.add_option("-t,--threads", p.threads, "thread counts")
      ->delimiter(',')
      ->check(CLI::Range(1u, 1024u));
  app.add_option("-s,--seconds", p.seconds, "seconds per measurement")
      ->check(CLI::Range(0.05, 600.0));
  app.add_option("-r,--rounds", p.rounds, "rounds (interleaved)")->check(CLI::Range(1u, 100u));
  app.add_option("--fill-pages", p.fill_pages, "pages held per fill")
      ->check(CLI::Range(1ul, 1ul << 22));
  app.add_option("--expedite-pages", p.expedite_pages, "expedite threshold")
      ->check(CLI::Range(1ul, 1ul << 30));
  app.add_option("--tcache", p.tcaches, "arena tcache modes: private,none")
      ->delimiter(',')
      ->check(CLI::IsMember({"private", "none"}));
  app.add_option("--gp-interval-us", p.gp_interval_us, "min us between grace periods")
      ->check(CLI::Range(0u, 1000000u));
  app.add_option("--sample-us", p.sample_us, "sampling interval (us)")
      ->check(CLI::Range(100u, 1000000u));
  app.add_option("--csv", csv_path, "also write rows as CSV to this file");
  app.add_option("--json", json_path, "also write rows and targets as JSON to this file");
  CLI11_PARSE(app, argc, argv);

  std::fputs(norefs::tools::describe_fill_free_config(p, sysconf(_SC_NPROCESSORS_ONLN)).c_str(),
             stdout);
  std::fflush(stdout);
  norefs::tools::FillFreeBenchResult r;
  try {
    // Progress on stderr: a line per measurement (overwritten on a terminal).
    norefs::tools::Progress progress;
    r = norefs::tools::run_fill_free_bench(p, [&progress](const std::string& line, bool done) {
      if (done) {
        progress.keep(line);
      } else {
        progress.update(line);
      }
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fill_free_bench: %s\n", e.what());
    return 1;
  }
  std::printf("\n%s\n%s", norefs::tools::format_fill_free_table(r).c_str(),
              norefs::tools::format_fill_free_targets(r).c_str());
  namespace report = norefs::tools::report;
  bool ok = true;
  if (!csv_path.empty()) {
    ok = report::write_file("fill_free_bench", csv_path, norefs::tools::fill_free_csv(r)) && ok;
  }
  if (!json_path.empty()) {
    ok = report::write_file("fill_free_bench", json_path, norefs::tools::fill_free_json(r)) && ok;
  }
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  return norefs::tools::guarded_main("fill_free_bench", [&] { return run(argc, argv); });
}
