// SPDX-License-Identifier: LGPL-2.1-or-later
#include "tools/check/partial_fault.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "cache/cache_stats.h"
#include "tools/check/evict_race.h"
#include "tools/check/splitmix.h"
#include "tools/check/sys_error.h"
#include "tools/ctl/ctl.h"

namespace norefs::tools {

namespace {

using splitmix64::splitmix;

constexpr std::size_t kPage = 4096;
constexpr unsigned char kSentinel = 0x5a;

std::uint64_t file_size(const PartialFaultParams& p, unsigned i) {
  return p.file_pages * kPage - (static_cast<std::uint64_t>(i) * 517) % kPage;
}

long thread_minflt() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_minflt;
}

// An mmap'd buffer, unmapped on destruction.
struct Mapping {
  std::byte* p = nullptr;
  std::size_t n = 0;
  Mapping(std::size_t bytes, bool shared) : n(bytes) {
    int fd = -1;
    if (shared) {
      fd = memfd_create("norefs-partial-fault", MFD_CLOEXEC);
      if (fd < 0) throw_errno("memfd_create");
      if (ftruncate(fd, static_cast<off_t>(n)) != 0) {
        close(fd);
        throw_errno("ftruncate memfd");
      }
    }
    void* m = mmap(nullptr, n, PROT_READ | PROT_WRITE,
                   shared ? MAP_SHARED : (MAP_PRIVATE | MAP_ANONYMOUS), fd, 0);
    if (fd >= 0) close(fd);
    if (m == MAP_FAILED) throw_errno("mmap");
    p = static_cast<std::byte*>(m);
  }
  ~Mapping() { munmap(p, n); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
};

struct alignas(128) FaultReaderStats {
  std::array<PartialFaultResult::PerBuffer, kZapBuffers> b{};
  std::uint64_t zapped = 0;
  std::vector<std::string> kept;
};

}  // namespace

std::string_view zap_buffer_name(ZapBuffer b) {
  switch (b) {
    case ZapBuffer::anon:
      return "anon";
    case ZapBuffer::shared:
      return "shared";
    case ZapBuffer::kCount:
      break;
  }
  return "?";
}

PartialFaultResult run_partial_fault(const PartialFaultParams& p) {
  if (p.readers == 0 || p.files == 0 || p.file_pages == 0 || p.max_read == 0) {
    throw std::invalid_argument(
        "partial_fault: readers, files, file_pages and max_read must be > 0");
  }
  if (p.files > 0xffff || p.file_pages > (std::size_t{1} << 20)) {
    throw std::invalid_argument("partial_fault: at most 65535 files of at most 4 GiB");
  }
  const bool in_process = p.dir.empty();
  std::vector<std::uint64_t> sizes;
  for (unsigned i = 0; i < p.files; i++) sizes.push_back(file_size(p, i));

  // In-process: a cache holding every file.
  std::unique_ptr<cache::PageCache> pc;
  std::vector<std::shared_ptr<cache::CachedFile>> cfiles;
  // Through a mount: the files in a new directory there.
  std::string dir;
  std::vector<std::string> paths;
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      if (dir.empty()) return;
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup;
  std::unique_ptr<cache::CacheStatsReader> stats;
  cache::CacheCounters before{};

  std::vector<std::byte> tmp(p.file_pages * kPage);
  if (in_process) {
    cache::PageCacheConfig cfg;
    cfg.read_path = p.read_path;
    pc = std::make_unique<cache::PageCache>(cfg);
    for (unsigned i = 0; i < p.files; i++) {
      cfiles.push_back(pc->open_file(evict_race_backing(i, sizes[i]), sizes[i]));
    }
    // Warm: every page cached, referenced and active, so that reads take
    // the fast path (mark_accessed a no-op) from the first timed read.
    for (int pass = 0; pass < 3; pass++) {
      for (unsigned i = 0; i < p.files; i++) {
        cache::FileHandle h(cfiles[i]);
        for (std::uint64_t off = 0; off < sizes[i]; off += kPage) {
          if (pc->read(h, off, kPage, tmp.data()) < 0)
            throw std::runtime_error("warm-up read failed");
        }
      }
    }
    before = pc->counters();
  } else {
    dir = p.dir + "/norefs-pf-XXXXXX";
    if (!mkdtemp(dir.data())) throw_errno("mkdtemp " + dir);
    cleanup.dir = dir;
    for (unsigned i = 0; i < p.files; i++) {
      paths.push_back(dir + "/f" + std::to_string(i));
      int fd = open(paths.back().c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd < 0) throw_errno("create " + paths.back());
      evict_race_fill(i, 0, tmp.data(), sizes[i]);
      std::size_t done = 0;
      while (done < sizes[i]) {
        ssize_t w = pwrite(fd, tmp.data() + done, sizes[i] - done, static_cast<off_t>(done));
        if (w <= 0) {
          int e = errno;
          close(fd);
          errno = w < 0 ? e : EIO;
          throw_errno("write " + paths.back());
        }
        done += static_cast<std::size_t>(w);
      }
      for (int pass = 0; pass < 3; pass++) {  // warm the daemon's cache
        for (std::uint64_t off = 0; off < sizes[i]; off += kPage) {
          if (pread(fd, tmp.data(), kPage, static_cast<off_t>(off)) < 0) {
            int e = errno;
            close(fd);
            errno = e;
            throw_errno("read " + paths.back());
          }
        }
      }
      close(fd);
    }
    try {
      ctl::Fd d(dir);
      stats = std::make_unique<cache::CacheStatsReader>(ctl::info(d).cache_stats);
      before = stats->sum();
    } catch (const std::exception&) {
      stats.reset();  // the counters are a bonus; the check does not need them
    }
  }

  // Each reader: one anon and one shared buffer, max_read plus a page for
  // the destination offset plus a page of margin after it.
  const std::size_t buf_bytes = (p.max_read + kPage - 1) / kPage * kPage + 2 * kPage;
  std::vector<std::unique_ptr<Mapping>> anon, shared;
  for (unsigned t = 0; t < p.readers; t++) {
    anon.push_back(std::make_unique<Mapping>(buf_bytes, false));
    shared.push_back(std::make_unique<Mapping>(buf_bytes, true));
  }

  // go: a start line.  Its acquire loads pair with the release store that
  // opens it (everything set up before is also ordered by thread creation).
  // stop: seq_cst stores, relaxed polls (see stopping()).
  std::atomic<bool> go{false}, stop{false};
  // Relaxed: flags polled per read; they publish nothing.
  auto stopping = [&] {
    return stop.load(std::memory_order_relaxed) ||
           (p.cancel && p.cancel->load(std::memory_order_relaxed));
  };
  const auto start = std::chrono::steady_clock::now();
  std::vector<FaultReaderStats> rstats(p.readers);
  std::vector<std::thread> threads;
  std::mutex err_mu;
  std::string setup_error;  // guarded by err_mu

  for (unsigned t = 0; t < p.readers; t++) {
    threads.emplace_back([&, t] {
      FaultReaderStats& st = rstats[t];
      std::vector<std::unique_ptr<cache::FileHandle>> handles;
      std::vector<int> fds;
      if (in_process) {
        for (auto& f : cfiles) handles.push_back(std::make_unique<cache::FileHandle>(f));
      } else {
        for (const auto& path : paths) {
          int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
          if (fd < 0) {
            std::lock_guard lk(err_mu);
            setup_error = "open " + path + ": " + std::generic_category().message(errno);
            stop.store(true);
            break;
          }
          fds.push_back(fd);
        }
      }
      std::vector<std::byte> expect(p.max_read);
      std::vector<std::byte> zero_page(kPage), sentinel_page(kPage, std::byte{kSentinel});
      std::uint64_t rng = p.seed * 0x100000001b3ULL + t + 1;
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      for (std::uint64_t n = 0; !stopping() && (in_process || fds.size() == paths.size()); n++) {
        const ZapBuffer kind = n % 2 ? ZapBuffer::shared : ZapBuffer::anon;
        std::byte* base = (kind == ZapBuffer::anon ? anon : shared)[t]->p;
        std::uint64_t r = splitmix(rng);
        unsigned fi = static_cast<unsigned>(r % p.files);
        std::uint64_t pos = (r >> 16) % sizes[fi];
        // Half the reads cross at most one destination page boundary, the
        // rest are up to max_read long.
        std::uint64_t r2 = splitmix(rng);
        std::size_t len =
            1 + (r2 >> 32) % std::min<std::size_t>(p.max_read, r2 & 1 ? p.max_read : kPage);
        std::size_t d = splitmix(rng) % kPage;  // destination offset in the first page
        // The pages the read may touch plus one after them: reset, zapped
        // and checked; the rest of the buffer is never touched.
        const std::size_t span = std::min(buf_bytes, (d + len + kPage - 1) / kPage * kPage + kPage);
        std::memset(base, kSentinel, span);
        std::uint64_t zapmask = 0;  // anon: which pages were zapped (bit i: page i)
        auto zapped_page = [&](std::size_t i) {
          return kind == ZapBuffer::anon && i / kPage < 64 && (zapmask >> (i / kPage) & 1);
        };
        // Differing bytes of [a, a+n) of the buffer against `want`, and the first.
        std::size_t first = buf_bytes;
        auto diff = [&](std::size_t a, const std::byte* want, std::size_t cnt) {
          if (std::memcmp(base + a, want, cnt) == 0) return std::size_t{0};
          std::size_t k = 0;
          for (std::size_t i = 0; i < cnt; i++) {
            if (base[a + i] != want[i]) {
              k++;
              first = std::min(first, a + i);
            }
          }
          return k;
        };
        {
          // anon: zapped pages come back as zeros.  shared: the bytes stay,
          // and the zapper thread keeps zapping meanwhile.
          const std::size_t npages = (d + len + kPage - 1) / kPage;
          zapmask = splitmix(rng);
          if (npages < 64) zapmask &= (std::uint64_t{1} << npages) - 1;
          if (zapmask == 0) zapmask = std::uint64_t{1} << (npages - 1);  // at least the last
          for (std::size_t i = 0; i < npages && i < 64; i++) {
            if (zapmask >> i & 1) {
              if (madvise(base + i * kPage, kPage, MADV_DONTNEED) != 0) {
                std::lock_guard lk(err_mu);
                setup_error = std::string("madvise: ") + std::generic_category().message(errno);
                stop.store(true);
              }
              st.zapped++;
            }
          }
        }
        const long f0 = thread_minflt();
        ssize_t got = in_process ? pc->read(*handles[fi], pos, len, base + d)
                                 : pread(fds[fi], base + d, len, static_cast<off_t>(pos));
        const long faults = thread_minflt() - f0;
        auto& bs = st.b[static_cast<std::size_t>(kind)];
        bs.reads++;
        bs.faults += static_cast<std::uint64_t>(faults);
        bs.faulted_reads += faults > 0;
        const std::size_t want = std::min<std::uint64_t>(len, sizes[fi] - pos);
        std::string what;
        std::size_t nbad = 0;
        first = buf_bytes;
        if (got != static_cast<ssize_t>(want)) {
          what = "returned " + std::to_string(got) + ", expected " + std::to_string(want);
        } else {
          evict_race_fill(fi, pos, expect.data(), want);
          // Every byte the read may have touched: its own, then the rest of
          // the span page by page (the sentinel, or zeros if zapped anon).
          nbad += diff(d, expect.data(), want);
          for (std::size_t pg = 0; pg < span; pg += kPage) {
            const std::byte* fillp = zapped_page(pg) ? zero_page.data() : sentinel_page.data();
            std::size_t a = pg, b = pg + kPage;
            if (b <= d || a >= d + want) {
              nbad += diff(a, fillp, kPage);
            } else {
              if (a < d) nbad += diff(a, fillp, d - a);
              if (b > d + want) nbad += diff(d + want, fillp + (d + want - a), b - (d + want));
            }
          }
          if (nbad) {
            char line[160];
            std::snprintf(line, sizeof line,
                          "%zu wrong bytes, first at buffer offset %zu (%s the read's bytes): "
                          "expected %02x got %02x",
                          nbad, first, first >= d && first < d + want ? "in" : "outside",
                          first >= d && first < d + want ? static_cast<unsigned>(expect[first - d])
                                                         : (zapped_page(first) ? 0u : kSentinel),
                          static_cast<unsigned>(base[first]));
            what = line;
          } else {
            bs.bytes_checked += want;
          }
        }
        if (!what.empty()) {
          bs.bad_reads++;
          bs.bad_bytes += nbad;
          if (st.kept.size() < p.keep_bad) {
            char line[200];
            std::snprintf(line, sizeof line, "reader %u %s buffer+%zu file %u [%llu, +%zu): ", t,
                          std::string(zap_buffer_name(kind)).c_str(), d, fi,
                          static_cast<unsigned long long>(pos), len);
            st.kept.push_back(line + what);
          }
        }
      }
      for (int fd : fds) close(fd);
    });
  }

  // The shared-buffer zapper: drops every reader's shared pages, round after round.
  std::uint64_t shared_zapped = 0;
  threads.emplace_back([&] {
    while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
    while (!stopping()) {
      for (auto& m : shared) {
        for (std::size_t off = 0; off < m->n; off += kPage) {
          if (madvise(m->p + off, kPage, MADV_DONTNEED) == 0) shared_zapped++;
        }
      }
      if (p.zap_pause_us) std::this_thread::sleep_for(std::chrono::microseconds(p.zap_pause_us));
    }
  });

  PartialFaultResult res;
  const auto t0 = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);  // pairs with the acquire loads of go
  const auto end = t0 + std::chrono::duration<double>(p.seconds);
  while (!stopping() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop.store(true);
  for (auto& t : threads) t.join();
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  (void)start;
  if (!setup_error.empty()) throw std::runtime_error("partial_fault: " + setup_error);

  res.pages_zapped = shared_zapped;
  for (const auto& st : rstats) {
    for (std::size_t b = 0; b < kZapBuffers; b++) {
      auto& d = res.by_buffer[b];
      const auto& s = st.b[b];
      d.reads += s.reads;
      d.bytes_checked += s.bytes_checked;
      d.bad_reads += s.bad_reads;
      d.bad_bytes += s.bad_bytes;
      d.faults += s.faults;
      d.faulted_reads += s.faulted_reads;
      res.reads += s.reads;
      res.bytes_checked += s.bytes_checked;
      res.bad_reads += s.bad_reads;
      res.bad_bytes += s.bad_bytes;
      res.faults += s.faults;
    }
    res.pages_zapped += st.zapped;
    for (const auto& k : st.kept) {
      if (res.first_bad.size() < p.keep_bad) res.first_bad.push_back(k);
    }
  }
  cache::CacheCounters after{};
  if (pc) {
    after = pc->counters();
    res.have_counters = true;
  } else if (stats) {
    try {
      after = stats->sum();
      res.have_counters = true;
    } catch (const std::exception&) {
    }
  }
  if (res.have_counters) {
    res.fast_pages = after[cache::Ctr::fast_pages] - before[cache::Ctr::fast_pages];
    res.misses = after[cache::Ctr::misses] - before[cache::Ctr::misses];
  }
  return res;
}

int partial_fault_exit_code(const PartialFaultResult& r) {
  if (r.reads == 0 || r.bad_reads > 0) return 1;
  std::uint64_t faulted = 0;
  for (const auto& b : r.by_buffer) faulted += b.faulted_reads;
  return faulted == 0 ? 2 : 0;
}

std::string describe_partial_fault_config(const PartialFaultParams& p) {
  std::ostringstream os;
  os << "norefs_evict_race --partial-fault: "
     << (p.dir.empty() ? "in-process (PageCache::read, read_path=" +
                             std::string(cache::read_path_name(p.read_path)) + ")"
                       : "through the mount at " + p.dir)
     << " seconds=" << p.seconds << "\n  readers=" << p.readers << " files=" << p.files
     << " file_pages=" << p.file_pages << " max_read=" << p.max_read
     << " zap_pause_us=" << p.zap_pause_us << " seed=" << p.seed << "\n";
  return os.str();
}

std::string format_partial_fault_report(const PartialFaultResult& r) {
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "ran            %.2f s\n", r.seconds);
  os << line;
  os << "buffer         reads   faulted reads   faults   bytes checked   bad reads   bad bytes\n";
  for (std::size_t b = 0; b < kZapBuffers; b++) {
    const auto& d = r.by_buffer[b];
    std::snprintf(
        line, sizeof line, "  %-8s %10llu %15llu %8llu %15llu %11llu %11llu\n",
        std::string(zap_buffer_name(static_cast<ZapBuffer>(b))).c_str(),
        static_cast<unsigned long long>(d.reads), static_cast<unsigned long long>(d.faulted_reads),
        static_cast<unsigned long long>(d.faults), static_cast<unsigned long long>(d.bytes_checked),
        static_cast<unsigned long long>(d.bad_reads), static_cast<unsigned long long>(d.bad_bytes));
    os << line;
  }
  std::snprintf(line, sizeof line, "zapped         %llu pages\n",
                static_cast<unsigned long long>(r.pages_zapped));
  os << line;
  if (r.have_counters) {
    std::snprintf(line, sizeof line, "cache          %llu fast-path pages, %llu misses\n",
                  static_cast<unsigned long long>(r.fast_pages),
                  static_cast<unsigned long long>(r.misses));
    os << line;
  }
  for (const auto& b : r.first_bad) os << "  bad: " << b << "\n";
  int code = partial_fault_exit_code(r);
  std::snprintf(
      line, sizeof line, "%s: %llu bad reads (%llu bad bytes) in %llu reads, %llu faults\n",
      code == 0   ? "PASS"
      : code == 2 ? "inconclusive (no read faulted)"
                  : "FAIL",
      static_cast<unsigned long long>(r.bad_reads), static_cast<unsigned long long>(r.bad_bytes),
      static_cast<unsigned long long>(r.reads), static_cast<unsigned long long>(r.faults));
  os << line;
  return os.str();
}

std::string partial_fault_json(const PartialFaultParams& p, const PartialFaultResult& r) {
  nlohmann::json buffers = nlohmann::json::object();
  for (std::size_t b = 0; b < kZapBuffers; b++) {
    const auto& d = r.by_buffer[b];
    buffers[std::string(zap_buffer_name(static_cast<ZapBuffer>(b)))] = {
        {"reads", d.reads},         {"faulted_reads", d.faulted_reads},
        {"faults", d.faults},       {"bytes_checked", d.bytes_checked},
        {"bad_reads", d.bad_reads}, {"bad_bytes", d.bad_bytes}};
  }
  nlohmann::json j = {{"config",
                       {{"mode", p.dir.empty() ? "in-process" : "mount"},
                        {"dir", p.dir},
                        {"read_path", cache::read_path_name(p.read_path)},
                        {"seconds", p.seconds},
                        {"readers", p.readers},
                        {"files", p.files},
                        {"file_pages", p.file_pages},
                        {"max_read", p.max_read},
                        {"zap_pause_us", p.zap_pause_us},
                        {"seed", p.seed}}},
                      {"result",
                       {{"seconds", r.seconds},
                        {"reads", r.reads},
                        {"bytes_checked", r.bytes_checked},
                        {"bad_reads", r.bad_reads},
                        {"bad_bytes", r.bad_bytes},
                        {"faults", r.faults},
                        {"pages_zapped", r.pages_zapped},
                        {"by_buffer", buffers},
                        {"first_bad", r.first_bad}}},
                      {"exit_code", partial_fault_exit_code(r)}};
  if (r.have_counters) {
    j["result"]["fast_pages"] = r.fast_pages;
    j["result"]["misses"] = r.misses;
  }
  return j.dump(2) + "\n";
}

}  // namespace norefs::tools
