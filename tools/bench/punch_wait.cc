// SPDX-License-Identifier: LGPL-2.1-or-later
#include "tools/bench/punch_wait.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <memory>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "alloc/page_pool.h"
#include "alloc/reader_registry.h"
#include "alloc/stats_block.h"
#include "cache/cache_stats.h"
#include "cache/page_cache.h"
#include "tools/bench/remote_readers.h"
#include "tools/ctl/ctl.h"
#include "tools/lib/report.h"

extern char** environ;

namespace norefs::tools::punch_wait {
namespace {

constexpr std::uint64_t kPage = cache::kPageSize;
constexpr double kMiB = 1024.0 * 1024.0;

std::uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000 +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

void sleep_until_ns(std::uint64_t t) {
  timespec d{static_cast<time_t>(t / 1000000000), static_cast<long>(t % 1000000000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &d, nullptr) == EINTR) {
  }
}

[[noreturn]] void sys_fail(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

bool stopped(const Params& p) {
  // Relaxed: a flag set by a signal handler and polled; it publishes no data.
  return p.interrupted && p.interrupted->load(std::memory_order_relaxed);
}

// Minor faults of `pid` (/proc/<pid>/stat field 10).
std::uint64_t minor_faults(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(in)), {});
  auto r = s.rfind(')');
  if (r == std::string::npos) return 0;
  std::istringstream is(s.substr(r + 2));
  std::string f;
  for (int i = 3; i <= 10 && is >> f; i++) {
    if (i == 10) return std::stoull(f);
  }
  return 0;
}

// Where the counters are, and whose RSS to sample; the reader registry
// whose grace periods the cell waits for (nullptr: none in the run), and
// the reader process to stop inside a section (nullptr: none).
struct Probe {
  long pid;
  const alloc::StatsReader* alloc;
  const cache::CacheStatsReader* cache;
  alloc::ReaderRegistry* registry = nullptr;
  RemoteReader* stopper = nullptr;
};

// One sample: pages waiting for a grace period, pages cached, pages not
// back in the arena (a lower bound: see Sampler::loop), the RSS in KiB.
struct Sample {
  std::uint64_t waiting, cached, live_min, rss_kib;
};

// One 2 ms sampler over the counter blocks and /proc/<pid>/status.
class Sampler {
 public:
  Sampler(const Params& p, const Cell& c, Probe probe)
      : p_(p), cell_(c), probe_(probe), status_("/proc/" + std::to_string(probe.pid) + "/status") {
    fd_ = ::open(status_.c_str(), O_RDONLY | O_CLOEXEC);
  }
  ~Sampler() {
    if (fd_ >= 0) ::close(fd_);
  }
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  std::uint64_t rss() {
    if (fd_ < 0) return 0;
    char buf[4096];
    ssize_t n = ::pread(fd_, buf, sizeof(buf) - 1, 0);
    if (n <= 0) return 0;
    buf[n] = 0;
    const char* v = std::strstr(buf, "VmRSS:");
    return v ? std::strtoull(v + 6, nullptr, 10) : 0;
  }

  // Samples until `done()` (checked after each sample) in phase `phase`;
  // calls `each(t_ms, sample)` per sample.
  template <class Done, class Each>
  void loop(const char* phase, std::uint64_t t0, Done done, Each each) {
    std::uint64_t next = now_ns();
    for (;;) {
      next += std::uint64_t{p_.sample_us} * 1000;
      sleep_until_ns(next);
      // Waiting first, then cached: a page leaves the cached count before it
      // joins the waiting one (page_cache.cc: lru_del, then free_removed),
      // so in this order a page removed meanwhile is counted at most once
      // (the other order counts it twice).
      std::uint64_t waiting = probe_.alloc->waiting();
      std::uint64_t cached = probe_.cache->sum().pages_cached;
      // The bound is checked on this, not on cached + waiting: a page that
      // was waiting at the first read can finish its grace period, go back
      // to the arena and be cached again before the second (expedited grace
      // periods take microseconds, and a preempted sampler can sit between
      // the reads for a millisecond), so that sum may count it twice (seen:
      // 276 and 312 of 256 pages, in the test suite on a loaded machine).
      // live_lower_bound() never overstates: a sample over B proves the
      // bound was broken (alloc/stats_block.h).
      std::int64_t live = probe_.alloc->live_lower_bound();
      std::uint64_t r = rss();
      double t_ms = static_cast<double>(now_ns() - t0) / 1e6;
      if (p_.samples_csv) {
        *p_.samples_csv << std::fixed << std::setprecision(3) << t_ms << ','
                        << variant_name(cell_.variant) << ',' << mode_name(cell_.mode) << ','
                        << cell_.threads << ',' << cell_.gp_interval_us << ',' << cell_.round << ','
                        << phase << ',' << waiting << ',' << cached << ',' << r << '\n';
      }
      if (each(t_ms, Sample{waiting, cached, live < 0 ? 0 : static_cast<std::uint64_t>(live), r}))
        return;
      if (done()) return;
    }
  }

 private:
  const Params& p_;
  const Cell& cell_;
  Probe probe_;
  std::string status_;
  int fd_ = -1;
};

// What a loader does to its file, behind one interface for both targets.
struct FileOps {
  virtual ~FileOps() = default;
  virtual void write(const std::byte* buf, std::size_t n, std::uint64_t off) = 0;
  virtual void free_all(Variant v, std::uint64_t size) = 0;
};

// Runs the load and the sampling of one cell; fills in *c.
void measure(const Params& p, Cell& c, std::vector<std::unique_ptr<FileOps>>& files, Probe probe) {
  const std::size_t n = files.size();
  std::vector<std::vector<std::byte>> bufs(n);
  for (std::size_t i = 0; i < n; i++) {
    bufs[i].assign(p.write_bytes, static_cast<std::byte>(0x11 + i));
  }
  Sampler sampler(p, c, probe);
  c.idle_rss_kib = sampler.rss();
  alloc::Counters a0 = probe.alloc->sum();
  cache::CacheCounters k0 = probe.cache->sum();
  std::uint64_t f0 = minor_faults(probe.pid);

  const alloc::ReaderRegistryStats g0 =
      probe.registry ? probe.registry->stats() : alloc::ReaderRegistryStats{};
  c.registry_slots = g0.slots_in_use;
  std::atomic<bool> stop{false};
  // Single writer each (its loader: relaxed load + store); summed by the
  // stopper during the load, and after the join.
  std::vector<std::atomic<std::uint64_t>> bytes(n);
  auto total_bytes = [&] {
    std::uint64_t sum = 0;
    for (const auto& b : bytes) sum += b.load(std::memory_order_relaxed);
    return sum;
  };
  std::vector<std::string> errors(n);
  std::vector<std::thread> loaders;
  const std::uint64_t t0 = now_ns();
  for (std::size_t i = 0; i < n; i++) {
    loaders.emplace_back([&, i] {
      try {
        while (!stop.load()) {
          for (std::uint64_t off = 0; off < p.file_bytes && !stop.load(); off += p.write_bytes) {
            std::size_t len = static_cast<std::size_t>(
                std::min<std::uint64_t>(p.write_bytes, p.file_bytes - off));
            files[i]->write(bufs[i].data(), len, off + p.write_offset);
            bytes[i].store(bytes[i].load(std::memory_order_relaxed) + len,
                           std::memory_order_relaxed);
          }
          files[i]->free_all(c.variant, p.file_bytes + p.write_offset);
        }
      } catch (const std::exception& e) {
        errors[i] = e.what();
        stop.store(true);
      }
    });
  }
  const std::uint64_t load_end = t0 + static_cast<std::uint64_t>(p.seconds * 1e9);
  // The stop (stop_reader_ms): at 1/3 of the load the reader enters a
  // section ("in" once it is inside), is stopped for stop_reader_ms, then
  // continues and leaves it.  Its window, for the sampler: [begin, end)
  // in now_ns(), 0 until set (release/acquire: the sampler then also sees
  // the bytes read before it).
  std::atomic<std::uint64_t> stop_begin{0}, stop_end{0};
  std::string stop_error;
  std::thread stopper;
  if (probe.stopper) {
    stopper = std::thread([&] {
      RemoteReader& r = *probe.stopper;
      sleep_until_ns(t0 + static_cast<std::uint64_t>(p.seconds * 1e9 / 3));
      if (stop.load() || stopped(p)) return;
      try {
        r.send('e');
        r.expect("in");
        if (kill(r.pid(), SIGSTOP) != 0) sys_fail("kill(SIGSTOP) of the remote reader");
        const std::uint64_t b0 = total_bytes(), s0 = now_ns();
        stop_begin.store(s0, std::memory_order_release);
        const std::uint64_t until = s0 + std::uint64_t{p.stop_reader_ms} * 1000000;
        // In 10 ms steps, so that a failed loader or a signal ends it early.
        while (now_ns() < until && !stop.load() && !stopped(p)) {
          sleep_until_ns(std::min(until, now_ns() + 10000000));
        }
        const std::uint64_t b1 = total_bytes(), s1 = now_ns();
        stop_end.store(s1, std::memory_order_release);
        kill(r.pid(), SIGCONT);
        r.send('l');
        r.expect("out");
        c.stop_ms = static_cast<double>(s1 - s0) / 1e6;
        c.stop_gib_per_s =
            static_cast<double>(b1 - b0) / (1024.0 * kMiB) / (static_cast<double>(s1 - s0) / 1e9);
      } catch (const std::exception& e) {
        kill(r.pid(), SIGCONT);
        stop_error = e.what();
      }
    });
  }
  double sum_w = 0, sum_c = 0, sum_r = 0;
  const std::uint64_t bound_kib = c.bound_pages * kPage / 1024;
  const std::uint64_t slack_kib = c.idle_rss_kib + p.rss_slack_bytes / 1024;
  sampler.loop(
      "load", t0, [&] { return now_ns() >= load_end || stop.load() || stopped(p); },
      [&](double, const Sample& smp) {
        const std::uint64_t w = smp.waiting, k = smp.cached, r = smp.rss_kib;
        c.samples++;
        sum_w += static_cast<double>(w);
        sum_c += static_cast<double>(k);
        sum_r += static_cast<double>(r);
        c.peak_waiting = std::max(c.peak_waiting, w);
        c.peak_cached = std::max(c.peak_cached, k);
        c.peak_total = std::max(c.peak_total, w + k);
        c.peak_live = std::max(c.peak_live, smp.live_min);
        c.peak_rss_kib = std::max(c.peak_rss_kib, r);
        if (c.bound_pages && smp.live_min > c.bound_pages) c.samples_over_bound++;
        if (c.bound_pages && r > bound_kib + slack_kib) c.rss_over_bound_samples++;
        if (probe.registry) {
          const alloc::ReaderRegistryStats g = probe.registry->stats();
          c.max_gp_blocked_ms = std::max(c.max_gp_blocked_ms, g.blocking_ms);
          if (probe.stopper && g.blocking_pid == probe.stopper->pid()) {
            c.stop_blocker_named = true;
          }
        }
        const std::uint64_t sb = stop_begin.load(std::memory_order_acquire);
        if (sb != 0 && stop_end.load(std::memory_order_acquire) == 0) c.stop_samples++;
        return false;
      });
  stop.store(true);
  for (auto& t : loaders) t.join();
  if (stopper.joinable()) stopper.join();
  const std::uint64_t t1 = now_ns();
  c.seconds = static_cast<double>(t1 - t0) / 1e9;
  if (stopped(p)) throw Interrupted();
  for (std::size_t i = 0; i < n; i++) {
    if (!errors[i].empty())
      throw std::runtime_error("loader " + std::to_string(i) + ": " + errors[i]);
  }
  if (!stop_error.empty()) throw std::runtime_error("stopping the remote reader: " + stop_error);
  if (probe.stopper && stop_end.load() == 0) {
    throw std::runtime_error("the load ended before the remote reader's stop did");
  }
  if (probe.registry) {
    const alloc::ReaderRegistryStats g1 = probe.registry->stats();
    c.registry_gps = g1.grace_periods - g0.grace_periods;
    c.membarriers = g1.membarriers - g0.membarriers;
    c.registry_waited = g1.waited - g0.waited;
  }
  alloc::Counters a1 = probe.alloc->sum();
  cache::CacheCounters k1 = probe.cache->sum();
  c.minor_faults = minor_faults(probe.pid) - f0;
  c.bytes = total_bytes();
  c.gib_per_s = static_cast<double>(c.bytes) / (1024.0 * kMiB) / c.seconds;
  if (c.samples) {
    c.mean_waiting = sum_w / static_cast<double>(c.samples);
    c.mean_cached = sum_c / static_cast<double>(c.samples);
    c.mean_rss_kib = sum_r / static_cast<double>(c.samples);
  }
  c.grace_periods = a1.grace_periods - a0.grace_periods;
  c.expedites = a1.expedites - a0.expedites;
  c.gp_per_s = static_cast<double>(c.grace_periods) / c.seconds;
  c.expedites_per_s = static_cast<double>(c.expedites) / c.seconds;
  c.write_alloc = k1[cache::Ctr::write_alloc] - k0[cache::Ctr::write_alloc];
  c.write_skipped = k1[cache::Ctr::write_skipped] - k0[cache::Ctr::write_skipped];
  c.limit_drains = k1[cache::Ctr::limit_drains] - k0[cache::Ctr::limit_drains];
  c.limit_blocked = k1[cache::Ctr::limit_blocked] - k0[cache::Ctr::limit_blocked];

  // Memory given back: RSS against the live pages, after the load.
  if (p.settle_seconds > 0 && !stopped(p)) {
    const std::uint64_t settle_end = t1 + static_cast<std::uint64_t>(p.settle_seconds * 1e9);
    sampler.loop(
        "settle", t0, [&] { return now_ns() >= settle_end || stopped(p); },
        [&](double t_ms, const Sample& smp) {
          const std::uint64_t r = smp.rss_kib;
          alloc::Counters a = probe.alloc->sum();
          c.end_rss_kib = r;
          c.end_live_pages = a.live();
          if (c.settle_ms < 0 && r <= a.live() * kPage / 1024 + slack_kib) {
            c.settle_ms = t_ms - static_cast<double>(t1 - t0) / 1e6;
          }
          return false;
        });
  }
}

// ── In-process ──

struct InprocFile final : FileOps {
  cache::PageCache& cache;
  int fd;
  std::shared_ptr<cache::CachedFile> f;
  InprocFile(cache::PageCache& pc, int i) : cache(pc) {
    fd = memfd_create(("punch_wait." + std::to_string(i)).c_str(), MFD_CLOEXEC);
    if (fd < 0) sys_fail("memfd_create");
    f = cache.open_file(std::make_unique<cache::FdBacking>(fd, true), 0);
  }
  ~InprocFile() override { f.reset(); }
  void write(const std::byte* buf, std::size_t n, std::uint64_t off) override {
    for (std::size_t done = 0; done < n;) {
      ssize_t r = ::pwrite(fd, buf + done, n - done, static_cast<off_t>(off + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) sys_fail("pwrite to the memfd backing file");
      done += static_cast<std::size_t>(r);
    }
    (void)cache.write(*f, off, buf, n);  // -ENOMEM: caches less, still consistent
  }
  void free_all(Variant v, std::uint64_t size) override {
    switch (v) {
      case Variant::punch:
        if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                      static_cast<off_t>(size))) {
          sys_fail("fallocate(PUNCH_HOLE) of the memfd");
        }
        (void)cache.punch(*f, 0, size);
        break;
      case Variant::truncate:
        if (ftruncate(fd, 0)) sys_fail("ftruncate of the memfd");
        (void)cache.truncate(*f, 0);
        break;
      case Variant::evict:
        cache.evict(*f);
        break;
    }
  }
};

std::string temp_dir(const Params& p, const char* what) {
  std::string t = p.work_dir + "/norefs_punch_wait." + what + ".XXXXXX";
  if (!mkdtemp(t.data())) sys_fail("mkdtemp in " + p.work_dir);
  return t;
}

alloc::PagePoolConfig pool_config(const Params& p, const Cell& c) {
  alloc::PagePoolConfig pc;
  pc.defer = c.mode != Mode::off;
  pc.expedite = c.mode == Mode::expedite || c.mode == Mode::bound;
  pc.expedite_pages = p.expedite_pages;
  pc.gp_interval_us = c.gp_interval_us;
  if (p.dirty_decay_ms >= -2) pc.dirty_decay_ms = p.dirty_decay_ms;
  return pc;
}

void run_inproc(const Params& p, Cell& c, alloc::ReaderRegistry* registry, RemoteReader* stopper) {
  std::string dir = temp_dir(p, "stats");
  struct Cleanup {
    std::string d;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } cleanup{dir};
  cache::PageCacheConfig cfg;
  cfg.pool = pool_config(p, c);
  cfg.pool.stats_path = dir + "/alloc";
  cfg.stats_path = dir + "/cache";
  cfg.limit_pages = c.mode == Mode::bound ? (p.bound_bytes + kPage - 1) / kPage : 0;
  cfg.write_fill_partial = p.write_fill_partial;
  c.bound_pages = cfg.limit_pages;
  cache::PageCache pc(cfg);
  {
    std::vector<std::unique_ptr<FileOps>> files;
    for (unsigned i = 0; i < c.threads; i++)
      files.push_back(std::make_unique<InprocFile>(pc, static_cast<int>(i)));
    alloc::StatsReader ar(cfg.pool.stats_path);
    cache::CacheStatsReader cr(cfg.stats_path);
    measure(p, c, files, Probe{static_cast<long>(getpid()), &ar, &cr, registry, stopper});
  }
}

// ── Through a mount ──

struct MountFile final : FileOps {
  int fd;
  std::string path;
  MountFile(const std::string& dir, unsigned i) : path(dir + "/punch_wait." + std::to_string(i)) {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) sys_fail("open " + path);
  }
  ~MountFile() override {
    ::close(fd);
    ::unlink(path.c_str());
  }
  void write(const std::byte* buf, std::size_t n, std::uint64_t off) override {
    for (std::size_t done = 0; done < n;) {
      ssize_t r = ::pwrite(fd, buf + done, n - done, static_cast<off_t>(off + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) sys_fail("pwrite " + path);
      done += static_cast<std::size_t>(r);
    }
  }
  void free_all(Variant v, std::uint64_t size) override {
    switch (v) {
      case Variant::punch:
        if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                      static_cast<off_t>(size))) {
          sys_fail("fallocate(PUNCH_HOLE) " + path);
        }
        break;
      case Variant::truncate:
        if (ftruncate(fd, 0)) sys_fail("ftruncate " + path);
        break;
      case Variant::evict: {
        ctl::Fd f(path);
        ctl::evict(f);
        break;
      }
    }
  }
};

bool is_mounted(const std::string& dir) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream is(line);
    std::string f;
    for (int i = 0; i < 5 && is >> f; i++) {
    }
    if (f == dir) return true;
  }
  return false;
}

// A daemon started for one cell; unmounted and reaped in every outcome.
class Daemon {
 public:
  Daemon(const Params& p, const Cell& c, const std::string& root) : mnt_(root + "/mnt") {
    std::string backing = root + "/backing", stats = root + "/stats";
    for (const auto& d : {backing, mnt_, stats}) {
      if (::mkdir(d.c_str(), 0700) && errno != EEXIST) sys_fail("mkdir " + d);
    }
    log_ = root + "/daemon.log";
    alloc::PagePoolConfig pc = pool_config(p, c);
    std::string opts = "stats_dir=" + stats + ",defer=" + (pc.defer ? "on" : "off") +
                       ",expedite=" + (pc.expedite ? "on" : "off") +
                       ",expedite_pages=" + std::to_string(p.expedite_pages) +
                       ",gp_interval_us=" + std::to_string(c.gp_interval_us) +
                       ",cache_size=" + std::to_string(c.mode == Mode::bound ? p.bound_bytes : 0);
    if (p.dirty_decay_ms >= -1) opts += ",dirty_decay_ms=" + std::to_string(p.dirty_decay_ms);
    if (!p.write_fill_partial) opts += ",write_fill=off";
    std::vector<std::string> argv{p.daemon, "-f", "-o", opts, backing, mnt_};
    cmd_.clear();
    for (const auto& a : argv) cmd_ += a + " ";
    std::vector<char*> av;
    av.reserve(argv.size() + 1);
    for (auto& a : argv) av.push_back(a.data());
    av.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    // Its own process group: a terminal's ^C reaches the tool, which then
    // unmounts; the daemon must not quit under the running load first.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    int err = posix_spawn(&pid_, p.daemon.c_str(), &fa, &attr, av.data(), environ);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    if (err) {
      errno = err;
      sys_fail("cannot start the daemon " + p.daemon);
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!is_mounted(mnt_)) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("the daemon exited before mounting: " + cmd_ + "\n" + log());
      }
      if (std::chrono::steady_clock::now() > deadline) {
        stop();
        throw std::runtime_error("no mount after 10 s: " + cmd_ + "\n" + log());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    struct stat st {};
    if (::stat(mnt_.c_str(), &st) != 0) {
      stop();
      throw std::runtime_error("the mount does not answer: " + cmd_ + "\n" + log());
    }
  }
  ~Daemon() { stop(); }
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  const std::string& mnt() const { return mnt_; }

  void stop() {
    if (pid_ <= 0) return;
    if (is_mounted(mnt_)) {
      pid_t u = -1;
      std::vector<std::string> argv{"fusermount3", "-u", mnt_};
      std::vector<char*> av;
      av.reserve(argv.size() + 1);
      for (auto& a : argv) av.push_back(a.data());
      av.push_back(nullptr);
      if (posix_spawnp(&u, "fusermount3", nullptr, nullptr, av.data(), environ) == 0) {
        int st = 0;
        ::waitpid(u, &st, 0);
      }
    }
    for (int i = 0; i < 500; i++) {  // 5 s for the daemon to exit
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      ::waitpid(pid_, &st, 0);
      pid_ = -1;
    }
    if (is_mounted(mnt_)) ::umount2(mnt_.c_str(), MNT_DETACH);
  }

 private:
  std::string log() const {
    std::ifstream in(log_);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }
  std::string mnt_, log_, cmd_;
  pid_t pid_ = -1;
};

void run_mount(const Params& p, Cell& c) {
  std::unique_ptr<Daemon> d;
  std::string root;
  struct Cleanup {
    std::unique_ptr<Daemon>* d;
    std::string* root;
    ~Cleanup() {
      d->reset();
      if (!root->empty()) {
        std::error_code ec;
        std::filesystem::remove_all(*root, ec);
      }
    }
  } cleanup{&d, &root};
  std::string dir = p.mount_dir;
  if (!p.daemon.empty()) {
    root = temp_dir(p, "mount");
    d = std::make_unique<Daemon>(p, c, root);
    dir = d->mnt();
  }
  ctl::MountInfo info;
  {
    ctl::Fd top(dir);
    info = ctl::info(top);
  }
  alloc::StatsReader ar(info.alloc_stats);
  cache::CacheStatsReader cr(info.cache_stats);
  c.bound_pages = cr.sum().limit_pages;
  std::vector<std::unique_ptr<FileOps>> files;
  for (unsigned i = 0; i < c.threads; i++) files.push_back(std::make_unique<MountFile>(dir, i));
  measure(p, c, files, Probe{static_cast<long>(info.pid), &ar, &cr});
}

// After the readers exited: every slot they held is back (their thread-exit
// destructors gave them back; a slot left behind is reclaimed as dead).
// Throws if some slot stays taken: the next cells would pay for it.
void wait_registry_empty(alloc::ReaderRegistry& registry) {
  for (int i = 0; i < 300; i++) {  // 3 s
    if (registry.stats().slots_in_use == 0) return;
    if (i % 10 == 9) registry.reclaim_dead();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  throw std::runtime_error("the reader registry still has " +
                           std::to_string(registry.stats().slots_in_use) +
                           " slot(s) in use after its readers exited");
}

}  // namespace

std::string_view target_name(Target t) { return t == Target::inproc ? "in-process" : "mount"; }
std::string_view variant_name(Variant v) {
  switch (v) {
    case Variant::punch:
      return "punch";
    case Variant::truncate:
      return "truncate";
    case Variant::evict:
      return "evict";
  }
  return "?";
}
std::string_view mode_name(Mode m) {
  switch (m) {
    case Mode::off:
      return "off";
    case Mode::defer:
      return "defer";
    case Mode::expedite:
      return "expedite";
    case Mode::bound:
      return "bound";
    case Mode::given:
      return "given";
  }
  return "?";
}
std::optional<Variant> parse_variant(std::string_view s) {
  for (Variant v : {Variant::punch, Variant::truncate, Variant::evict}) {
    if (s == variant_name(v)) return v;
  }
  return std::nullopt;
}
std::optional<Mode> parse_mode(std::string_view s) {
  for (Mode m : {Mode::off, Mode::defer, Mode::expedite, Mode::bound}) {
    if (s == mode_name(m)) return m;
  }
  return std::nullopt;
}

std::uint64_t rss_kib(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
  }
  return 0;
}

std::vector<Cell> run(const Params& p) {
  if (p.threads.empty() || p.variants.empty() || p.modes.empty() || p.gp_intervals_us.empty()) {
    throw std::invalid_argument(
        "every list (threads, variants, modes, gp intervals) needs an entry");
  }
  if (p.write_bytes == 0 || p.file_bytes == 0 || p.sample_us == 0 || p.rounds == 0) {
    throw std::invalid_argument("file size, write size, sample interval and rounds must be > 0");
  }
  if (p.target == Target::mount && p.daemon.empty() == p.mount_dir.empty()) {
    throw std::invalid_argument("the mount target needs exactly one of --daemon and --mount");
  }
  if (p.remote_readers.empty()) {
    throw std::invalid_argument("remote readers: the list needs an entry (0: none)");
  }
  bool remote = false, every_remote = true;
  for (unsigned r : p.remote_readers) {
    remote = remote || r > 0;
    every_remote = every_remote && r > 0;
  }
  if (remote && p.target == Target::mount) {
    throw std::invalid_argument(
        "--remote-readers: in-process target only (the daemon hands its reader registry to no "
        "other process yet)");
  }
  if (p.stop_reader_ms > 0) {
    if (!every_remote) {
      throw std::invalid_argument("--stop-reader-ms needs --remote-readers >= 1 in every value");
    }
    for (Mode m : p.modes) {
      if (m == Mode::defer || m == Mode::expedite) {
        throw std::invalid_argument(
            "--stop-reader-ms: modes off and bound only (defer and expedite have no bound: every "
            "page freed during the stop would wait for it)");
      }
    }
    if (p.stop_reader_ms >= p.seconds * 1000 * 2 / 3) {
      throw std::invalid_argument(
          "--stop-reader-ms must end before the load does: less than 2/3 of --seconds (the stop "
          "starts at 1/3)");
    }
  }
  const std::string program = p.remote_reader.empty() ? default_remote_reader() : p.remote_reader;
  // One registry for the whole run, created before the first cell if any
  // cell has readers, so that the cells with none run with a registry
  // too (no slot in use: its grace periods pay a fence and a load).
  alloc::ReaderRegistry* registry = remote ? &alloc::process_registry() : nullptr;
  const int registry_fd = registry ? registry->fd() : -1;
  std::vector<Mode> modes = p.modes;
  std::vector<unsigned> gps = p.gp_intervals_us;
  if (p.target == Target::mount && p.daemon.empty()) {
    modes = {Mode::given};  // an existing mount's own configuration
    gps = {0};
  }
  if (p.samples_csv) {
    *p.samples_csv << "t_ms,variant,mode,N,gp_interval_us,round,phase,pages_waiting,pages_cached,"
                      "rss_kib\n";
  }
  std::vector<Cell> cells;
  const std::vector<unsigned>& readers = p.remote_readers;
  const std::size_t total =
      p.rounds * p.variants.size() * gps.size() * p.threads.size() * readers.size() * modes.size();
  for (unsigned round = 0; round < p.rounds; round++) {
    for (Variant v : p.variants) {
      for (unsigned gp : gps) {
        for (unsigned n : p.threads) {
          for (std::size_t ri = 0; ri < readers.size(); ri++) {
            const unsigned nr = readers[(ri + round) % readers.size()];
            // The readers idle through every mode of the group, then exit:
            // the next group starts from an empty registry.
            std::vector<RemoteReader> idle;
            for (unsigned i = 0; i < nr; i++) {
              idle.push_back(RemoteReader::idle_reader(program, registry_fd, -1));
            }
            // Innermost: the modes of one N run back to back, in an order
            // rotated by the round (the first cell of a group measured
            // slower on a loaded machine: docs/punch-wait.md).
            for (std::size_t k = 0; k < modes.size(); k++) {
              Mode m = modes[(k + round) % modes.size()];
              if (stopped(p)) throw Interrupted();
              Cell c;
              c.variant = v;
              c.mode = m;
              c.gp_interval_us = gp;
              c.threads = n;
              c.round = round;
              c.remote_readers = nr;
              if (p.target == Target::inproc) {
                run_inproc(p, c, registry,
                           p.stop_reader_ms > 0 && !idle.empty() ? &idle[0] : nullptr);
              } else {
                run_mount(p, c);
              }
              if (stopped(p)) throw Interrupted();
              cells.push_back(c);
              if (p.progress) p.progress(cells.back(), cells.size(), total);
            }
            for (auto& r : idle) r.finish();
            if (registry) wait_registry_empty(*registry);
          }
        }
      }
    }
  }
  return cells;
}

std::string describe(const Params& p) {
  std::ostringstream os;
  auto list = [&](const auto& v, auto f) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ",") + std::string(f(x));
    return s;
  };
  alloc::PagePoolConfig def;
  os << "target: " << target_name(p.target) << "\n";
  if (p.target == Target::mount) {
    os << (p.daemon.empty() ? "mount: " + p.mount_dir : "daemon: " + p.daemon) << "\n";
  }
  os << "variants: " << list(p.variants, variant_name) << "\n"
     << "modes: " << list(p.modes, mode_name) << "\n"
     << "threads (N): " << list(p.threads, [](unsigned n) { return std::to_string(n); }) << "\n"
     << "gp_interval_us: " << list(p.gp_intervals_us, [](unsigned n) { return std::to_string(n); })
     << "\n"
     << "remote readers: " << list(p.remote_readers, [](unsigned n) { return std::to_string(n); })
     << " (idle reader processes registered with this process's reader registry)\n";
  if (p.stop_reader_ms > 0) {
    os << "stop reader: one of them inside a section, SIGSTOPped for " << p.stop_reader_ms
       << " ms from 1/3 of each load\n";
  }
  os << "file: " << static_cast<double>(p.file_bytes) / kMiB << " MiB per loader, written in "
     << p.write_bytes << "-byte pieces at offset +" << p.write_offset << "\n"
     << "bound B (mode bound): " << static_cast<double>(p.bound_bytes) / kMiB << " MiB\n"
     << "expedite_pages: " << p.expedite_pages << "\n"
     << "dirty_decay_ms: " << (p.dirty_decay_ms >= -2 ? p.dirty_decay_ms : def.dirty_decay_ms)
     << (p.dirty_decay_ms >= -2 ? "" : " (default)") << "\n"
     << "write_fill_partial: " << (p.write_fill_partial ? "on" : "off") << "\n"
     << "load: " << p.seconds << " s per cell, then " << p.settle_seconds
     << " s of sampling after it; rounds: " << p.rounds << "\n"
     << "sample interval: " << p.sample_us << " us\n"
     << "RSS overhead allowed: idle RSS + " << static_cast<double>(p.rss_slack_bytes) / kMiB
     << " MiB\n"
     << "cores: " << std::thread::hardware_concurrency() << "\n";
  return os.str();
}

namespace {
const Cell* base_of(const std::vector<Cell>& cells, const Cell& c) {
  for (const Cell& b : cells) {
    if (b.mode == Mode::off && b.variant == c.variant && b.gp_interval_us == c.gp_interval_us &&
        b.threads == c.threads && b.round == c.round && b.remote_readers == c.remote_readers) {
      return &b;
    }
  }
  return nullptr;
}
double ratio(const std::vector<Cell>& cells, const Cell& c) {
  const Cell* b = base_of(cells, c);
  return b && b->gib_per_s > 0 ? c.gib_per_s / b->gib_per_s : NAN;
}
// The same cell with no remote reader (same variant, mode, gp interval, N
// and round), or nullptr.
const Cell* no_readers_of(const std::vector<Cell>& cells, const Cell& c) {
  for (const Cell& b : cells) {
    if (b.remote_readers == 0 && b.mode == c.mode && b.variant == c.variant &&
        b.gp_interval_us == c.gp_interval_us && b.threads == c.threads && b.round == c.round) {
      return &b;
    }
  }
  return nullptr;
}
// GiB/s and mean waiting against no_readers_of(); NaN without one (or a
// zero to divide by).
double gib_vs_r0(const std::vector<Cell>& cells, const Cell& c) {
  const Cell* b = no_readers_of(cells, c);
  return b && b->gib_per_s > 0 ? c.gib_per_s / b->gib_per_s : NAN;
}
double waiting_vs_r0(const std::vector<Cell>& cells, const Cell& c) {
  const Cell* b = no_readers_of(cells, c);
  return b && b->mean_waiting > 0 ? c.mean_waiting / b->mean_waiting : NAN;
}
}  // namespace

void print_table(std::ostream& os, const std::vector<Cell>& cells) {
  using A = report::Table::Align;
  report::Table table({{"variant", A::left},
                       {"mode", A::left},
                       {"gp_us", A::right},
                       {"N", A::right},
                       {"rdr", A::right},
                       {"mean MiB", A::right},
                       {"peak MiB", A::right},
                       {"GiB/s", A::right},
                       {"x off", A::right},
                       {"exp/s", A::right},
                       {"gp/s", A::right},
                       {"peak RSS", A::right},
                       {"peak c+w", A::right},
                       {"over B", A::right},
                       {"settle", A::right},
                       {"minflt", A::right}});
  using report::fmt;
  auto mib = [](double pages) { return pages * kPage / kMiB; };
  for (const Cell& c : cells) {
    table.add_row(
        {std::string(variant_name(c.variant)), std::string(mode_name(c.mode)),
         std::to_string(c.gp_interval_us), std::to_string(c.threads),
         std::to_string(c.remote_readers), fmt("%.1f", mib(c.mean_waiting)),
         fmt("%.1f", mib(static_cast<double>(c.peak_waiting))), fmt("%.2f", c.gib_per_s),
         fmt("%.2f", ratio(cells, c)), fmt("%.0f", c.expedites_per_s), fmt("%.0f", c.gp_per_s),
         fmt("%.0f", static_cast<double>(c.peak_rss_kib) / 1024.0),
         fmt("%.0f", mib(static_cast<double>(c.peak_total))),
         c.bound_pages ? std::to_string(c.samples_over_bound) : "-",
         c.settle_ms >= 0 ? fmt("%.0f", c.settle_ms) : "never", std::to_string(c.minor_faults)});
  }
  os << table.str()
     << "(rdr: idle registered readers in other processes; MiB waiting: mean and peak of the\n"
        " 2 ms samples; x off: GiB/s against defer=off of the same variant, gp interval, N,\n"
        " readers and round; peak c+w: cached + waiting, MiB; over B: samples with more pages\n"
        " out of the arena than the bound; settle: ms after the load until RSS <= live pages +\n"
        " idle RSS + slack; minflt: minor faults of the cache's process)\n";
  bool any_registry = false;
  for (const Cell& c : cells) any_registry = any_registry || c.remote_readers > 0;
  if (!any_registry) return;
  // The readers in other processes and the registry's grace periods.
  report::Table reg({{"variant", A::left},
                     {"mode", A::left},
                     {"gp_us", A::right},
                     {"N", A::right},
                     {"rdr", A::right},
                     {"slots", A::right},
                     {"reg gp/s", A::right},
                     {"membar/s", A::right},
                     {"waited", A::right},
                     {"held ms", A::right},
                     {"lim blk", A::right},
                     {"skipped", A::right},
                     {"stop ms", A::right},
                     {"stop GiB/s", A::right},
                     {"named", A::left},
                     {"GiB x r0", A::right},
                     {"wait x r0", A::right}});
  for (const Cell& c : cells) {
    const bool stop = c.stop_ms > 0;
    reg.add_row({std::string(variant_name(c.variant)), std::string(mode_name(c.mode)),
                 std::to_string(c.gp_interval_us), std::to_string(c.threads),
                 std::to_string(c.remote_readers), std::to_string(c.registry_slots),
                 fmt("%.0f", static_cast<double>(c.registry_gps) / c.seconds),
                 fmt("%.0f", static_cast<double>(c.membarriers) / c.seconds),
                 std::to_string(c.registry_waited), std::to_string(c.max_gp_blocked_ms),
                 std::to_string(c.limit_blocked), std::to_string(c.write_skipped),
                 stop ? fmt("%.0f", c.stop_ms) : "-", stop ? fmt("%.2f", c.stop_gib_per_s) : "-",
                 stop ? (c.stop_blocker_named ? "yes" : "no") : "-",
                 fmt("%.2f", gib_vs_r0(cells, c)), fmt("%.2f", waiting_vs_r0(cells, c))});
  }
  os << "\n"
     << reg.str()
     << "(slots: registry slots in use at the load's start; reg gp/s, membar/s: the registry's\n"
        " grace periods and membarrier calls; waited: grace periods that found a reader inside\n"
        " a section; held ms: the longest a grace period was held back by one, from the 2 ms\n"
        " samples; lim blk: the limit gave up waiting (no progress); skipped: pages of writes\n"
        " left uncached; stop: the stopped reader's time, GiB/s meanwhile, whether the registry\n"
        " named its pid; x r0: GiB/s and mean waiting against the same cell with 0 readers)\n";
}

namespace {

// The cells for CSV and JSON: the same names in both.
report::Records cell_records(const std::vector<Cell>& cells) {
  report::Records rec({"variant",
                       "mode",
                       "gp_interval_us",
                       "N",
                       "round",
                       "bound_pages",
                       "seconds",
                       "bytes",
                       "gib_per_s",
                       "ratio_vs_off",
                       "samples",
                       "mean_waiting_pages",
                       "peak_waiting_pages",
                       "mean_cached_pages",
                       "peak_cached_pages",
                       "peak_total_pages",
                       "peak_live_pages",
                       "samples_over_bound",
                       "grace_periods",
                       "expedites",
                       "gp_per_s",
                       "expedites_per_s",
                       "idle_rss_kib",
                       "mean_rss_kib",
                       "peak_rss_kib",
                       "rss_over_bound_samples",
                       "minor_faults",
                       "settle_ms",
                       "end_rss_kib",
                       "end_live_pages",
                       "write_alloc",
                       "write_skipped",
                       "limit_drains",
                       "limit_blocked",
                       "remote_readers",
                       "registry_slots",
                       "registry_gps",
                       "membarriers",
                       "registry_waited",
                       "max_gp_blocked_ms",
                       "stop_ms",
                       "stop_samples",
                       "stop_blocker_named",
                       "stop_gib_per_s",
                       "gib_vs_no_readers",
                       "waiting_vs_no_readers"});
  for (const Cell& c : cells) {
    rec.add({variant_name(c.variant),
             mode_name(c.mode),
             c.gp_interval_us,
             c.threads,
             c.round,
             c.bound_pages,
             c.seconds,
             c.bytes,
             c.gib_per_s,
             ratio(cells, c),
             c.samples,
             c.mean_waiting,
             c.peak_waiting,
             c.mean_cached,
             c.peak_cached,
             c.peak_total,
             c.peak_live,
             c.samples_over_bound,
             c.grace_periods,
             c.expedites,
             c.gp_per_s,
             c.expedites_per_s,
             c.idle_rss_kib,
             c.mean_rss_kib,
             c.peak_rss_kib,
             c.rss_over_bound_samples,
             c.minor_faults,
             c.settle_ms,
             c.end_rss_kib,
             c.end_live_pages,
             c.write_alloc,
             c.write_skipped,
             c.limit_drains,
             c.limit_blocked,
             c.remote_readers,
             c.registry_slots,
             c.registry_gps,
             c.membarriers,
             c.registry_waited,
             c.max_gp_blocked_ms,
             c.stop_ms,
             c.stop_samples,
             c.stop_blocker_named,
             c.stop_gib_per_s,
             gib_vs_r0(cells, c),
             waiting_vs_r0(cells, c)});
  }
  return rec;
}

}  // namespace

void write_csv(std::ostream& os, const std::vector<Cell>& cells) {
  os << cell_records(cells).csv();
}

nlohmann::json to_json(const Params& p, const std::vector<Cell>& cells) {
  nlohmann::json j;
  j["config"] = {
      {"target", target_name(p.target)},
      {"daemon", p.daemon},
      {"mount", p.mount_dir},
      {"file_bytes", p.file_bytes},
      {"write_bytes", p.write_bytes},
      {"write_offset", p.write_offset},
      {"bound_bytes", p.bound_bytes},
      {"expedite_pages", p.expedite_pages},
      {"dirty_decay_ms",
       p.dirty_decay_ms >= -2 ? p.dirty_decay_ms : alloc::PagePoolConfig{}.dirty_decay_ms},
      {"write_fill_partial", p.write_fill_partial},
      {"seconds", p.seconds},
      {"settle_seconds", p.settle_seconds},
      {"sample_us", p.sample_us},
      {"rounds", p.rounds},
      {"rss_slack_bytes", p.rss_slack_bytes},
      {"remote_readers", p.remote_readers},
      {"stop_reader_ms", p.stop_reader_ms},
      {"cores", std::thread::hardware_concurrency()},
  };
  j["cells"] = cell_records(cells).json();
  return j;
}

}  // namespace norefs::tools::punch_wait
