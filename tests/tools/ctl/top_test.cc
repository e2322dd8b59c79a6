// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The arithmetic of `norefsctl top` (tools/ctl/ctl.h): rates from two snapshots
// of the counter blocks, made up here so that every number on the screen is
// known in advance; the screen's lines; VmRSS parsing.  The terminal side
// (redraw, q, Ctrl-C, restoring the terminal) is tests/fs/top_test.cc.
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cache/page_cache.h"
#include "tools/ctl/ctl.h"

namespace norefs::tools::ctl {
namespace {

using cache::Ctr;
using cache::Stop;

void set(cache::CacheCounters& c, Ctr k, std::uint64_t v) { c.v[static_cast<std::size_t>(k)] = v; }
void set(cache::CacheCounters& c, Stop s, std::uint64_t v) {
  c.v[static_cast<std::size_t>(cache::stop_counter(s))] = v;
}

// Two snapshots 2 s apart with known deltas.
struct Pair {
  TopSnapshot before, after;
  Pair() {
    before.seconds = 100.0;
    after.seconds = 102.0;
    auto& b = before.cache;
    auto& a = after.cache;
    set(b, Ctr::reads, 1000);
    set(a, Ctr::reads, 1000 + 2 * 5000);  // 5000 reads/s
    set(b, Ctr::bytes, 0);
    set(a, Ctr::bytes, 2 * 80000);  // 80000 B/s
    // Interval: 9000 fast + 600 slow hits = 9600 hits, 400 misses.
    set(b, Ctr::fast_pages, 1000);
    set(a, Ctr::fast_pages, 10000);
    set(b, Ctr::slow_hits, 0);
    set(a, Ctr::slow_hits, 600);
    set(b, Ctr::misses, 3600);
    set(a, Ctr::misses, 4000);
    set(b, Ctr::evicted, 10);
    set(a, Ctr::evicted, 10 + 2 * 7);  // 7/s
    // Stops: accessed 300/s, batch 50/s, missing 200/s, readahead unchanged.
    set(b, Stop::accessed, 0);
    set(a, Stop::accessed, 600);
    set(b, Stop::batch, 10);
    set(a, Stop::batch, 110);
    set(b, Stop::missing, 0);
    set(a, Stop::missing, 400);
    set(b, Stop::readahead, 5);
    set(a, Stop::readahead, 5);
    a.pages_cached = 2048;
    a.active_pages = 512;
    a.limit_pages = 65536;
    a.batch = 31;
    a.read_path = static_cast<std::uint64_t>(cache::ReadPath::ref);
    before.alloc.grace_periods = 40;
    after.alloc.grace_periods = 40 + 2 * 400;  // 400/s
    before.alloc.expedites = 3;
    after.alloc.expedites = 3 + 2 * 25;  // 25/s
    after.alloc.waiting = 1024;
    after.alloc.peak_waiting = 4096;
    after.rss_kib = 20480;
  }
};

TEST(TopRates, RatesAreDeltasOverTheInterval) {
  Pair p;
  TopRates r = top_rates(&p.before, p.after);
  EXPECT_DOUBLE_EQ(r.interval_s, 2.0);
  EXPECT_DOUBLE_EQ(r.reads_per_s, 5000.0);
  EXPECT_DOUBLE_EQ(r.bytes_per_s, 80000.0);
  ASSERT_TRUE(r.hit_ratio);
  EXPECT_DOUBLE_EQ(*r.hit_ratio, 9600.0 / 10000.0);
  ASSERT_TRUE(r.fast_share);
  EXPECT_DOUBLE_EQ(*r.fast_share, 9000.0 / 9600.0);
  // Since start: 10600 hits, 4000 misses; 10000 fast of 10600.
  ASSERT_TRUE(r.hit_ratio_total);
  EXPECT_DOUBLE_EQ(*r.hit_ratio_total, 10600.0 / 14600.0);
  EXPECT_DOUBLE_EQ(*r.fast_share_total, 10000.0 / 10600.0);
  EXPECT_DOUBLE_EQ(r.grace_periods_per_s, 400.0);
  EXPECT_DOUBLE_EQ(r.expedites_per_s, 25.0);
  EXPECT_DOUBLE_EQ(r.evictions_per_s, 7.0);
  EXPECT_DOUBLE_EQ(r.stops_per_s, 550.0);
  // By rate, highest first; a reason that did not move is left out.
  ASSERT_EQ(r.stops.size(), 3u);
  EXPECT_EQ(r.stops[0].first, "accessed");
  EXPECT_DOUBLE_EQ(r.stops[0].second, 300.0);
  EXPECT_EQ(r.stops[1].first, "missing");
  EXPECT_DOUBLE_EQ(r.stops[1].second, 200.0);
  EXPECT_EQ(r.stops[2].first, "batch");
  EXPECT_DOUBLE_EQ(r.stops[2].second, 50.0);
  // Gauges come from the newer snapshot.
  EXPECT_EQ(r.pages_cached, 2048u);
  EXPECT_EQ(r.active_pages, 512u);
  EXPECT_EQ(r.limit_pages, 65536u);
  EXPECT_EQ(r.waiting, 1024u);
  EXPECT_EQ(r.peak_waiting, 4096u);
  EXPECT_EQ(r.read_path, "ref");
  EXPECT_EQ(r.batch, 31u);
  EXPECT_EQ(r.rss_kib, 20480u);
}

TEST(TopRates, FirstFrameHasGaugesButNoRates) {
  Pair p;
  TopRates r = top_rates(nullptr, p.after);
  EXPECT_EQ(r.interval_s, 0.0);
  EXPECT_EQ(r.reads_per_s, 0.0);
  EXPECT_FALSE(r.hit_ratio);
  EXPECT_TRUE(r.stops.empty());
  EXPECT_EQ(r.pages_cached, 2048u);
  ASSERT_TRUE(r.hit_ratio_total);
  std::vector<std::string> lines = format_top(r, "/mnt");
  EXPECT_EQ(lines[1].rfind("reads    -", 0), 0u) << lines[1];
}

TEST(TopRates, IdleIntervalHasNoRatio) {
  Pair p;
  TopRates r = top_rates(&p.after, TopSnapshot{p.after});
  // Same counters, but same time too: no interval, no rates.
  EXPECT_EQ(r.interval_s, 0.0);
  TopSnapshot later = p.after;
  later.seconds += 1;
  r = top_rates(&p.after, later);
  EXPECT_DOUBLE_EQ(r.interval_s, 1.0);
  EXPECT_EQ(r.reads_per_s, 0.0);
  EXPECT_FALSE(r.hit_ratio) << "nothing hit or missed: no ratio, not 0%";
  EXPECT_FALSE(r.fast_share);
}

TEST(TopRates, CounterGoingBackwardsCountsAsZero) {
  Pair p;
  // Swapped: every counter "went backwards".
  TopSnapshot back = p.before;
  back.seconds = p.after.seconds + 1;
  TopRates r = top_rates(&p.after, back);
  EXPECT_EQ(r.reads_per_s, 0.0);
  EXPECT_EQ(r.grace_periods_per_s, 0.0);
  EXPECT_TRUE(r.stops.empty());
}

TEST(TopScreen, ShowsEveryField) {
  Pair p;
  std::vector<std::string> lines = format_top(top_rates(&p.before, p.after), "/mnt pid 7", 200);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  for (const char* want :
       {"/mnt pid 7", "ref batch 31", "reads    5k/s", "80kB/s", "hit 96.0% (all 72.6%)",
        "fast path 93.8% (all 94.3%)", "stops    550/s  accessed 300, missing 200, batch 50",
        "cache    2048 pages (8.00 MiB), 512 active, limit 65536 pages (256 MiB)",
        "waiting  1024 pages now (4.00 MiB), peak 4096 (16.00 MiB)",
        "grace periods 400/s  expedites 25/s  evictions 7/s", "daemon   RSS 20.0 MiB"}) {
    EXPECT_NE(all.find(want), std::string::npos) << "missing \"" << want << "\" in\n" << all;
  }
}

TEST(TopScreen, LinesFitTheWidthAndStopsAreCapped) {
  Pair p;
  TopRates r = top_rates(&p.before, p.after);
  std::vector<std::string> lines = format_top(r, "/a/very/long/mount/point/name", 40, 2);
  for (const auto& l : lines) EXPECT_LE(l.size(), 40u) << l;
  lines = format_top(r, "/mnt", 200, 2);
  EXPECT_NE(lines[2].find("accessed 300, missing 200, ..."), std::string::npos) << lines[2];
}

TEST(TopScreen, HumanRate) {
  EXPECT_EQ(human_rate(0), "0");
  EXPECT_EQ(human_rate(950), "950");
  EXPECT_EQ(human_rate(12345), "12.3k");
  EXPECT_EQ(human_rate(65.3e6), "65.3M");
  EXPECT_EQ(human_rate(2.5e9), "2.5G");
}

TEST(TopRss, ParsesVmRss) {
  EXPECT_EQ(parse_vmrss_kib("Name:\tnorefs\nVmPeak:\t  99 kB\nVmRSS:\t    1234 kB\nThreads: 3\n"),
            1234u);
  EXPECT_FALSE(parse_vmrss_kib("Name:\tkthreadd\nThreads: 1\n"));  // kernel threads have none
  EXPECT_FALSE(parse_vmrss_kib("VmRSS:\t kB\n"));
  // This process has one.
  auto self = daemon_rss_kib(static_cast<std::uint64_t>(getpid()));
  ASSERT_TRUE(self);
  EXPECT_GT(*self, 0u);
  EXPECT_FALSE(daemon_rss_kib(0));  // no /proc/0
}

}  // namespace
}  // namespace norefs::tools::ctl
