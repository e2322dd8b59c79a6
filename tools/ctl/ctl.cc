// SPDX-License-Identifier: LGPL-2.1-or-later
#include "tools/ctl/ctl.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "alloc/page.h"
#include "cache/page_cache.h"

#include "fs/control.h"
#include "tools/lib/report.h"

namespace norefs::tools::ctl {
namespace {

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

[[noreturn]] void fail_ioctl(const Fd& fd, const char* what, int err) {
  std::string why;
  switch (err) {
    case EPERM:
      why = "only root or the mounting user may use the norefs control interface";
      break;
    case ENOTTY:
    case ENOSYS:
      why = "not a norefs mount";
      break;
    default:
      why = std::generic_category().message(err);
  }
  throw CtlError(fd.path() + ": " + what + ": " + why, err);
}

// EVICT and PREFETCH act on a regular file's cache; the daemon answers
// ENOTTY for anything else, which would read as "not a norefs mount".
void require_regular(const Fd& fd) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw CtlError(fd.path() + ": " + std::generic_category().message(errno), errno);
  if (!S_ISREG(st.st_mode)) throw CtlError(fd.path() + ": not a regular file", EINVAL);
}

template <typename T>
void do_ioctl(const Fd& fd, unsigned long cmd, const char* what, T* arg) {
  if (::ioctl(fd.get(), cmd, arg) != 0) fail_ioctl(fd, what, errno);
}

}  // namespace

Fd::Fd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)), path_(path) {
  if (fd_ < 0) throw CtlError(path + ": " + std::generic_category().message(errno), errno);
}

Fd::~Fd() { ::close(fd_); }

MountInfo info(const Fd& fd) {
  norefs_info in{};
  do_ioctl(fd, NOREFS_IOC_INFO, "NOREFS_IOC_INFO", &in);
  // The daemon NUL-terminates; do not trust it to.
  in.alloc_stats[sizeof(in.alloc_stats) - 1] = '\0';
  in.cache_stats[sizeof(in.cache_stats) - 1] = '\0';
  return {in.pid, in.alloc_stats, in.cache_stats};
}

std::uint64_t evict(const Fd& fd) {
  require_regular(fd);
  norefs_evict ev{};
  do_ioctl(fd, NOREFS_IOC_EVICT, "NOREFS_IOC_EVICT", &ev);
  return ev.pages;
}

Prefetch prefetch(const Fd& fd, std::uint64_t offset, std::uint64_t length,
                  const cache::CacheStatsReader* cache) {
  require_regular(fd);
  norefs_prefetch pf{};
  pf.offset = offset;
  pf.length = length;
  std::uint64_t before = cache ? cache->sum()[cache::Ctr::readahead_pages] : 0;
  std::uint64_t t0 = now_ns();
  do_ioctl(fd, NOREFS_IOC_PREFETCH, "NOREFS_IOC_PREFETCH", &pf);
  Prefetch r;
  r.wall_ns = now_ns() - t0;
  r.pages_read = pf.pages_read;
  r.daemon_ns = pf.nanoseconds;
  if (cache) r.counter_pages = cache->sum()[cache::Ctr::readahead_pages] - before;
  return r;
}

RangeRead read_range(const Fd& fd, std::uint64_t offset, std::uint64_t length,
                     const cache::CacheStatsReader& cache) {
  // A kernel_cache mount would answer from the kernel's page cache.
  ::posix_fadvise(fd.get(), static_cast<off_t>(offset), static_cast<off_t>(length),
                  POSIX_FADV_DONTNEED);
  constexpr std::size_t kChunk = 1 << 20;
  std::vector<char> buf(kChunk);
  const cache::CacheCounters before = cache.sum();
  RangeRead r;
  std::uint64_t t0 = now_ns();
  while (r.bytes < length) {
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, length - r.bytes));
    ssize_t n = ::pread(fd.get(), buf.data(), want, static_cast<off_t>(offset + r.bytes));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw CtlError(fd.path() + ": pread: " + std::generic_category().message(errno), errno);
    }
    if (n == 0) break;  // EOF came early: the file shrank
    r.bytes += static_cast<std::uint64_t>(n);
  }
  r.wall_ns = now_ns() - t0;
  const cache::CacheCounters after = cache.sum();
  r.pages_read = after[cache::Ctr::readahead_pages] - before[cache::Ctr::readahead_pages];
  r.misses = after[cache::Ctr::misses] - before[cache::Ctr::misses];
  r.hits = after.hits() - before.hits();
  return r;
}

PrefetchMeasure measure_prefetch(const Fd& fd, std::uint64_t offset, std::uint64_t length,
                                 const cache::CacheStatsReader& cache) {
  require_regular(fd);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw CtlError(fd.path() + ": " + std::generic_category().message(errno), errno);
  auto size = static_cast<std::uint64_t>(st.st_size);
  PrefetchMeasure m;
  m.offset = offset;
  m.length = offset >= size ? 0 : (length == 0 ? size - offset : std::min(length, size - offset));

  m.evicted_without = evict(fd);
  m.read_without = read_range(fd, m.offset, m.length, cache);

  m.evicted_with = evict(fd);
  m.advice = prefetch(fd, m.offset, m.length, &cache);
  m.read_with = read_range(fd, m.offset, m.length, cache);
  return m;
}

// ---- norefsctl top ----------------------------------------------------------

namespace {

// A delta of two sums of per-thread counters.  Each slot only grows and keeps
// its counts when a thread exits, so a later sum is never smaller for the
// same daemon; if it is, the numbers are not comparable and the delta is 0.
std::uint64_t delta(std::uint64_t before, std::uint64_t after) {
  return after >= before ? after - before : 0;
}

std::optional<double> ratio(std::uint64_t num, std::uint64_t den) {
  if (den == 0) return std::nullopt;
  return static_cast<double>(num) / static_cast<double>(den);
}

double mib(std::uint64_t pages) {
  return static_cast<double>(pages) * alloc::kPageSize / 1048576.0;
}

std::string percent(const std::optional<double>& v) {
  if (!v) return "-";
  char b[16];
  std::snprintf(b, sizeof b, "%.1f%%", 100.0 * *v);
  return b;
}

using report::fmt;

}  // namespace

TopSnapshot top_snapshot(const alloc::StatsReader& a, const cache::CacheStatsReader& c,
                         std::uint64_t pid) {
  TopSnapshot s;
  s.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  s.alloc = a.sum();
  s.cache = c.sum();
  s.rss_kib = daemon_rss_kib(pid);
  return s;
}

TopRates top_rates(const TopSnapshot* prev, const TopSnapshot& now) {
  using cache::Ctr;
  TopRates r;
  const cache::CacheCounters& c = now.cache;
  r.pages_cached = c.pages_cached;
  r.active_pages = c.active_pages;
  r.limit_pages = c.limit_pages;
  r.waiting = now.alloc.waiting;
  r.peak_waiting = now.alloc.peak_waiting;
  r.remote_readers = now.alloc.remote.slots_in_use;
  r.remote_blocking_pid = now.alloc.remote.blocking_pid;
  r.remote_blocking_ms = now.alloc.remote.blocking_ms;
  r.remote_reclaimed = now.alloc.remote.reclaimed_dead;
  r.batch = c.batch;
  r.read_path = c.read_path <= static_cast<std::uint64_t>(cache::ReadPath::stackcopy)
                    ? std::string(cache::read_path_name(static_cast<cache::ReadPath>(c.read_path)))
                    : "unknown";
  r.rss_kib = now.rss_kib;
  r.hit_ratio_total = ratio(c.hits(), c.hits() + c[Ctr::misses]);
  r.fast_share_total = ratio(c[Ctr::fast_pages], c.hits());
  if (!prev || now.seconds <= prev->seconds) return r;

  const cache::CacheCounters& p = prev->cache;
  const double dt = now.seconds - prev->seconds;
  r.interval_s = dt;
  auto per_s = [dt](std::uint64_t before, std::uint64_t after) {
    return static_cast<double>(delta(before, after)) / dt;
  };
  auto ctr_per_s = [&](Ctr k) { return per_s(p[k], c[k]); };
  r.reads_per_s = ctr_per_s(Ctr::reads);
  r.bytes_per_s = ctr_per_s(Ctr::bytes);
  const std::uint64_t hits = delta(p.hits(), c.hits());
  const std::uint64_t misses = delta(p[Ctr::misses], c[Ctr::misses]);
  r.hit_ratio = ratio(hits, hits + misses);
  r.fast_share = ratio(delta(p[Ctr::fast_pages], c[Ctr::fast_pages]), hits);
  r.evictions_per_s = ctr_per_s(Ctr::evicted);
  r.grace_periods_per_s = per_s(prev->alloc.grace_periods, now.alloc.grace_periods);
  r.expedites_per_s = per_s(prev->alloc.expedites, now.alloc.expedites);
  for (std::size_t i = 0; i < cache::kStops; i++) {
    auto stop = static_cast<cache::Stop>(i);
    double v = per_s(p.stops(stop), c.stops(stop));
    r.stops_per_s += v;
    if (v > 0) r.stops.emplace_back(std::string(cache::stop_name(stop)), v);
  }
  // Highest rate first; equal rates in the enum's order (stable).
  std::stable_sort(r.stops.begin(), r.stops.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return r;
}

std::string human_rate(double v) {
  char b[32];
  if (v >= 999.5e6) {
    std::snprintf(b, sizeof b, "%.3gG", v / 1e9);
  } else if (v >= 999.5e3) {
    std::snprintf(b, sizeof b, "%.3gM", v / 1e6);
  } else if (v >= 999.5) {
    std::snprintf(b, sizeof b, "%.3gk", v / 1e3);
  } else {
    std::snprintf(b, sizeof b, "%.0f", v);
  }
  return b;
}

std::vector<std::string> format_top(const TopRates& r, std::string_view title, std::size_t width,
                                    std::size_t max_stops) {
  const bool rates = r.interval_s > 0;
  auto rate = [rates](double v) { return rates ? human_rate(v) + "/s" : std::string("-"); };
  std::vector<std::string> lines;
  std::string head = "norefs top  " + std::string(title) + "  " + r.read_path + " batch " +
                     std::to_string(r.batch);
  if (rates) head += "  over " + fmt("%.2f s", r.interval_s);
  lines.push_back(head);

  lines.push_back("reads    " + rate(r.reads_per_s) + "  " +
                  (rates ? human_rate(r.bytes_per_s) + "B/s" : "-") + "  hit " +
                  percent(r.hit_ratio) + " (all " + percent(r.hit_ratio_total) + ")  fast path " +
                  percent(r.fast_share) + " (all " + percent(r.fast_share_total) + ")");

  std::string stops = "stops    " + rate(r.stops_per_s);
  for (std::size_t i = 0; i < r.stops.size() && i < max_stops; i++) {
    stops += (i ? ", " : "  ") + r.stops[i].first + " " + human_rate(r.stops[i].second);
  }
  if (r.stops.size() > max_stops) stops += ", ...";
  lines.push_back(stops);

  lines.push_back("cache    " + std::to_string(r.pages_cached) + " pages (" +
                  fmt("%.2f MiB", mib(r.pages_cached)) + "), " + std::to_string(r.active_pages) +
                  " active, limit " +
                  (r.limit_pages ? std::to_string(r.limit_pages) + " pages (" +
                                       fmt("%.0f MiB", mib(r.limit_pages)) + ")"
                                 : std::string("none")));
  lines.push_back("waiting  " + std::to_string(r.waiting) + " pages now (" +
                  fmt("%.2f MiB", mib(r.waiting)) + "), peak " + std::to_string(r.peak_waiting) +
                  " (" + fmt("%.2f MiB", mib(r.peak_waiting)) + ")");
  lines.push_back("rcu      grace periods " + rate(r.grace_periods_per_s) + "  expedites " +
                  rate(r.expedites_per_s) + "  evictions " + rate(r.evictions_per_s));
  // Only when another process reads the cache, or did.
  if (r.remote_readers || r.remote_reclaimed || r.remote_blocking_pid) {
    std::string l = "remote   " + std::to_string(r.remote_readers) + " reader threads";
    if (r.remote_blocking_pid) {
      l += ", grace period held " + std::to_string(r.remote_blocking_ms) + " ms by pid " +
           std::to_string(r.remote_blocking_pid);
    }
    if (r.remote_reclaimed) l += ", " + std::to_string(r.remote_reclaimed) + " dead reclaimed";
    lines.push_back(l);
  }
  lines.push_back("daemon   RSS " + (r.rss_kib
                                         ? fmt("%.1f MiB", static_cast<double>(*r.rss_kib) / 1024.0)
                                         : std::string("-")));
  for (auto& l : lines) {
    if (l.size() > width) l.resize(width);
  }
  return lines;
}

std::optional<std::uint64_t> parse_vmrss_kib(std::string_view status) {
  std::size_t at = 0;
  while (at < status.size()) {
    std::size_t end = status.find('\n', at);
    if (end == std::string_view::npos) end = status.size();
    std::string_view line = status.substr(at, end - at);
    at = end + 1;
    if (line.substr(0, 6) != "VmRSS:") continue;
    // "VmRSS:\t    1234 kB"
    std::uint64_t kib = 0;
    bool digits = false;
    for (char ch : line.substr(6)) {
      if (ch >= '0' && ch <= '9') {
        kib = kib * 10 + static_cast<std::uint64_t>(ch - '0');
        digits = true;
      } else if (digits) {
        break;
      }
    }
    if (!digits || line.find("kB") == std::string_view::npos) return std::nullopt;
    return kib;
  }
  return std::nullopt;
}

std::optional<std::uint64_t> daemon_rss_kib(std::uint64_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  if (!f) return std::nullopt;
  std::ostringstream text;
  text << f.rdbuf();
  return parse_vmrss_kib(text.str());
}

}  // namespace norefs::tools::ctl
