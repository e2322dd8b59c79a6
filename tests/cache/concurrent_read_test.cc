// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Readers on each read path against one writer that writes, truncates,
// punches, evicts, invalidates, shrinks and prefetches two files of one
// cache (poison_on_free on, with and without a memory limit).  Every
// 8-byte word a reader gets must be a value that word held at some moment
// of the read — never poison, never another file's or another offset's
// word, never a stale version, never a zero no change made — and the
// length must end at a size the file had meanwhile.
//
// How the valid values are known.  Word w of file f holds
//   pattern_word(f, w, version)   or 0,
// where version is the number of the writer's operation that wrote it (0
// for the initial content).  The writer is one thread (the cache's callers
// serialize changes of a file) and numbers its operations 1, 2, ...; for
// operation k it logs what k does, publishes `started = k`, changes the
// backing file, applies k to the cache, updates the model `committed`
// (what every word holds once k is done) and publishes `done = k`.  A
// reader takes lo = done, snapshots `committed` for its range, reads, then
// takes hi = started.  A word it got is valid iff it equals the snapshot,
// or an operation in (lo, hi] wrote that value there (version in (lo, hi],
// covering the word) or zeroed it (a zero).  Sizes likewise.
//
// Short by design (a few hundred operations): the long stress runs belong
// in tools/.  With sync points compiled in, readers and removals yield now
// and then inside the windows the protocol guards.  The writer paces itself on the readers'
// progress (never on time), so that each operation is followed by reads that saturate pages and
// take the fast path with no operation running.
#include <atomic>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>

#include "cache_test_util.h"

namespace norefs::cache::test {
namespace {

constexpr std::uint64_t kCapPages = 48;
constexpr std::uint64_t kCap = kCapPages * P;  // bytes a file may reach
constexpr std::uint64_t kCapWords = kCap / 8;
constexpr int kReaders = 2;
constexpr int kReadsPerGroup = 4;  // the same range, so the last read finds it saturated
#if defined(NOREFS_TEST_TSAN)
constexpr int kOps = 200;
#elif defined(NOREFS_TEST_ASAN)
constexpr int kOps = 800;
#else
constexpr int kOps = 1500;
#endif

std::uint32_t word_file(std::uint64_t v) { return static_cast<std::uint32_t>(v >> 56); }
std::uint64_t word_version(std::uint64_t v) { return (v >> 32) & 0xffffff; }
std::uint64_t word_index(std::uint64_t v) { return v & 0xffffffffu; }

// A backing file of atomic words, so that fills racing the writer read
// each word whole.
struct WordFile {
  explicit WordFile(std::uint32_t file_id, std::uint64_t initial_size)
      : id(file_id),
        words(new std::atomic<std::uint64_t>[kCapWords]),
        committed(new std::atomic<std::uint64_t>[kCapWords]),
        size(initial_size),
        committed_size(initial_size) {
    for (std::uint64_t w = 0; w < kCapWords; w++) {
      std::uint64_t v = w * 8 < initial_size ? pattern_word(id, w, 0) : 0;
      words[w].store(v, std::memory_order_relaxed);
      committed[w].store(v, std::memory_order_relaxed);
    }
  }
  const std::uint32_t id;
  std::unique_ptr<std::atomic<std::uint64_t>[]> words;      // the backing file
  std::unique_ptr<std::atomic<std::uint64_t>[]> committed;  // after the last done op
  std::atomic<std::uint64_t> size;
  std::atomic<std::uint64_t> committed_size;
};

// The file's words as they are now, whole 8-byte loads and stores where
// aligned; the size is read at each read.  Relaxed: a fill may race the
// writer (that is the point); each word is read whole, and which version it
// gets is checked against the model, not ordered by these loads.
std::unique_ptr<Backing> word_backing(std::shared_ptr<WordFile> f) {
  return std::make_unique<tools::GeneratedBacking>(
      [f] { return f->size.load(std::memory_order_relaxed); },
      [f](std::uint64_t o, std::byte* dst, std::size_t n) {
        std::size_t k = 0;
        while (k < n) {
          std::uint64_t v = f->words[o / 8].load(std::memory_order_relaxed);
          if (o % 8 == 0 && n - k >= 8) {
            std::memcpy(dst + k, &v, 8);
            k += 8;
            o += 8;
          } else {
            dst[k++] = static_cast<std::byte>(v >> (8 * (o % 8)));
            o++;
          }
        }
        // Let the writer in between this read and the fill's publication: a
        // fill that read bytes a change then made stale must not publish them.
        std::this_thread::yield();
      });
}

enum class Kind : std::uint8_t { write, zero, resize, other };
struct Op {
  std::uint32_t file = 0;
  Kind kind = Kind::other;
  std::uint64_t off = 0, end = 0;  // bytes written or zeroed
  std::uint64_t size_after = 0;
};

struct Params {
  ReadPath path;
  std::size_t limit_pages;
};

std::string params_name(const ::testing::TestParamInfo<Params>& info) {
  std::string s(read_path_name(info.param.path));
  std::replace(s.begin(), s.end(), '-', '_');
  return s + (info.param.limit_pages ? "_limit" : "_unlimited");
}

class ConcurrentReadTest : public ::testing::TestWithParam<Params> {};

TEST_P(ConcurrentReadTest, EveryWordWasTheFilesAtSomeMoment) {
  const Params prm = GetParam();
  PageCacheConfig cfg = test_config(prm.path);
  cfg.limit_pages = prm.limit_pages;
  PageCache cache(cfg);

  std::shared_ptr<WordFile> wf[2] = {std::make_shared<WordFile>(0x21, 20 * P + 96),
                                     std::make_shared<WordFile>(0x22, 33 * P + 8)};
  std::shared_ptr<CachedFile> files[2];
  for (int i = 0; i < 2; i++) {
    files[i] = cache.open_file(word_backing(wf[i]), wf[i]->size.load());
  }

  std::vector<Op> log(kOps + 1);
  std::atomic<std::uint64_t> started{0}, done{0};
  std::atomic<bool> stop{false}, failed{false};
  // Reader t has finished groups[t] groups and may start one while
  // groups[t] < allowance[t]: the writer hands out three per operation (two
  // after it, one overlapping the next), so readers do not spin on a loaded
  // machine and the run's cost is set by the operation count.
  std::atomic<std::uint64_t> groups[kReaders] = {};
  std::atomic<std::uint64_t> allowance[kReaders];
  for (auto& a : allowance) a.store(3);
  auto stop_all = [&] {
    stop = true;
    for (auto& a : allowance) {
      a.store(~std::uint64_t{0});
      a.notify_all();
    }
  };
  std::atomic<std::uint64_t> words_checked{0}, reads_done{0};
  std::mutex fail_mu;
  std::string first_failure;  // guarded by fail_mu

  auto fail = [&](const std::string& what) {
    std::lock_guard lk(fail_mu);
    if (first_failure.empty()) first_failure = what;
    failed = true;
    stop_all();
  };

  auto reader = [&](int t) {
    std::mt19937_64 rng(100 + t);
    FileHandle handles[2] = {FileHandle(files[0]), FileHandle(files[1])};
    std::vector<std::uint64_t> buf, snap;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> zeroed;
    while (!stop.load(std::memory_order_relaxed)) {
      if (const std::uint64_t a = allowance[t].load(std::memory_order_acquire);
          groups[t].load(std::memory_order_relaxed) >= a) {
        allowance[t].wait(a, std::memory_order_acquire);
        continue;
      }
      const int fi = static_cast<int>(rng() % 2);
      WordFile& m = *wf[fi];
      const std::uint64_t pos = (rng() % ((kCap + P) / 8)) * 8;
      const std::uint64_t len =
          rng() % 2 ? 8 * (1 + rng() % (std::min<std::uint64_t>(1024, P - pos % P) / 8))
                    : 8 * (1 + rng() % (8 * P / 8));
      const bool use_iov = prm.path == ReadPath::noref && rng() % 2;
      for (int rep = 0; rep < kReadsPerGroup && !stop.load(std::memory_order_relaxed); rep++) {
        const std::uint64_t lo = done.load(std::memory_order_acquire);
        const std::uint64_t first_w = pos / 8, nw = len / 8;
        snap.assign(nw, 0);
        for (std::uint64_t i = 0; i < nw && first_w + i < kCapWords; i++) {
          // Acquire pairs with the writer's release: a value seen here was
          // applied to the cache before this read starts.
          snap[i] = m.committed[first_w + i].load(std::memory_order_acquire);
        }
        const std::uint64_t snap_size = m.committed_size.load(std::memory_order_acquire);

        buf.assign(nw, 0);
        auto* bytes = reinterpret_cast<std::byte*>(buf.data());
        ssize_t r;
        if (use_iov) {
          bool sent = false;
          r = cache.read_iov(
              handles[fi], pos, len, bytes,
              [&](const iovec* iov, int n) {
                std::byte* d = bytes;
                for (int i = 0; i < n; i++) {
                  std::memcpy(d, iov[i].iov_base, iov[i].iov_len);
                  d += iov[i].iov_len;
                }
              },
              &sent);
        } else {
          r = cache.read(handles[fi], pos, len, bytes);
        }
        const std::uint64_t hi = started.load(std::memory_order_acquire);
        reads_done.fetch_add(1, std::memory_order_relaxed);

        auto where = [&] {
          std::ostringstream os;
          os << "file " << fi << " read(" << pos << ", " << len << ") = " << r << " lo " << lo
             << " hi " << hi << " path " << read_path_name(prm.path) << (use_iov ? " iov" : "");
          return os.str();
        };
        if (r < 0 || r % 8 != 0 || static_cast<std::uint64_t>(r) > len) {
          fail(where() + ": bad return");
          return;
        }
        // Sizes the file had during the read.
        std::uint64_t min_size = snap_size, max_size = snap_size;
        zeroed.clear();
        for (std::uint64_t k = lo + 1; k <= hi; k++) {
          const Op& op = log[k];
          if (op.file != static_cast<std::uint32_t>(fi)) continue;
          min_size = std::min(min_size, op.size_after);
          max_size = std::max(max_size, op.size_after);
          if (op.kind == Kind::zero) zeroed.emplace_back(op.off, op.end);
        }
        if (prm.limit_pages) {
          const std::uint64_t live = cache.pool_counters().live();
          if (live > prm.limit_pages) {
            fail(where() + ": " + std::to_string(live) + " pages live, over the limit");
            return;
          }
        }
        const std::uint64_t n = static_cast<std::uint64_t>(r);
        if (n > 0 && pos + n > max_size) {
          fail(where() + ": past every size (max " + std::to_string(max_size) + ")");
          return;
        }
        if (n < len && pos + n < min_size) {
          fail(where() + ": short before every end (min " + std::to_string(min_size) + ")");
          return;
        }
        for (std::uint64_t i = 0; i < n / 8; i++) {
          const std::uint64_t w = first_w + i, v = buf[i], off = w * 8;
          if (v == snap[i]) continue;
          bool ok = false;
          if (v == 0) {
            for (auto [zo, ze] : zeroed) ok |= zo <= off && off < ze;
          } else if (word_file(v) == m.id && word_index(v) == w) {
            const std::uint64_t ver = word_version(v);
            ok = ver > lo && ver <= hi && log[ver].file == static_cast<std::uint32_t>(fi) &&
                 log[ver].kind == Kind::write && log[ver].off <= off && off < log[ver].end;
          }
          if (!ok) {
            std::ostringstream os;
            os << where() << ": word at " << off << " = 0x" << std::hex << v << " (snapshot 0x"
               << snap[i] << ")";
            fail(os.str());
            return;
          }
        }
        words_checked.fetch_add(n / 8, std::memory_order_relaxed);
      }
      groups[t].fetch_add(1, std::memory_order_release);
    }
  };

  auto writer = [&] {
    std::mt19937_64 rng(7);
    std::vector<std::uint64_t> data;
    for (std::uint64_t k = 1; k <= static_cast<std::uint64_t>(kOps) && !stop.load(); k++) {
      const int fi = static_cast<int>(rng() % 2);
      WordFile& m = *wf[fi];
      CachedFile& f = *files[fi];
      const std::uint64_t size = m.size.load(std::memory_order_relaxed);
      Op op;
      op.file = static_cast<std::uint32_t>(fi);
      op.size_after = size;
      const unsigned choice = static_cast<unsigned>(rng() % 100);
      std::uint64_t arg1 = 0, arg2 = 0;
      int what;
      if (choice < 35) {  // write, possibly extending
        what = 0;
        op.kind = Kind::write;
        op.off = (rng() % (kCapWords - 1)) * 8;
        op.end = std::min(kCap, op.off + 8 * (1 + rng() % (4 * P / 8)));
        op.size_after = std::max(size, op.end);
      } else if (choice < 50) {  // truncate
        what = 1;
        arg1 = (rng() % (kCapWords + 1)) * 8;
        op.kind = arg1 < size ? Kind::zero : Kind::resize;
        op.off = arg1;
        op.end = size;
        op.size_after = arg1;
      } else if (choice < 65) {  // punch, sometimes far past EOF
        what = 2;
        arg1 = (rng() % kCapWords) * 8;
        arg2 = rng() % 8 == 0 ? ~std::uint64_t{0} - arg1 : 8 * (1 + rng() % (6 * P / 8));
        op.kind = Kind::zero;
        op.off = arg1;
        op.end = std::min(kCap, arg1 + arg2);
      } else if (choice < 75) {
        what = 3;  // evict
      } else if (choice < 85) {
        what = 4;  // invalidate a range
        arg1 = (rng() % kCapPages) * P + rng() % P;
        arg2 = rng() % (8 * P);
      } else if (choice < 92) {
        what = 5;  // shrink
        arg1 = 1 + rng() % 16;
      } else {
        what = 6;  // prefetch
        arg1 = (rng() % kCapPages) * P;
        arg2 = 1 + rng() % (16 * P);
      }
      log[k] = op;
      started.store(k, std::memory_order_release);

      // The backing file first (the cache's callers' rule), then the cache.
      int err = 0;
      switch (what) {
        case 0:
          data.resize((op.end - op.off) / 8);
          for (std::uint64_t i = 0; i < data.size(); i++) {
            data[i] = pattern_word(m.id, op.off / 8 + i, static_cast<std::uint32_t>(k));
            m.words[op.off / 8 + i].store(data[i], std::memory_order_relaxed);
          }
          if (op.end > size) m.size.store(op.end, std::memory_order_relaxed);
          err = cache.write(f, op.off, data.data(), data.size() * 8);
          break;
        case 1:
          if (arg1 < size) {
            m.size.store(arg1, std::memory_order_relaxed);
            for (std::uint64_t w = arg1 / 8; w < size / 8; w++) {
              m.words[w].store(0, std::memory_order_relaxed);
            }
          } else {
            m.size.store(arg1, std::memory_order_relaxed);
          }
          err = cache.truncate(f, arg1);
          break;
        case 2:
          for (std::uint64_t w = op.off / 8; w < op.end / 8; w++) {
            m.words[w].store(0, std::memory_order_relaxed);
          }
          err = cache.punch(f, arg1, arg2);
          break;
        case 3:
          cache.evict(f);
          break;
        case 4:
          cache.invalidate(f, arg1, arg2);
          break;
        case 5:
          cache.shrink(arg1);
          break;
        case 6: {
          ssize_t r = cache.prefetch(f, arg1, arg2);
          if (r < 0 && r != -ENOMEM) err = static_cast<int>(r);
          break;
        }
      }
      if (err != 0 && err != -ENOMEM) {
        fail("operation " + std::to_string(k) + " failed: " + std::to_string(err));
        return;
      }
      if (op.kind == Kind::write) {
        for (std::uint64_t i = 0; i < data.size(); i++) {
          m.committed[op.off / 8 + i].store(data[i], std::memory_order_release);
        }
      } else if (op.kind == Kind::zero) {
        for (std::uint64_t w = op.off / 8; w < op.end / 8; w++) {
          m.committed[w].store(0, std::memory_order_release);
        }
      }
      m.committed_size.store(op.size_after, std::memory_order_release);
      done.store(k, std::memory_order_release);

      // Pace: two whole groups per reader after this operation, so that
      // one group runs with no operation at all.
      std::uint64_t want[kReaders];
      for (int t = 0; t < kReaders; t++) {
        want[t] = groups[t].load(std::memory_order_acquire) + 2;
        allowance[t].store(want[t] + 1, std::memory_order_release);
        allowance[t].notify_all();
      }
      const auto deadline = std::chrono::steady_clock::now() + kLongWait;
      for (int t = 0; t < kReaders && !stop.load(); t++) {
        while (groups[t].load(std::memory_order_acquire) < want[t] && !stop.load()) {
          if (std::chrono::steady_clock::now() > deadline) {
            fail("readers made no progress for " + std::to_string(kLongWait.count()) + " s");
            break;
          }
          std::this_thread::yield();
        }
      }
    }
    stop_all();
  };

  // Widen the windows the protocol guards (between lookup and copy, and
  // between unlink and free) by yielding there now and then, so that the
  // writer's changes land inside them.  Timing never decides a pass.
  SyncPointScope scope;
  if (sync_point::kEnabled) {
    auto yield_sometimes = [] {
      thread_local unsigned n = 0;
      if (++n % 3 == 0) std::this_thread::yield();
    };
    for (const char* point :
         {"read:fast:before_copy", "read:slow:before_copy", "remove:after_unlink"}) {
      sync_point::set(point, yield_sometimes);
    }
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kReaders; t++) threads.emplace_back(reader, t);
  std::thread w(writer);
  w.join();
  for (auto& t : threads) t.join();
  sync_point::clear();

  auto c = cache.counters();
  EXPECT_FALSE(failed.load()) << first_failure << "\n" << describe(c);
  EXPECT_EQ(done.load(), static_cast<std::uint64_t>(kOps));
  EXPECT_GT(words_checked.load(), 0u);
  if (prm.limit_pages == 0 && (prm.path == ReadPath::noref || prm.path == ReadPath::stackcopy)) {
    EXPECT_GT(c[Ctr::fast_pages], 0u) << describe(c);
  }
  EXPECT_EQ(c[Ctr::io_errors], 0u);
  RecordProperty("reads", std::to_string(reads_done.load()));
  RecordProperty("words_checked", std::to_string(words_checked.load()));
  files[0].reset();
  files[1].reset();
}

std::vector<Params> all_params() {
  std::vector<Params> v;
  for (ReadPath p : kAllPaths) {
    v.push_back({p, 0});
    v.push_back({p, 40});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Paths, ConcurrentReadTest, ::testing::ValuesIn(all_params()), params_name);

}  // namespace
}  // namespace norefs::cache::test
