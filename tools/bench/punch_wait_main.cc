// SPDX-License-Identifier: LGPL-2.1-or-later
//
// norefs_punch_wait — memory waiting for a grace period under hole-punch
// loads, in-process or through a norefs mount (tools/bench/punch_wait.h,
// docs/punch-wait.md).  Prints the effective configuration, a progress
// line per cell on stderr, the table, and optionally CSV, JSON and the
// per-sample time series.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "alloc/page_pool.h"
#include "tools/bench/punch_wait.h"
#include "tools/lib/guarded_main.h"
#include "tools/lib/report.h"

namespace pw = norefs::tools::punch_wait;

namespace {

std::atomic<bool> g_interrupted{false};

extern "C" void on_signal(int) { g_interrupted.store(true); }

// The daemon next to this tool in the build tree (build/tools -> build/fs).
std::string default_daemon() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  std::string self(buf, static_cast<std::size_t>(n));
  auto slash = self.rfind('/');
  std::string cand = self.substr(0, slash) + "/../fs/norefs";
  return access(cand.c_str(), X_OK) == 0 ? cand : "";
}

}  // namespace

static int run(int argc, char** argv) {
  CLI::App app{
      "norefs_punch_wait: N loaders fill and free their own 64 MiB file in a loop; memory "
      "waiting for a grace period, throughput and RSS per mode, in-process or through a mount"};
  pw::Params p;
  std::string target = "inproc";
  std::vector<std::string> variants{"punch", "truncate", "evict"};
  std::vector<std::string> modes{"off", "defer", "expedite", "bound"};
  double file_mib = 64, bound_mib = 128, slack_mib = 32;
  std::string fill_partial = "on";
  std::string csv_path, json_path, samples_path;
  app.add_option("--target", target, "inproc (cache/ in this process) or mount")
      ->check(CLI::IsMember({"inproc", "mount"}));
  app.add_option("--variants", variants, "punch, truncate, evict")
      ->delimiter(',')
      ->check(CLI::IsMember({"punch", "truncate", "evict"}));
  app.add_option("--modes", modes, "off, defer, expedite, bound (interleaved)")
      ->delimiter(',')
      ->check(CLI::IsMember({"off", "defer", "expedite", "bound"}));
  app.add_option("-t,--threads", p.threads, "loader counts N")
      ->delimiter(',')
      ->check(CLI::Range(1u, 256u));
  app.add_option("--gp-interval-us", p.gp_intervals_us,
                 "grace-period pacing(s); ~20000 is the kernel's normal pacing")
      ->delimiter(',')
      ->check(CLI::Range(0u, 1000000u));
  app.add_option("--remote-readers", p.remote_readers,
                 "idle reader processes registered with the reader registry, per cell (in-process "
                 "target; several values: interleaved)")
      ->delimiter(',')
      ->check(CLI::Range(0u, 64u));
  app.add_option("--stop-reader-ms", p.stop_reader_ms,
                 "one remote reader enters a section and is SIGSTOPped this long from 1/3 of each "
                 "load (modes off and bound)")
      ->check(CLI::Range(0u, 3600000u));
  app.add_option("--remote-reader", p.remote_reader,
                 "the reader program (default: norefs_remote_reader beside this one)");
  app.add_option("--file-mib", file_mib, "file per loader, MiB")->check(CLI::Range(0.004, 4096.0));
  app.add_option("--write-bytes", p.write_bytes, "bytes per write")
      ->check(CLI::Range(std::size_t{1}, std::size_t{64} << 20));
  app.add_option("--write-offset", p.write_offset,
                 "added to every write's offset (not page-aligned: partial pages)");
  app.add_option("--bound-mib", bound_mib, "B: cache_size of mode bound, MiB")
      ->check(CLI::Range(1.0, 1048576.0));
  app.add_option("--expedite-pages", p.expedite_pages, "pending pages that trigger an expedite")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 24));
  app.add_option("--dirty-decay-ms", p.dirty_decay_ms,
                 "arena dirty_decay_ms (-1 never purge, -2 jemalloc's 10 s; default: the pool's)")
      ->check(CLI::Range(-2L, 3600000L));
  app.add_option("--fill-partial", fill_partial,
                 "cache a write's partial pages by reading the backing file (the daemon's "
                 "-o write_fill)")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("-s,--seconds", p.seconds, "load per cell")->check(CLI::Range(0.01, 3600.0));
  app.add_option("--settle-seconds", p.settle_seconds, "sampling after the load (0: none)")
      ->check(CLI::Range(0.0, 600.0));
  app.add_option("--sample-us", p.sample_us, "sample interval")->check(CLI::Range(100u, 1000000u));
  app.add_option("--rounds", p.rounds, "repeat every cell, interleaved")
      ->check(CLI::Range(1u, 100u));
  app.add_option("--rss-slack-mib", slack_mib, "RSS allowed above live pages + idle RSS")
      ->check(CLI::Range(0.0, 65536.0));
  auto* daemon_opt = app.add_option("--daemon", p.daemon,
                                    "mount target: start this daemon per cell (default: the "
                                    "build tree's fs/norefs)");
  auto* mount_opt = app.add_option("--mount", p.mount_dir,
                                   "mount target: use this existing norefs mount (its own "
                                   "configuration, one mode)");
  mount_opt->excludes(daemon_opt);
  app.add_option("--work-dir", p.work_dir, "where temp trees go (backing files: use a tmpfs)");
  app.add_option("--csv", csv_path, "write the table as CSV");
  app.add_option("--json", json_path, "write configuration and cells as JSON");
  app.add_option("--samples-csv", samples_path,
                 "write every sample: t_ms, variant, mode, N, gp, round, phase, pages_waiting, "
                 "pages_cached, rss_kib");
  CLI11_PARSE(app, argc, argv);

  p.target = target == "mount" ? pw::Target::mount : pw::Target::inproc;
  p.variants.clear();
  for (const auto& v : variants) p.variants.push_back(*pw::parse_variant(v));
  p.modes.clear();
  for (const auto& m : modes) p.modes.push_back(*pw::parse_mode(m));
  p.file_bytes = static_cast<std::uint64_t>(file_mib * 1048576) & ~std::uint64_t{4095};
  p.bound_bytes = static_cast<std::uint64_t>(bound_mib * 1048576);
  p.rss_slack_bytes = static_cast<std::uint64_t>(slack_mib * 1048576);
  p.write_fill_partial = fill_partial == "on";
  if (p.target == pw::Target::mount && p.mount_dir.empty() && p.daemon.empty()) {
    p.daemon = default_daemon();
    if (p.daemon.empty()) {
      std::fprintf(stderr,
                   "norefs_punch_wait: --target mount needs --daemon PATH or --mount DIR (no "
                   "daemon found next to this tool)\n");
      return 2;
    }
  }
  if (p.target == pw::Target::inproc && (!p.daemon.empty() || !p.mount_dir.empty())) {
    std::fprintf(stderr, "norefs_punch_wait: --daemon and --mount need --target mount\n");
    return 2;
  }
  if (p.file_bytes == 0) {
    std::fprintf(stderr, "norefs_punch_wait: --file-mib must be at least one page\n");
    return 2;
  }

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  p.interrupted = &g_interrupted;

  std::ofstream samples;
  if (!samples_path.empty()) {
    samples.open(samples_path);
    if (!samples) {
      std::fprintf(stderr, "norefs_punch_wait: cannot write %s\n", samples_path.c_str());
      return 1;
    }
    p.samples_csv = &samples;
  }
  std::cout << pw::describe(p) << std::endl;
  p.progress = [](const pw::Cell& c, std::size_t i, std::size_t n) {
    std::fprintf(stderr, "[%zu/%zu] %s %s gp=%u N=%u: %.2f GiB/s, waiting mean %.1f MiB\n", i, n,
                 std::string(pw::variant_name(c.variant)).c_str(),
                 std::string(pw::mode_name(c.mode)).c_str(), c.gp_interval_us, c.threads,
                 c.gib_per_s, c.mean_waiting * 4096 / 1048576.0);
  };
  std::vector<pw::Cell> cells;
  try {
    cells = pw::run(p);
  } catch (const pw::Interrupted&) {
    std::fprintf(stderr, "norefs_punch_wait: interrupted; cleaned up\n");
    return 130;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "norefs_punch_wait: %s\n", e.what());
    return 1;
  }
  pw::print_table(std::cout, cells);
  bool ok = true;
  if (samples.is_open()) {
    samples.close();
    ok = ok && static_cast<bool>(samples);
  }
  if (!csv_path.empty()) {
    std::ostringstream os;
    pw::write_csv(os, cells);
    ok = norefs::tools::report::write_file("norefs_punch_wait", csv_path, os.str()) && ok;
  }
  if (!json_path.empty()) {
    ok = norefs::tools::report::write_file("norefs_punch_wait", json_path,
                                           pw::to_json(p, cells).dump(2) + "\n") &&
         ok;
  }
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  return norefs::tools::guarded_main("norefs_punch_wait", [&] { return run(argc, argv); });
}
