// SPDX-License-Identifier: LGPL-2.1-or-later
//
// norefs_addressing_bench — the fast path's chain of dependent loads with
// absolute pointers against offsets from the region's base
// (tools/bench/addressing.h).  A program of its own with no CLI11: four
// options, and a CLI11 main costs more to compile than the benchmark.
//
//   norefs_addressing_bench [--rounds N] [--seconds S] [--cpu C] [--csv FILE] [--json FILE]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "tools/bench/addressing.h"
#include "tools/lib/guarded_main.h"
#include "tools/lib/report.h"

namespace ad = norefs::tools::addressing;

namespace {

int usage(const char* self) {
  std::fprintf(stderr,
               "usage: %s [--rounds N] [--seconds S] [--cpu C] [--csv FILE] [--json FILE]\n"
               "  --rounds N    rounds, every reader and shape in each (default 9)\n"
               "  --seconds S   per reader and shape in each round (default 0.3)\n"
               "  --cpu C       pin to the C-th allowed CPU, -1 not pinned (default 0)\n"
               "  --csv FILE    also write the rows as CSV\n"
               "  --json FILE   also write configuration and rows (every round) as JSON\n",
               self);
  return 2;
}

}  // namespace

static int run(int argc, char** argv) {
  ad::Params p;
  std::string csv_path, json_path;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      usage(argv[0]);
      return 0;
    }
    if (i + 1 >= argc) return usage(argv[0]);
    const char* v = argv[++i];
    char* end = nullptr;
    if (a == "--rounds") {
      long n = std::strtol(v, &end, 10);
      if (*end || n < 1 || n > 1000) return usage(argv[0]);
      p.rounds = static_cast<unsigned>(n);
    } else if (a == "--seconds") {
      double s = std::strtod(v, &end);
      if (*end || !(s > 0) || s > 600) return usage(argv[0]);
      p.seconds = s;
    } else if (a == "--cpu") {
      long c = std::strtol(v, &end, 10);
      if (*end || c < -1 || c > 4096) return usage(argv[0]);
      p.cpu = static_cast<int>(c);
    } else if (a == "--csv") {
      csv_path = v;
    } else if (a == "--json") {
      json_path = v;
    } else {
      return usage(argv[0]);
    }
  }
  std::fputs(ad::describe(p).c_str(), stdout);
  std::fflush(stdout);
  ad::Result r =
      ad::run(p, [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
  std::printf("\n%s", ad::format_table(r).c_str());
  bool ok = true;
  if (!csv_path.empty()) {
    ok = norefs::tools::report::write_file("norefs_addressing_bench", csv_path, ad::csv(r)) && ok;
  }
  if (!json_path.empty()) {
    ok = norefs::tools::report::write_file("norefs_addressing_bench", json_path, ad::json(r)) && ok;
  }
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  return norefs::tools::guarded_main("norefs_addressing_bench", [&] { return run(argc, argv); });
}
