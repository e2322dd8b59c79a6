// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/ctl/ctl.h — the library half of norefsctl: the control ioctls of a norefs
// mount (fs/control.h) and the prefetch measurement, in the style of the
// MADV_WILLNEED measurement in seeds/madvise-willneed-cow-swap.txt: pages
// read from the backing file during the advice and during the later read,
// and the time of each, against the same read without the advice.
//
// It also holds the arithmetic of `norefsctl top` (snapshots of the two
// counter blocks, rates from their deltas, the screen as lines of text), so
// that tests feed it snapshots; the terminal handling stays in the main.
//
// Errors are CtlError with a message a user can act on ("not a norefs
// mount", "only root or the mounting user ..."), never a bare errno.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "alloc/stats_block.h"
#include "cache/cache_stats.h"

namespace norefs::tools::ctl {

class CtlError : public std::runtime_error {
 public:
  CtlError(const std::string& what, int err) : std::runtime_error(what), err_(err) {}
  int err() const { return err_; }

 private:
  int err_;
};

// An open O_RDONLY descriptor of a file or directory, closed on destruction.
class Fd {
 public:
  explicit Fd(const std::string& path);  // throws CtlError
  ~Fd();
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

struct MountInfo {
  std::uint64_t pid = 0;
  std::string alloc_stats;  // alloc/stats_block.h block
  std::string cache_stats;  // cache/cache_stats.h block
};

// NOREFS_IOC_INFO on any file or directory of the mount.
MountInfo info(const Fd& fd);

// NOREFS_IOC_EVICT on a regular file: pages evicted.
std::uint64_t evict(const Fd& fd);

struct Prefetch {
  std::uint64_t pages_read = 0;     // reported by the daemon
  std::uint64_t daemon_ns = 0;      // reported by the daemon
  std::uint64_t wall_ns = 0;        // the ioctl as this process saw it
  std::uint64_t counter_pages = 0;  // readahead_pages delta around the ioctl
};

// NOREFS_IOC_PREFETCH of [offset, offset+length); length 0 = to EOF.
// `cache`, when given, also takes the readahead_pages delta.
Prefetch prefetch(const Fd& fd, std::uint64_t offset, std::uint64_t length,
                  const cache::CacheStatsReader* cache = nullptr);

struct RangeRead {
  std::uint64_t bytes = 0;
  std::uint64_t pages_read = 0;  // readahead_pages delta: read from the backing file
  std::uint64_t misses = 0;      // misses delta
  std::uint64_t hits = 0;        // hits delta (fast_pages + slow_hits)
  std::uint64_t wall_ns = 0;
};

// Reads [offset, offset+length) through the mount with pread (1 MiB calls),
// after posix_fadvise(DONTNEED) so that a kernel_cache mount's page cache
// does not answer instead of the daemon.  Deltas are of the whole daemon: run
// it on a quiet mount.
RangeRead read_range(const Fd& fd, std::uint64_t offset, std::uint64_t length,
                     const cache::CacheStatsReader& cache);

struct PrefetchMeasure {
  std::uint64_t offset = 0, length = 0;  // length resolved against the file size
  // Without the advice: evict, then read.
  std::uint64_t evicted_without = 0;
  RangeRead read_without;
  // With it: evict, prefetch, then read.
  std::uint64_t evicted_with = 0;
  Prefetch advice;
  RangeRead read_with;
};

PrefetchMeasure measure_prefetch(const Fd& fd, std::uint64_t offset, std::uint64_t length,
                                 const cache::CacheStatsReader& cache);

// ---- norefsctl top ----------------------------------------------------------

// The two counter blocks and the daemon's RSS at one moment.
struct TopSnapshot {
  double seconds = 0;  // steady clock
  alloc::Counters alloc;
  cache::CacheCounters cache;
  std::optional<std::uint64_t> rss_kib;  // VmRSS of the daemon; nullopt if unreadable
};

TopSnapshot top_snapshot(const alloc::StatsReader& a, const cache::CacheStatsReader& c,
                         std::uint64_t pid);

// What one frame shows.  Rates are deltas over `interval_s`; a counter that
// went backwards (another daemon behind the same path) counts as 0.  With no
// previous snapshot (the first frame) interval_s is 0 and no rate is known.
struct TopRates {
  double interval_s = 0;
  double reads_per_s = 0, bytes_per_s = 0;
  // Over the interval; nullopt when nothing was hit or missed in it.
  std::optional<double> hit_ratio;   // hits / (hits + misses)
  std::optional<double> fast_share;  // fast_pages / hits
  // Since the daemon started.
  std::optional<double> hit_ratio_total, fast_share_total;
  double stops_per_s = 0;
  // Fast-path stops per second by reason, highest first, only those > 0.
  std::vector<std::pair<std::string, double>> stops;
  double grace_periods_per_s = 0, expedites_per_s = 0, evictions_per_s = 0;
  // Gauges of the newer snapshot.
  std::uint64_t pages_cached = 0, active_pages = 0, limit_pages = 0;
  std::uint64_t waiting = 0, peak_waiting = 0;
  // Readers in other processes (alloc's remote counters).
  std::uint64_t remote_readers = 0, remote_blocking_pid = 0, remote_blocking_ms = 0;
  std::uint64_t remote_reclaimed = 0;
  std::string read_path;
  std::uint64_t batch = 0;
  std::optional<std::uint64_t> rss_kib;
};

// `prev` null: the first frame (gauges only).
TopRates top_rates(const TopSnapshot* prev, const TopSnapshot& now);

// The screen: a header line then one line per group, none wider than
// `width` columns.  `title` goes into the header (the mount, the pid);
// at most `max_stops` stop reasons are shown.
std::vector<std::string> format_top(const TopRates& r, std::string_view title,
                                    std::size_t width = 80, std::size_t max_stops = 4);

// "12.3k", "65.3M", "950": three significant digits, for rates.
std::string human_rate(double v);

// VmRSS from the text of /proc/<pid>/status, in KiB; nullopt if absent.
std::optional<std::uint64_t> parse_vmrss_kib(std::string_view status);
// Reads /proc/<pid>/status; nullopt if it cannot be read (the daemon exited,
// or another user's process under hidepid).
std::optional<std::uint64_t> daemon_rss_kib(std::uint64_t pid);

}  // namespace norefs::tools::ctl
