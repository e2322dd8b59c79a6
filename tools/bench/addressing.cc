// SPDX-License-Identifier: LGPL-2.1-or-later
#include "tools/bench/addressing.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <new>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "alloc/rcu.h"
#include "cache/fast_path.h"
#include "cache/page_cache.h"
#include "tools/lib/backings.h"
#include "tools/lib/report.h"

namespace norefs::tools::addressing {
namespace {

using cache::Ctr;
using cache::FastResult;
using cache::kPageShift;
using cache::kPageSize;
using cache::Stop;

constexpr std::size_t kLen = 16;  // bytes per read
constexpr unsigned kSlots = cache::PageIndex::kSlots, kBits = cache::PageIndex::kBits;

std::byte content(std::uint64_t i) { return static_cast<std::byte>((i * 131 + 7) & 0xff); }

// ── The copies: MEASUREMENT VARIANTS of the fast path's structures and
// lookup, for this benchmark only (not product code; the product's are
// cache/shared_file.h, cache/page_index.h, alloc/page.h).  Reduced to what
// the fast path reads, in the same order and with the same orderings. ──

// Absolute pointers, as main stores them.
struct alignas(64) PtrPage {
  std::atomic<std::uint64_t> state;
  const std::byte* data;
};
struct alignas(64) PtrNode {
  unsigned shift;
  std::atomic<const void*> slots[kSlots];
};
struct alignas(64) PtrFile {
  std::atomic<std::uint64_t> size;
  std::atomic<const PtrNode*> root;
};
// Offsets from the region's base; 0 is null (offset 0 is the region's
// header, never a node or a page).
struct alignas(64) OffPage {
  std::atomic<std::uint64_t> state;
  std::uint64_t data;
};
struct alignas(64) OffNode {
  unsigned shift;
  std::atomic<std::uint64_t> slots[kSlots];
};
struct alignas(64) OffFile {
  std::atomic<std::uint64_t> size;
  std::atomic<std::uint64_t> root;
};

inline unsigned slot_of(std::uint64_t index, unsigned shift) {
  return static_cast<unsigned>(index >> shift) & (kSlots - 1);
}
inline std::uint64_t max_index(unsigned shift) {
  unsigned bits = shift + kBits;
  return bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
}

// PageIndex::lookup() over the copies, one addressing each.
struct Pointers {
  static const PtrPage* lookup(const PtrFile& f, std::uint64_t index) {
    // Acquire: as PageIndex::lookup() (pairs with the release that linked it).
    const PtrNode* n = f.root.load(std::memory_order_acquire);
    if (!n || index > max_index(n->shift)) return nullptr;
    for (;;) {
      const void* e = n->slots[slot_of(index, n->shift)].load(std::memory_order_acquire);
      if (n->shift == 0 || !e) return static_cast<const PtrPage*>(e);
      n = static_cast<const PtrNode*>(e);
    }
  }
  static const std::byte* data(const PtrPage& p) { return p.data; }
};

struct Offsets {
  const std::byte* base;
  template <class T>
  const T* at(std::uint64_t off) const {
    return reinterpret_cast<const T*>(base + off);
  }
  const OffPage* lookup(const OffFile& f, std::uint64_t index) const {
    std::uint64_t o = f.root.load(std::memory_order_acquire);
    if (!o) return nullptr;
    const OffNode* n = at<OffNode>(o);
    if (index > max_index(n->shift)) return nullptr;
    for (;;) {
      std::uint64_t e = n->slots[slot_of(index, n->shift)].load(std::memory_order_acquire);
      if (!e) return nullptr;
      if (n->shift == 0) return at<OffPage>(e);
      n = at<OffNode>(e);
    }
  }
  const std::byte* data(const OffPage& p) const { return base + p.data; }
};

// cache::fast_read()'s loop, line for line, over a copy (its sync point,
// a no-op in a build without NOREFS_SYNC_POINTS, is left out).
template <class Addr, class File, class Sink>
[[gnu::always_inline]] inline FastResult copy_read(const Addr& a, const File& f, std::uint64_t pos,
                                                   std::size_t len, Sink& sink, unsigned batch,
                                                   const std::atomic<bool>* interrupted,
                                                   cache::CacheSlot& st) {
  FastResult r;
  const std::uint64_t isize0 = f.size.load(std::memory_order_acquire);
  unsigned pages = 0;
  for (;;) {
    if (r.n == len || pos >= isize0) {
      r.complete = true;
      break;
    }
    if (interrupted && interrupted->load(std::memory_order_relaxed)) {
      r.stop = Stop::interrupted;
      break;
    }
    if (pages == batch) {
      r.stop = Stop::batch;
      break;
    }
    const auto* p = a.lookup(f, pos >> kPageShift);
    if (!p) {
      r.stop = Stop::missing;
      break;
    }
    r.stop = cache::page_stop(p->state.load(std::memory_order_acquire));
    if (r.stop != Stop::kCount) break;
    std::uint64_t end = std::min(isize0, f.size.load(std::memory_order_acquire));
    if (pos >= end) {
      r.stop = Stop::past_eof;
      break;
    }
    std::size_t off = pos & (kPageSize - 1);
    std::size_t n = std::min({len - r.n, kPageSize - off, static_cast<std::size_t>(end - pos)});
    sink.put(a.data(*p) + off, n);
    r.n += n;
    pos += n;
    pages++;
  }
  bump(st, Ctr::fast_pages, pages);
  return r;
}

// The three reads, out of line as PageCache::read() is, each one section.
[[gnu::noinline]] ssize_t read_fast(const cache::SharedFile* f, std::uint64_t pos, std::byte* dst,
                                    unsigned batch, cache::CacheSlot& st) {
  cache::BufferSink sink{dst};
  FastResult r;
  {
    alloc::rcu::ReadGuard g;
    r = cache::fast_read(*f, pos, kLen, sink, batch, nullptr, st);
  }
  return r.complete ? static_cast<ssize_t>(r.n) : -1;
}

[[gnu::noinline]] ssize_t read_pointers(const PtrFile* f, std::uint64_t pos, std::byte* dst,
                                        unsigned batch, cache::CacheSlot& st) {
  cache::BufferSink sink{dst};
  FastResult r;
  {
    alloc::rcu::ReadGuard g;
    r = copy_read(Pointers{}, *f, pos, kLen, sink, batch, nullptr, st);
  }
  return r.complete ? static_cast<ssize_t>(r.n) : -1;
}

[[gnu::noinline]] ssize_t read_offsets(const std::byte* base, std::uint64_t file, std::uint64_t pos,
                                       std::byte* dst, unsigned batch, cache::CacheSlot& st) {
  cache::BufferSink sink{dst};
  FastResult r;
  {
    alloc::rcu::ReadGuard g;
    Offsets a{base};
    r = copy_read(a, *a.at<OffFile>(file), pos, kLen, sink, batch, nullptr, st);
  }
  return r.complete ? static_cast<ssize_t>(r.n) : -1;
}

// Reads for `seconds`; `read(dep, buf)` adds dep to its entry (pointer or
// offset) and its position.  Latency: dep is the first byte the last read
// copied AND a zero the compiler cannot see, so each read waits for the
// one before; throughput: dep is 0 and the reads are independent.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

template <Shape S, class Read>
Measurement time_loop(double seconds, std::byte* buf, Read read) {
  using Clock = std::chrono::steady_clock;
  std::uint64_t zero = 0;
  asm volatile("" : "+r"(zero));
  std::uint64_t dep = 0, reads = 0;
  bool bad = false;
  const double cpu0 = thread_cpu_seconds();
  const Clock::time_point t0 = Clock::now();
  const auto deadline =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  Clock::time_point t1;
  do {
    for (int i = 0; i < 1024; i++) {
      bad |= read(dep, buf) != static_cast<ssize_t>(kLen);
      if constexpr (S == Shape::latency) dep = std::to_integer<std::uint64_t>(buf[0]) & zero;
    }
    reads += 1024;
    t1 = Clock::now();
  } while (t1 < deadline);
  const double cpu1 = thread_cpu_seconds();
  if (bad) throw std::runtime_error("addressing: a read stopped or returned short");
  for (std::size_t i = 0; i < kLen; i++) {
    if (buf[i] != content(i)) throw std::runtime_error("addressing: a read copied wrong bytes");
  }
  Measurement m;
  m.reads = reads;
  m.seconds = std::chrono::duration<double>(t1 - t0).count();
  m.ns_per_read = m.seconds * 1e9 / static_cast<double>(reads);
  m.cpu_seconds = cpu1 - cpu0;
  m.cpu_ns_per_read = m.cpu_seconds * 1e9 / static_cast<double>(reads);
  return m;
}

// The copies, in the region (the pool's SharedAlloc), freed with it.
class Copies {
 public:
  Copies(cache::PageCache& cache, const cache::Page& real)
      : heap_(cache.pool().shared_alloc()), base_(cache.region().base()) {
    const std::uint64_t state = cache::pg::load(real);
    std::byte* pdata = take(kPageSize, kPageSize);
    std::byte* odata = take(kPageSize, kPageSize);
    std::memcpy(pdata, real.data, kPageSize);
    std::memcpy(odata, real.data, kPageSize);
    auto* pp = new (take(sizeof(PtrPage), 64)) PtrPage{{state}, pdata};
    auto* pn = new (take(sizeof(PtrNode), 64)) PtrNode{};
    pn->shift = 0;
    pn->slots[0].store(pp, std::memory_order_release);
    ptr_file_ = new (take(sizeof(PtrFile), 64)) PtrFile{};
    ptr_file_->size.store(kPageSize, std::memory_order_release);
    ptr_file_->root.store(pn, std::memory_order_release);
    auto* op = new (take(sizeof(OffPage), 64)) OffPage{{state}, off(odata)};
    auto* on = new (take(sizeof(OffNode), 64)) OffNode{};
    on->shift = 0;
    on->slots[0].store(off(op), std::memory_order_release);
    auto* of = new (take(sizeof(OffFile), 64)) OffFile{};
    of->size.store(kPageSize, std::memory_order_release);
    of->root.store(off(on), std::memory_order_release);
    off_file_ = off(of);
  }
  ~Copies() {
    for (auto& [p, size, align] : taken_) heap_.free(p, size, align);
  }
  Copies(const Copies&) = delete;
  Copies& operator=(const Copies&) = delete;

  const PtrFile* ptr_file() const { return ptr_file_; }
  std::uint64_t off_file() const { return off_file_; }
  const std::byte* base() const { return base_; }

 private:
  struct Taken {
    void* p;
    std::size_t size, align;
  };
  std::byte* take(std::size_t size, std::size_t align) {
    void* p = heap_.alloc(size, align);
    if (!p) throw std::bad_alloc();
    taken_.push_back({p, size, align});
    return static_cast<std::byte*>(p);
  }
  std::uint64_t off(const void* p) const {
    return static_cast<std::uint64_t>(static_cast<const std::byte*>(p) - base_);
  }
  alloc::SharedAlloc heap_;
  const std::byte* base_;
  std::vector<Taken> taken_;
  PtrFile* ptr_file_ = nullptr;
  std::uint64_t off_file_ = 0;
};

// Pins the calling thread for the scope, and puts its old mask back.
class Pin {
 public:
  explicit Pin(int nth) {
    if (nth < 0 || pthread_getaffinity_np(pthread_self(), sizeof(old_), &old_) != 0) return;
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; c++) {
      if (CPU_ISSET(c, &old_)) cpus.push_back(c);
    }
    if (cpus.empty()) return;
    cpu_ = cpus[static_cast<std::size_t>(nth) % cpus.size()];
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu_, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0) cpu_ = -1;
  }
  ~Pin() {
    if (cpu_ >= 0) pthread_setaffinity_np(pthread_self(), sizeof(old_), &old_);
  }
  Pin(const Pin&) = delete;
  Pin& operator=(const Pin&) = delete;
  int cpu() const { return cpu_; }

 private:
  cpu_set_t old_{};
  int cpu_ = -1;
};

constexpr Reader kReaders[] = {Reader::fast_read, Reader::copy_pointers, Reader::copy_offsets};
constexpr Shape kShapes[] = {Shape::throughput, Shape::latency};

}  // namespace

std::string_view reader_name(Reader r) {
  switch (r) {
    case Reader::fast_read:
      return "fast_read";
    case Reader::copy_pointers:
      return "copy-pointers";
    case Reader::copy_offsets:
      return "copy-offsets";
  }
  return "?";
}

std::string_view shape_name(Shape s) { return s == Shape::throughput ? "throughput" : "latency"; }

Result run(const Params& p, const std::function<void(const std::string&)>& progress) {
  if (p.rounds == 0 || !(p.seconds > 0)) {
    throw std::invalid_argument("addressing: rounds and seconds must be > 0");
  }
  Result res;
  res.params = p;
  for (Shape s : kShapes) {
    for (Reader r : kReaders) {
      Row row;
      row.reader = r;
      row.shape = s;
      res.rows.push_back(row);
    }
  }
  Pin pin(p.cpu);
  res.pinned_cpu = pin.cpu();

  cache::PageCacheConfig cfg;
  cache::PageCache cache(cfg);
  auto file = cache.open_file(
      std::make_unique<GeneratedBacking>(kPageSize,
                                         [](std::uint64_t off, std::byte* dst, std::size_t n) {
                                           for (std::size_t k = 0; k < n; k++)
                                             dst[k] = content(off + k);
                                         }),
      kPageSize);
  cache::FileHandle handle(file);
  alignas(128) std::byte buf[128] = {};
  // Warm: until the page is referenced and active, every read a fast-path hit.
  for (int i = 0; i < 8; i++) {
    if (cache.read(handle, 0, kLen, buf) != static_cast<ssize_t>(kLen))
      throw std::runtime_error("addressing: warm-up read failed");
  }
  const cache::SharedFile& shared = cache::PageCache::shared_file(*file);
  const cache::Page* real = nullptr;
  {
    alloc::rcu::ReadGuard g;
    real = shared.index.lookup(0);
  }
  if (!real || cache::page_stop(cache::pg::load(*real)) != Stop::kCount) {
    throw std::runtime_error("addressing: the page is not a fast-path hit after warm-up");
  }
  {
    Copies copies(cache, *real);
    cache::CacheStats stats("", 4);
    cache::CacheSlot& st = stats.slot();
    const unsigned batch = cfg.batch;
    const cache::SharedFile* sf = &shared;
    const PtrFile* pf = copies.ptr_file();
    const std::byte* base = copies.base();
    const std::uint64_t of = copies.off_file();
    auto measure = [&]<Shape S>(Reader r) {
      switch (r) {
        case Reader::fast_read:
          return time_loop<S>(p.seconds, buf, [&](std::uint64_t d, std::byte* b) {
            return read_fast(reinterpret_cast<const cache::SharedFile*>(
                                 reinterpret_cast<const std::byte*>(sf) + d),
                             d, b, batch, st);
          });
        case Reader::copy_pointers:
          return time_loop<S>(p.seconds, buf, [&](std::uint64_t d, std::byte* b) {
            return read_pointers(
                reinterpret_cast<const PtrFile*>(reinterpret_cast<const std::byte*>(pf) + d), d, b,
                batch, st);
          });
        case Reader::copy_offsets:
          break;
      }
      return time_loop<S>(p.seconds, buf, [&](std::uint64_t d, std::byte* b) {
        return read_offsets(base, of + d, d, b, batch, st);
      });
    };
    for (unsigned round = 0; round < p.rounds; round++) {
      for (std::size_t si = 0; si < 2; si++) {
        for (std::size_t k = 0; k < 3; k++) {
          const std::size_t ri = (k + round) % 3;
          Measurement m = si == 0 ? measure.template operator()<Shape::throughput>(kReaders[ri])
                                  : measure.template operator()<Shape::latency>(kReaders[ri]);
          res.rows[si * 3 + ri].rounds.push_back(m);
        }
      }
      if (progress) {
        std::ostringstream os;
        os << "round " << round + 1 << "/" << p.rounds << ":";
        for (const Row& row : res.rows) {
          os << " " << reader_name(row.reader) << "/" << shape_name(row.shape) << " "
             << report::fmt("%.2f", row.rounds.back().cpu_ns_per_read);
        }
        progress(os.str());
      }
    }
  }
  for (std::size_t si = 0; si < 2; si++) {
    const Row& ptr = res.rows[si * 3 + 1];
    for (std::size_t ri = 0; ri < 3; ri++) {
      Row& row = res.rows[si * 3 + ri];
      std::vector<double> ns, cpu, vs;
      for (std::size_t i = 0; i < row.rounds.size(); i++) {
        ns.push_back(row.rounds[i].ns_per_read);
        cpu.push_back(row.rounds[i].cpu_ns_per_read);
        vs.push_back(row.rounds[i].cpu_ns_per_read / ptr.rounds[i].cpu_ns_per_read);
      }
      const report::Spread a = report::spread(ns), c = report::spread(cpu), b = report::spread(vs);
      row.ns_per_read = a.median;
      row.ns_min = a.min;
      row.ns_max = a.max;
      row.cpu_ns = c.median;
      row.cpu_ns_min = c.min;
      row.cpu_ns_max = c.max;
      row.vs_pointers = b.median;
      row.vs_pointers_min = b.min;
      row.vs_pointers_max = b.max;
    }
  }
  return res;
}

std::string describe(const Params& p) {
  std::ostringstream os;
  os << "norefs_addressing_bench: one cached page, " << kLen
     << "-byte reads at offset 0; readers fast_read (a), copy-pointers (a'), copy-offsets (b);"
        " shapes throughput, latency\n  rounds="
     << p.rounds << " seconds=" << p.seconds << " (per reader and shape) cpu=" << p.cpu
     << (p.cpu < 0 ? " (not pinned)" : " (the cpu-th allowed CPU)") << "\n";
  return os.str();
}

std::string format_table(const Result& r) {
  using A = report::Table::Align;
  using report::fmt;
  report::Table t({{"shape", A::left},
                   {"reader", A::left},
                   {"ns/read", A::right},
                   {"(min-max)", A::right},
                   {"cpu-ns", A::right},
                   {"(min-max)", A::right},
                   {"x pointers", A::right},
                   {"(min-max)", A::right},
                   {"- pointers ns", A::right}});
  for (std::size_t i = 0; i < r.rows.size(); i++) {
    const Row& row = r.rows[i];
    const Row& ptr = r.rows[i / 3 * 3 + 1];
    if (i == 3) t.add_gap();
    t.add_row({std::string(shape_name(row.shape)), std::string(reader_name(row.reader)),
               fmt("%.2f", row.ns_per_read), fmt("%.2f", row.ns_min) + fmt("-%.2f", row.ns_max),
               fmt("%.2f", row.cpu_ns), fmt("%.2f", row.cpu_ns_min) + fmt("-%.2f", row.cpu_ns_max),
               fmt("%.3fx", row.vs_pointers),
               fmt("%.3f", row.vs_pointers_min) + fmt("-%.3f", row.vs_pointers_max),
               fmt("%+.2f", row.cpu_ns - ptr.cpu_ns)});
  }
  std::ostringstream os;
  os << t.str() << "(medians over " << r.params.rounds
     << " rounds; cpu-ns: the thread's CPU clock per read; x pointers: median of the same-round"
        " ratios of cpu-ns to copy-pointers'; - pointers: difference of the cpu-ns medians;"
        " pinned to CPU "
     << r.pinned_cpu << ")\n";
  return os.str();
}

namespace {

report::Records records(const Result& r) {
  report::Records rec({"shape", "reader", "rounds", "ns_per_read", "ns_min", "ns_max",
                       "cpu_ns_per_read", "cpu_ns_min", "cpu_ns_max", "vs_pointers",
                       "vs_pointers_min", "vs_pointers_max"});
  for (const Row& row : r.rows) {
    rec.add({shape_name(row.shape), reader_name(row.reader), row.rounds.size(), row.ns_per_read,
             row.ns_min, row.ns_max, row.cpu_ns, row.cpu_ns_min, row.cpu_ns_max, row.vs_pointers,
             row.vs_pointers_min, row.vs_pointers_max});
  }
  return rec;
}

}  // namespace

std::string csv(const Result& r) { return records(r).csv(); }

std::string json(const Result& r) {
  nlohmann::json rows = records(r).json();
  for (std::size_t i = 0; i < r.rows.size(); i++) {
    nlohmann::json rounds = nlohmann::json::array();
    for (const Measurement& m : r.rows[i].rounds) {
      rounds.push_back(
          {{"reads", m.reads}, {"seconds", m.seconds}, {"ns_per_read", m.ns_per_read}});
    }
    rows[i]["rounds"] = rounds;
  }
  nlohmann::json cfg = {{"rounds", r.params.rounds},
                        {"seconds", r.params.seconds},
                        {"cpu", r.params.cpu},
                        {"pinned_cpu", r.pinned_cpu},
                        {"read_bytes", kLen}};
  return nlohmann::json{{"config", cfg}, {"rows", rows}}.dump(2) + "\n";
}

}  // namespace norefs::tools::addressing
