// SPDX-License-Identifier: LGPL-2.1-or-later
//
// norefsctl — control and statistics of a running norefs mount, through the
// ioctls of fs/control.h on a path inside the mount.
//
//   norefsctl stats    <path> [--json] [--watch MS]
//   norefsctl top      <path> [--interval S] [--count N]
//   norefsctl sample   <path> [--interval-ms 2] [--seconds S] [--csv F] [--json]
//   norefsctl evict    <file> [--json]
//   norefsctl prefetch <file> [--offset N] [--length N] [--measure] [--json]
//
// A thin main: the ioctls and the prefetch measurement are tools/ctl/ctl.h, the
// JSON of the counter blocks tools/ctl/stats_json.h, the 2 ms sampler
// tools/ctl/sample_waiting.h, the rates and the screen of `top` tools/ctl/ctl.h
// (this file only draws them and reads the keyboard).  Exit 1 on any error,
// with a message; 2 on bad usage.

#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>
#include <thread>

#include "alloc/page.h"
#include "alloc/stats_block.h"
#include "cache/cache_stats.h"
#include "tools/ctl/ctl.h"
#include "tools/ctl/sample_waiting.h"
#include "tools/ctl/stats_json.h"
#include "tools/lib/guarded_main.h"
#include "tools/lib/progress.h"

namespace ctl = norefs::tools::ctl;
using nlohmann::ordered_json;
using norefs::alloc::kPageSize;

namespace {

double ms(std::uint64_t ns) { return static_cast<double>(ns) / 1e6; }
double mib(std::uint64_t pages) { return static_cast<double>(pages) * kPageSize / 1048576.0; }

void print_config(const std::string& path, const ctl::MountInfo& mi) {
  std::printf("norefsctl: %s: daemon pid %lu, alloc stats %s, cache stats %s\n", path.c_str(),
              static_cast<unsigned long>(mi.pid), mi.alloc_stats.c_str(), mi.cache_stats.c_str());
}

// ---- stats ----------------------------------------------------------------

ordered_json stats_json(const ctl::MountInfo& mi, const norefs::alloc::StatsReader& a,
                        const norefs::cache::CacheStatsReader& c) {
  ordered_json j;
  j["daemon"] = {{"pid", mi.pid}, {"alloc_stats", mi.alloc_stats}, {"cache_stats", mi.cache_stats}};
  j["time_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  j["alloc"] = norefs::tools::alloc_counters_json(a.sum());
  j["cache"] = norefs::tools::cache_counters_json(c.sum());
  return j;
}

std::string fmt_value(const ordered_json& v) {
  if (v.is_number_float()) {
    char b[32];
    std::snprintf(b, sizeof b, "%.4f", v.get<double>());
    return b;
  }
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// One line per counter; with `prev` (watch mode) also the rate since then.
void print_stats_table(const ordered_json& j, const ordered_json* prev) {
  double dt = prev ? static_cast<double>(j["time_ms"].get<long long>() -
                                         (*prev)["time_ms"].get<long long>()) /
                         1000.0
                   : 0;
  auto line = [&](const std::string& name, const ordered_json& v, const ordered_json* pv,
                  const std::string& note) {
    std::string rate;
    if (pv && dt > 0 && v.is_number_unsigned() && pv->is_number_unsigned()) {
      char b[48];
      std::snprintf(b, sizeof b, "%+.0f/s",
                    (static_cast<double>(v.get<std::uint64_t>()) -
                     static_cast<double>(pv->get<std::uint64_t>())) /
                        dt);
      rate = b;
    }
    std::printf("  %-22s %20s %14s  %s\n", name.c_str(), fmt_value(v).c_str(), rate.c_str(),
                note.c_str());
  };
  for (const char* section : {"alloc", "cache"}) {
    std::printf("%s:\n", section);
    for (auto& [k, v] : j[section].items()) {
      if (k == "stops" || k == "remote_readers") continue;
      const ordered_json* pv = prev ? &(*prev)[section][k] : nullptr;
      std::string note;
      if (k == "hits") note = "fast_pages + slow_hits";
      if (k == "hit_ratio") note = "hits / (hits + misses)";
      if (k == "fast_share") note = "fast_pages / hits";
      if (k == "limit_pages" && v.get<std::uint64_t>() == 0) note = "no limit";
      if ((k == "waiting" || k == "peak_waiting" || k == "pages_cached") &&
          v.is_number_unsigned()) {
        char b[32];
        std::snprintf(b, sizeof b, "%.2f MiB", mib(v.get<std::uint64_t>()));
        note = b;
      }
      line(k, v, pv, note);
    }
  }
  std::printf("readers in other processes:\n");
  for (auto& [k, v] : j["alloc"]["remote_readers"].items()) {
    const ordered_json* pv = prev ? &(*prev)["alloc"]["remote_readers"][k] : nullptr;
    std::string note;
    if (k == "blocking_pid") note = v.get<std::uint64_t>() ? "holds the grace period back" : "none";
    line(k, v, pv, note);
  }
  std::printf("fast-path stops (%s in all):\n", fmt_value(j["cache"]["stops_total"]).c_str());
  for (auto& [k, v] : j["cache"]["stops"].items()) {
    char share[32];
    std::snprintf(share, sizeof share, "%5.1f %%", 100.0 * v["share"].get<double>());
    line(k, v["count"], prev ? &(*prev)["cache"]["stops"][k]["count"] : nullptr, share);
  }
}

int cmd_stats(const std::string& path, bool json, unsigned watch_ms) {
  ctl::Fd fd(path);
  ctl::MountInfo mi = ctl::info(fd);
  norefs::alloc::StatsReader a(mi.alloc_stats);
  norefs::cache::CacheStatsReader c(mi.cache_stats);
  if (!json) print_config(path, mi);
  std::optional<ordered_json> prev;
  for (;;) {
    ordered_json j = stats_json(mi, a, c);
    if (json) {
      // Watch mode prints JSON lines: one object per sample.
      std::printf("%s\n", j.dump(watch_ms ? -1 : 2).c_str());
    } else {
      if (watch_ms) {
        std::time_t t = std::time(nullptr);
        char ts[32];
        std::tm tm{};
        std::strftime(ts, sizeof ts, "%H:%M:%S", localtime_r(&t, &tm));
        std::printf("---- %s\n", ts);
      }
      print_stats_table(j, prev ? &*prev : nullptr);
    }
    std::fflush(stdout);
    if (!watch_ms) return 0;
    prev = std::move(j);
    std::this_thread::sleep_for(std::chrono::milliseconds(watch_ms));
  }
}

// ---- top ------------------------------------------------------------------
//
// On a terminal: the alternate screen (what was on the terminal comes back
// at exit), no cursor, the keyboard unbuffered and not echoed so that q
// quits at once; each frame overwrites the last from the top-left corner.
// Otherwise (a pipe, a file): the frames one after another, no escapes.
// q, Ctrl-C (SIGINT), SIGTERM and SIGHUP all end it the same way: the
// terminal is restored and the exit status is 0.

volatile std::sig_atomic_t g_quit = 0;
extern "C" void on_quit_signal(int) { g_quit = 1; }

// The terminal's state while `top` draws, restored by restore() or the
// destructor (an exception thrown mid-frame still restores it).
class TopTerminal {
 public:
  TopTerminal(bool screen, bool keys) : screen_(screen) {
    if (keys && ::tcgetattr(STDIN_FILENO, &saved_) == 0) {
      termios raw = saved_;
      raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);  // ISIG stays: Ctrl-C is SIGINT
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      keys_ = ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) == 0;
    }
    if (screen_) {
      std::fputs("\033[?1049h\033[?25l", stdout);  // alternate screen, hide the cursor
      std::fflush(stdout);
    }
  }
  ~TopTerminal() { restore(); }
  TopTerminal(const TopTerminal&) = delete;
  TopTerminal& operator=(const TopTerminal&) = delete;

  void restore() {
    if (screen_) {
      std::fputs("\033[?25h\033[?1049l", stdout);  // show the cursor, leave the screen
      std::fflush(stdout);
      screen_ = false;
    }
    if (keys_) {
      ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_);
      keys_ = false;
    }
  }
  bool keys() const { return keys_; }

 private:
  bool screen_;
  bool keys_ = false;
  termios saved_{};
};

// Waits until `deadline`; true if the user asked to quit meanwhile.
bool wait_or_quit(const TopTerminal& term, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    if (g_quit) return true;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{STDIN_FILENO, POLLIN, 0};
    int n = ::poll(&p, term.keys() ? 1 : 0, static_cast<int>(left.count()) + 1);
    if (n < 0 && errno != EINTR)
      throw ctl::CtlError(std::string("poll: ") + std::generic_category().message(errno), errno);
    if (n > 0) {
      char buf[64];
      ssize_t got = ::read(STDIN_FILENO, buf, sizeof buf);
      for (ssize_t i = 0; i < got; i++) {
        if (buf[i] == 'q' || buf[i] == 'Q') return true;
      }
      if (got == 0) return false;  // EOF on the terminal: keep drawing until a signal
    }
  }
}

std::size_t terminal_width() {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

int cmd_top(const std::string& path, double interval, unsigned count) {
  ctl::Fd fd(path);
  ctl::MountInfo mi = ctl::info(fd);
  norefs::alloc::StatsReader a(mi.alloc_stats);
  norefs::cache::CacheStatsReader c(mi.cache_stats);

  struct sigaction sa {};
  sa.sa_handler = on_quit_signal;  // no SA_RESTART: poll() returns EINTR
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);

  const bool screen = ::isatty(STDOUT_FILENO) != 0;
  TopTerminal term(screen, screen && ::isatty(STDIN_FILENO) != 0);
  if (!screen) {
    print_config(path, mi);
    std::printf("norefsctl top: a frame every %.3g s%s\n\n", interval,
                count ? (", " + std::to_string(count) + " frame(s)").c_str() : "");
  }
  const auto step = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(interval));
  auto next = std::chrono::steady_clock::now();
  std::optional<ctl::TopSnapshot> prev;
  bool daemon_gone = false;
  for (unsigned frame = 1;; frame++) {
    ctl::TopSnapshot now = ctl::top_snapshot(a, c, mi.pid);
    // The stats files stay mapped after the daemon exits: notice it rather
    // than draw frozen counters.
    daemon_gone = ::kill(static_cast<pid_t>(mi.pid), 0) != 0 && errno == ESRCH;
    ctl::TopRates r = ctl::top_rates(prev ? &*prev : nullptr, now);
    std::time_t t = std::time(nullptr);
    char ts[16];
    std::tm tm{};
    std::strftime(ts, sizeof ts, "%H:%M:%S", localtime_r(&t, &tm));
    std::string title = path + "  pid " + std::to_string(mi.pid) + "  " + ts;
    std::vector<std::string> lines = ctl::format_top(r, title, screen ? terminal_width() : 200);
    if (screen) {
      std::string out = "\033[H";  // home; each line clears its own rest, then the screen's
      for (const auto& l : lines) out += l + "\033[K\n";
      out += "\033[K\n";
      out += term.keys() ? "q quits\033[K" : "Ctrl-C quits\033[K";
      out += "\033[J";
      std::fputs(out.c_str(), stdout);
    } else {
      for (const auto& l : lines) std::printf("%s\n", l.c_str());
      std::printf("\n");
    }
    std::fflush(stdout);
    if (daemon_gone || (count && frame >= count)) break;
    prev = now;
    next += step;
    if (wait_or_quit(term, next)) break;
  }
  term.restore();
  if (daemon_gone) {
    std::fprintf(stderr, "norefsctl: %s: the daemon (pid %lu) has exited\n", path.c_str(),
                 static_cast<unsigned long>(mi.pid));
    return 1;
  }
  return 0;
}

// ---- sample ---------------------------------------------------------------

int cmd_sample(const std::string& path, unsigned interval_ms, double seconds,
               const std::string& csv, bool json) {
  ctl::Fd fd(path);
  ctl::MountInfo mi = ctl::info(fd);
  norefs::alloc::StatsReader a(mi.alloc_stats);
  if (!json) {
    print_config(path, mi);
    std::printf("sampling pages waiting for a grace period every %u ms for %.3g s%s%s\n",
                interval_ms, seconds, csv.empty() ? "" : ", samples to ", csv.c_str());
  }
  std::ofstream out;
  if (!csv.empty()) {
    out.open(csv);
    if (!out) throw ctl::CtlError(csv + ": cannot write", errno);
    out << "elapsed_ms,waiting_pages\n";
  }
  // Each sample to the CSV, if asked; once a second a progress line on
  // stderr (stdout carries only the result, JSON included).
  norefs::tools::Progress progress;
  std::uint64_t next_report_ns = 1000000000, max_so_far = 0;
  norefs::tools::OnSample each = [&](std::uint64_t ns, std::uint64_t w) {
    if (out.is_open()) out << ms(ns) << ',' << w << '\n';
    max_so_far = std::max(max_so_far, w);
    if (ns >= next_report_ns) {
      next_report_ns += 1000000000;
      char line[128];
      std::snprintf(line, sizeof line, "sampled %.0f/%.3g s: %lu pages waiting now, max %lu",
                    static_cast<double>(ns) / 1e9, seconds, static_cast<unsigned long>(w),
                    static_cast<unsigned long>(max_so_far));
      progress.update(line);
    }
  };
  norefs::tools::WaitingSamples w =
      norefs::tools::sample_waiting(a, interval_ms * 1000, seconds, each);
  // The pool's own peak: the largest pending+inflight any of its sweeps saw,
  // since it started (the samples see only what is waiting at each tick).
  progress.finish();
  std::uint64_t pool_peak = a.sum().peak_waiting;
  if (json) {
    std::printf("%s\n", ordered_json{{"pid", mi.pid},
                                     {"interval_ms", interval_ms},
                                     {"seconds", seconds},
                                     {"samples", w.samples},
                                     {"min_waiting_pages", w.min},
                                     {"mean_waiting_pages", w.mean()},
                                     {"max_waiting_pages", w.peak},
                                     {"pool_peak_waiting_pages", pool_peak}}
                            .dump(2)
                            .c_str());
  } else {
    std::printf("%-10s %12s %10s\n", "", "pages", "MiB");
    std::printf("%-10s %12lu %10.2f\n", "min", static_cast<unsigned long>(w.min), mib(w.min));
    std::printf("%-10s %12.1f %10.2f\n", "mean", w.mean(), w.mean() * kPageSize / 1048576.0);
    std::printf("%-10s %12lu %10.2f\n", "max", static_cast<unsigned long>(w.peak), mib(w.peak));
    std::printf("%-10s %12lu %10.2f   (the pool's own peak since it started)\n", "peak",
                static_cast<unsigned long>(pool_peak), mib(pool_peak));
    std::printf("%lu samples\n", static_cast<unsigned long>(w.samples));
  }
  return 0;
}

// ---- evict ----------------------------------------------------------------

int cmd_evict(const std::string& path, bool json) {
  ctl::Fd fd(path);
  std::uint64_t pages = ctl::evict(fd);
  if (json) {
    std::printf("%s\n", ordered_json{{"file", path}, {"evicted_pages", pages}}.dump().c_str());
  } else {
    std::printf("%s: evicted %lu pages (%.2f MiB)\n", path.c_str(),
                static_cast<unsigned long>(pages), mib(pages));
  }
  return 0;
}

// ---- prefetch -------------------------------------------------------------

ordered_json read_json(const ctl::RangeRead& r) {
  return {{"bytes", r.bytes},
          {"pages_read", r.pages_read},
          {"misses", r.misses},
          {"hits", r.hits},
          {"ms", ms(r.wall_ns)}};
}

int cmd_prefetch(const std::string& path, std::uint64_t offset, std::uint64_t length, bool measure,
                 bool json) {
  ctl::Fd fd(path);
  ctl::MountInfo mi = ctl::info(fd);
  norefs::cache::CacheStatsReader c(mi.cache_stats);
  if (!json) {
    print_config(path, mi);
    std::printf("prefetch offset %lu length %s%s\n", static_cast<unsigned long>(offset),
                length ? std::to_string(length).c_str() : "to EOF",
                measure ? ", measured against the read without it" : "");
  }
  if (!measure) {
    ctl::Prefetch p = ctl::prefetch(fd, offset, length, &c);
    if (json) {
      std::printf("%s\n", ordered_json{{"file", path},
                                       {"offset", offset},
                                       {"length", length},
                                       {"pages_read", p.pages_read},
                                       {"daemon_ms", ms(p.daemon_ns)},
                                       {"wall_ms", ms(p.wall_ns)},
                                       {"counter_pages", p.counter_pages}}
                              .dump(2)
                              .c_str());
    } else {
      std::printf(
          "read %lu pages (%.2f MiB) from the backing file in %.3f ms (%.3f ms "
          "round trip)\n",
          static_cast<unsigned long>(p.pages_read), mib(p.pages_read), ms(p.daemon_ns),
          ms(p.wall_ns));
    }
    return 0;
  }
  ctl::PrefetchMeasure m = ctl::measure_prefetch(fd, offset, length, c);
  if (json) {
    std::printf(
        "%s\n",
        ordered_json{{"file", path},
                     {"offset", m.offset},
                     {"length", m.length},
                     {"without_prefetch",
                      {{"evicted_pages", m.evicted_without}, {"read", read_json(m.read_without)}}},
                     {"with_prefetch",
                      {{"evicted_pages", m.evicted_with},
                       {"advice",
                        {{"pages_read", m.advice.pages_read},
                         {"counter_pages", m.advice.counter_pages},
                         {"daemon_ms", ms(m.advice.daemon_ns)},
                         {"wall_ms", ms(m.advice.wall_ns)}}},
                       {"read", read_json(m.read_with)}}}}
            .dump(2)
            .c_str());
    return 0;
  }
  std::printf("range [%lu, %lu): %lu pages\n", static_cast<unsigned long>(m.offset),
              static_cast<unsigned long>(m.offset + m.length),
              static_cast<unsigned long>((m.length + kPageSize - 1) / kPageSize));
  std::printf("%-18s %10s | %-25s | %-25s\n", "", "evict", "      the advice",
              "    the later read");
  std::printf("%-18s %10s | %12s %12s | %12s %12s\n", "", "pages", "pages read", "time ms",
              "pages read", "time ms");
  std::printf("%-18s %10lu | %12s %12s | %12lu %12.3f\n", "without prefetch",
              static_cast<unsigned long>(m.evicted_without), "-", "-",
              static_cast<unsigned long>(m.read_without.pages_read), ms(m.read_without.wall_ns));
  std::printf("%-18s %10lu | %12lu %12.3f | %12lu %12.3f\n", "with prefetch",
              static_cast<unsigned long>(m.evicted_with),
              static_cast<unsigned long>(m.advice.pages_read), ms(m.advice.wall_ns),
              static_cast<unsigned long>(m.read_with.pages_read), ms(m.read_with.wall_ns));
  std::printf(
      "advice: %.3f ms in the daemon, readahead_pages counter +%lu; "
      "later read: misses %lu without, %lu with\n",
      ms(m.advice.daemon_ns), static_cast<unsigned long>(m.advice.counter_pages),
      static_cast<unsigned long>(m.read_without.misses),
      static_cast<unsigned long>(m.read_with.misses));
  return 0;
}

}  // namespace

static int run(int argc, char** argv) {
  CLI::App app{"norefsctl: statistics and control of a running norefs mount"};
  app.require_subcommand(1);

  std::string path, csv;
  bool json = false, measure = false;
  unsigned watch_ms = 0, interval_ms = 2;
  double seconds = 1.0;
  std::uint64_t offset = 0, length = 0;

  auto* stats = app.add_subcommand("stats", "print every counter of the mount's daemon");
  stats->add_option("path", path, "a file or directory in the mount")->required();
  stats->add_flag("--json", json, "print JSON (JSON lines with --watch)");
  stats->add_option("--watch", watch_ms, "repeat every MS milliseconds, with rates")
      ->check(CLI::Range(1u, 3600000u));

  double top_interval = 1.0;
  unsigned top_count = 0;
  auto* top = app.add_subcommand(
      "top", "a live screen of rates and gauges, redrawn every second (q or Ctrl-C quits)");
  top->add_option("path", path, "a file or directory in the mount")->required();
  top->add_option("--interval", top_interval, "seconds between frames (default 1)")
      ->check(CLI::Range(0.05, 3600.0));
  top->add_option("--count", top_count, "exit after N frames (default 0: until q or Ctrl-C)");

  auto* sample = app.add_subcommand("sample", "sample pages waiting for a grace period");
  sample->add_option("path", path, "a file or directory in the mount")->required();
  sample->add_option("--interval-ms", interval_ms, "sampling interval (default 2)")
      ->check(CLI::Range(1u, 60000u));
  sample->add_option("--seconds", seconds, "how long to sample (default 1)")
      ->check(CLI::Range(0.001, 86400.0));
  sample->add_option("--csv", csv, "write every sample to this CSV file");
  sample->add_flag("--json", json, "print JSON");

  auto* ev = app.add_subcommand("evict", "evict a file's cached pages");
  ev->add_option("file", path, "a regular file in the mount")->required();
  ev->add_flag("--json", json, "print JSON");

  auto* pf = app.add_subcommand("prefetch", "read a range of a file into the cache now");
  pf->add_option("file", path, "a regular file in the mount")->required();
  pf->add_option("--offset", offset, "first byte (default 0)");
  pf->add_option("--length", length, "bytes (default 0: to the end of the file)");
  pf->add_flag("--measure", measure,
               "then read the range and compare with evict + read without the prefetch");
  pf->add_flag("--json", json, "print JSON");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is a ParseError too: exit 0 for it, 2 (bad usage) for the rest.
    return app.exit(e) == 0 ? 0 : 2;
  }

  try {
    if (stats->parsed()) return cmd_stats(path, json, watch_ms);
    if (top->parsed()) return cmd_top(path, top_interval, top_count);
    if (sample->parsed()) return cmd_sample(path, interval_ms, seconds, csv, json);
    if (ev->parsed()) return cmd_evict(path, json);
    if (pf->parsed()) return cmd_prefetch(path, offset, length, measure, json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "norefsctl: %s\n", e.what());
    return 1;
  }
  return 2;
}

int main(int argc, char** argv) {
  return norefs::tools::guarded_main("norefsctl", [&] { return run(argc, argv); });
}
