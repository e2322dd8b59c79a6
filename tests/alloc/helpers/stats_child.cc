// SPDX-License-Identifier: LGPL-2.1-or-later
//
// norefs_alloc_stats_child PATH — a separate process reading a PagePool's
// stats block, for tests/alloc/stats_test.cc.
//
// Protocol on stdin/stdout: maps PATH with StatsReader and prints "ready";
// waits for one line on stdin; then prints "name value" lines of the sum it
// reads at that moment, and "end".  Exit status 0, or 2 (usage), 3 (stdin
// closed), 4 (StatsReader threw: the message goes to stderr, and the kind to
// stdout as "error system_error" / "error runtime_error").
#include <cinttypes>
#include <cstdio>
#include <stdexcept>
#include <system_error>

#include "alloc/stats_block.h"

int main(int argc, char** argv) {
  using norefs::alloc::Counters;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s STATS_PATH\n", argv[0]);
    return 2;
  }
  try {
    norefs::alloc::StatsReader reader(argv[1]);
    std::printf("ready\n");
    std::fflush(stdout);
    char line[64];
    if (std::fgets(line, sizeof line, stdin) == nullptr) return 3;
    Counters c = reader.sum();
    std::uint64_t waiting = reader.waiting();
    auto out = [](const char* name, std::uint64_t v) { std::printf("%s %" PRIu64 "\n", name, v); };
    out("pending", c.pending);
    out("inflight", c.inflight);
    out("waiting", c.waiting);
    out("peak_waiting", c.peak_waiting);
    out("allocated", c.allocated);
    out("deferred", c.deferred);
    out("immediate", c.immediate);
    out("not_deferred", c.not_deferred);
    out("freed_after_gp", c.freed_after_gp);
    out("expedites", c.expedites);
    out("expedited_pages", c.expedited_pages);
    out("check_violations", c.check_violations);
    out("threads", c.threads);
    out("slots", c.slots);
    out("config", c.config);
    out("reader_waiting", waiting);
    std::printf("end\n");
    return 0;
  } catch (const std::system_error& e) {
    std::printf("error system_error\n");
    std::fprintf(stderr, "%s\n", e.what());
  } catch (const std::runtime_error& e) {
    std::printf("error runtime_error\n");
    std::fprintf(stderr, "%s\n", e.what());
  }
  return 4;
}
