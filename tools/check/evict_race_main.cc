// SPDX-License-Identifier: LGPL-2.1-or-later
//
// norefs_evict_race — the evict-race checker (tools/check/evict_race.h): readers
// check every byte they read while an evictor frees their pages and
// churners reuse the memory at once.  Prints the effective configuration,
// the report and the verdict; --json writes all of it.
//
// The run goes in a child process, so that a crash is an outcome too: with
// defer off a reader may copy through a freed descriptor's data pointer.
//
// Exit status: 0 if no bad read where none may be (defer on, or ref and
// stackcopy, whose bytes need no deferral), or, for the unsafe control
// (--defer off with noref), if bad reads were detected or the run crashed;
// 1 on bad reads or a crash where none may be (or no read at all); 2 if
// inconclusive (the control detected nothing, or nothing was evicted).
//
// Through a mount (tools/check/mount_race.h, docs/races.md):
//   --mount DIR                 a directory on a running norefs mount;
//   --daemon PATH [--backing D] start PATH (the norefs daemon) on a temporary
//                               mountpoint with --read-path, --defer,
//                               --cache-size, --read-delay-us and -o, and
//                               unmount it in every outcome.
// --partial-fault runs the partial-fault test (tools/check/partial_fault.h)
// in-process, or through the mount with --mount/--daemon.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include "tools/check/evict_race.h"
#include "tools/check/mount_race.h"
#include "tools/check/partial_fault.h"
#include "tools/lib/guarded_main.h"
#include "tools/lib/progress.h"
#include "tools/lib/report.h"

using norefs::tools::EvictMode;
using norefs::tools::EvictRaceParams;

namespace {

bool write_json(const std::string& path, const std::string& text) {
  return norefs::tools::report::write_file("norefs_evict_race", path, text);
}

int run_and_report(const EvictRaceParams& p, const std::string& json_path) {
  norefs::tools::EvictRaceResult r;
  try {
    norefs::tools::Progress progress;  // stderr, about once a second
    r = norefs::tools::run_evict_race(p, [&progress](const std::string& l) { progress.update(l); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "norefs_evict_race: %s\n", e.what());
    return 1;
  }
  norefs::tools::EvictRaceVerdict v = norefs::tools::evict_race_verdict(p, r);
  std::printf("\n%s\n%s\n", norefs::tools::format_evict_race_report(p, r).c_str(),
              v.message.c_str());
  if (!json_path.empty() && !write_json(json_path, norefs::tools::evict_race_json(p, &r, v))) {
    return 1;
  }
  return v.exit_code;
}

std::atomic<bool> g_cancel{false};

extern "C" void on_signal(int) {
  // Relaxed: the runs poll it; it publishes nothing.
  g_cancel.store(true, std::memory_order_relaxed);
}

// What the through-the-mount modes were given on the command line.
struct MountCli {
  std::string mount, daemon, backing, options, cache_size = "1M";
  unsigned read_delay_us = 0;
  bool control = false, partial = false;
  bool no_evict = false, no_punch = false, no_rewrite = false, no_truncate = false;
  unsigned mutate_pause_us = 1000;
  unsigned zap_pause_us = 50;
};

// Runs the through-the-mount race or the partial-fault test on `dir`.
int run_on(const std::string& dir, const MountCli& m, const EvictRaceParams& ip,
           const CLI::App& app, const std::string& json_path, const std::string& daemon_options,
           bool control) {
  if (m.partial) {
    norefs::tools::PartialFaultParams p;
    p.dir = dir;
    p.read_path = ip.read_path;
    p.seconds = ip.seconds;
    if (app.count("--readers")) p.readers = ip.readers;
    if (app.count("--files")) p.files = ip.files;
    if (app.count("--file-pages")) p.file_pages = ip.file_pages;
    if (app.count("--max-read")) p.max_read = ip.max_read;
    p.zap_pause_us = m.zap_pause_us;
    p.seed = ip.seed;
    p.keep_bad = ip.keep_bad;
    p.cancel = &g_cancel;
    std::fputs(norefs::tools::describe_partial_fault_config(p).c_str(), stdout);
    std::fflush(stdout);
    norefs::tools::PartialFaultResult r;
    try {
      r = norefs::tools::run_partial_fault(p);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "norefs_evict_race: %s\n", e.what());
      return 1;
    }
    std::printf("\n%s", norefs::tools::format_partial_fault_report(r).c_str());
    if (!json_path.empty() && !write_json(json_path, norefs::tools::partial_fault_json(p, r))) {
      return 1;
    }
    return norefs::tools::partial_fault_exit_code(r);
  }
  norefs::tools::MountRaceParams p;
  p.dir = dir;
  p.seconds = ip.seconds;
  if (app.count("--readers")) p.readers = ip.readers;
  if (app.count("--files")) p.files = ip.files;
  if (app.count("--file-pages")) p.file_pages = ip.file_pages;
  if (app.count("--max-read")) p.max_read = ip.max_read;
  if (app.count("--evict-pause-us")) p.evict_pause_us = ip.evict_pause_us;
  p.mutate_pause_us = m.mutate_pause_us;
  p.evict = !m.no_evict;
  p.punch = !m.no_punch;
  p.rewrite = !m.no_rewrite;
  p.truncate = !m.no_truncate;
  p.seed = ip.seed;
  p.keep_bad = ip.keep_bad;
  p.control = control;
  p.cancel = &g_cancel;
  std::fputs(norefs::tools::describe_mount_race_config(p).c_str(), stdout);
  std::fflush(stdout);
  norefs::tools::MountRaceResult r;
  try {
    r = norefs::tools::run_mount_race(p);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "norefs_evict_race: %s\n", e.what());
    return 1;
  }
  norefs::tools::MountRaceVerdict v = norefs::tools::mount_race_verdict(p, r);
  std::printf("\n%s\n%s\n", norefs::tools::format_mount_race_report(r).c_str(), v.message.c_str());
  if (!json_path.empty() &&
      !write_json(json_path, norefs::tools::mount_race_json(p, r, v, daemon_options))) {
    return 1;
  }
  return v.exit_code;
}

int run_mount_modes(const MountCli& m, const EvictRaceParams& ip, const CLI::App& app,
                    const std::string& json_path, const std::string& read_path,
                    const std::string& defer) {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  if (!m.mount.empty()) {
    return run_on(m.mount, m, ip, app, json_path, "", m.control);
  }
  // --daemon: the daemon's options from ours, then -o (later wins).
  std::string opts = "read_path=" + read_path + ",defer=" + defer + ",cache_size=" + m.cache_size;
  if (m.read_delay_us) opts += ",debug_read_delay_us=" + std::to_string(m.read_delay_us);
  if (!m.options.empty()) opts += "," + m.options;
  // The unsafe control: defer off with the noref path (as in-process).
  const bool control = m.control || (!m.partial && defer == "off" && read_path == "noref" &&
                                     opts.find("read_path=") == opts.rfind("read_path=") &&
                                     opts.find("defer=") == opts.rfind("defer="));
  std::printf("daemon: %s -o %s\n", m.daemon.c_str(), opts.c_str());
  std::fflush(stdout);
  norefs::tools::DaemonMount dm(m.daemon, opts, m.backing);
  try {
    dm.start();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "norefs_evict_race: %s\n", e.what());
    return 1;
  }
  int code = run_on(dm.mountpoint(), m, ip, app, json_path, opts, control);
  std::optional<int> died = dm.exited();
  std::optional<int> st = dm.stop();
  if (died) {
    std::printf("the daemon died during the run: %s\n",
                norefs::tools::describe_wait_status(*died).c_str());
    if (control) {
      std::printf("control: the daemon's death is the broken guarantee showing as a crash\n");
      return 0;
    }
    std::printf("FAIL\n%s", dm.log().c_str());
    return 1;
  }
  if (!st || !WIFEXITED(*st) || WEXITSTATUS(*st) != 0) {
    std::printf("FAIL: the daemon %s at unmount\n%s",
                st ? norefs::tools::describe_wait_status(*st).c_str() : "had to be killed",
                dm.log().c_str());
    return 1;
  }
  std::printf("daemon exited 0 after the unmount\n");
  return g_cancel.load() ? 1 : code;
}

}  // namespace

static int run(int argc, char** argv) {
  CLI::App app{
      "norefs_evict_race: check every byte readers read while their pages are evicted and the "
      "memory reused"};
  EvictRaceParams p;
  std::string read_path = "noref", defer = "on", tcache = "private", mode = "both";
  std::string json_path;
  app.add_option("--read-path", read_path, "read path")
      ->check(CLI::IsMember({"noref", "ref", "ref-fetchadd", "stackcopy"}));
  app.add_option("--defer", defer, "deferred page free (off with noref: the unsafe control)")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_flag("--poison", p.poison, "fill freed pages with the poison byte (poison_on_free)");
  app.add_option("--tcache", tcache, "arena tcache mode: private or none")
      ->check(CLI::IsMember({"private", "none"}));
  app.add_option("-s,--seconds", p.seconds, "how long to run")->check(CLI::Range(0.01, 86400.0));
  app.add_option("--readers", p.readers, "reader threads")->check(CLI::Range(1u, 256u));
  app.add_option("--churners", p.churners, "arena churn threads")->check(CLI::Range(0u, 256u));
  app.add_option("--files", p.files, "files")->check(CLI::Range(1u, 65535u));
  app.add_option("--file-pages", p.file_pages, "pages per file")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  app.add_option("--max-read", p.max_read, "longest read in bytes")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 24));
  app.add_option("--churn-pages", p.churn_pages, "pages per churn batch")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  app.add_option("--evictor-churn-pages", p.evictor_churn_pages,
                 "pages the evictor allocates, patterns and frees after each eviction")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 20));
  app.add_option("--evict-pause-us", p.evict_pause_us, "evictor sleep after each call")
      ->check(CLI::Range(0u, 1000000u));
  app.add_option("--evict-mode", mode, "evict (fadvise DONTNEED), invalidate, or both")
      ->check(CLI::IsMember({"evict", "invalidate", "both"}));
  app.add_option("--limit-pages", p.limit_pages, "cache memory limit in pages (0: none)");
  app.add_option("--readahead-max-pages", p.readahead_max_pages, "readahead window maximum")
      ->check(CLI::Range(0u, 1024u));
  app.add_option("--seed", p.seed, "seed of the readers' random ranges");
  app.add_option("--keep-bad", p.keep_bad, "bad reads to show")->check(CLI::Range(0u, 1000u));
  app.add_option("--json", json_path, "also write config, result and verdict as JSON");
  // Under TSan the run stays in this process: jemalloc's fork handlers
  // lock its mutexes before fork() and re-initialize them in the child
  // without unlocking, so TSan in the child reports a "double lock" on the
  // next trylock (in PagePool's arena stats refresh).  Not a bug of ours.
#if defined(__SANITIZE_THREAD__)
  bool no_fork = true;
#else
  bool no_fork = false;
#endif
  app.add_flag("--no-fork", no_fork, "run in this process (a crash is then not reported)");

  MountCli m;
  auto* o_mount =
      app.add_option("--mount", m.mount, "through the mount: a directory on a running norefs mount")
          ->check(CLI::ExistingDirectory);
  auto* o_daemon = app.add_option("--daemon", m.daemon,
                                  "through the mount: start this norefs daemon on a temporary "
                                  "mountpoint (unmounted in every outcome)")
                       ->check(CLI::ExistingFile);
  o_mount->excludes(o_daemon);
  app.add_option("--backing", m.backing, "--daemon: backing directory (default: a temporary one)")
      ->check(CLI::ExistingDirectory)
      ->needs(o_daemon);
  app.add_option("-o", m.options, "--daemon: more daemon -o options (after ours)")->needs(o_daemon);
  app.add_option("--cache-size", m.cache_size, "--daemon: the daemon's cache_size (default 1M)")
      ->needs(o_daemon);
  app.add_option("--read-delay-us", m.read_delay_us,
                 "--daemon: the daemon's debug_read_delay_us (test builds of the daemon only): "
                 "widens the race window")
      ->check(CLI::Range(0u, 1000000u))
      ->needs(o_daemon);
  app.add_flag("--control", m.control,
               "the mount is the unsafe control: bad reads are expected (--daemon infers it "
               "from --defer off with noref)");
  app.add_flag("--partial-fault", m.partial,
               "the partial-fault test: reads into buffers whose pages are zapped "
               "(in-process, or through --mount/--daemon)");
  app.add_option("--zap-pause-us", m.zap_pause_us, "--partial-fault: shared-buffer zapper sleep");
  app.add_flag("--no-evict", m.no_evict, "through the mount: no evictor");
  app.add_flag("--no-punch", m.no_punch, "through the mount: no hole punches");
  app.add_flag("--no-rewrite", m.no_rewrite, "through the mount: no rewrites");
  app.add_flag("--no-truncate", m.no_truncate, "through the mount: no truncate + rewrite");
  app.add_option("--mutate-pause-us", m.mutate_pause_us,
                 "through the mount: each changer's sleep after a change")
      ->check(CLI::Range(0u, 1000000u));
  CLI11_PARSE(app, argc, argv);

  p.read_path = *norefs::cache::parse_read_path(read_path);
  p.defer = defer == "on";
  p.tcache =
      tcache == "none" ? norefs::alloc::TcacheMode::none : norefs::alloc::TcacheMode::private_;
  p.mode = mode == "evict"        ? EvictMode::evict
           : mode == "invalidate" ? EvictMode::invalidate
                                  : EvictMode::both;

  if (!m.mount.empty() || !m.daemon.empty()) {
    return run_mount_modes(m, p, app, json_path, read_path, defer);
  }
  if (m.partial) return run_on("", m, p, app, json_path, "", false);

  std::fputs(norefs::tools::describe_evict_race_config(p).c_str(), stdout);
  std::fflush(stdout);
  if (no_fork) return run_and_report(p, json_path);

  // The run goes in a child: with defer off a reader may crash on a freed
  // descriptor, and that outcome is reported too.  Nothing has started a
  // thread yet, so the child is a clean copy.
  pid_t pid = fork();
  if (pid < 0) {
    std::perror("norefs_evict_race: fork");
    return 1;
  }
  if (pid == 0) {
    int code = run_and_report(p, json_path);
    std::fflush(nullptr);
    _exit(code);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      std::perror("norefs_evict_race: waitpid");
      return 1;
    }
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  norefs::tools::EvictRaceVerdict v =
      norefs::tools::evict_race_crash_verdict(p, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  std::printf("\n%s\n", v.message.c_str());
  if (!json_path.empty() && !write_json(json_path, norefs::tools::evict_race_json(p, nullptr, v))) {
    return 1;
  }
  return v.exit_code;
}

int main(int argc, char** argv) {
  return norefs::tools::guarded_main("norefs_evict_race", [&] { return run(argc, argv); });
}
