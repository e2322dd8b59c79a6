// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/bench/fill_free.h — the fill-and-free load: the userspace form of the
// series' hole-punch loop ("N processes each fallocate() and hole-punch
// 64 MiB of a memfd in a loop").  N threads each allocate `fill_pages`
// pages, touch them, mark them rcu_free (as if they had left a page cache
// index) and free them, calling make_way() after every page like a removal
// loop, as fast as they can for `seconds`.  A sampler reads the pool's
// published counters every `sample_us` (from the stats block, as another
// process would) and keeps the mean and peak of what waits.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "alloc/page_pool.h"
#include "tools/lib/report.h"

namespace norefs::tools {

struct FillFreeParams {
  alloc::PagePoolConfig pool;
  unsigned threads = 1;
  std::size_t fill_pages = 1024;  // pages held per fill (4 MiB)
  double seconds = 1.0;
  unsigned sample_us = 2000;
};

struct FillFreeResult {
  std::uint64_t pages = 0;  // pages allocated and freed, all threads
  double seconds = 0;       // measured wall time of the load
  double pages_per_sec = 0;
  double mean_waiting = 0;         // pages, over samples
  std::uint64_t peak_waiting = 0;  // pages, max over samples
  std::uint64_t samples = 0;
  std::uint64_t grace_periods = 0, expedites = 0, make_way_yields = 0;
  std::uint64_t alloc_failures = 0;
};

// Runs one measurement with a fresh pool.  `stats_path` is where the pool
// publishes its counters for the sampler (must not exist).
FillFreeResult run_fill_free(const FillFreeParams& p, const std::string& stats_path);

// ── fill_free_bench: the variants against each other (tools/bench/fill_free_bench.cc) ──
//
// For each tcache mode: immediate free (defer off), and deferred free with
// and without expedite.  Every (variant, threads)
// runs once per round, all interleaved in each round so that machine drift
// hits all alike; rows report medians over rounds (peak: max over rounds).

struct FillFreeBenchParams {
  std::vector<unsigned> threads{1, 2, 4};
  double seconds = 1.0;  // per measurement
  unsigned rounds = 3;
  std::size_t fill_pages = 1024, expedite_pages = 1024;
  std::vector<std::string> tcaches{"private"};  // private, none
  unsigned sample_us = 2000;
  unsigned gp_interval_us = alloc::PagePoolConfig{}.gp_interval_us;
  std::string stats_dir = "/dev/shm";  // where each measurement's pool publishes its counters
};

struct FillFreeVariant {
  std::string name;    // "immediate", "deferred", "deferred-noexp"
  std::string tcache;  // private | none
  alloc::PagePoolConfig cfg;
};
std::vector<FillFreeVariant> fill_free_variants(const FillFreeBenchParams& p);

// A (threads, variant) over rounds.
struct FillFreeRow {
  unsigned threads = 0;
  FillFreeVariant variant;
  std::vector<FillFreeResult> rounds;
  double pages_per_sec = 0, pages_per_sec_min = 0, pages_per_sec_max = 0;  // median, min, max
  double ratio_to_immediate = 0;   // median pages/s / immediate's (same tcache, threads)
  double mean_waiting = 0;         // pages, median over rounds
  std::uint64_t peak_waiting = 0;  // pages, max over rounds
  double grace_periods_per_sec = 0, expedites_per_sec = 0;  // over all rounds' time
  std::uint64_t alloc_failures = 0;                         // over all rounds
};

struct FillFreeBenchResult {
  FillFreeBenchParams params;
  long cpus = 0;
  std::vector<FillFreeRow> rows;  // threads x variants, in that order
  std::vector<report::Target> targets;
};

// Runs every measurement.  `progress`, if set, gets a line after each one
// (done false) and after each round (done true).
using FillFreeProgress = std::function<void(const std::string& line, bool done)>;
FillFreeBenchResult run_fill_free_bench(const FillFreeBenchParams& p,
                                        const FillFreeProgress& progress = {});

// Medians and ratios of rows whose `rounds` are filled in; then the
// targets: at the largest thread count, for the first tcache mode, deferred pages/s >= 0.90x
// immediate's, and mean waiting without expedite >= 20x with it.
void aggregate_fill_free_rows(std::vector<FillFreeRow>& rows);
std::vector<report::Target> evaluate_fill_free_targets(const FillFreeBenchParams& p,
                                                       const std::vector<FillFreeRow>& rows);

std::string describe_fill_free_config(const FillFreeBenchParams& p, long cpus);
std::string format_fill_free_table(const FillFreeBenchResult& r);
std::string format_fill_free_targets(const FillFreeBenchResult& r);
std::string fill_free_csv(const FillFreeBenchResult& r);
std::string fill_free_json(const FillFreeBenchResult& r);  // {rows, targets}

}  // namespace norefs::tools
