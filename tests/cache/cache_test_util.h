// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/cache/cache_test_util.h — helpers shared by the page-cache tests.
//
// Content.  Every test file's bytes are a function of (file, offset,
// generation): byte o is byte o % 8 (little-endian) of the word
//   (file << 56) | (gen << 32) | (o / 8)          (file 1..0x5f)
// so that bytes from another file, another offset or another generation,
// and the pool's poison (0x6b in every byte: file 0x6b), are all told apart.
//
// TestBacking (tools::ControlledBacking) serves a file whose content the
// test holds (BackingControl): it starts as the pattern and the test
// changes it exactly as a caller of PageCache must (backing first, then the
// cache).  It counts reads, returns an injected error, and can hold reads
// at a gate (after copying, so that a held fill carries the bytes of the
// moment it read).
//
// Timing rule (tests/alloc/test_util.h): waits are bounded only so that a
// broken cache fails instead of hanging; no pass depends on timing.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "alloc/test_util.h"
#include "cache/backing.h"
#include "cache/cache_stats.h"
#include "cache/page_cache.h"
#include "cache/sync_point.h"
#include "tools/lib/backings.h"

#include "pattern.h"

namespace norefs::cache::test {

using namespace std::chrono_literals;
using alloc::test::run_threads;
using alloc::test::wait_until;
using Bytes = std::vector<std::byte>;

// One page, the unit most cases count in (the cache tests build as one
// unity translation unit: tests/CMakeLists.txt; shared names live here).
inline constexpr std::uint64_t P = kPageSize;

inline Bytes zeros(std::size_t n) { return Bytes(n, std::byte{0}); }

// Bound for waits on progress another thread is guaranteed to make.
inline constexpr auto kLongWait = 30s;

// Sanitizer builds run several times slower: loops that only add more of
// the same cases scale down (never a check).
#if defined(NOREFS_TEST_TSAN) || defined(NOREFS_TEST_ASAN)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

inline Bytes pattern(std::uint32_t file, std::uint64_t off, std::size_t len, std::uint32_t gen) {
  // Whole words, then the bytes asked for (little-endian, as pattern_byte).
  const std::uint64_t w0 = off / 8, w1 = (off + len + 7) / 8;
  std::vector<std::uint64_t> words(w1 - w0);
  for (std::uint64_t w = w0; w < w1; w++) {
    std::uint64_t v = pattern_word(file, w, gen);
    std::byte le[8];
    for (int k = 0; k < 8; k++) le[k] = static_cast<std::byte>(v >> (8 * k));
    std::memcpy(&words[w - w0], le, 8);
  }
  Bytes b(len);
  if (len) std::memcpy(b.data(), reinterpret_cast<const std::byte*>(words.data()) + off % 8, len);
  return b;
}

// Exact comparison with a short message: the first difference, its file
// offset, and how many bytes differ (a 1 MiB EXPECT_EQ would print it all).
inline ::testing::AssertionResult same_bytes(const Bytes& got, const Bytes& want,
                                             std::uint64_t base = 0) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "length " << got.size() << ", expected " << want.size()
                                         << " (at offset " << base << ")";
  }
  if (got.empty() || std::memcmp(got.data(), want.data(), got.size()) == 0) {
    return ::testing::AssertionSuccess();
  }
  std::size_t first = got.size(), diff = 0;
  for (std::size_t i = 0; i < got.size(); i++) {
    if (got[i] != want[i]) {
      if (first == got.size()) first = i;
      diff++;
    }
  }
  if (diff == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << diff << " of " << got.size() << " bytes differ; first at offset " << base + first
         << ": got 0x" << std::hex << std::to_integer<int>(got[first]) << ", expected 0x"
         << std::to_integer<int>(want[first]);
}

// The backing file as the test sees it, and the backing over it that the
// cache owns: the tools' (tools/lib/backings.h), with its fault injection.
using BackingControl = tools::BackingControl;
using TestBacking = tools::ControlledBacking;

// A cached file with one handle, over a TestBacking.  Declare after the
// PageCache: it must go first.
struct TestFile {
  std::shared_ptr<BackingControl> ctl = std::make_shared<BackingControl>();
  std::shared_ptr<CachedFile> f;
  std::unique_ptr<FileHandle> h;

  TestFile(PageCache& cache, std::uint32_t id, std::uint64_t size, std::uint32_t gen = 0) {
    ctl->set_bytes(pattern(id, 0, size, gen));
    f = cache.open_file(std::make_unique<TestBacking>(ctl), size);
    h = std::make_unique<FileHandle>(f);
  }
  Bytes expect(std::uint64_t off, std::size_t len) { return ctl->expect(off, len, f->size()); }
};

// The configuration most tests use: readahead synchronous (no worker thread
// deciding what is cached when).
inline PageCacheConfig test_config(ReadPath path = ReadPath::noref) {
  PageCacheConfig c;
  c.read_path = path;
  c.async_readahead = false;
  c.pool.poison_on_free = true;
  return c;
}

// read() into a vector of what it returned; *ret gets the return value.
inline Bytes read_bytes(PageCache& cache, FileHandle& h, std::uint64_t pos, std::size_t len,
                        ssize_t* ret = nullptr, const ReadOptions& opt = {}) {
  Bytes buf(len, std::byte{0xee});
  ssize_t r = cache.read(h, pos, len, buf.data(), opt);
  if (ret) *ret = r;
  buf.resize(r > 0 ? static_cast<std::size_t>(r) : 0);
  return buf;
}

// Reads [pos, pos+len) and checks the bytes against the backing.
inline ::testing::AssertionResult reads_right(PageCache& cache, TestFile& tf, std::uint64_t pos,
                                              std::size_t len) {
  ssize_t r = 0;
  Bytes got = read_bytes(cache, *tf.h, pos, len, &r);
  if (r < 0) return ::testing::AssertionFailure() << "read(" << pos << ", " << len << ") = " << r;
  return same_bytes(got, tf.expect(pos, len), pos);
}

// Reads [pos, pos+len) until a read is served without an `accessed` stop:
// a page needs three marks (referenced, active, referenced) before marking
// it is a no-op.  False if five reads were not enough.
inline bool warm(PageCache& cache, TestFile& tf, std::uint64_t pos, std::size_t len) {
  Bytes buf(len);
  for (int i = 0; i < 5; i++) {
    std::uint64_t before = cache.counters().stops(Stop::accessed);
    if (cache.read(*tf.h, pos, len, buf.data()) < 0) return false;
    if (cache.counters().stops(Stop::accessed) == before) return true;
  }
  return false;
}

// What changed between two sums.
inline std::uint64_t delta(const CacheCounters& after, const CacheCounters& before, Ctr c) {
  return after[c] - before[c];
}
inline std::uint64_t stops_delta(const CacheCounters& after, const CacheCounters& before, Stop s) {
  return after.stops(s) - before.stops(s);
}
inline std::uint64_t all_stops(const CacheCounters& c) {
  std::uint64_t n = 0;
  for (std::size_t s = 0; s < kStops; s++) n += c.stops(static_cast<Stop>(s));
  return n;
}

inline std::string describe(const CacheCounters& c) {
  std::ostringstream os;
  os << "{";
  for (std::size_t i = 0; i < kCounters; i++) {
    if (c.v[i]) os << counter_name(i) << "=" << c.v[i] << " ";
  }
  os << "pages_cached=" << c.pages_cached << " active_pages=" << c.active_pages << "}";
  return os.str();
}

// Clears every sync point when the test ends, whatever it asserted.
struct SyncPointScope {
  SyncPointScope() = default;
  SyncPointScope(const SyncPointScope&) = delete;
  SyncPointScope& operator=(const SyncPointScope&) = delete;
  ~SyncPointScope() { sync_point::clear(); }
};

// Holds, at a sync point, the one thread that volunteered (hold_me()), the
// first time it gets there, until release().  Other threads pass through.
class Holder {
 public:
  std::function<void()> callback() {
    return [this] {
      if (!volunteer()) return;
      std::unique_lock lk(mu_);
      if (used_) return;
      used_ = true;
      held_ = true;
      cv_.notify_all();
      cv_.wait(lk, [&] { return released_; });
      held_ = false;
    };
  }
  // Called on the thread to hold, before it runs the code under test.
  static void hold_me() { volunteer() = true; }
  bool wait_held() {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, kLongWait, [&] { return held_; });
  }
  void release() {
    {
      std::lock_guard lk(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }
  ~Holder() { release(); }

 private:
  static bool& volunteer() {
    thread_local bool v = false;
    return v;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool used_ = false, held_ = false, released_ = false;  // guarded by mu_
};

// The data pointer of the page holding `pos`, as read_iov() hands it out
// (noref only; the page must be warm).  nullptr if it did not take the
// zero-copy path.
inline const std::byte* page_data(PageCache& cache, FileHandle& h, std::uint64_t pos) {
  const std::byte* data = nullptr;
  bool sent = false;
  std::byte buf[8];
  cache.read_iov(
      h, pos, 1, buf,
      [&](const iovec* iov, int n) {
        if (n == 1) data = static_cast<const std::byte*>(iov[0].iov_base) - (pos % kPageSize);
      },
      &sent);
  return sent ? data : nullptr;
}

inline std::string path_param_name(const ::testing::TestParamInfo<ReadPath>& info) {
  std::string s(read_path_name(info.param));
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

inline const ReadPath kAllPaths[] = {ReadPath::noref, ReadPath::ref, ReadPath::ref_fetchadd,
                                     ReadPath::stackcopy};

}  // namespace norefs::cache::test
