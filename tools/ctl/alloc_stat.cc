// SPDX-License-Identifier: LGPL-2.1-or-later
//
// norefs_alloc_stat — reads a PagePool's published counters (a stats block,
// alloc/stats_block.h) from another process: once as a table or JSON, or
// sampling pages waiting every --interval-ms for --seconds and reporting mean
// and peak.  It maps the block read-only and takes no lock the pool takes.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <nlohmann/json.hpp>

#include "alloc/page.h"
#include "alloc/stats_block.h"
#include "tools/ctl/sample_waiting.h"
#include "tools/ctl/stats_json.h"
#include "tools/lib/guarded_main.h"
#include "tools/lib/progress.h"

using norefs::alloc::kPageSize;

static int run(int argc, char** argv) {
  CLI::App app{"norefs_alloc_stat: read a norefs page pool's counters"};
  std::string path;
  bool json = false;
  double seconds = 0;
  unsigned interval_ms = 2;
  app.add_option("stats-file", path, "the pool's stats block")->required();
  app.add_flag("--json", json, "print JSON");
  app.add_option("--seconds", seconds, "sample pages waiting for this long")
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--interval-ms", interval_ms, "sampling interval")->check(CLI::Range(1u, 60000u));
  CLI11_PARSE(app, argc, argv);

  try {
    norefs::alloc::StatsReader reader(path);
    if (seconds > 0) {
      if (!json) {
        std::printf("norefs_alloc_stat: %s: sampling pages waiting every %u ms for %.3g s\n",
                    path.c_str(), interval_ms, seconds);
        std::fflush(stdout);
      }
      // Once a second a progress line on stderr (stdout: only the result).
      norefs::tools::Progress progress;
      std::uint64_t next_report_ns = 1000000000;
      norefs::tools::WaitingSamples w = norefs::tools::sample_waiting(
          reader, interval_ms * 1000, seconds, [&](std::uint64_t ns, std::uint64_t waiting) {
            if (ns < next_report_ns) return;
            next_report_ns += 1000000000;
            progress.update("sampled " + std::to_string(ns / 1000000000) +
                            " s: " + std::to_string(waiting) + " pages waiting now");
          });
      progress.finish();
      std::uint64_t n = w.samples, peak = w.peak;
      double mean = w.mean();
      if (json) {
        std::printf("%s\n", nlohmann::json{{"samples", n},
                                           {"interval_ms", interval_ms},
                                           {"mean_waiting_pages", mean},
                                           {"peak_waiting_pages", peak}}
                                .dump()
                                .c_str());
      } else {
        std::printf(
            "samples %lu every %u ms: mean waiting %.1f pages (%.2f MiB), peak %lu pages (%.2f "
            "MiB)\n",
            static_cast<unsigned long>(n), interval_ms, mean, mean * kPageSize / 1048576.0,
            static_cast<unsigned long>(peak), static_cast<double>(peak) * kPageSize / 1048576.0);
      }
      return 0;
    }
    nlohmann::ordered_json j = norefs::tools::alloc_counters_json(reader.sum());
    if (json) {
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      for (auto& [k, v] : j.items()) std::printf("%-22s %s\n", k.c_str(), v.dump().c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "norefs_alloc_stat: %s\n", e.what());
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  return norefs::tools::guarded_main("norefs_alloc_stat", [&] { return run(argc, argv); });
}
