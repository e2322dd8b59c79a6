// SPDX-License-Identifier: LGPL-2.1-or-later
#include "tools/bench/pread_scaling.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "alloc/reader_registry.h"
#include "cache/backing.h"
#include "cache/copy.h"
#include "tools/bench/remote_readers.h"
#include "tools/lib/backings.h"
#include "tools/lib/report.h"

namespace norefs::tools {

using cache::CacheCounters;
using cache::Ctr;
using cache::kStops;
using cache::PageCache;
using cache::ReadPath;
using cache::Stop;
using report::si;

namespace {

// Per-thread things live on their own 128-byte lines (two 64-byte lines:
// will-it-scale's choice, against the adjacent-line prefetcher), so that
// the tool itself adds no false sharing to what it measures.  FileHandle
// holds prev_pos, which every read stores: handles side by side in one
// array would share a line between threads.
constexpr std::size_t kLine = 128;

struct alignas(kLine) PaddedHandle {
  explicit PaddedHandle(std::shared_ptr<cache::CachedFile> f) : h(std::move(f)) {}
  cache::FileHandle h;
};

struct alignas(kLine) ThreadCounter {
  std::atomic<std::uint64_t> reads{0};  // single writer: its thread (relaxed load + store)
};

struct AlignedFree {
  std::align_val_t align{kLine};
  void operator()(std::byte* p) const { ::operator delete[](p, align); }
};
using AlignedBuffer = std::unique_ptr<std::byte[], AlignedFree>;

AlignedBuffer aligned_buffer(std::size_t n, std::size_t align = kLine) {
  std::size_t rounded = (std::max<std::size_t>(n, 1) + align - 1) / align * align;
  std::align_val_t a{align};
  return AlignedBuffer(static_cast<std::byte*>(::operator new[](rounded, a)), AlignedFree{a});
}

std::byte content_byte(std::uint64_t i) { return static_cast<std::byte>((i * 131 + 7) & 0xff); }

// The floor's "read": `len` bytes from `src` (the file's bytes, page-aligned)
// at `pos`, copied page by page with the read paths' copy_bytes(), with the call
// shape of PageCache::read (a call the compiler cannot see into, a length
// returned and compared).  No cache, no lookup, no section, no counter.
[[gnu::noinline]] ssize_t floor_read(const std::byte* src, std::uint64_t size, std::uint64_t pos,
                                     std::size_t len, std::byte* dst) {
  if (pos >= size) return 0;
  len = std::min<std::size_t>(len, size - pos);
  std::size_t done = 0;
  while (done < len) {
    std::size_t off = (pos + done) & (cache::kPageSize - 1);
    std::size_t n = std::min(len - done, cache::kPageSize - off);
    cache::copy_bytes(dst + done, src + pos + done, n);
    done += n;
  }
  return static_cast<ssize_t>(done);
}

// The in-memory backing: the bytes generated from their offset.
std::unique_ptr<cache::Backing> memory_backing(std::size_t size) {
  return std::make_unique<GeneratedBacking>(size,
                                            [](std::uint64_t off, std::byte* dst, std::size_t n) {
                                              for (std::size_t k = 0; k < n; k++)
                                                dst[k] = content_byte(off + k);
                                            });
}

// A temp file of `size` bytes, already unlinked (pread1's mkstemp + unlink).
std::unique_ptr<cache::Backing> temp_file_backing(const std::string& dir, std::size_t size) {
  std::string path = dir + "/norefs-pread-XXXXXX";
  int fd = mkstemp(path.data());
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "mkstemp " + path);
  unlink(path.c_str());
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; i++) bytes[i] = content_byte(i);
  std::size_t done = 0;
  while (done < size) {
    ssize_t w = pwrite(fd, bytes.data() + done, size - done, static_cast<off_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = errno;
      close(fd);
      throw std::system_error(e, std::generic_category(), "write " + path);
    }
    done += static_cast<std::size_t>(w);
  }
  return std::make_unique<cache::FdBacking>(fd, true);
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; c++) {
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    }
  }
  return cpus;
}

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort
}

std::uint64_t delta(const CacheCounters& a, const CacheCounters& b, Ctr c) { return b[c] - a[c]; }

}  // namespace

std::string pread_size_name(std::size_t n) {
  if (n >= (1u << 20) && n % (1u << 20) == 0) return std::to_string(n >> 20) + "M";
  if (n >= 1024 && n % 1024 == 0) return std::to_string(n >> 10) + "K";
  return std::to_string(n);
}

std::string_view pread_variant_name(PreadVariant v) {
  return v == PreadVariant::shared ? "shared" : "private";
}

std::optional<PreadVariant> parse_pread_variant(std::string_view s) {
  if (s == "shared") return PreadVariant::shared;
  if (s == "private") return PreadVariant::private_;
  return std::nullopt;
}

std::string_view pread_backing_name(PreadBacking b) {
  return b == PreadBacking::file ? "file" : "memory";
}

namespace {

// The cache's read path a row measures; the floor measures none (its cache
// only provides the handles, with the default path).
ReadPath cache_path(PreadPath p) {
  switch (p) {
    case PreadPath::ref:
      return ReadPath::ref;
    case PreadPath::ref_fetchadd:
      return ReadPath::ref_fetchadd;
    case PreadPath::stackcopy:
      return ReadPath::stackcopy;
    case PreadPath::floor:
    case PreadPath::noref:
    case PreadPath::noref_remote:  // this process warms the cache on noref
      break;
  }
  return ReadPath::noref;
}

}  // namespace

std::string_view pread_path_name(PreadPath p) {
  if (p == PreadPath::floor) return "floor";
  if (p == PreadPath::noref_remote) return "noref-remote";
  return cache::read_path_name(cache_path(p));
}

std::optional<PreadPath> parse_pread_path(std::string_view s) {
  for (auto p : {PreadPath::floor, PreadPath::noref, PreadPath::noref_remote, PreadPath::ref,
                 PreadPath::ref_fetchadd, PreadPath::stackcopy}) {
    if (s == pread_path_name(p)) return p;
  }
  return std::nullopt;
}

namespace {

// reads/s, ns/read and the CPU figures of m from its reads and seconds;
// cpu_seconds < 0: unknown.
void compute_rates(PreadMeasurement& m, unsigned threads, double cpu_seconds) {
  m.reads_per_sec = static_cast<double>(m.reads) / m.seconds;
  m.ns_per_read = m.reads ? threads * m.seconds * 1e9 / static_cast<double>(m.reads)
                          : std::numeric_limits<double>::infinity();
  if (cpu_seconds >= 0) {
    m.cpu_seconds = cpu_seconds;
    m.cpu_share = m.cpu_seconds / (threads * m.seconds);
    m.cpu_ns_per_read = m.reads ? m.cpu_seconds * 1e9 / static_cast<double>(m.reads)
                                : std::numeric_limits<double>::infinity();
  }
}

// noref-remote's timed part: `procs` reader processes (tools/bench/
// remote_readers.h), one thread each, pinned as the threads are, each
// reading `size` bytes at 0 of its file's SharedFile through the one fast
// path under remote_rcu::ReadGuard and counting in its own memory and its
// own CacheStats slot.  The files are the ones this process warmed; their
// handles stay open in the caller for the whole time ("no handle, no
// reader": cache/shared_file.h).  The processes start reading as soon as
// they are up; counting starts when every one of them has read ("ready")
// and `settle` has passed, as for the threads.
void time_remote(const PreadScalingParams& p, PageCache& cache,
                 const std::vector<std::shared_ptr<cache::CachedFile>>& files, unsigned procs,
                 std::size_t size, PreadMeasurement& m) {
  const std::string program = p.remote_reader.empty() ? default_remote_reader() : p.remote_reader;
  alloc::ReaderRegistry& registry = alloc::process_registry();
  std::vector<int> cpus = p.pin ? allowed_cpus() : std::vector<int>{};
  std::vector<RemoteReader> readers;
  readers.reserve(procs);
  for (unsigned t = 0; t < procs; t++) {
    const cache::SharedFile& f = PageCache::shared_file(*files[t % files.size()]);
    readers.push_back(RemoteReader::fast_reader(program, cache.region().fd(), registry.fd(), &f,
                                                size, p.batch,
                                                cpus.empty() ? -1 : cpus[t % cpus.size()]));
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(p.settle));
  // Every process is asked first and answers after, so that the snapshots
  // lie microseconds apart; the time is the middle of the exchange.
  using Clock = std::chrono::steady_clock;
  auto snapshot = [&](std::vector<RemoteReadSnapshot>& out) {
    Clock::time_point a = Clock::now();
    for (auto& r : readers) r.send('s');
    out.clear();
    for (auto& r : readers) out.push_back(r.read_snapshot());
    Clock::time_point b = Clock::now();
    return a + (b - a) / 2;
  };
  std::vector<RemoteReadSnapshot> s0, s1;
  CacheCounters c0 = cache.counters();
  Clock::time_point t0 = snapshot(s0);
  std::this_thread::sleep_for(std::chrono::duration<double>(p.seconds));
  Clock::time_point t1 = snapshot(s1);
  CacheCounters c1 = cache.counters();
  // Every process copied the file's bytes, on its first read and its last.
  std::vector<std::byte> want(size);
  for (std::size_t i = 0; i < size; i++) want[i] = content_byte(i);
  const std::uint64_t hash = fnv1a_64(want.data(), size);
  for (auto& r : readers) {
    const std::uint64_t first = r.first_hash(), last = r.finish();
    if (first != hash || last != hash) {
      throw std::runtime_error("pread_scaling: a remote reader copied wrong bytes (first read " +
                               std::string(first == hash ? "right" : "wrong") + ", last " +
                               std::string(last == hash ? "right" : "wrong") + ")");
    }
  }

  m.seconds = std::chrono::duration<double>(t1 - t0).count();
  m.thread_reads_min = std::numeric_limits<std::uint64_t>::max();
  double cpu = 0;
  std::uint64_t short_reads = 0;
  for (unsigned t = 0; t < procs; t++) {
    std::uint64_t n = s1[t].reads - s0[t].reads;
    m.reads += n;
    m.thread_reads_min = std::min(m.thread_reads_min, n);
    m.thread_reads_max = std::max(m.thread_reads_max, n);
    if (cpu >= 0 && s0[t].cpu_ns >= 0 && s1[t].cpu_ns >= 0) {
      cpu += static_cast<double>(s1[t].cpu_ns - s0[t].cpu_ns) * 1e-9;
    } else {
      cpu = -1;
    }
    // The readers' own counters; this process's cache counts what it read
    // meanwhile (nothing: its handles only stay open).
    m.cache_reads += s1[t].cache_reads - s0[t].cache_reads;
    m.fast_reads += s1[t].fast_reads - s0[t].fast_reads;
    for (std::size_t s = 0; s < kStops; s++) m.stops[s] += s1[t].stops[s] - s0[t].stops[s];
    short_reads += s1[t].short_reads - s0[t].short_reads;
  }
  compute_rates(m, procs, cpu);
  m.cache_reads += delta(c0, c1, Ctr::reads);
  m.fast_reads += delta(c0, c1, Ctr::fast_reads);
  m.slow_hits = delta(c0, c1, Ctr::slow_hits);
  m.misses = delta(c0, c1, Ctr::misses);
  m.waits = delta(c0, c1, Ctr::waits);
  m.short_reads = short_reads;
}

}  // namespace

PreadMeasurement measure_pread(const PreadScalingParams& p, std::size_t size, PreadVariant variant,
                               unsigned threads, PreadPath path) {
  cache::PageCacheConfig cfg;
  cfg.read_path = cache_path(path);
  cfg.pool.defer = p.defer;
  cfg.batch = p.batch;
  PageCache cache(cfg);

  const std::size_t file_size = std::max(size, cache::kPageSize);
  const unsigned nfiles = variant == PreadVariant::shared ? 1 : threads;
  std::vector<std::shared_ptr<cache::CachedFile>> files;
  for (unsigned i = 0; i < nfiles; i++) {
    std::unique_ptr<cache::Backing> b = p.backing == PreadBacking::file
                                            ? temp_file_backing(p.tmp_dir, file_size)
                                            : memory_backing(file_size);
    files.push_back(cache.open_file(std::move(b), file_size));
  }
  std::vector<std::unique_ptr<PaddedHandle>> handles;
  for (unsigned t = 0; t < threads; t++) {
    handles.push_back(std::make_unique<PaddedHandle>(files[t % nfiles]));
  }
  // The floor's source: one page-aligned copy of a file's bytes per file,
  // so that private threads copy from their own pages as they would from
  // the cache.
  const bool floor = path == PreadPath::floor;
  std::vector<AlignedBuffer> sources;
  for (unsigned i = 0; floor && i < nfiles; i++) {
    AlignedBuffer s = aligned_buffer(file_size, cache::kPageSize);
    for (std::size_t b = 0; b < file_size; b++) s[b] = content_byte(b);
    sources.push_back(std::move(s));
  }

  PreadMeasurement m;
  // Warm: a pass reads once through every handle; stop after the first pass
  // (from the second on) in which nothing stopped the fast path, nothing
  // missed or waited and no readahead started.  The floor has nothing to
  // warm but its own bytes, which its first timed reads touch.
  if (floor) {
    m.warm = true;
  } else {
    AlignedBuffer buf = aligned_buffer(size);
    for (unsigned pass = 1; pass <= p.max_warm_passes; pass++) {
      CacheCounters a = cache.counters();
      for (auto& h : handles) {
        ssize_t r = cache.read(h->h, 0, size, buf.get());
        if (r != static_cast<ssize_t>(size)) {
          throw std::runtime_error("pread_scaling: warm-up read returned " + std::to_string(r) +
                                   ", expected " + std::to_string(size));
        }
      }
      CacheCounters b = cache.counters();
      bool clean = delta(a, b, Ctr::misses) == 0 && delta(a, b, Ctr::waits) == 0 &&
                   delta(a, b, Ctr::sync_readahead) == 0 &&
                   delta(a, b, Ctr::async_readahead) == 0 && delta(a, b, Ctr::readahead_pages) == 0;
      // `batch` is no sign of a cold cache: a read of more pages than the
      // batch limit always stops there, and goes on in a new section.
      for (std::size_t s = 0; s < kStops; s++) {
        if (static_cast<Stop>(s) == Stop::batch) continue;
        clean = clean && delta(a, b, cache::stop_counter(static_cast<Stop>(s))) == 0;
      }
      m.warm_passes = pass;
      if (clean && pass >= 2) {
        m.warm = true;
        break;
      }
    }
  }

  if (path == PreadPath::noref_remote) {
    time_remote(p, cache, files, threads, size, m);
    handles.clear();
    files.clear();
    return m;
  }

  std::vector<ThreadCounter> counters(threads);
  std::atomic<int> go{0};
  std::atomic<bool> stop{false}, failed{false};
  std::vector<int> cpus = p.pin ? allowed_cpus() : std::vector<int>{};
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; t++) {
    workers.emplace_back([&, t] {
      if (!cpus.empty()) pin_to(cpus[t % cpus.size()]);
      AlignedBuffer buf = aligned_buffer(size);
      cache::FileHandle& h = handles[t]->h;
      std::atomic<std::uint64_t>& reads = counters[t].reads;
      const ssize_t want = static_cast<ssize_t>(size);
      go.wait(0, std::memory_order_acquire);
      // Relaxed: a flag polled per read; it publishes nothing.  Two loops,
      // so that neither pays a branch on the path per read.
      if (floor) {
        const std::byte* src = sources[t % nfiles].get();
        while (!stop.load(std::memory_order_relaxed)) {
          if (floor_read(src, file_size, 0, size, buf.get()) != want)
            failed.store(true, std::memory_order_relaxed);
          reads.store(reads.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        }
        return;
      }
      while (!stop.load(std::memory_order_relaxed)) {
        if (cache.read(h, 0, size, buf.get()) != want)
          failed.store(true, std::memory_order_relaxed);
        reads.store(reads.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      }
    });
  }

  // Relaxed snapshots: each counter has one writer; we want each value, not
  // an order between them (as will-it-scale's parent reads its children).
  auto snapshot = [&] {
    std::vector<std::uint64_t> v(threads);
    for (unsigned t = 0; t < threads; t++) v[t] = counters[t].reads.load(std::memory_order_relaxed);
    return v;
  };
  // The CPU time the threads got: on a machine shared with other work,
  // reads/s alone cannot tell a slow read from a thread that did not run.
  std::vector<clockid_t> clocks(threads);
  for (unsigned t = 0; t < threads; t++) {
    if (pthread_getcpuclockid(workers[t].native_handle(), &clocks[t]) != 0) {
      clocks[t] = CLOCK_THREAD_CPUTIME_ID;  // marks "unknown" below
    }
  }
  auto cpu_seconds = [&] {
    double sum = 0;
    for (unsigned t = 0; t < threads; t++) {
      timespec ts{};
      if (clocks[t] == CLOCK_THREAD_CPUTIME_ID || clock_gettime(clocks[t], &ts) != 0) return -1.0;
      sum += static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
    }
    return sum;
  };
  go.store(1, std::memory_order_release);
  go.notify_all();
  // Count only once every thread is reading (will-it-scale waits for all
  // its tasks), then after `settle` more.
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);;) {
    bool all = true;
    for (auto& c : counters) all = all && c.reads.load(std::memory_order_relaxed) > 0;
    if (all || failed.load(std::memory_order_relaxed) ||
        std::chrono::steady_clock::now() > deadline)
      break;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(p.settle));
  // The cache's counters and the threads' next to each other, with no
  // system call between them (the CPU clocks are read outside): this
  // thread competes with the readers for the CPUs, and a reschedule between
  // the two snapshots would count a time slice of reads in one and not in
  // the other (seen under ASan: 4.7% of a round's reads).
  CacheCounters c0 = cache.counters();
  std::vector<std::uint64_t> r0 = snapshot();
  auto t0 = std::chrono::steady_clock::now();
  double cpu0 = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::duration<double>(p.seconds));
  double cpu1 = cpu_seconds();
  std::vector<std::uint64_t> r1 = snapshot();
  auto t1 = std::chrono::steady_clock::now();
  CacheCounters c1 = cache.counters();
  stop.store(true, std::memory_order_relaxed);
  for (auto& w : workers) w.join();
  if (failed.load(std::memory_order_relaxed)) {
    throw std::runtime_error("pread_scaling: a timed read returned a short count or an error");
  }

  m.seconds = std::chrono::duration<double>(t1 - t0).count();
  m.thread_reads_min = std::numeric_limits<std::uint64_t>::max();
  for (unsigned t = 0; t < threads; t++) {
    std::uint64_t n = r1[t] - r0[t];
    m.reads += n;
    m.thread_reads_min = std::min(m.thread_reads_min, n);
    m.thread_reads_max = std::max(m.thread_reads_max, n);
  }
  compute_rates(m, threads, cpu0 >= 0 && cpu1 >= 0 ? cpu1 - cpu0 : -1.0);
  m.cache_reads = delta(c0, c1, Ctr::reads);
  m.fast_reads = delta(c0, c1, Ctr::fast_reads);
  m.slow_hits = delta(c0, c1, Ctr::slow_hits);
  m.misses = delta(c0, c1, Ctr::misses);
  m.waits = delta(c0, c1, Ctr::waits);
  for (std::size_t s = 0; s < kStops; s++) {
    m.stops[s] = delta(c0, c1, cache::stop_counter(static_cast<Stop>(s)));
  }
  handles.clear();
  files.clear();
  return m;
}

void aggregate_pread_rows(std::vector<PreadRow>& rows) {
  auto find_path = [&](const PreadRow& r, PreadPath path) -> const PreadRow* {
    for (const auto& x : rows) {
      if (x.size == r.size && x.variant == r.variant && x.threads == r.threads && x.path == path)
        return &x;
    }
    return nullptr;
  };
  for (auto& row : rows) {
    std::vector<double> rate, ns, share, cpu_ns;
    std::uint64_t cache_reads = 0, fast = 0;
    std::array<std::uint64_t, kStops> stops{};
    row.all_warm = true;
    for (const auto& m : row.rounds) {
      rate.push_back(m.reads_per_sec);
      ns.push_back(m.ns_per_read);
      if (m.cpu_seconds > 0) {
        share.push_back(m.cpu_share);
        cpu_ns.push_back(m.cpu_ns_per_read);
      }
      cache_reads += m.cache_reads;
      fast += m.fast_reads;
      for (std::size_t s = 0; s < kStops; s++) stops[s] += m.stops[s];
      row.all_warm = row.all_warm && m.warm;
    }
    const report::Spread rs = report::spread(rate);
    row.reads_per_sec = rs.median;
    row.reads_per_sec_min = rate.empty() ? 0 : rs.min;
    row.reads_per_sec_max = rate.empty() ? 0 : rs.max;
    row.ns_per_read = report::median(ns);
    row.cpu_share = report::median(share);
    row.cpu_ns_per_read = report::median(cpu_ns);
    double mreads = static_cast<double>(cache_reads) / 1e6;
    for (std::size_t s = 0; s < kStops; s++) {
      row.stops_per_mread[s] = cache_reads ? static_cast<double>(stops[s]) / mreads : 0;
    }
    row.fast_read_fraction =
        cache_reads ? static_cast<double>(fast) / static_cast<double>(cache_reads) : 0;
  }
  // Same-round ratios: reads/s of `num` / reads/s of `den`, round by round.
  auto ratios = [](const PreadRow* num, const PreadRow* den) {
    std::vector<double> v;
    for (std::size_t i = 0; num && den && i < num->rounds.size() && i < den->rounds.size(); i++) {
      if (den->rounds[i].reads_per_sec > 0) {
        v.push_back(num->rounds[i].reads_per_sec / den->rounds[i].reads_per_sec);
      }
    }
    return v;
  };
  auto med_min_max = [](const std::vector<double>& v, double& med, double& lo, double& hi) {
    const report::Spread sp = report::spread(v);
    med = sp.median;
    lo = sp.min;
    hi = sp.max;
  };
  for (auto& row : rows) {
    med_min_max(ratios(&row, find_path(row, PreadPath::ref)), row.ratio_to_ref,
                row.ratio_to_ref_min, row.ratio_to_ref_max);
    const PreadRow* floor = find_path(row, PreadPath::floor);
    med_min_max(ratios(floor, &row), row.times_floor, row.times_floor_min, row.times_floor_max);
    std::vector<double> over;
    for (std::size_t i = 0; floor && i < row.rounds.size() && i < floor->rounds.size(); i++) {
      over.push_back(row.rounds[i].ns_per_read - floor->rounds[i].ns_per_read);
    }
    row.ns_over_floor = report::median(over);
  }
}

PreadScalingResult run_pread_scaling(const PreadScalingParams& p, const PreadProgress& progress) {
  PreadScalingResult res;
  res.params = p;
  res.cpus = sysconf(_SC_NPROCESSORS_ONLN);
  for (std::size_t size : p.sizes) {
    for (PreadVariant v : p.variants) {
      for (unsigned n : p.threads) {
        for (PreadPath path : p.paths) {
          PreadRow row;
          row.size = size;
          row.variant = v;
          row.threads = n;
          row.path = path;
          res.rows.push_back(row);
        }
      }
    }
  }
  auto unit = [](const PreadRow& row) {
    const bool procs = row.path == PreadPath::noref_remote;
    if (row.threads == 1) return procs ? " process: " : " thread: ";
    return procs ? " processes: " : " threads: ";
  };
  for (unsigned round = 0; round < p.rounds; round++) {
    auto start = std::chrono::steady_clock::now();
    const std::string of_rounds =
        "round " + std::to_string(round + 1) + "/" + std::to_string(p.rounds);
    for (std::size_t i = 0; i < res.rows.size(); i++) {
      PreadRow& row = res.rows[i];
      row.rounds.push_back(measure_pread(p, row.size, row.variant, row.threads, row.path));
      if (progress) {
        const PreadMeasurement& m = row.rounds.back();
        progress(of_rounds + "  " + std::to_string(i + 1) + "/" + std::to_string(res.rows.size()) +
                     "  " + std::string(pread_path_name(row.path)) + " " +
                     pread_size_name(row.size) + "B " +
                     std::string(pread_variant_name(row.variant)) + " " +
                     std::to_string(row.threads) + unit(row) + si(m.reads_per_sec) + " reads/s",
                 false);
      }
    }
    if (progress) {
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      progress(of_rounds + " done (" + std::to_string(res.rows.size()) + " measurements, " +
                   std::to_string(static_cast<int>(secs)) + " s)",
               true);
    }
  }
  aggregate_pread_rows(res.rows);
  res.targets = evaluate_pread_targets(res.rows);
  return res;
}

}  // namespace norefs::tools
