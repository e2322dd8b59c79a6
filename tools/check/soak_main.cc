// SPDX-License-Identifier: LGPL-2.1-or-later
//
// norefs_soak — the C++ parts of the soak (tools/check/soak.sh, docs/soak.md), a
// thin main over tools/check/soak_load.h and tools/check/soak_monitor.h:
//
//   norefs_soak pattern    --size N FILE...        write pattern files (file k: id k+1)
//   norefs_soak read-check [opts] FILE...          check every byte of random reads of them
//   norefs_soak punch      [opts] FILE             write / check / punch / check loaders
//   norefs_soak monitor    [opts] PATH-IN-MOUNT    2 ms samples vs cache_size, final counters
//
// Each prints its configuration, then its report; --json F writes it as
// JSON.  Exit status 0 if every check held, 1 if one failed or the run
// could not be made, 2 on bad usage.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "tools/check/soak_load.h"
#include "tools/check/soak_monitor.h"
#include "tools/lib/guarded_main.h"

namespace tools = norefs::tools;

namespace {

std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");

void on_signal(int) { g_stop.store(true, std::memory_order_relaxed); }  // a flag, no data

bool write_json(const std::string& path, const std::string& text) {
  if (path.empty()) return true;
  std::ofstream f(path);
  f << text << '\n';
  f.close();
  if (!f) {
    std::fprintf(stderr, "norefs_soak: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

void print_failures(const std::vector<tools::SoakFailure>& v) {
  for (const tools::SoakFailure& f : v) std::printf("  FAILED %s\n", f.what.c_str());
}

}  // namespace

static int run(int argc, char** argv) {
  CLI::App app{"norefs_soak: loaders and the counter monitor of the soak (tools/check/soak.sh)"};
  app.require_subcommand(1);
  std::string json;
  std::vector<std::string> files;

  std::uint64_t pattern_size = 0;
  auto* pattern = app.add_subcommand("pattern", "write pattern files (file k holds id k+1)");
  pattern->add_option("--size", pattern_size, "bytes per file")
      ->required()
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40));
  pattern->add_option("files", files, "the files, in order")->required();

  tools::ReadCheckParams rc;
  auto* read_check = app.add_subcommand("read-check", "random reads of pattern files, checked");
  read_check->add_option("files", rc.files, "the pattern files, in the order `pattern` got them")
      ->required();
  read_check->add_option("--threads", rc.threads, "reader threads (2)")
      ->check(CLI::Range(1u, 256u));
  read_check->add_option("-s,--seconds", rc.seconds, "how long (1)")
      ->check(CLI::Range(0.001, 86400.0));
  read_check->add_option("--max-read", rc.max_read, "longest read in bytes (256 KiB)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{64} << 20));
  read_check->add_option("--seed", rc.seed, "random seed (1)");
  read_check->add_option("--json", json, "write params and result as JSON");

  tools::PunchParams pp;
  auto* punch = app.add_subcommand("punch", "hole-punch loaders on one file, every byte checked");
  punch->add_option("file", pp.file, "the file (created, sized to threads x regions x region)")
      ->required();
  punch->add_option("--threads", pp.threads, "loader threads (2)")->check(CLI::Range(1u, 256u));
  punch->add_option("--regions", pp.regions_per_thread, "regions per thread (4)")
      ->check(CLI::Range(1u, 4096u));
  punch->add_option("--region-bytes", pp.region_bytes, "bytes per region, at least a page (65536)")
      ->check(CLI::Range(std::size_t{4096}, std::size_t{64} << 20));
  punch->add_option("-s,--seconds", pp.seconds, "how long (1)")->check(CLI::Range(0.001, 86400.0));
  punch->add_option("--seed", pp.seed, "random seed (1)");
  punch->add_option("--json", json, "write params and result as JSON");

  tools::MonitorParams mp;
  auto* monitor = app.add_subcommand(
      "monitor",
      "sample live pages against cache_size until the daemon exits, then check its "
      "final counters");
  monitor->add_option("path", mp.mount, "a file or directory in the mount")->required();
  monitor->add_option("--interval-us", mp.interval_us, "sampling interval (2000)")
      ->check(CLI::Range(100u, 1000000u));
  monitor->add_option("--status", mp.status_path, "status file (JSON), replaced each period");
  monitor->add_option("--status-ms", mp.status_every_ms, "status period (1000)")
      ->check(CLI::Range(10u, 3600000u));
  monitor->add_option("--json", json, "write the report as JSON");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  try {
    if (pattern->parsed()) {
      for (std::size_t k = 0; k < files.size(); k++) {
        tools::write_pattern_file(files[k], static_cast<unsigned>(k + 1), pattern_size);
      }
      std::printf("norefs_soak pattern: %zu file(s) of %llu bytes\n", files.size(),
                  static_cast<unsigned long long>(pattern_size));
      return 0;
    }
    if (read_check->parsed()) {
      std::printf(
          "norefs_soak read-check: %zu file(s), %u thread(s), %.3g s, reads up to %zu "
          "bytes, seed %llu\n",
          rc.files.size(), rc.threads, rc.seconds, rc.max_read,
          static_cast<unsigned long long>(rc.seed));
      tools::ReadCheckResult r = tools::run_read_check(rc);
      std::printf(
          "norefs_soak read-check: %llu reads (%llu small), %.1f MiB, %llu bad, %llu I/O "
          "errors in %.1f s: %s\n",
          static_cast<unsigned long long>(r.reads), static_cast<unsigned long long>(r.small_reads),
          static_cast<double>(r.bytes) / 1048576.0, static_cast<unsigned long long>(r.bad_reads),
          static_cast<unsigned long long>(r.io_errors), r.seconds, r.ok() ? "ok" : "FAILED");
      print_failures(r.failures);
      if (!write_json(json, tools::read_check_json(rc, r))) return 1;
      return r.ok() ? 0 : 1;
    }
    if (punch->parsed()) {
      std::printf(
          "norefs_soak punch: %s, %u thread(s) x %u region(s) of %zu bytes, %.3g s, "
          "seed %llu\n",
          pp.file.c_str(), pp.threads, pp.regions_per_thread, pp.region_bytes, pp.seconds,
          static_cast<unsigned long long>(pp.seed));
      tools::PunchResult r = tools::run_punch(pp);
      std::printf(
          "norefs_soak punch: %llu cycles (%llu unaligned punches), %.1f MiB checked, "
          "%llu bad, %llu I/O errors in %.1f s: %s\n",
          static_cast<unsigned long long>(r.cycles),
          static_cast<unsigned long long>(r.unaligned_punches),
          static_cast<double>(r.bytes_checked) / 1048576.0,
          static_cast<unsigned long long>(r.bad_reads),
          static_cast<unsigned long long>(r.io_errors), r.seconds, r.ok() ? "ok" : "FAILED");
      print_failures(r.failures);
      if (!write_json(json, tools::punch_json(pp, r))) return 1;
      return r.ok() ? 0 : 1;
    }
    if (monitor->parsed()) {
      struct sigaction sa {};
      sa.sa_handler = on_signal;
      sigaction(SIGINT, &sa, nullptr);
      sigaction(SIGTERM, &sa, nullptr);
      mp.stop = &g_stop;
      std::printf("norefs_soak monitor: %s, a sample every %u us until the daemon exits\n",
                  mp.mount.c_str(), mp.interval_us);
      std::fflush(stdout);
      tools::MonitorResult r = tools::run_monitor(mp);
      std::printf("norefs_soak monitor: %s%s", tools::format_monitor_report(r).c_str(),
                  r.ok() ? "" : "norefs_soak monitor: FAILED\n");
      if (!write_json(json, tools::monitor_json(mp, r))) return 1;
      return r.ok() ? 0 : 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "norefs_soak: %s\n", e.what());
    return 1;
  }
  return 2;
}

int main(int argc, char** argv) {
  return norefs::tools::guarded_main("norefs_soak", [&] { return run(argc, argv); });
}
