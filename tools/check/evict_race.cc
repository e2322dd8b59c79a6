// SPDX-License-Identifier: LGPL-2.1-or-later
#include "tools/check/evict_race.h"
#include "tools/check/splitmix.h"

#include <string.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "cache/backing.h"
#include "tools/lib/backings.h"
#include "tools/lib/report.h"

namespace norefs::tools {

using cache::Ctr;
using cache::kPageSize;
using cache::PageCache;

namespace {

using report::si;
using splitmix64::mix;
using splitmix64::splitmix;
using splitmix64::unmix;

// ── The content function ──
constexpr std::uint64_t kMagic = 0xe71c;  // top 16 bits of every content key
// The churn pattern: these high 32 bits, a page serial below.
constexpr std::uint64_t kChurnHigh = 0xc4a2c4a2ULL;

// Bytes [off, off+n) of file `file` into dst: whole 8-byte stores where the
// offset is word-aligned (fills always are: they are page-aligned).
void fill_content(unsigned file, std::uint64_t off, std::byte* dst, std::size_t n) {
  while (n > 0) {
    std::uint64_t word = evict_race_word(file, off >> 3);
    std::size_t k = off & 7;
    std::size_t take = std::min<std::size_t>(8 - k, n);
    std::memcpy(dst, reinterpret_cast<const std::byte*>(&word) + k, take);
    dst += take;
    off += take;
    n -= take;
  }
}

// File i is file_pages pages long, less a few bytes for i > 0: partial last
// pages and reads that end at EOF are checked too.
std::uint64_t file_size(const EvictRaceParams& p, unsigned i) {
  return p.file_pages * kPageSize - (static_cast<std::uint64_t>(i) * 517) % kPageSize;
}

// Writes the churn pattern with whole-word stores.
void write_churn(alloc::Page* pg, std::uint64_t serial) {
  std::uint64_t w = (kChurnHigh << 32) | (serial & 0xffffffffULL);
  for (std::size_t off = 0; off < kPageSize; off += 8) std::memcpy(pg->data + off, &w, 8);
}

std::pair<BadKind, std::string> classify(std::uint64_t word, unsigned this_file) {
  std::uint64_t poison = 0;
  std::memset(&poison, alloc::kPoisonByte, sizeof poison);
  if (word == poison) return {BadKind::poison, "poison bytes (a freed page, poison_on_free)"};
  if ((word >> 32) == kChurnHigh) {
    return {BadKind::churn, "churn pattern, page serial " + std::to_string(word & 0xffffffffULL)};
  }
  if (word == 0) return {BadKind::zeros, "zeros"};
  unsigned f;
  std::uint64_t w;
  if (evict_race_decode(word, &f, &w)) {
    return {f == this_file ? BadKind::same_file : BadKind::other_file,
            "data of file " + std::to_string(f) + " offset " + std::to_string(w * 8)};
  }
  return {BadKind::unknown, "unrecognized bytes"};
}

struct alignas(128) ReaderStats {
  std::uint64_t reads = 0, bytes = 0, bad = 0, bad_bytes = 0;
  std::array<std::uint64_t, kBadKinds> by_kind{};
  std::vector<BadRead> kept;
};

struct alignas(128) WorkerStats {
  std::uint64_t evict_calls = 0, invalidate_calls = 0, pages_evicted = 0, churned = 0;
};

std::string hex(const std::array<std::uint8_t, 8>& b, std::size_t n) {
  std::string s;
  char x[4];
  for (std::size_t i = 0; i < n; i++) {
    std::snprintf(x, sizeof x, "%02x", b[i]);
    s += x;
  }
  return s;
}

}  // namespace

std::uint64_t evict_race_word(unsigned file, std::uint64_t w) {
  return mix((kMagic << 48) | (static_cast<std::uint64_t>(file & 0xffff) << 32) |
             (w & 0xffffffffULL));
}

void evict_race_fill(unsigned file, std::uint64_t off, std::byte* dst, std::size_t n) {
  fill_content(file, off, dst, n);
}

std::unique_ptr<cache::Backing> evict_race_backing(unsigned file, std::uint64_t size) {
  // A file's bytes, generated on demand: nothing to set up, nothing to drift.
  return std::make_unique<GeneratedBacking>(
      size, [file](std::uint64_t off, std::byte* dst, std::size_t n) {
        fill_content(file, off, dst, n);
      });
}

bool evict_race_decode(std::uint64_t word, unsigned* file, std::uint64_t* w) {
  std::uint64_t key = unmix(word);
  if ((key >> 48) != kMagic) return false;
  *file = static_cast<unsigned>((key >> 32) & 0xffff);
  *w = key & 0xffffffffULL;
  return true;
}

std::string_view evict_mode_name(EvictMode m) {
  switch (m) {
    case EvictMode::evict:
      return "evict";
    case EvictMode::invalidate:
      return "invalidate";
    case EvictMode::both:
      return "both";
  }
  return "?";
}

std::string_view bad_kind_name(BadKind k) {
  switch (k) {
    case BadKind::length:
      return "length";
    case BadKind::other_file:
      return "other_file";
    case BadKind::same_file:
      return "same_file";
    case BadKind::churn:
      return "churn";
    case BadKind::poison:
      return "poison";
    case BadKind::zeros:
      return "zeros";
    case BadKind::unknown:
      return "unknown";
    case BadKind::kCount:
      break;
  }
  return "?";
}

EvictRaceResult run_evict_race(const EvictRaceParams& p,
                               const std::function<void(const std::string&)>& progress) {
  if (p.readers == 0 || p.files == 0 || p.file_pages == 0 || p.max_read == 0) {
    throw std::invalid_argument("evict_race: readers, files, file_pages and max_read must be > 0");
  }
  if (p.files > 0xffff || p.file_pages * kPageSize / 8 > 0xffffffffULL) {
    throw std::invalid_argument("evict_race: at most 65535 files of at most 32 GiB");
  }
  cache::PageCacheConfig cfg;
  cfg.read_path = p.read_path;
  cfg.pool.defer = p.defer;
  cfg.pool.poison_on_free = p.poison;
  cfg.pool.tcache = p.tcache;
  cfg.limit_pages = p.limit_pages;
  cfg.readahead_max_pages = p.readahead_max_pages;
  PageCache cache(cfg);

  std::vector<std::shared_ptr<cache::CachedFile>> files;
  std::vector<std::uint64_t> sizes;
  for (unsigned i = 0; i < p.files; i++) {
    sizes.push_back(file_size(p, i));
    files.push_back(cache.open_file(evict_race_backing(i, sizes[i]), sizes[i]));
  }

  std::atomic<bool> go{false}, stop{false};
  const auto start = std::chrono::steady_clock::now();
  auto since_start = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  std::vector<ReaderStats> rstats(p.readers);
  // Bad reads so far, for the progress line only (the report sums rstats
  // after the join).  Relaxed: a count shown to a person, ordering nothing.
  std::atomic<std::uint64_t> bad_so_far{0};
  std::vector<WorkerStats> wstats(1 + p.churners);  // [0]: the evictor
  std::vector<std::thread> threads;

  for (unsigned t = 0; t < p.readers; t++) {
    threads.emplace_back([&, t] {
      std::vector<std::unique_ptr<cache::FileHandle>> handles;
      handles.reserve(files.size());
      for (auto& f : files) handles.push_back(std::make_unique<cache::FileHandle>(f));
      std::vector<std::byte> buf(p.max_read), expect(p.max_read);
      ReaderStats& st = rstats[t];
      std::uint64_t rng = p.seed * 0x100000001b3ULL + t + 1;
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      // Relaxed: a flag polled per read; it publishes nothing.
      while (!stop.load(std::memory_order_relaxed)) {
        std::uint64_t r = splitmix(rng);
        unsigned fi = static_cast<unsigned>(r % p.files);
        std::uint64_t pos = (r >> 16) % sizes[fi];
        // Mostly short reads (one page, the fast path's common case), some
        // across pages, up to max_read.
        std::size_t cap = std::min<std::size_t>(p.max_read, (r >> 60) < 8    ? 64
                                                            : (r >> 60) < 12 ? 512
                                                            : (r >> 60) < 14 ? 4096
                                                                             : p.max_read);
        std::size_t len = 1 + splitmix(rng) % cap;
        ssize_t got = cache.read(*handles[fi], pos, len, buf.data());
        std::size_t want = std::min<std::uint64_t>(len, sizes[fi] - pos);
        st.reads++;
        BadRead bad;
        bool is_bad = false;
        if (got != static_cast<ssize_t>(want)) {
          is_bad = true;
          bad.kind = BadKind::length;
          bad.what = "read returned " + std::to_string(got) + ", expected " + std::to_string(want);
          bad.offset = pos;
        } else {
          fill_content(fi, pos, expect.data(), want);
          if (std::memcmp(buf.data(), expect.data(), want) != 0) {
            is_bad = true;
            std::size_t i = 0;
            while (buf[i] == expect[i]) i++;
            std::size_t nbad = 0;
            for (std::size_t j = i; j < want; j++) nbad += buf[j] != expect[j];
            st.bad_bytes += nbad;
            bad.offset = pos + i;
            bad.nbytes = std::min<std::size_t>(8, want - i);
            std::memcpy(bad.expected.data(), expect.data() + i, bad.nbytes);
            std::memcpy(bad.got.data(), buf.data() + i, bad.nbytes);
            // Decode the first wrong aligned word that the read covers and
            // that decodes: pages are word-aligned, so a word comes whole
            // from wherever it came from, unless the copy tore it (memcpy
            // loads a vector at the head and tail first: a word across that
            // edge mixes bytes loaded before and after the page changed).
            bad.kind = BadKind::unknown;
            bad.what = "no wrong word the read covers decodes";
            for (std::uint64_t a = bad.offset & ~std::uint64_t{7}, tries = 0;
                 a + 8 <= pos + want && tries < 64; a += 8) {
              if (a < pos ||
                  std::memcmp(buf.data() + (a - pos), expect.data() + (a - pos), 8) == 0) {
                continue;
              }
              tries++;
              std::uint64_t word;
              std::memcpy(&word, buf.data() + (a - pos), 8);
              auto [kind, what] = classify(word, fi);
              if (kind == BadKind::unknown) continue;
              bad.kind = kind;
              bad.what = what + " (word at offset " + std::to_string(a) + ")";
              break;
            }
          } else {
            st.bytes += want;
          }
        }
        if (is_bad) {
          st.bad++;
          bad_so_far.fetch_add(1, std::memory_order_relaxed);
          st.by_kind[static_cast<std::size_t>(bad.kind)]++;
          if (st.kept.size() < p.keep_bad) {
            bad.at_seconds = since_start();
            bad.reader = t;
            bad.file = fi;
            bad.pos = pos;
            bad.len = len;
            bad.returned = got;
            bad.expected_len = want;
            st.kept.push_back(std::move(bad));
          }
        }
      }
    });
  }

  auto churn = [&](std::vector<alloc::Page*>& held, std::size_t n, std::uint64_t& serial) {
    std::size_t got = 0;
    for (; got < n; got++) {
      alloc::Page* pg = cache.pool().alloc();
      if (!pg) break;
      write_churn(pg, serial++);
      held[got] = pg;
    }
    for (std::size_t i = 0; i < got; i++) cache.pool().free(held[i]);  // rcu_free clear: now
    return got;
  };

  threads.emplace_back([&] {  // the evictor
    WorkerStats& st = wstats[0];
    std::vector<alloc::Page*> held(p.evictor_churn_pages);
    std::uint64_t serial = std::uint64_t{1} << 31;
    std::uint64_t n = 0;
    while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
    while (!stop.load(std::memory_order_relaxed)) {
      cache::CachedFile& f = *files[n % p.files];
      bool inval =
          p.mode == EvictMode::invalidate || (p.mode == EvictMode::both && (n / p.files) % 2 == 1);
      if (inval) {
        cache.invalidate(f);
        st.invalidate_calls++;
      } else {
        st.pages_evicted += cache.evict(f);
        st.evict_calls++;
      }
      n++;
      if (p.evictor_churn_pages) st.churned += churn(held, p.evictor_churn_pages, serial);
      if (p.evict_pause_us)
        std::this_thread::sleep_for(std::chrono::microseconds(p.evict_pause_us));
    }
  });

  for (unsigned c = 0; c < p.churners; c++) {
    threads.emplace_back([&, c] {
      WorkerStats& st = wstats[1 + c];
      std::vector<alloc::Page*> held(p.churn_pages);
      std::uint64_t serial = std::uint64_t{c} << 24;
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      while (!stop.load(std::memory_order_relaxed))
        st.churned += churn(held, p.churn_pages, serial);
    });
  }

  EvictRaceResult res;
  const auto t0 = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  const auto end = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(p.seconds));
  for (auto tick = t0 + std::chrono::seconds(1); tick < end; tick += std::chrono::seconds(1)) {
    std::this_thread::sleep_until(tick);
    if (!progress) continue;
    cache::CacheCounters c = cache.counters();
    char line[160];
    std::snprintf(
        line, sizeof line, "%.0f/%.3g s: %s reads, %s bad, %s pages evicted",
        std::chrono::duration<double>(tick - t0).count(), p.seconds,
        si(static_cast<double>(c[cache::Ctr::reads])).c_str(),
        std::to_string(bad_so_far.load(std::memory_order_relaxed)).c_str(),
        si(static_cast<double>(c[cache::Ctr::evicted] + c[cache::Ctr::removed_pages])).c_str());
    progress(line);
  }
  std::this_thread::sleep_until(end);
  stop.store(true, std::memory_order_relaxed);
  for (auto& t : threads) t.join();
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  for (const auto& st : rstats) {
    res.reads += st.reads;
    res.bytes_checked += st.bytes;
    res.bad_reads += st.bad;
    res.bad_bytes += st.bad_bytes;
    for (std::size_t k = 0; k < kBadKinds; k++) res.bad_by_kind[k] += st.by_kind[k];
    res.first_bad.insert(res.first_bad.end(), st.kept.begin(), st.kept.end());
  }
  std::sort(res.first_bad.begin(), res.first_bad.end(),
            [](const BadRead& a, const BadRead& b) { return a.at_seconds < b.at_seconds; });
  if (res.first_bad.size() > p.keep_bad) res.first_bad.resize(p.keep_bad);
  for (const auto& st : wstats) {
    res.evict_calls += st.evict_calls;
    res.invalidate_calls += st.invalidate_calls;
    res.pages_evicted += st.pages_evicted;
    res.churned_pages += st.churned;
  }
  res.cache = cache.counters();
  res.pages_invalidated = res.cache[Ctr::removed_pages];  // only invalidate() removes here
  res.pool = cache.pool_counters();
  files.clear();
  return res;
}

EvictRaceVerdict evict_race_verdict(const EvictRaceParams& p, const EvictRaceResult& r) {
  EvictRaceVerdict v;
  v.control = !p.defer && p.read_path == cache::ReadPath::noref;
  char buf[512];
  if (r.reads == 0) {
    v.exit_code = 1;
    v.message = "FAIL: no read completed, nothing was checked";
    return v;
  }
  if (v.control) {
    if (r.bad_reads > 0) {
      std::snprintf(buf, sizeof buf,
                    "control: %llu bad reads detected, the checker catches a broken guarantee "
                    "(defer off, noref)",
                    static_cast<unsigned long long>(r.bad_reads));
      v.exit_code = 0;
    } else {
      std::snprintf(buf, sizeof buf,
                    "control: no bad read detected in %.1f s — inconclusive (defer off, noref: "
                    "bad reads were expected)",
                    r.seconds);
      v.exit_code = 2;
    }
    v.message = buf;
    return v;
  }
  if (r.bad_reads > 0) {
    std::snprintf(buf, sizeof buf, "FAIL: %llu bad reads of %llu (read path %s, defer %s)",
                  static_cast<unsigned long long>(r.bad_reads),
                  static_cast<unsigned long long>(r.reads),
                  std::string(cache::read_path_name(p.read_path)).c_str(), p.defer ? "on" : "off");
    v.exit_code = 1;
  } else if (r.evictions() == 0) {
    std::snprintf(buf, sizeof buf, "inconclusive: 0 bad reads, but no page was evicted");
    v.exit_code = 2;
  } else {
    std::snprintf(buf, sizeof buf,
                  "PASS: 0 bad reads in %llu reads (%.1f MiB checked), %llu pages evicted or "
                  "invalidated meanwhile%s",
                  static_cast<unsigned long long>(r.reads),
                  static_cast<double>(r.bytes_checked) / (1024.0 * 1024.0),
                  static_cast<unsigned long long>(r.evictions()),
                  p.defer ? ""
                          : " (defer off: the bytes were right, but this path still touched "
                            "freed descriptors; see tools/check/evict_race.h)");
    v.exit_code = 0;
  }
  v.message = buf;
  return v;
}

EvictRaceVerdict evict_race_crash_verdict(const EvictRaceParams& p, int sig) {
  EvictRaceVerdict v;
  v.control = !p.defer && p.read_path == cache::ReadPath::noref;
  const char* name = sigdescr_np(sig);  // MT-Safe, unlike strsignal
  std::string what =
      "the run died of signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")";
  if (v.control) {
    v.exit_code = 0;
    v.message = "control: " + what +
                ": a reader used a page whose descriptor was freed and reused under it, the "
                "broken guarantee showing as a crash (defer off, noref)";
  } else if (!p.defer) {
    v.exit_code = 1;
    v.message = "FAIL: " + what +
                " (defer off: this path too reads descriptors freed at once; see "
                "tools/check/evict_race.h)";
  } else {
    v.exit_code = 1;
    v.message = "FAIL: " + what + " with defer on";
  }
  return v;
}

std::string describe_evict_race_config(const EvictRaceParams& p) {
  std::ostringstream os;
  os << "norefs_evict_race: read_path=" << cache::read_path_name(p.read_path)
     << " defer=" << (p.defer ? "on" : "off") << " poison=" << (p.poison ? "on" : "off")
     << " tcache=" << (p.tcache == alloc::TcacheMode::none ? "none" : "private")
     << " seconds=" << p.seconds << "\n  readers=" << p.readers << " churners=" << p.churners
     << " files=" << p.files << " file_pages=" << p.file_pages << " max_read=" << p.max_read
     << " churn_pages=" << p.churn_pages << " evictor_churn_pages=" << p.evictor_churn_pages
     << " evict_mode=" << evict_mode_name(p.mode) << " evict_pause_us=" << p.evict_pause_us
     << " limit_pages=" << p.limit_pages << " readahead_max_pages=" << p.readahead_max_pages
     << " seed=" << p.seed << "\n";
  return os.str();
}

std::string format_evict_race_report(const EvictRaceParams& p, const EvictRaceResult& r) {
  std::ostringstream os;
  char line[512];
  const auto& c = r.cache;
  auto per_s = [&](double x) { return x / r.seconds; };
  std::snprintf(line, sizeof line,
                "reads          %llu (%.0f/s), %.1f MiB checked, fast-path reads %.1f%%, "
                "misses %llu\n",
                static_cast<unsigned long long>(r.reads), per_s(static_cast<double>(r.reads)),
                static_cast<double>(r.bytes_checked) / (1024.0 * 1024.0),
                c[Ctr::reads] ? 100.0 * static_cast<double>(c[Ctr::fast_reads]) /
                                    static_cast<double>(c[Ctr::reads])
                              : 0.0,
                static_cast<unsigned long long>(c[Ctr::misses]));
  os << line;
  std::snprintf(line, sizeof line, "bad reads      %llu (%llu wrong bytes)\n",
                static_cast<unsigned long long>(r.bad_reads),
                static_cast<unsigned long long>(r.bad_bytes));
  os << line;
  if (r.bad_reads) {
    os << "  by first wrong word:";
    for (std::size_t k = 0; k < kBadKinds; k++) {
      if (r.bad_by_kind[k])
        os << " " << bad_kind_name(static_cast<BadKind>(k)) << "=" << r.bad_by_kind[k];
    }
    os << "\n";
  }
  std::snprintf(line, sizeof line,
                "evictions      %llu pages (evict() %llu calls: %llu pages; invalidate() %llu "
                "calls: %llu pages)\n",
                static_cast<unsigned long long>(r.evictions()),
                static_cast<unsigned long long>(r.evict_calls),
                static_cast<unsigned long long>(r.pages_evicted),
                static_cast<unsigned long long>(r.invalidate_calls),
                static_cast<unsigned long long>(r.pages_invalidated));
  os << line;
  std::snprintf(line, sizeof line, "churn          %llu pages (%.0f/s); fills %llu pages\n",
                static_cast<unsigned long long>(r.churned_pages),
                per_s(static_cast<double>(r.churned_pages)),
                static_cast<unsigned long long>(c[Ctr::readahead_pages]));
  os << line;
  std::snprintf(line, sizeof line,
                "pool           deferred %llu, immediate %llu, grace periods %llu, peak waiting "
                "%llu pages\n",
                static_cast<unsigned long long>(r.pool.deferred),
                static_cast<unsigned long long>(r.pool.immediate),
                static_cast<unsigned long long>(r.pool.grace_periods),
                static_cast<unsigned long long>(r.pool.peak_waiting));
  os << line;
  if (!r.first_bad.empty()) {
    os << "first bad reads:\n";
    for (const auto& b : r.first_bad) {
      std::snprintf(line, sizeof line,
                    "  t=%.3fs reader %u file %u read [%llu, +%zu) -> %zd: at offset %llu "
                    "expected %s got %s (%s)\n",
                    b.at_seconds, b.reader, b.file, static_cast<unsigned long long>(b.pos), b.len,
                    b.returned, static_cast<unsigned long long>(b.offset),
                    b.nbytes ? hex(b.expected, b.nbytes).c_str() : "-",
                    b.nbytes ? hex(b.got, b.nbytes).c_str() : "-", b.what.c_str());
      os << line;
    }
  }
  (void)p;
  return os.str();
}

std::string evict_race_json(const EvictRaceParams& p, const EvictRaceResult* rp,
                            const EvictRaceVerdict& v) {
  nlohmann::json cfg = {{"read_path", cache::read_path_name(p.read_path)},
                        {"defer", p.defer},
                        {"poison", p.poison},
                        {"tcache", p.tcache == alloc::TcacheMode::none ? "none" : "private"},
                        {"seconds", p.seconds},
                        {"readers", p.readers},
                        {"churners", p.churners},
                        {"files", p.files},
                        {"file_pages", p.file_pages},
                        {"max_read", p.max_read},
                        {"churn_pages", p.churn_pages},
                        {"evictor_churn_pages", p.evictor_churn_pages},
                        {"evict_pause_us", p.evict_pause_us},
                        {"evict_mode", evict_mode_name(p.mode)},
                        {"limit_pages", p.limit_pages},
                        {"readahead_max_pages", p.readahead_max_pages},
                        {"seed", p.seed}};
  nlohmann::json verdict = {
      {"exit_code", v.exit_code}, {"control", v.control}, {"message", v.message}};
  if (!rp) {
    return nlohmann::json{{"config", cfg}, {"result", nullptr}, {"verdict", verdict}}.dump(2) +
           "\n";
  }
  const EvictRaceResult& r = *rp;
  nlohmann::json kinds = nlohmann::json::object();
  for (std::size_t k = 0; k < kBadKinds; k++) {
    kinds[std::string(bad_kind_name(static_cast<BadKind>(k)))] = r.bad_by_kind[k];
  }
  nlohmann::json bad = nlohmann::json::array();
  for (const auto& b : r.first_bad) {
    bad.push_back({{"at_seconds", b.at_seconds},
                   {"reader", b.reader},
                   {"file", b.file},
                   {"pos", b.pos},
                   {"len", b.len},
                   {"returned", b.returned},
                   {"expected_len", b.expected_len},
                   {"offset", b.offset},
                   {"expected", hex(b.expected, b.nbytes)},
                   {"got", hex(b.got, b.nbytes)},
                   {"kind", bad_kind_name(b.kind)},
                   {"what", b.what}});
  }
  const auto& c = r.cache;
  nlohmann::json res = {{"seconds", r.seconds},
                        {"reads", r.reads},
                        {"bytes_checked", r.bytes_checked},
                        {"bad_reads", r.bad_reads},
                        {"bad_bytes", r.bad_bytes},
                        {"bad_by_kind", kinds},
                        {"first_bad", bad},
                        {"evict_calls", r.evict_calls},
                        {"invalidate_calls", r.invalidate_calls},
                        {"pages_evicted", r.pages_evicted},
                        {"pages_invalidated", r.pages_invalidated},
                        {"churned_pages", r.churned_pages},
                        {"cache_reads", c[Ctr::reads]},
                        {"fast_reads", c[Ctr::fast_reads]},
                        {"misses", c[Ctr::misses]},
                        {"fill_pages", c[Ctr::readahead_pages]},
                        {"pool_deferred", r.pool.deferred},
                        {"pool_immediate", r.pool.immediate},
                        {"grace_periods", r.pool.grace_periods},
                        {"peak_waiting", r.pool.peak_waiting}};
  return nlohmann::json{{"config", cfg}, {"result", res}, {"verdict", verdict}}.dump(2) + "\n";
}

}  // namespace norefs::tools
