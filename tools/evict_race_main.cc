// SPDX-License-Identifier: LGPL-2.1-or-later
//
// norefs_evict_race — the evict-race checker (tools/evict_race.h): readers
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
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>

#include "tools/evict_race.h"
#include "tools/progress.h"

using norefs::tools::EvictMode;
using norefs::tools::EvictRaceParams;

namespace {

bool write_json(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  f.close();
  if (!f) {
    std::fprintf(stderr, "norefs_evict_race: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
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

}  // namespace

int main(int argc, char** argv) {
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
  CLI11_PARSE(app, argc, argv);

  p.read_path = *norefs::cache::parse_read_path(read_path);
  p.defer = defer == "on";
  p.tcache =
      tcache == "none" ? norefs::alloc::TcacheMode::none : norefs::alloc::TcacheMode::private_;
  p.mode = mode == "evict"        ? EvictMode::evict
           : mode == "invalidate" ? EvictMode::invalidate
                                  : EvictMode::both;

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
