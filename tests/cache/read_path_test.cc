// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The four read paths (noref, ref, ref-fetchadd, stackcopy) return the same
// bytes, exactly the file's, for reads of every shape: unaligned, inside
// one page, crossing pages, more than 1 MiB, crossing and past EOF; cold
// (misses, readahead) and warm.  Each path's counters say which path served
// each read: the reference paths never stop a fast path; stackcopy takes
// only reads of at most stackcopy_max bytes inside one page; every page
// visit is a hit (fast_pages or slow_hits) or a miss.
//
// read_iov: served whole in one batch, the sender gets iovecs into the
// pages (their concatenation is the file's bytes) and nothing is copied;
// otherwise *sent is false and the buffer holds the bytes.
#include <random>
#include <set>
#include <utility>

#include "cache_test_util.h"

namespace norefs::cache::test {
namespace {

constexpr std::uint64_t kSize = 2 * 1024 * 1024 + 1234;  // ends inside a page

std::vector<std::pair<std::uint64_t, std::size_t>> read_shapes() {
  std::vector<std::pair<std::uint64_t, std::size_t>> v = {
      {0, 1},
      {0, P},
      {P - 1, 2},
      {P - 1, P + 2},
      {100, 1024},
      {100, 1025},
      {P - 512, 512},
      {P - 512, 513},
      {3 * P + 7, 900},
      {123, 1'100'000},
      {0, kSize},
      {5 * P, 2 * 1024 * 1024},
      {kSize - 10, 100},
      {kSize - 1234, 1234},
      {kSize - 1, 1},
      {kSize, 10},
      {kSize + 5000, 10},
      {kSize - 3 * P, 8 * P},
      {0, 0},
      {77, 0},
  };
  std::mt19937_64 rng(42);
  for (int i = 0; i < (kSanitized ? 24 : 60); i++) {
    std::uint64_t pos = rng() % (kSize + P);
    std::size_t len;
    switch (i % 4) {
      case 0:
        len = 1 + rng() % 64;
        break;
      case 1:
        len = 1 + rng() % 1024;
        break;
      case 2:
        len = 1 + rng() % (8 * P);
        break;
      default:
        len = 1 + rng() % ((kSanitized ? 64 : 300) * P);
        break;
    }
    v.emplace_back(pos, len);
  }
  return v;
}

// Pages a read of [pos, pos+len) visits: those it returns bytes of.
std::uint64_t pages_visited(std::uint64_t pos, std::size_t len, std::uint64_t size) {
  std::uint64_t end = std::min<std::uint64_t>(pos + len, size);
  if (pos >= end) return 0;
  return ((end - 1) / P) - pos / P + 1;
}

bool stackcopy_eligible(const PageCacheConfig& cfg, std::uint64_t pos, std::size_t len) {
  return len <= cfg.stackcopy_max && (pos % P) + len <= P;
}

// The content every test relies on: each byte is pattern_byte(), and no
// two (file, word, generation) share a word, nor does the pool's poison.
TEST(TestContentTest, PatternIsUniqueAndMatchesBytewise) {
  for (std::uint64_t off : {0, 1, 7, 8, 4095, 4096, 123457}) {
    Bytes b = pattern(3, off, 50, 2);
    for (std::size_t i = 0; i < b.size(); i++) ASSERT_EQ(b[i], pattern_byte(3, off + i, 2));
  }
  std::set<std::uint64_t> seen;
  for (std::uint32_t f : {1, 2, 0x21}) {
    for (std::uint32_t g : {0, 1, 7}) {
      for (std::uint64_t w = 0; w < 4096; w++) {
        std::uint64_t v = pattern_word(f, w, g);
        EXPECT_NE(v, 0u);
        EXPECT_NE(v, 0x6b6b6b6b6b6b6b6bULL);
        EXPECT_TRUE(seen.insert(v).second);
      }
    }
  }
  EXPECT_EQ(alloc::kPoisonByte, 0x6b);
}

class ReadPathTest : public ::testing::TestWithParam<ReadPath> {};

TEST_P(ReadPathTest, EveryShapeReturnsExactBytes) {
  const ReadPath path = GetParam();
  PageCacheConfig cfg = test_config(path);
  PageCache cache(cfg);
  TestFile tf(cache, 3, kSize);
  const auto shapes = read_shapes();

  std::uint64_t visits = 0;
  auto one_pass = [&](bool warm_pass) {
    for (auto [pos, len] : shapes) {
      SCOPED_TRACE(testing::Message() << "pos " << pos << " len " << len << " warm " << warm_pass);
      auto before = cache.counters();
      ssize_t r = 0;
      Bytes got = read_bytes(cache, *tf.h, pos, len, &r);
      auto after = cache.counters();
      Bytes want = pattern(3, pos, pos < kSize ? std::min<std::uint64_t>(len, kSize - pos) : 0, 0);
      ASSERT_EQ(r, static_cast<ssize_t>(want.size()));
      ASSERT_TRUE(same_bytes(got, want, pos));
      visits += pages_visited(pos, len, kSize);

      const std::uint64_t fast = delta(after, before, Ctr::fast_pages);
      const std::uint64_t stops = all_stops(after) - all_stops(before);
      switch (path) {
        case ReadPath::ref:
        case ReadPath::ref_fetchadd:
          EXPECT_EQ(fast, 0u);
          EXPECT_EQ(stops, 0u) << describe(after);
          EXPECT_EQ(delta(after, before, Ctr::fast_reads), 0u);
          break;
        case ReadPath::stackcopy:
          if (!stackcopy_eligible(cfg, pos, len)) {
            EXPECT_EQ(fast, 0u);
            EXPECT_EQ(stops, 0u) << describe(after);
          } else if (warm_pass && pos < kSize && len > 0) {
            EXPECT_EQ(fast, 1u) << describe(after);
            EXPECT_EQ(stops, 0u) << describe(after);
            EXPECT_EQ(delta(after, before, Ctr::fast_reads), 1u);
          }
          EXPECT_LE(fast, 1u);
          break;
        case ReadPath::noref:
          if (warm_pass && len > 0) {
            // Every page is cached, saturated and unmarked: the batches and
            // nothing else stop it, and it reads every page itself.
            EXPECT_EQ(stops, stops_delta(after, before, Stop::batch)) << describe(after);
            EXPECT_EQ(fast, pages_visited(pos, len, kSize));
            EXPECT_EQ(delta(after, before, Ctr::slow_hits), 0u);
            EXPECT_EQ(delta(after, before, Ctr::fast_reads), 1u);
          }
          break;
      }
      EXPECT_EQ(delta(after, before, Ctr::bytes), want.size());
    }
  };
  one_pass(false);
  // Warm every page: several whole-file reads (the reference path marks
  // each page once per read; the fast path is not needed to saturate).
  for (int i = 0; i < 4; i++) ASSERT_TRUE(reads_right(cache, tf, 0, kSize));
  visits += 4 * pages_visited(0, kSize, kSize);
  one_pass(true);

  auto c = cache.counters();
  EXPECT_EQ(c.hits() + c[Ctr::misses], visits) << describe(c);
  EXPECT_EQ(c[Ctr::waits], 0u);
  EXPECT_EQ(c[Ctr::io_errors], 0u);
}

// One file, four caches, one per path: byte-identical answers, including
// after changes that leave partial and zeroed pages behind.
TEST(ReadPathTest, AllPathsAgreeAfterChanges) {
  std::vector<std::unique_ptr<PageCache>> caches;
  std::vector<std::unique_ptr<TestFile>> files;
  for (ReadPath p : kAllPaths) caches.push_back(std::make_unique<PageCache>(test_config(p)));
  for (auto& c : caches) files.push_back(std::make_unique<TestFile>(*c, 4, 40 * P + 17));
  for (std::size_t i = 0; i < caches.size(); i++) {
    PageCache& c = *caches[i];
    TestFile& tf = *files[i];
    ASSERT_GE(c.prefetch(*tf.f, 0, 40 * P), 0);
    Bytes w = pattern(9, 0, 3 * P, 1);
    tf.ctl->write(5 * P + 100, w);
    ASSERT_EQ(c.write(*tf.f, 5 * P + 100, w.data(), w.size()), 0);
    tf.ctl->zero(20 * P + 3, P);
    ASSERT_EQ(c.punch(*tf.f, 20 * P + 3, P), 0);
    tf.ctl->resize(30 * P + 9);
    ASSERT_EQ(c.truncate(*tf.f, 30 * P + 9), 0);
    tf.ctl->resize(35 * P);
    ASSERT_EQ(c.truncate(*tf.f, 35 * P), 0);
  }
  std::mt19937_64 rng(7);
  for (int k = 0; k < 200; k++) {
    std::uint64_t pos = rng() % (36 * P);
    std::size_t len = 1 + rng() % (k % 2 ? 1024 : 6 * P);
    Bytes first;
    for (std::size_t i = 0; i < caches.size(); i++) {
      SCOPED_TRACE(testing::Message()
                   << read_path_name(kAllPaths[i]) << " pos " << pos << " len " << len);
      ssize_t r = 0;
      Bytes got = read_bytes(*caches[i], *files[i]->h, pos, len, &r);
      ASSERT_GE(r, 0);
      ASSERT_TRUE(same_bytes(got, files[i]->expect(pos, len), pos));
      if (i == 0) first = got;
      ASSERT_TRUE(same_bytes(got, first, pos));
    }
  }
  files.clear();
}

INSTANTIATE_TEST_SUITE_P(Paths, ReadPathTest, ::testing::ValuesIn(kAllPaths), path_param_name);

// ── read_iov ──

struct IovCapture {
  Bytes bytes;
  int calls = 0;
  int iovcnt = 0;
  IovSender sender() {
    return [this](const iovec* iov, int n) {
      calls++;
      iovcnt = n;
      for (int i = 0; i < n; i++) {
        const auto* b = static_cast<const std::byte*>(iov[i].iov_base);
        bytes.insert(bytes.end(), b, b + iov[i].iov_len);
      }
    };
  }
};

TEST(ReadIovTest, WholeReadInOneBatchIsSentFromPages) {
  PageCache cache(test_config());
  const std::uint64_t size = 6 * P + 300;
  TestFile tf(cache, 5, size);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, size), 7);
  ASSERT_TRUE(warm(cache, tf, 0, size));

  for (auto [pos, len] : {std::pair<std::uint64_t, std::size_t>{100, 3 * P},
                          {0, P},
                          {P + 1, 10},
                          {5 * P + 4000, 2 * P} /* to EOF */}) {
    SCOPED_TRACE(testing::Message() << "pos " << pos << " len " << len);
    IovCapture cap;
    Bytes buf(len, std::byte{0xee});
    bool sent = false;
    auto before = cache.counters();
    ssize_t r = cache.read_iov(*tf.h, pos, len, buf.data(), cap.sender(), &sent);
    auto after = cache.counters();
    Bytes want = tf.expect(pos, len);
    EXPECT_TRUE(sent);
    EXPECT_EQ(r, static_cast<ssize_t>(want.size()));
    EXPECT_EQ(cap.calls, 1);
    EXPECT_EQ(static_cast<std::uint64_t>(cap.iovcnt), pages_visited(pos, len, size));
    EXPECT_TRUE(same_bytes(cap.bytes, want, pos));
    EXPECT_EQ(buf, Bytes(len, std::byte{0xee})) << "read_iov copied into buf";
    EXPECT_EQ(delta(after, before, Ctr::zero_copy_reads), 1u);
    EXPECT_EQ(delta(after, before, Ctr::fast_reads), 1u);
    EXPECT_EQ(delta(after, before, Ctr::bytes), want.size());
  }
}

TEST(ReadIovTest, NotServedWholeFallsBackToBuffer) {
  PageCacheConfig cfg = test_config();
  cfg.batch = 4;
  PageCache cache(cfg);
  const std::uint64_t size = 12 * P;
  TestFile tf(cache, 5, size);
  ASSERT_EQ(cache.prefetch(*tf.f, 0, size), 12);
  ASSERT_TRUE(warm(cache, tf, 0, size));
  cache.invalidate(*tf.f, 2 * P, P);  // page 2 gone

  struct Case {
    std::uint64_t pos;
    std::size_t len;
    const char* why;
  };
  for (const Case& k :
       {Case{P + 10, 2 * P, "page 2 missing"}, Case{5 * P, 5 * P, "more pages than a batch"},
        Case{0, 3 * P, "page 2 refilled, not warm yet"}}) {
    SCOPED_TRACE(k.why);
    IovCapture cap;
    Bytes buf(k.len, std::byte{0xee});
    bool sent = true;
    auto before = cache.counters();
    ssize_t r = cache.read_iov(*tf.h, k.pos, k.len, buf.data(), cap.sender(), &sent);
    auto after = cache.counters();
    EXPECT_FALSE(sent);
    EXPECT_EQ(cap.calls, 0);
    ASSERT_EQ(r, static_cast<ssize_t>(k.len));
    buf.resize(static_cast<std::size_t>(r));
    EXPECT_TRUE(same_bytes(buf, tf.expect(k.pos, k.len), k.pos));
    EXPECT_EQ(delta(after, before, Ctr::zero_copy_reads), 0u);
  }
  // Page 2, refilled and read twice since, is still not saturated.
  IovCapture cap;
  Bytes buf(P, std::byte{0xee});
  bool sent = true;
  ssize_t r = cache.read_iov(*tf.h, 2 * P, P, buf.data(), cap.sender(), &sent);
  EXPECT_FALSE(sent);
  EXPECT_EQ(r, static_cast<ssize_t>(P));
  EXPECT_TRUE(same_bytes(buf, tf.expect(2 * P, P), 2 * P));
}

TEST(ReadIovTest, ReferencePathsNeverSend) {
  for (ReadPath p : {ReadPath::ref, ReadPath::ref_fetchadd, ReadPath::stackcopy}) {
    SCOPED_TRACE(read_path_name(p));
    PageCache cache(test_config(p));
    TestFile tf(cache, 5, 3 * P);
    ASSERT_EQ(cache.prefetch(*tf.f, 0, 3 * P), 3);
    for (int i = 0; i < 5; i++) {
      IovCapture cap;
      Bytes buf(100, std::byte{0xee});
      bool sent = true;
      ssize_t r = cache.read_iov(*tf.h, P + 50, 100, buf.data(), cap.sender(), &sent);
      EXPECT_FALSE(sent);
      EXPECT_EQ(cap.calls, 0);
      EXPECT_EQ(r, 100);
      EXPECT_TRUE(same_bytes(buf, tf.expect(P + 50, 100), P + 50));
    }
    EXPECT_EQ(cache.counters()[Ctr::zero_copy_reads], 0u);
  }
}

}  // namespace
}  // namespace norefs::cache::test
