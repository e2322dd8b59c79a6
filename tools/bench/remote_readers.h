// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/bench/remote_readers.h — readers in other processes for the
// benchmarks: starts norefs_remote_reader (tools/bench/remote_reader.cc)
// and speaks its line protocol over two pipes.
//
// Why a program of its own and not the benchmark re-exec'd through
// /proc/self/exe: the benchmarks' functions also run inside the test
// binary (tests/tools/bench), whose /proc/self/exe is a gtest main; a
// separate small program (no CLI11, no PageCache) serves both benchmarks
// and the tests alike, and holds nothing of the parent but what it maps,
// as a client of the daemon would.  The cost: the tools must find it
// (default_remote_reader()).
//
// Each RemoteReader is one process, started with posix_spawn: stdin and
// stdout one end of a socket pair (commands in, replies out), stderr the
// parent's, and the fds it needs at 3 and 4 (the only ones it inherits).  The destructor ends it
// (SIGCONT first, in case it is stopped; then EOF on its stdin; SIGKILL
// after 5 s) and reaps it: never a process left behind.
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "cache/cache_stats.h"
#include "cache/shared_file.h"

namespace norefs::tools {

// norefs_remote_reader next to this program (the build tree's
// tools/bench, or an installed bin/'s ../lib/norefs), or "" if none.
std::string default_remote_reader();

// What the reader reports of the bytes it copied: FNV-1a, 64 bits.
std::uint64_t fnv1a_64(const std::byte* p, std::size_t n);

// One snapshot of a reading process ("snap" reply).
struct RemoteReadSnapshot {
  std::uint64_t reads = 0;  // its loop count
  long long cpu_ns = -1;    // its reading thread's CPU clock; -1 unknown
  std::uint64_t cache_reads = 0, fast_reads = 0, short_reads = 0;  // its own CacheStats slot
  std::array<std::uint64_t, cache::kStops> stops{};
};

class RemoteReader {
 public:
  // A process that reads `size` bytes at 0 of `file` through the fast path
  // in a loop, pinned to `cpu` (-1: not pinned).  Returns once it reads
  // (its "ready").  Throws std::runtime_error / std::system_error.
  static RemoteReader fast_reader(const std::string& program, int region_fd, int registry_fd,
                                  const cache::SharedFile* file, std::size_t size, unsigned batch,
                                  int cpu);
  // A process that took a registry slot and idles, pinned to `cpu` (-1: not).
  static RemoteReader idle_reader(const std::string& program, int registry_fd, int cpu);

  RemoteReader(RemoteReader&& o) noexcept;
  RemoteReader& operator=(RemoteReader&&) = delete;
  RemoteReader(const RemoteReader&) = delete;
  ~RemoteReader();

  pid_t pid() const { return pid_; }
  long slot() const { return slot_; }  // its registry slot index (-1: none)
  // fnv1a_64() of the bytes its first read copied (idle: 0).
  std::uint64_t first_hash() const { return first_hash_; }

  // Writes one command line ("s", "e", "l", "q"), not waiting for the reply.
  void send(char command);
  // Reads one reply line; it must start with `word`.  Throws with the
  // process's exit status if it ended, or after `timeout`.
  std::string expect(const char* word,
                     std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // "s" + its reply, in two halves so that a caller can ask every process
  // first and collect after (the snapshots then lie microseconds apart).
  RemoteReadSnapshot read_snapshot();
  // "q", its "bye", and the exit status: the process has ended.  Returns
  // fnv1a_64() of the bytes its last read copied (idle: 0).  Throws if it
  // did not exit 0.
  std::uint64_t finish();

 private:
  RemoteReader(const std::string& program, std::vector<std::string> args,
               const std::vector<int>& fds);
  void end();
  pid_t pid_ = -1;
  int sock_ = -1;  // our end of its stdin and stdout (one socket pair)
  long slot_ = -1;
  std::uint64_t first_hash_ = 0;
  std::string pending_;  // bytes read past the last line
};

}  // namespace norefs::tools
