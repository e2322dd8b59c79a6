// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/fs/concurrency_test.cc — readers racing writers, truncates and hole
// punches on one file, for every read path.
//
// The file is made of 8-byte words, word w = (w << 24) | version: a word
// read at the wrong offset, a torn or stale page, or bytes that were never
// in the file show up as a word whose index is not its position or whose
// version was never written there.  Per word the test keeps the version
// last completed (done) and the highest started (issued); a read must
// return, for each word, a version in [done before the read, issued after
// it] — the value the word held at some moment during the read.
#include <fcntl.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <cctype>
#include <iostream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "fs_test_util.h"

namespace norefs::fs::test {
namespace {

constexpr std::size_t kWords = 256 * 1024 / 8;  // 64 pages
constexpr auto kRun = 1500ms;

std::uint64_t encode(std::uint64_t w, std::uint32_t v) { return (w << 24) | v; }

std::string words(std::size_t first, std::size_t n, std::uint32_t v) {
  std::string s(n * 8, '\0');
  for (std::size_t i = 0; i < n; i++) {
    std::uint64_t x = encode(first + i, v);
    std::memcpy(s.data() + i * 8, &x, 8);
  }
  return s;
}

class ConcurrencyStress : public MountTest, public ::testing::WithParamInterface<const char*> {
 protected:
  MountConfig config() const override { return {{std::string("read_path=") + GetParam()}, {}}; }
};

// The first failure a thread saw (threads stop at their first).
struct Failures {
  std::mutex mu;
  std::vector<std::string> seen;
  std::atomic<bool> any{false};
  void add(std::string s) {
    std::lock_guard lk(mu);
    if (seen.size() < 5) seen.push_back(std::move(s));
    any.store(true, std::memory_order_relaxed);
  }
};

// A read of up to 64 KiB at a random word, or a small one inside a page
// (the stack-copy path's case).
std::pair<std::size_t, std::size_t> random_range(std::mt19937_64& rng) {
  std::size_t first = rng() % kWords;
  std::size_t n;
  if (rng() % 2) {
    std::size_t in_page = kPage / 8 - first % (kPage / 8);
    n = 1 + rng() % std::min<std::size_t>(in_page, 128);
  } else {
    n = 1 + rng() % (64 * 1024 / 8);
  }
  return {first, std::min(n, kWords - first)};
}

TEST_P(ConcurrencyStress, ReadersSeeOnlyWrittenWordsWhileWritersWrite) {
  write_file(m("f"), words(0, kWords, 1));
  auto done = std::make_unique<std::atomic<std::uint32_t>[]>(kWords);
  auto issued = std::make_unique<std::atomic<std::uint32_t>[]>(kWords);
  for (std::size_t w = 0; w < kWords; w++) {
    done[w].store(1, std::memory_order_relaxed);
    issued[w].store(1, std::memory_order_relaxed);
  }
  std::atomic<std::uint32_t> next_version{2};
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> reads{0}, writes{0};
  Failures failures;
  constexpr std::size_t kStripe = 700;  // words; stripes straddle pages
  constexpr int kWriters = 2, kReaders = 3;

  std::vector<std::thread> threads;
  for (int t = 0; t < kWriters; t++) {
    threads.emplace_back([&, t] {
      try {
        Fd fd(m("f"), O_WRONLY);
        std::mt19937_64 rng(t + 1);
        const std::size_t stripes = (kWords + kStripe - 1) / kStripe;
        while (!stop.load(std::memory_order_relaxed) && !failures.any.load()) {
          std::size_t s = (rng() % ((stripes + kWriters - 1 - t) / kWriters)) * kWriters + t;
          std::size_t lo = s * kStripe, hi = std::min(kWords, lo + kStripe);
          if (lo >= hi) continue;
          std::size_t first = lo + rng() % (hi - lo);
          std::size_t n = 1 + rng() % (hi - first);
          std::uint32_t v = next_version.fetch_add(1, std::memory_order_relaxed);
          // Release: a reader that sees v in issued[] after its read may
          // accept v; the bytes go out only after.
          for (std::size_t w = first; w < first + n; w++)
            issued[w].store(v, std::memory_order_release);
          pwrite_all(fd.get(), words(first, n, v), static_cast<off_t>(first * 8));
          for (std::size_t w = first; w < first + n; w++)
            done[w].store(v, std::memory_order_release);
          writes.fetch_add(1, std::memory_order_relaxed);
        }
      } catch (const std::exception& e) {
        failures.add(std::string("writer: ") + e.what());
      }
    });
  }
  // Readers 0..kReaders-2 read at random; the last one reads the file
  // front to back in 32 KiB reads, again and again (readahead windows).
  for (int t = 0; t < kReaders; t++) {
    threads.emplace_back([&, t] {
      try {
        Fd fd(m("f"), O_RDONLY);
        std::mt19937_64 rng(100 + t);
        std::vector<std::uint32_t> lo;
        std::size_t next = 0;
        while (!stop.load(std::memory_order_relaxed) && !failures.any.load()) {
          std::size_t first, n;
          if (t == kReaders - 1) {
            first = next;
            n = std::min<std::size_t>(32 * 1024 / 8, kWords - first);
            next = first + n == kWords ? 0 : first + n;
          } else {
            std::tie(first, n) = random_range(rng);
          }
          lo.resize(n);
          for (std::size_t i = 0; i < n; i++)
            lo[i] = done[first + i].load(std::memory_order_acquire);
          std::string got = pread_str(fd.get(), n * 8, static_cast<off_t>(first * 8));
          if (got.size() != n * 8) {
            failures.add("short read: " + std::to_string(got.size()) + " of " +
                         std::to_string(n * 8) + " at " + std::to_string(first * 8));
            return;
          }
          for (std::size_t i = 0; i < n; i++) {
            std::uint64_t x;
            std::memcpy(&x, got.data() + i * 8, 8);
            std::uint64_t w = first + i;
            std::uint32_t v = static_cast<std::uint32_t>(x & 0xffffff);
            std::uint32_t hi = issued[w].load(std::memory_order_acquire);
            if ((x >> 24) != w || v < lo[i] || v > hi) {
              failures.add("word " + std::to_string(w) + " (offset " + std::to_string(w * 8) +
                           ") read as index " + std::to_string(x >> 24) + " version " +
                           std::to_string(v) + "; allowed versions [" + std::to_string(lo[i]) +
                           ", " + std::to_string(hi) + "]; read of " + std::to_string(n * 8) +
                           " at " + std::to_string(first * 8));
              return;
            }
          }
          reads.fetch_add(1, std::memory_order_relaxed);
        }
      } catch (const std::exception& e) {
        failures.add(std::string("reader: ") + e.what());
      }
    });
  }
  std::this_thread::sleep_for(kRun);
  stop.store(true);
  for (auto& th : threads) th.join();
  for (const auto& f : failures.seen) ADD_FAILURE() << f;
  EXPECT_GT(reads.load(), 10u);
  EXPECT_GT(writes.load(), 10u);
  // Quiescent: the file is exactly the last completed version of each word.
  std::string model(kWords * 8, '\0');
  for (std::size_t w = 0; w < kWords; w++) {
    std::uint64_t x = encode(w, done[w].load(std::memory_order_relaxed));
    std::memcpy(model.data() + w * 8, &x, 8);
  }
  EXPECT_BYTES_EQ(model, read_file(m("f")));
  EXPECT_BYTES_EQ(model, read_file(b("f")));
}

// One mutator truncates, punches and zeroes ranges and writes them back;
// readers check every word.  Between a mutation's start and its rewrite a
// word may read as zero or be past EOF; outside such windows (a seqlock
// of mutations, odd while one is in progress) it must be exactly the last
// version written.
TEST_P(ConcurrencyStress, ReadersNeverSeeForeignBytesWhileTruncatingAndPunching) {
  write_file(m("f"), words(0, kWords, 1));
  auto done = std::make_unique<std::atomic<std::uint32_t>[]>(kWords);
  for (std::size_t w = 0; w < kWords; w++) done[w].store(1, std::memory_order_relaxed);
  std::atomic<std::uint32_t> max_version{1};
  std::atomic<std::uint64_t> seq{0};  // odd: a mutation is in progress
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> reads{0}, quiet_reads{0}, mutations{0};
  Failures failures;

  std::thread mutator([&] {
    try {
      Fd fd(m("f"), O_RDWR);
      std::mt19937_64 rng(7);
      std::uint32_t v = 1;
      while (!stop.load(std::memory_order_relaxed) && !failures.any.load()) {
        std::size_t first = rng() % kWords;
        std::size_t n = 1 + rng() % std::min<std::size_t>(kWords - first, 3 * kPage / 8);
        int op = static_cast<int>(rng() % 3);
        ++v;
        max_version.store(v, std::memory_order_release);
        seq.fetch_add(1, std::memory_order_acq_rel);  // odd
        if (op == 0) {
          // Truncate at `first`, then write the tail back.
          n = kWords - first;
          must(::ftruncate(fd.get(), static_cast<off_t>(first * 8)), "ftruncate");
        } else {
          int mode = op == 1 ? FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE : FALLOC_FL_ZERO_RANGE;
          must(
              ::fallocate(fd.get(), mode, static_cast<off_t>(first * 8), static_cast<off_t>(n * 8)),
              "fallocate");
        }
        pwrite_all(fd.get(), words(first, n, v), static_cast<off_t>(first * 8));
        for (std::size_t w = first; w < first + n; w++) done[w].store(v, std::memory_order_release);
        seq.fetch_add(1, std::memory_order_acq_rel);  // even
        mutations.fetch_add(1, std::memory_order_relaxed);
        std::this_thread::sleep_for(1ms);  // quiet windows for exact checks
      }
    } catch (const std::exception& e) {
      failures.add(std::string("mutator: ") + e.what());
    }
  });
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; t++) {
    readers.emplace_back([&, t] {
      try {
        Fd fd(m("f"), O_RDONLY);
        std::mt19937_64 rng(200 + t);
        std::vector<std::uint32_t> want;
        while (!stop.load(std::memory_order_relaxed) && !failures.any.load()) {
          auto [first, n] = random_range(rng);
          // Seqlock read side: the versions are snapshotted inside the
          // window [s1, s2]; done[] only changes while seq is odd, so if
          // s1 == s2 is even the snapshot held for the whole read.
          std::uint64_t s1 = seq.load(std::memory_order_acquire);
          want.resize(n);
          for (std::size_t i = 0; i < n; i++)
            want[i] = done[first + i].load(std::memory_order_acquire);
          std::string got = pread_str(fd.get(), n * 8, static_cast<off_t>(first * 8));
          std::uint64_t s2 = seq.load(std::memory_order_acquire);
          const bool quiet = s1 == s2 && s1 % 2 == 0;
          const std::uint32_t maxv = max_version.load(std::memory_order_acquire);
          auto where = [&] {
            return "; read of " + std::to_string(n * 8) + " at " + std::to_string(first * 8) +
                   (quiet ? " (no mutation during the read)" : " (racing a mutation)");
          };
          if (got.size() % 8 != 0 || got.size() > n * 8 || (quiet && got.size() != n * 8)) {
            failures.add("read returned " + std::to_string(got.size()) + " bytes" + where());
            return;
          }
          for (std::size_t i = 0; i < got.size() / 8; i++) {
            std::uint64_t x;
            std::memcpy(&x, got.data() + i * 8, 8);
            const std::uint64_t w = first + i;
            const std::uint32_t v = static_cast<std::uint32_t>(x & 0xffffff);
            bool ok;
            if (quiet) {
              ok = x == encode(w, want[i]);
            } else {
              ok = x == 0 || ((x >> 24) == w && v >= 1 && v <= maxv);
            }
            if (!ok) {
              failures.add("word " + std::to_string(w) + " read as index " +
                           std::to_string(x >> 24) + " version " + std::to_string(v) + " (raw " +
                           std::to_string(x) + "), last written version " +
                           std::to_string(want[i]) + where());
              return;
            }
          }
          reads.fetch_add(1, std::memory_order_relaxed);
          if (quiet) quiet_reads.fetch_add(1, std::memory_order_relaxed);
        }
      } catch (const std::exception& e) {
        failures.add(std::string("reader: ") + e.what());
      }
    });
  }
  std::this_thread::sleep_for(kRun);
  stop.store(true);
  mutator.join();
  for (auto& th : readers) th.join();
  for (const auto& f : failures.seen) ADD_FAILURE() << f;
  EXPECT_GT(reads.load(), 10u);
  EXPECT_GT(mutations.load(), 10u);
  EXPECT_GT(quiet_reads.load(), 0u);
  std::string model(kWords * 8, '\0');
  for (std::size_t w = 0; w < kWords; w++) {
    std::uint64_t x = encode(w, done[w].load());
    std::memcpy(model.data() + w * 8, &x, 8);
  }
  EXPECT_BYTES_EQ(model, read_file(m("f")));
  EXPECT_BYTES_EQ(model, read_file(b("f")));
}

// With a cache smaller than the file, pages are evicted and filled again
// all the time: fills race the writes, truncates and punches.
INSTANTIATE_TEST_SUITE_P(ReadPaths, ConcurrencyStress,
                         ::testing::Values("noref", "ref", "ref-fetchadd", "stackcopy",
                                           "noref,cache_size=128k", "ref,cache_size=128k"),
                         path_name);

// ── Interrupted reads ──
//
// A thread reads a file larger than the cache in 1 MiB reads while another
// keeps sending it a signal (no SA_RESTART): each read returns the right
// bytes, possibly fewer (a short read), or fails with EINTR — never wrong
// bytes, and never a short read the kernel then takes for the end of the
// file (kernel_cache: the file would shrink).
class InterruptStress : public MountTest, public ::testing::WithParamInterface<const char*> {
 protected:
  MountConfig config() const override {
    MountConfig c{{"cache_size=1m"}, {}};
    if (*GetParam()) c.options.push_back(GetParam());
    return c;
  }
};

void on_sigusr1(int) {}

TEST_P(InterruptStress, ReadsReturnRightBytesOrEintr) {
  const std::string model = random_bytes(6 << 20, 900);
  write_file(b("f"), model);
  struct sigaction sa {
  }, old{};
  sa.sa_handler = on_sigusr1;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: interrupted reads return
  ASSERT_SYS(::sigaction(SIGUSR1, &sa, &old));
  std::atomic<bool> stop{false}, ready{false}, failed{false};
  std::atomic<std::uint64_t> reads{0}, eintr{0}, short_reads{0};
  std::string failure;  // written by the reader, read after join
  std::thread reader([&] {
    try {
      Fd fd(m("f"), O_RDONLY);
      std::string buf(1 << 20, '\0');
      std::mt19937_64 rng(901);
      ready = true;
      while (!stop) {
        std::size_t off = rng() % model.size();
        errno = 0;
        ssize_t n = ::pread(fd.get(), buf.data(), buf.size(), static_cast<off_t>(off));
        if (n < 0) {
          if (errno != EINTR) throw_errno("pread");
          eintr++;
          continue;
        }
        std::size_t want = std::min(buf.size(), model.size() - off);
        if (static_cast<std::size_t>(n) > want ||
            std::memcmp(buf.data(), model.data() + off, static_cast<std::size_t>(n)) != 0) {
          failure = "read of " + std::to_string(buf.size()) + " at " + std::to_string(off) +
                    " returned " + std::to_string(n) + " bytes that differ from the file";
          failed = true;
          return;
        }
        if (static_cast<std::size_t>(n) < want) short_reads++;
        reads++;
      }
    } catch (const std::exception& e) {
      failure = e.what();
      failed = true;
    }
    ready = true;
  });
  while (!ready) std::this_thread::sleep_for(1ms);
  auto end = std::chrono::steady_clock::now() + 1s;
  while (std::chrono::steady_clock::now() < end && !failed) {
    ::pthread_kill(reader.native_handle(), SIGUSR1);
    std::this_thread::sleep_for(200us);
  }
  stop = true;
  reader.join();
  ::sigaction(SIGUSR1, &old, nullptr);
  EXPECT_EQ(failure, "");
  EXPECT_GT(reads.load(), 0u);
  std::cerr << "reads " << reads << ", EINTR " << eintr << ", short " << short_reads << "\n";
  // The file is whole, and the kernel's idea of its size too.
  Fd fd(m("f"), O_RDONLY);
  struct stat st {};
  ASSERT_SYS(::fstat(fd.get(), &st));
  EXPECT_EQ(st.st_size, static_cast<off_t>(model.size()));
  EXPECT_BYTES_EQ(model, read_chunked(fd.get(), 1 << 20));
}

INSTANTIATE_TEST_SUITE_P(Modes, InterruptStress, ::testing::Values("", "kernel_cache"),
                         [](const auto& tp) {
                           return std::string(*tp.param ? tp.param : "direct_io");
                         });

}  // namespace
}  // namespace norefs::fs::test
