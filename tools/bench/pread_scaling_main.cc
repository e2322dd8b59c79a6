// SPDX-License-Identifier: LGPL-2.1-or-later
//
// norefs_pread_scaling — in-process pread scaling of the four read paths
// against the floor (a copy with no cache), will-it-scale style (tools/bench/pread_scaling.h): N
// threads each reading `size` bytes at offset 0 of one shared file (pread2) or of their own
// (pread1), every path interleaved in each round.  Prints the effective configuration, a table of
// medians over rounds, the targets, and optionally the rows as CSV and JSON.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "tools/bench/pread_scaling.h"
#include "tools/lib/guarded_main.h"
#include "tools/lib/progress.h"
#include "tools/lib/report.h"

using norefs::tools::PreadBacking;
using norefs::tools::PreadScalingParams;

namespace {

bool write_file(const std::string& path, const std::string& text) {
  return norefs::tools::report::write_file("norefs_pread_scaling", path, text);
}

}  // namespace

static int run(int argc, char** argv) {
  CLI::App app{
      "norefs_pread_scaling: reads/s of noref, ref, ref-fetchadd and stackcopy against the "
      "floor, N threads reading the same bytes, will-it-scale style; noref-remote: N reader "
      "processes"};
  PreadScalingParams p;
  std::vector<std::string> paths{"floor", "noref",        "noref-remote",
                                 "ref",   "ref-fetchadd", "stackcopy"};
  std::vector<std::string> variants{"shared", "private"};
  std::string defer = "on", pin = "on", backing = "file";
  std::string csv_path, json_path;
  app.add_option("--paths", paths,
                 "read paths, and floor (a copy with no cache: the limit); noref-remote: noref "
                 "read by N processes")
      ->delimiter(',')
      ->check(
          CLI::IsMember({"floor", "noref", "noref-remote", "ref", "ref-fetchadd", "stackcopy"}));
  app.add_option("--sizes", p.sizes, "read sizes in bytes (file: max(size, 4096) bytes)")
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30));
  app.add_option("--variants", variants, "shared (one file, pread2), private (one each, pread1)")
      ->delimiter(',')
      ->check(CLI::IsMember({"shared", "private"}));
  app.add_option("-t,--threads", p.threads, "thread counts")
      ->delimiter(',')
      ->check(CLI::Range(1u, 1024u));
  app.add_option("-s,--seconds", p.seconds, "counted seconds per measurement")
      ->check(CLI::Range(0.001, 600.0));
  app.add_option("--settle", p.settle, "seconds the threads run before counting starts")
      ->check(CLI::Range(0.0, 60.0));
  app.add_option("-r,--rounds", p.rounds, "rounds (all paths interleaved in each)")
      ->check(CLI::Range(1u, 100u));
  app.add_option("--batch", p.batch, "fast path: pages per read-side section (FOLIO_BATCH_SIZE)")
      ->check(CLI::Range(1u, norefs::cache::kMaxBatch));
  app.add_option(
         "--defer", defer,
         "deferred page free (no page is freed while timing: off changes only setup and teardown)")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--pin", pin, "pin thread t to the t-th allowed CPU")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--backing", backing, "file (temp file in --tmp-dir) or memory")
      ->check(CLI::IsMember({"file", "memory"}));
  app.add_option("--tmp-dir", p.tmp_dir, "where the temp files are made (and unlinked)");
  app.add_option("--remote-reader", p.remote_reader,
                 "noref-remote: the reader program (default: norefs_remote_reader beside this "
                 "one)");
  app.add_option("--csv", csv_path, "also write the rows as CSV to this file");
  app.add_option("--json", json_path, "also write config, rows and targets as JSON to this file");
  CLI11_PARSE(app, argc, argv);

  p.paths.clear();
  for (const auto& s : paths) p.paths.push_back(*norefs::tools::parse_pread_path(s));
  p.variants.clear();
  for (const auto& s : variants) p.variants.push_back(*norefs::tools::parse_pread_variant(s));
  p.defer = defer == "on";
  p.pin = pin == "on";
  p.backing = backing == "file" ? PreadBacking::file : PreadBacking::memory;

  std::fputs(norefs::tools::describe_pread_config(p, sysconf(_SC_NPROCESSORS_ONLN)).c_str(),
             stdout);
  std::fflush(stdout);
  norefs::tools::PreadScalingResult r;
  try {
    // Progress on stderr: one line per measurement, overwritten on a terminal.
    norefs::tools::Progress progress;
    r = norefs::tools::run_pread_scaling(p, [&progress](const std::string& line, bool done) {
      done ? progress.keep(line) : progress.update(line);
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "norefs_pread_scaling: %s\n", e.what());
    return 1;
  }
  std::printf("\n%s\n%s", norefs::tools::format_pread_table(r).c_str(),
              norefs::tools::format_pread_targets(r).c_str());
  if (!csv_path.empty() && !write_file(csv_path, norefs::tools::pread_csv(r))) return 1;
  if (!json_path.empty() && !write_file(json_path, norefs::tools::pread_json(r))) return 1;
  return 0;
}

int main(int argc, char** argv) {
  return norefs::tools::guarded_main("norefs_pread_scaling", [&] { return run(argc, argv); });
}
