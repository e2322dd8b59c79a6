// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/fs/control_test.cc — the control ioctls (fs/control.h) and the
// counters they point to: INFO names the daemon and two stats files that
// parse; EVICT empties a file's cache so the next read misses; PREFETCH
// fills it so the next read needs no readahead; other users get EPERM.
// And what the counters say about the read paths: hot small reads are
// fast-path hits with noref/stackcopy and never with ref/ref-fetchadd;
// cache=off reads uncached; cache_size bounds the pages cached.
#include <sys/ioctl.h>
#include <sys/stat.h>

#include <string>
#include <thread>

#include "alloc/stats_block.h"
#include "cache/cache_stats.h"
#include "fs/control.h"
#include "fs_test_util.h"

namespace norefs::fs::test {
namespace {

using cache::CacheCounters;
using cache::Ctr;

norefs_info get_info(int fd) {
  norefs_info info{};
  must(::ioctl(fd, NOREFS_IOC_INFO, &info), "ioctl(NOREFS_IOC_INFO)");
  return info;
}

std::uint64_t evict(int fd) {
  norefs_evict ev{};
  must(::ioctl(fd, NOREFS_IOC_EVICT, &ev), "ioctl(NOREFS_IOC_EVICT)");
  return ev.pages;
}

norefs_prefetch prefetch(int fd, std::uint64_t off, std::uint64_t len) {
  norefs_prefetch pf{};
  pf.offset = off;
  pf.length = len;
  must(::ioctl(fd, NOREFS_IOC_PREFETCH, &pf), "ioctl(NOREFS_IOC_PREFETCH)");
  return pf;
}

class ControlTest : public MountTest {
 protected:
  // The cache counters of the running daemon, through INFO.
  CacheCounters counters() {
    Fd root(m(), O_RDONLY | O_DIRECTORY);
    cache::CacheStatsReader r(get_info(root.get()).cache_stats);
    return r.sum();
  }
  // Counters after the daemon has settled (replies may go out before the
  // last bump; async readahead runs on a worker).  Waits for two equal sums.
  CacheCounters settled() {
    Fd root(m(), O_RDONLY | O_DIRECTORY);
    cache::CacheStatsReader r(get_info(root.get()).cache_stats);
    CacheCounters prev = r.sum();
    for (int i = 0; i < 50; i++) {
      std::this_thread::sleep_for(20ms);
      CacheCounters c = r.sum();
      if (c.v == prev.v && c.pages_cached == prev.pages_cached) return c;
      prev = c;
    }
    return prev;
  }
};

TEST_F(ControlTest, InfoNamesTheDaemonAndStatsFilesThatParse) {
  write_file(m("f"), random_bytes(10 * kPage, 700));
  Fd file(m("f"), O_RDONLY);
  Fd dir(m(), O_RDONLY | O_DIRECTORY);
  for (int fd : {file.get(), dir.get()}) {
    norefs_info info = get_info(fd);
    EXPECT_EQ(info.pid, static_cast<std::uint64_t>(mount().pid()));
    const std::string pid = std::to_string(mount().pid());
    EXPECT_EQ(std::string(info.alloc_stats), tree().stats + "/alloc." + pid);
    EXPECT_EQ(std::string(info.cache_stats), tree().stats + "/cache." + pid);
    for (const char* p : {info.alloc_stats, info.cache_stats}) {
      struct stat st {};
      ASSERT_EQ(::stat(p, &st), 0) << p << ": " << errno_name(errno);
      EXPECT_EQ(st.st_mode & 0777, 0600u) << p;
      EXPECT_EQ(st.st_uid, ::geteuid()) << p;
    }
    EXPECT_NO_THROW(alloc::StatsReader{info.alloc_stats});
    EXPECT_NO_THROW(cache::CacheStatsReader{info.cache_stats});
  }
  // The counters move with reads through the mount.
  norefs_info info = get_info(file.get());
  cache::CacheStatsReader cr(info.cache_stats);
  alloc::StatsReader ar(info.alloc_stats);
  CacheCounters before = cr.sum();
  EXPECT_EQ(pread_str(file.get(), 10 * kPage, 0).size(), 10 * kPage);
  CacheCounters after = settled();
  EXPECT_GT(after[Ctr::reads], before[Ctr::reads]);
  EXPECT_GE(after[Ctr::bytes] - before[Ctr::bytes], 10 * kPage);
  EXPECT_EQ(after.read_path, 0u) << "default read_path is noref";
  alloc::Counters a = ar.sum();
  EXPECT_GT(a.allocated, 0u);
  EXPECT_EQ(a.check_violations, 0u);
}

class ControlConfigTest : public ControlTest {
 protected:
  MountConfig config() const override {
    return {{"read_path=ref-fetchadd", "batch=7", "cache_size=8m"}, {}};
  }
};

TEST_F(ControlConfigTest, StatsHeaderReflectsOptions) {
  CacheCounters c = counters();
  EXPECT_EQ(c.read_path, 2u) << "ref-fetchadd";
  EXPECT_EQ(c.batch, 7u);
  EXPECT_EQ(c.limit_pages, 8 * kMiB / kPage);
}

// A file made behind the daemon's back: its first read is cold.
TEST_F(ControlTest, EvictThenNextReadMisses) {
  const std::string data = random_bytes(16 * kPage, 701);
  write_file(b("f"), data);
  Fd fd(m("f"), O_RDONLY);
  EXPECT_BYTES_EQ(data, pread_str(fd.get(), data.size(), 0));
  CacheCounters c0 = settled();
  EXPECT_GE(c0.pages_cached, 16u);
  EXPECT_EQ(evict(fd.get()), 16u);
  CacheCounters c1 = settled();
  EXPECT_EQ(c1.pages_cached, c0.pages_cached - 16);
  EXPECT_EQ(c1[Ctr::evicted] - c0[Ctr::evicted], 16u);
  EXPECT_BYTES_EQ(data, pread_str(fd.get(), data.size(), 0));
  CacheCounters c2 = settled();
  EXPECT_GT(c2[Ctr::misses], c1[Ctr::misses]);
  EXPECT_EQ(c2[Ctr::readahead_pages] - c1[Ctr::readahead_pages], 16u);
  // Nothing cached left to evict right after an eviction.
  EXPECT_EQ(evict(fd.get()), 16u);
  EXPECT_EQ(evict(fd.get()), 0u);
  // EVICT is for regular files.
  Fd dir(m(), O_RDONLY | O_DIRECTORY);
  norefs_evict ev{};
  EXPECT_EQ(::ioctl(dir.get(), NOREFS_IOC_EVICT, &ev), -1);
}

TEST_F(ControlTest, PrefetchThenReadNeedsNoReadahead) {
  const std::string whole = random_bytes(kMiB, 702);
  const std::string part = random_bytes(kMiB, 703);
  write_file(b("whole"), whole);
  write_file(b("part"), part);
  {
    Fd fd(m("whole"), O_RDONLY);
    norefs_prefetch pf = prefetch(fd.get(), 0, 0);  // length 0: to the end
    EXPECT_EQ(pf.pages_read, kMiB / kPage);
    EXPECT_GT(pf.nanoseconds, 0u);
    CacheCounters c0 = settled();
    EXPECT_BYTES_EQ(whole, read_chunked(fd.get(), 128 * 1024));
    CacheCounters c1 = settled();
    EXPECT_EQ(c1[Ctr::readahead_pages] - c0[Ctr::readahead_pages], 0u);
    EXPECT_EQ(c1[Ctr::misses] - c0[Ctr::misses], 0u);
    EXPECT_GE(c1.hits() - c0.hits(), kMiB / kPage);
    // Again: already cached, nothing read from the backing file.
    EXPECT_EQ(prefetch(fd.get(), 0, 0).pages_read, 0u);
    // Past the end: nothing to read.
    EXPECT_EQ(prefetch(fd.get(), 2 * kMiB, kPage).pages_read, 0u);
  }
  {
    Fd fd(m("part"), O_RDONLY);
    norefs_prefetch pf = prefetch(fd.get(), kPage, 2 * kPage);
    EXPECT_EQ(pf.pages_read, 2u);
    CacheCounters c0 = settled();
    EXPECT_BYTES_EQ(part.substr(kPage, 2 * kPage), pread_str(fd.get(), 2 * kPage, kPage));
    CacheCounters c1 = settled();
    EXPECT_EQ(c1[Ctr::readahead_pages] - c0[Ctr::readahead_pages], 0u);
    EXPECT_EQ(c1[Ctr::misses] - c0[Ctr::misses], 0u);
    // Unaligned range: every page it touches.
    EXPECT_EQ(prefetch(fd.get(), 10 * kPage + 1, kPage).pages_read, 2u);
  }
}

// The ioctls are for root and the mounting user only.
class ControlPermissionTest : public ControlTest {
 protected:
  MountConfig config() const override { return {{"allow_other", "default_permissions"}, {}}; }
};

TEST_F(ControlPermissionTest, OtherUsersGetEperm) {
  SKIP_UNLESS_ROOT();
  write_file(m("public"), random_bytes(3 * kPage, 704), 0644);
  ASSERT_SYS(::chmod(m("public").c_str(), 0644));
  write_file(m("private"), "secret", 0600);
  ASSERT_SYS(::chmod(m("private").c_str(), 0600));
  const std::string helper = NOREFS_HELPER_AS_USER;
  auto as = [&](const std::string& uid, const std::string& op, const std::string& path) {
    return run({helper, uid, op, path}, 30s);
  };
  // Controls: the helper works, as root everything succeeds.
  for (const char* op : {"info", "evict", "prefetch", "read"}) {
    RunResult r = as("-", op, m("public"));
    EXPECT_TRUE(r.exited(0)) << "as root, " << op << ": " << describe_status(r.status) << " "
                             << r.output;
  }
  // uid 65534 may read a public file (allow_other) ...
  RunResult r = as("65534", "read", m("public"));
  EXPECT_TRUE(r.exited(0)) << "read as 65534: " << describe_status(r.status) << " " << r.output;
  // ... but not a 0600 file of root (default_permissions) ...
  r = as("65534", "read", m("private"));
  EXPECT_TRUE(r.exited(EACCES)) << "read of a 0600 file as 65534: " << describe_status(r.status)
                                << " " << r.output;
  // ... and no ioctl, on a file or on the root directory.
  for (const std::string& path : {m("public"), m()}) {
    for (const char* op : {"info", "evict", "prefetch"}) {
      if (path == m() && std::string(op) != "info") continue;  // EVICT/PREFETCH: files only
      r = as("65534", op, path);
      EXPECT_TRUE(r.exited(EPERM))
          << op << " on " << path << " as 65534: " << describe_status(r.status) << " " << r.output;
    }
  }
}

// ── What the counters say about the read paths ──

class ReadPathCountersTest : public ControlTest, public ::testing::WithParamInterface<const char*> {
 protected:
  MountConfig config() const override { return {{std::string("read_path=") + GetParam()}, {}}; }
  bool fast() const {
    return std::string(GetParam()) == "noref" || std::string(GetParam()) == "stackcopy";
  }
};

// 1000 reads of 100 bytes of one hot page.
TEST_P(ReadPathCountersTest, HotSmallReadsAreFastPathHitsOnlyOnFastPaths) {
  const std::string data = random_bytes(kPage, 705);
  write_file(m("f"), data);
  Fd fd(m("f"), O_RDONLY);
  for (int i = 0; i < 5; i++) ASSERT_EQ(pread_str(fd.get(), 100, 0), data.substr(0, 100));
  CacheCounters c0 = settled();
  for (int i = 0; i < 1000; i++) {
    std::string got = pread_str(fd.get(), 100, 0);
    ASSERT_EQ(got, data.substr(0, 100)) << "read " << i;
  }
  CacheCounters c1 = settled();
  const std::uint64_t reads = c1[Ctr::reads] - c0[Ctr::reads];
  const std::uint64_t fast_pages = c1[Ctr::fast_pages] - c0[Ctr::fast_pages];
  const std::uint64_t hits = c1.hits() - c0.hits();
  EXPECT_GE(reads, 1000u) << "direct_io: every read reaches the daemon";
  EXPECT_GE(hits, 1000u);
  EXPECT_EQ(c1[Ctr::misses] - c0[Ctr::misses], 0u);
  if (fast()) {
    EXPECT_GE(fast_pages, 900u) << GetParam() << ": hot small reads should take the fast path";
    // "read calls served entirely by the fast path" (cache/cache_stats.h).
    EXPECT_GE(c1[Ctr::fast_reads] - c0[Ctr::fast_reads], 900u)
        << GetParam() << ": reads served whole by the fast path are not counted as fast_reads";
  } else {
    EXPECT_EQ(c1[Ctr::fast_pages], 0u) << GetParam() << " has no fast path";
    EXPECT_EQ(c1[Ctr::fast_reads], 0u);
    EXPECT_GE(c1[Ctr::slow_hits] - c0[Ctr::slow_hits], 1000u);
  }
}

INSTANTIATE_TEST_SUITE_P(ReadPaths, ReadPathCountersTest,
                         ::testing::Values("noref", "ref", "ref-fetchadd", "stackcopy"),
                         [](const auto& tp) {
                           std::string s = tp.param;
                           for (char& c : s) c = c == '-' ? '_' : c;
                           return s;
                         });

// cache=off: a plain passthrough.
class CacheOffTest : public ControlTest {
 protected:
  MountConfig config() const override { return {{"cache=off"}, {}}; }
};

TEST_F(CacheOffTest, NothingIsCached) {
  const std::string data = random_bytes(64 * kPage + 3, 706);
  write_file(b("f"), data);
  CacheCounters c0 = settled();
  EXPECT_BYTES_EQ(data, read_file(m("f")));
  EXPECT_BYTES_EQ(data, read_file(m("f")));
  write_file(m("g"), data);
  EXPECT_BYTES_EQ(data, read_file(m("g")));
  // Nothing is cached, hit or read ahead (the daemon may bypass the cache
  // entirely, so no read counter is required to move).
  CacheCounters c1 = settled();
  EXPECT_EQ(c1.pages_cached, 0u);
  EXPECT_EQ(c1.hits(), 0u);
  EXPECT_EQ(c1[Ctr::readahead_pages], c0[Ctr::readahead_pages]);
  EXPECT_EQ(c1[Ctr::written_pages], c0[Ctr::written_pages]);
}

class CacheSizeTest : public ControlTest {
 protected:
  MountConfig config() const override { return {{"cache_size=1m"}, {}}; }
};

TEST_F(CacheSizeTest, PagesCachedStayUnderTheLimit) {
  const std::string data = random_bytes(4 * kMiB, 707);
  write_file(b("f"), data);
  for (int pass = 0; pass < 2; pass++) {
    EXPECT_BYTES_EQ(data, read_file(m("f")));
    CacheCounters c = settled();
    EXPECT_EQ(c.limit_pages, kMiB / kPage);
    EXPECT_LE(c.pages_cached, c.limit_pages) << "pass " << pass;
    EXPECT_GT(c[Ctr::evicted], 0u);
  }
}

}  // namespace
}  // namespace norefs::fs::test
