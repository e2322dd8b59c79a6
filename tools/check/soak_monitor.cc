// SPDX-License-Identifier: LGPL-2.1-or-later
#include "tools/check/soak_monitor.h"

#include <poll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <system_error>

#include "alloc/page.h"
#include "cache/page_cache.h"
#include "tools/ctl/ctl.h"
#include "tools/ctl/stats_json.h"

namespace norefs::tools {
namespace {

using nlohmann::ordered_json;

constexpr std::size_t kKeptOver = 8;

std::uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000 +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

std::string u(std::uint64_t v) { return std::to_string(v); }

class PidFd {
 public:
  explicit PidFd(pid_t pid) : fd_(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))) {
    if (fd_ < 0) {
      throw std::system_error(errno, std::generic_category(),
                              "pidfd_open of the daemon (pid " + std::to_string(pid) + ")");
    }
  }
  ~PidFd() { ::close(fd_); }
  PidFd(const PidFd&) = delete;
  PidFd& operator=(const PidFd&) = delete;
  // True once the process has exited (readable pidfd), without waiting.
  bool exited() const {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }

 private:
  int fd_;
};

void write_status(const std::string& path, const ordered_json& j) {
  // Replaced atomically: the soak's progress loop never reads half a file.
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << j.dump() << '\n';
    if (!f) return;  // a missed status line is no failure of the soak
  }
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace

std::vector<CounterCheck> final_counter_checks(const alloc::Counters& a,
                                               const cache::CacheCounters& c,
                                               std::uint64_t limit_pages) {
  using cache::Ctr;
  std::vector<CounterCheck> v;
  auto check = [&v](std::string name, bool ok, std::string detail) {
    v.push_back({std::move(name), ok, std::move(detail)});
  };
  check("nothing waits for a grace period", a.pending == 0 && a.inflight == 0,
        "pending " + u(a.pending) + ", inflight " + u(a.inflight));
  std::uint64_t back = a.immediate + a.not_deferred + a.freed_after_gp;
  check("every allocated page is back in the arena", a.allocated == back,
        "allocated " + u(a.allocated) + " = immediate " + u(a.immediate) + " + not_deferred " +
            u(a.not_deferred) + " + freed_after_gp " + u(a.freed_after_gp) + " (" + u(back) + ")");
  check("every deferred page was freed after its grace period", a.deferred == a.freed_after_gp,
        "deferred " + u(a.deferred) + ", freed_after_gp " + u(a.freed_after_gp));
  check("no page freed before its grace period", a.check_violations == 0,
        "check_violations " + u(a.check_violations));
  check("the pool's peak of waiting pages is within the limit", a.peak_waiting <= limit_pages,
        "peak_waiting " + u(a.peak_waiting) + ", limit " + u(limit_pages));
  check("the cache is empty", c.pages_cached == 0 && c.active_pages == 0,
        "pages_cached " + u(c.pages_cached) + ", active_pages " + u(c.active_pages));
  std::uint64_t left = c[Ctr::evicted] + c[Ctr::removed_pages] + c[Ctr::written_pages];
  check("pages that left the cache <= pages allocated", left <= a.allocated,
        "evicted " + u(c[Ctr::evicted]) + " + removed " + u(c[Ctr::removed_pages]) +
            " + replaced by writes " + u(c[Ctr::written_pages]) + " = " + u(left) + ", allocated " +
            u(a.allocated));
  check("pages read from the backing file <= pages allocated",
        c[Ctr::readahead_pages] <= a.allocated,
        "readahead_pages " + u(c[Ctr::readahead_pages]) + ", allocated " + u(a.allocated));
  check("zero_copy_reads <= fast_reads <= reads",
        c[Ctr::zero_copy_reads] <= c[Ctr::fast_reads] && c[Ctr::fast_reads] <= c[Ctr::reads],
        u(c[Ctr::zero_copy_reads]) + " <= " + u(c[Ctr::fast_reads]) + " <= " + u(c[Ctr::reads]));
  check("every batch stop followed a full batch of fast pages",
        c.stops(cache::Stop::batch) * c.batch <= c[Ctr::fast_pages],
        "stop_batch " + u(c.stops(cache::Stop::batch)) + " x batch " + u(c.batch) +
            " <= fast_pages " + u(c[Ctr::fast_pages]));
  check("no backing I/O error", c[Ctr::io_errors] == 0, "io_errors " + u(c[Ctr::io_errors]));
  return v;
}

bool MonitorResult::ok() const {
  if (!daemon_exited || samples == 0 || over_limit != 0) return false;
  return std::all_of(checks.begin(), checks.end(), [](const CounterCheck& c) { return c.ok; });
}

MonitorResult run_monitor(const MonitorParams& p) {
  if (p.interval_us == 0) throw std::invalid_argument("the sampling interval must be positive");
  ctl::MountInfo mi;
  {
    // Closed at once: a descriptor in the mount would keep it busy.
    ctl::Fd fd(p.mount);
    mi = ctl::info(fd);
  }
  alloc::StatsReader a(mi.alloc_stats);
  cache::CacheStatsReader c(mi.cache_stats);
  PidFd daemon(static_cast<pid_t>(mi.pid));

  MonitorResult r;
  r.daemon_pid = mi.pid;
  cache::CacheCounters first = c.sum();
  r.limit_pages = first.limit_pages;
  r.read_path = std::string(cache::read_path_name(static_cast<cache::ReadPath>(first.read_path)));
  if (r.limit_pages == 0) {
    throw std::runtime_error(p.mount + ": the mount has no cache_size limit to check");
  }
  const std::int64_t limit = static_cast<std::int64_t>(r.limit_pages);
  const std::uint64_t interval = std::uint64_t{p.interval_us} * 1000;
  const std::uint64_t status_every = std::uint64_t{p.status_every_ms} * 1000000;
  const std::uint64_t start = now_ns();
  std::uint64_t next = start, last_sample = start, next_status = start;
  for (;;) {
    next += interval;
    timespec deadline{static_cast<time_t>(next / 1000000000), static_cast<long>(next % 1000000000)};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr);
    // Once exited the daemon frees nothing more: the last sample below is
    // of its final state.
    bool exited = daemon.exited();
    std::int64_t live = a.live_lower_bound();
    std::uint64_t waiting = a.waiting();
    cache::CacheCounters cc = c.sum();
    const std::uint64_t t = now_ns();
    r.samples++;
    if (t > next + interval) r.late_samples++;
    r.max_gap_ms = std::max(r.max_gap_ms, static_cast<double>(t - last_sample) / 1e6);
    last_sample = t;
    if (live > limit) {
      r.over_limit++;
      if (r.first_over.size() < kKeptOver) {
        r.first_over.push_back({static_cast<double>(t - start) / 1e9, live});
      }
    }
    r.max_live = std::max(r.max_live, live);
    r.max_cached = std::max(r.max_cached, cc.pages_cached);
    r.max_waiting = std::max(r.max_waiting, waiting);
    r.max_cached_plus_waiting = std::max(r.max_cached_plus_waiting, cc.pages_cached + waiting);
    if (!p.status_path.empty() && (t >= next_status || exited)) {
      next_status = t + status_every;
      write_status(p.status_path, {{"read_path", r.read_path},
                                   {"elapsed_s", static_cast<double>(t - start) / 1e9},
                                   {"samples", r.samples},
                                   {"late_samples", r.late_samples},
                                   {"reads", cc[cache::Ctr::reads]},
                                   {"bytes", cc[cache::Ctr::bytes]},
                                   {"evicted", cc[cache::Ctr::evicted]},
                                   {"pages_cached", cc.pages_cached},
                                   {"waiting", waiting},
                                   {"live", live},
                                   {"limit_pages", r.limit_pages},
                                   {"max_live", r.max_live},
                                   {"over_limit", r.over_limit},
                                   {"daemon_exited", exited}});
    }
    if (exited) {
      r.daemon_exited = true;
      break;
    }
    if (p.stop && p.stop->load(std::memory_order_relaxed)) break;  // relaxed: a flag, no data
    // Behind by more than an interval (a loaded machine): take the next
    // sample now and count it late, rather than a burst to catch up.
    if (t > next + interval) next = t;
  }
  r.seconds = static_cast<double>(now_ns() - start) / 1e9;
  r.alloc_final = a.sum();
  r.cache_final = c.sum();
  if (r.daemon_exited) r.checks = final_counter_checks(r.alloc_final, r.cache_final, r.limit_pages);
  return r;
}

std::string monitor_json(const MonitorParams& p, const MonitorResult& r) {
  ordered_json over = ordered_json::array();
  for (const OverLimitSample& s : r.first_over) {
    over.push_back({{"elapsed_s", s.elapsed_s}, {"live", s.live}});
  }
  ordered_json checks = ordered_json::array();
  for (const CounterCheck& c : r.checks) {
    checks.push_back({{"name", c.name}, {"ok", c.ok}, {"detail", c.detail}});
  }
  ordered_json j;
  j["params"] = {
      {"mount", p.mount}, {"interval_us", p.interval_us}, {"status_every_ms", p.status_every_ms}};
  j["daemon_pid"] = r.daemon_pid;
  j["read_path"] = r.read_path;
  j["limit_pages"] = r.limit_pages;
  j["limit_bytes"] = r.limit_pages * alloc::kPageSize;
  j["seconds"] = r.seconds;
  j["sampling"] = {{"samples", r.samples},
                   {"late_samples", r.late_samples},
                   {"max_gap_ms", r.max_gap_ms},
                   {"over_limit", r.over_limit},
                   {"first_over_limit", over},
                   {"max_live", r.max_live},
                   {"max_cached", r.max_cached},
                   {"max_waiting", r.max_waiting},
                   {"max_cached_plus_waiting", r.max_cached_plus_waiting}};
  j["daemon_exited"] = r.daemon_exited;
  j["final_checks"] = checks;
  j["final"] = {{"alloc", alloc_counters_json(r.alloc_final)},
                {"cache", cache_counters_json(r.cache_final)}};
  j["ok"] = r.ok();
  return j.dump(2);
}

std::string format_monitor_report(const MonitorResult& r) {
  char b[512];
  std::string s;
  std::snprintf(b, sizeof b,
                "%s: %llu samples in %.1f s (%llu late, longest gap %.1f ms); live pages max "
                "%lld of %llu (cached max %llu, waiting max %llu); over the limit: %llu\n",
                r.read_path.c_str(), static_cast<unsigned long long>(r.samples), r.seconds,
                static_cast<unsigned long long>(r.late_samples), r.max_gap_ms,
                static_cast<long long>(r.max_live), static_cast<unsigned long long>(r.limit_pages),
                static_cast<unsigned long long>(r.max_cached),
                static_cast<unsigned long long>(r.max_waiting),
                static_cast<unsigned long long>(r.over_limit));
  s += b;
  for (const OverLimitSample& o : r.first_over) {
    std::snprintf(b, sizeof b, "  over the limit at %.3f s: %lld pages\n", o.elapsed_s,
                  static_cast<long long>(o.live));
    s += b;
  }
  if (!r.daemon_exited) s += "  the daemon had not exited: no final counters checked\n";
  for (const CounterCheck& c : r.checks) {
    s += std::string("  ") + (c.ok ? "ok    " : "FAILED") + " " + c.name + ": " + c.detail + "\n";
  }
  return s;
}

}  // namespace norefs::tools
