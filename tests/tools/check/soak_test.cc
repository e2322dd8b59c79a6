// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The soak's library parts (tools/check/soak_load.h, tools/check/soak_monitor.h)
// without a mount: the final counter checks on consistent counters and on
// each broken one, the pattern reader on plain files (and a corrupted one),
// the hole-punch loader on a plain file.  The whole soak through mounts is
// the ctest soak_quick (release build, label stress).
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tools/check/soak_load.h"
#include "tools/check/soak_monitor.h"

namespace norefs::tools {
namespace {

using cache::Ctr;

class ScratchDir {
 public:
  ScratchDir() {
    std::string t = (std::filesystem::temp_directory_path() / "norefs-soak-test.XXXXXX").string();
    if (!mkdtemp(t.data())) throw std::runtime_error("mkdtemp");
    path_ = t;
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A drained daemon's counters, consistent.
struct Final {
  alloc::Counters a;
  cache::CacheCounters c;
  std::uint64_t limit = 4096;
  Final() {
    a.allocated = 100;
    a.immediate = 10;
    a.not_deferred = 5;
    a.freed_after_gp = 85;
    a.deferred = 85;
    a.peak_waiting = 20;
    auto set = [this](Ctr k, std::uint64_t v) { c.v[static_cast<std::size_t>(k)] = v; };
    set(Ctr::evicted, 50);
    set(Ctr::removed_pages, 20);
    set(Ctr::written_pages, 10);
    set(Ctr::readahead_pages, 70);
    set(Ctr::reads, 40);
    set(Ctr::fast_reads, 30);
    set(Ctr::zero_copy_reads, 20);
    set(Ctr::fast_pages, 100);
    set(cache::stop_counter(cache::Stop::batch), 3);
    c.batch = 31;
    c.limit_pages = limit;
  }
  std::vector<std::string> failed() const {
    std::vector<std::string> v;
    for (const CounterCheck& k : final_counter_checks(a, c, limit)) {
      if (!k.ok) v.push_back(k.name);
    }
    return v;
  }
};

TEST(SoakFinalChecks, ConsistentCountersPass) {
  EXPECT_TRUE(Final().failed().empty());
  EXPECT_GE(final_counter_checks(Final().a, Final().c, 4096).size(), 10u);
}

TEST(SoakFinalChecks, EachBrokenCounterFailsItsCheck) {
  auto c = [](Ctr k) { return static_cast<std::size_t>(k); };
  const std::vector<std::pair<std::string, std::function<void(Final&)>>> cases = {
      {"nothing waits for a grace period", [](Final& f) { f.a.inflight = 1; }},
      {"every allocated page is back in the arena", [](Final& f) { f.a.allocated++; }},
      {"every deferred page was freed after its grace period", [](Final& f) { f.a.deferred++; }},
      {"no page freed before its grace period", [](Final& f) { f.a.check_violations = 1; }},
      {"the pool's peak of waiting pages is within the limit",
       [](Final& f) { f.a.peak_waiting = f.limit + 1; }},
      {"the cache is empty", [](Final& f) { f.c.pages_cached = 1; }},
      {"pages that left the cache <= pages allocated",
       [&c](Final& f) { f.c.v[c(Ctr::evicted)] = 71; }},
      {"pages read from the backing file <= pages allocated",
       [&c](Final& f) { f.c.v[c(Ctr::readahead_pages)] = 101; }},
      {"zero_copy_reads <= fast_reads <= reads",
       [&c](Final& f) { f.c.v[c(Ctr::fast_reads)] = 41; }},
      {"every batch stop followed a full batch of fast pages",
       [](Final& f) {
         f.c.v[static_cast<std::size_t>(cache::stop_counter(cache::Stop::batch))] = 4;
       }},
      {"no backing I/O error", [&c](Final& f) { f.c.v[c(Ctr::io_errors)] = 1; }},
  };
  for (const auto& [name, breaks] : cases) {
    Final f;
    breaks(f);
    EXPECT_EQ(f.failed(), std::vector<std::string>{name});
  }
}

TEST(SoakLoadStress, ReadCheckPassesOnPatternFilesAndCatchesACorruptByte) {
  ScratchDir d;
  ReadCheckParams p;
  p.files = {d.file("p1"), d.file("p2")};
  p.seconds = 0.1;
  p.max_read = 64 * 1024;
  for (std::size_t k = 0; k < p.files.size(); k++) {
    write_pattern_file(p.files[k], static_cast<unsigned>(k + 1), 200000 + k);
  }
  ReadCheckResult ok = run_read_check(p);
  EXPECT_TRUE(ok.ok()) << (ok.failures.empty() ? "" : ok.failures[0].what);
  EXPECT_GT(ok.reads, 0u);
  EXPECT_GT(ok.small_reads, 0u);

  // One byte of file 2 changed: reads over it are bad, and the message says
  // where.  Reads are random: a 200 KB file is read over many times.
  int fd = ::open(p.files[1].c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  char x;
  pattern_bytes(2, 1000, &x, 1);
  x = static_cast<char>(~x);
  ASSERT_EQ(::pwrite(fd, &x, 1, 1000), 1);
  ::close(fd);
  p.seconds = 0.2;
  ReadCheckResult bad = run_read_check(p);
  EXPECT_FALSE(bad.ok());
  EXPECT_GT(bad.bad_reads, 0u);
  ASSERT_FALSE(bad.failures.empty());
  EXPECT_NE(bad.failures[0].what.find("first wrong byte at offset 1000"), std::string::npos)
      << bad.failures[0].what;
}

TEST(SoakLoadStress, PunchLoaderChecksEveryCycle) {
  ScratchDir d;
  PunchParams p;
  p.file = d.file("punch");
  p.seconds = 0.1;
  p.region_bytes = 60000;  // not a page multiple: neighbours share edge pages
  PunchResult r = run_punch(p);
  EXPECT_TRUE(r.ok()) << (r.failures.empty() ? "" : r.failures[0].what);
  EXPECT_GT(r.cycles, 0u);
  EXPECT_GT(r.unaligned_punches, 0u);
  EXPECT_EQ(r.bytes_checked, 2 * r.cycles * p.region_bytes);
  EXPECT_EQ(std::filesystem::file_size(p.file),
            std::uintmax_t{p.threads} * p.regions_per_thread * p.region_bytes);
}

TEST(SoakLoad, BadParametersThrow) {
  ScratchDir d;
  PunchParams p;
  p.file = d.file("punch");
  p.region_bytes = 100;
  EXPECT_THROW(run_punch(p), std::invalid_argument);
  ReadCheckParams r;
  EXPECT_THROW(run_read_check(r), std::invalid_argument);
  r.files = {d.file("missing")};
  EXPECT_THROW(run_read_check(r), std::system_error);
}

}  // namespace
}  // namespace norefs::tools
