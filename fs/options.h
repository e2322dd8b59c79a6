// SPDX-License-Identifier: LGPL-2.1-or-later
//
// fs/options.h — the daemon's command line: `norefs [options] <backing-dir>
// <mountpoint>`.  FUSE's own options (-f -d -s -h -V, -o clone_fd, mount
// options such as allow_other) are parsed by libfuse; ours are -o options
// stripped from the arguments before libfuse sees the rest (its
// fuse_session_new() rejects what nobody consumed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/config.h"

namespace norefs::fs {

// How read replies are sent (see ops_file.cc, "Reply modes").
enum class ReplyMode : std::uint8_t { automatic, copy, iov };

struct Options {
  // ── Ours (-o) ──
  std::size_t cache_bytes = 256ull << 20;  // cache_size; 0 = unbounded
  cache::ReadPath read_path = cache::ReadPath::noref;
  bool defer = true;
  bool expedite = true;
  std::size_t expedite_pages = 1024;
  unsigned gp_interval_us = alloc::PagePoolConfig{}.gp_interval_us;
  long dirty_decay_ms = alloc::PagePoolConfig{}.dirty_decay_ms;
  unsigned batch = 31;
  bool cache = true;          // cache=off: plain passthrough
  bool write_fill = true;     // PageCacheConfig::write_fill_partial
  bool kernel_cache = false;  // keep_cache instead of direct_io
  std::size_t readahead_bytes = 128 << 10;
  unsigned max_threads = 0;  // 0: the default (default_max_threads())
  ReplyMode reply = ReplyMode::automatic;
  double coherence_timeout = 1.0;  // seconds
  // Serve requests over the kernel's FUSE io_uring queues (fs/fuse_uring.h,
  // docs/fuse-io-uring.md) instead of /dev/fuse reads and writes.
  bool io_uring = false;
  // "" until validated: then the -o stats_dir value, else default_stats_dir().
  std::string stats_dir;
  // Test builds only (NOREFS_SYNC_POINTS): operations do not switch to the
  // caller's credentials (fs/credentials.h), the permission tests' control.
  bool debug_daemon_credentials = false;
#ifdef NOREFS_SYNC_POINTS
  // Test builds only (docs/races.md): microseconds a fast-path reader
  // (noref, stackcopy) sleeps after its page lookup and before its copy,
  // inside the read-side section (sync points read:fast:before_copy,
  // read:stackcopy:before_copy), to widen the race window deferral closes.
  // Builds without sync points reject the option.
  unsigned debug_read_delay_us = 0;
#endif

  // ── Remounting (mount -o remount,ro|rw: mount(8) runs the helper again) ──
  bool remount = false;    // -o remount: change a running mount, start nothing
  bool read_only = false;  // -o ro seen (rw clears it); also passed to libfuse

  // ── FUSE's (fuse_parse_cmdline) ──
  bool foreground = false;
  bool debug = false;
  bool singlethread = false;
  bool clone_fd = false;
  unsigned max_idle_threads = ~0u;

  // ── Positional ──
  std::string backing_dir;  // absolute (realpath) once validated
  std::string mountpoint;   // absolute (realpath) once validated

  // Where the counter blocks go when stats_dir is not given: /run/norefs for
  // root; for a user mount $XDG_RUNTIME_DIR/norefs, or /tmp/norefs-<uid>
  // when XDG_RUNTIME_DIR is unset (either is checked like any stats_dir).
  static std::string default_stats_dir();
  // The worker thread maximum when max_threads is not given.
  static unsigned default_max_threads();
  unsigned effective_max_threads() const {
    return max_threads ? max_threads : default_max_threads();
  }
  std::size_t limit_pages() const {
    return (cache_bytes + cache::kPageSize - 1) / cache::kPageSize;
  }
  unsigned readahead_pages() const {
    return static_cast<unsigned>((readahead_bytes + cache::kPageSize - 1) / cache::kPageSize);
  }
  // The PageCacheConfig these options ask for; stats paths for `pid`.
  cache::PageCacheConfig cache_config(long pid) const;
};

// What parse_command_line() decided.
struct ParseResult {
  enum Action { run, exit_ok, exit_usage } action = run;
  Options opts;
  // Arguments left for fuse_session_new() (argv[0] first): FUSE's mount and
  // session options, plus fsname= and subtype= added by us.
  std::vector<std::string> fuse_args;
};

// Parses and validates everything that can be checked before mounting:
// option values, the backing directory, the mountpoint (exists, is a
// directory, is not a mount point yet, is not inside the backing
// directory), the stats directory (created 0700 if missing; refused unless
// it is a directory, not a symlink, owned by the effective uid and writable
// by nobody else).  Prints a
// clear message to stderr on bad input (exit_usage), the help or version to
// stdout (exit_ok).
ParseResult parse_command_line(int argc, char* argv[]);

// Exposed for tests: "256M" -> 268435456; k,K,m,M,g,G are binary.
std::optional<std::size_t> parse_size(std::string_view s);
// True if `path` (absolute, canonical) is a mount point according to
// `mountinfo` (the text of /proc/self/mountinfo).
bool is_mount_point(std::string_view mountinfo, std::string_view path);
// The filesystem type of the topmost mount at `path` ("fuse.norefs"), or ""
// if nothing is mounted there.
std::string mount_type(std::string_view mountinfo, std::string_view path);

}  // namespace norefs::fs
