// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/bench/pread_scaling.h — in-process pread scaling, will-it-scale style
// (prior-art.md §5: pread1, pread2), over the page cache library.
//
// One measurement: a fresh PageCache with one read path, N threads, each
// with its own FileHandle (its own readahead state, like an fd per task),
// reading `size` bytes at offset 0 in a loop and counting reads in its own
// cache line.  The file is max(size, one page) long:
//  - shared  (pread2): one file, every thread its own handle on it;
//  - private (pread1): one file per thread.
// Before timing, the cache is warmed through every handle until one whole
// pass of reads finds every page cached, referenced and active (no fast-path
// stop, no miss, no wait): from then on noref takes its fast path on every
// read.  Then the threads run for `settle` (not counted) and `seconds`
// (counted); the stop counters of the timed part say whether that held.
//
// A run interleaves everything: for each round, for each (size, variant,
// threads), every path in turn, each with its own cache (the refcount
// discipline differs), so that machine drift hits all paths alike.  Rows
// report the median over rounds, the min-max, and the medians of the ratios
// to `ref` and to `floor` measured in the same round.
//
// The floor is not a read path: the same harness, threads, handles and
// buffers, but each "read" copies `size` bytes from a fixed page-aligned
// source (page by page, as every path copies) with no cache, no lookup and
// no read-side section.  It is the limit any read path can reach here; what
// a path adds to it is the path's own cost.
//
// noref-remote is noref with the N threads replaced by N reader processes,
// one thread each (tools/bench/remote_readers.h): the same fresh cache, the
// same files and handles warmed the same way in this process, then each
// process maps the cache's shared region and the reader registry and reads
// `size` bytes at 0 of its file's SharedFile through the one fast path
// (cache/fast_path.h) under remote_rcu::ReadGuard, pinned as the threads
// are, counting reads in its own memory and in its own CacheStats slot
// (counted per process), and reports counts and its CPU clock over its
// socket.  Its rows' `threads` are processes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/cache_stats.h"
#include "cache/page_cache.h"
#include "tools/lib/report.h"

namespace norefs::tools {

enum class PreadVariant { shared, private_ };
std::string_view pread_variant_name(PreadVariant v);  // "shared", "private"
std::optional<PreadVariant> parse_pread_variant(std::string_view s);

// Where the file's bytes come from before they are cached.
// A temp file (FdBacking) / bytes generated in memory (GeneratedBacking).
enum class PreadBacking { file, memory };
std::string_view pread_backing_name(PreadBacking b);
// "16", "4K", "1M": sizes as the table and the progress lines write them.
std::string pread_size_name(std::size_t n);

// What one row measures: the floor, or one of the cache's read paths, or
// noref-remote: the noref fast path run by readers in other processes.
enum class PreadPath { floor, noref, noref_remote, ref, ref_fetchadd, stackcopy };
// "floor", "noref-remote", or the cache's name
std::string_view pread_path_name(PreadPath p);
std::optional<PreadPath> parse_pread_path(std::string_view s);

struct PreadScalingParams {
  std::vector<PreadPath> paths{PreadPath::floor, PreadPath::noref,        PreadPath::noref_remote,
                               PreadPath::ref,   PreadPath::ref_fetchadd, PreadPath::stackcopy};
  std::vector<std::size_t> sizes{1, 16, 32, 256, 1024, 4096, 65536, 1048576};
  std::vector<PreadVariant> variants{PreadVariant::shared, PreadVariant::private_};
  std::vector<unsigned> threads{1, 2, 4};
  double seconds = 1.0;  // counted, per measurement
  double settle = 0.05;  // threads run this long before counting starts
  unsigned rounds = 3;
  unsigned batch = cache::PageCacheConfig{}.batch;  // fast path: pages per section
  bool defer = true;                                // PagePoolConfig::defer
  bool pin = true;  // thread t on the t-th allowed CPU (mod their number)
  PreadBacking backing = PreadBacking::file;
  std::string tmp_dir = "/tmp";
  unsigned max_warm_passes = 64;
  // noref-remote: the reader program (tools/bench/remote_reader.cc); empty:
  // default_remote_reader() (beside this program).
  std::string remote_reader;
};

// One (round, size, variant, threads, path).
struct PreadMeasurement {
  std::uint64_t reads = 0;  // counted by the threads during `seconds`
  double seconds = 0;       // measured
  double reads_per_sec = 0;
  double ns_per_read = 0;  // per thread: threads * seconds / reads
  std::uint64_t thread_reads_min = 0, thread_reads_max = 0;
  // CPU time the threads got in those seconds (their thread CPU clocks),
  // its share of threads * seconds, and CPU ns per read: on a machine
  // shared with other work, what a read costs when it runs.  0 if unknown.
  double cpu_seconds = 0, cpu_share = 0, cpu_ns_per_read = 0;
  // The cache's counters over the same interval (sum of its per-thread slots).
  std::uint64_t cache_reads = 0, fast_reads = 0, slow_hits = 0, misses = 0, waits = 0;
  std::array<std::uint64_t, cache::kStops> stops{};
  // noref-remote: reads that returned short (a fast-path stop, with no
  // reference path in the reader's process to continue on).
  std::uint64_t short_reads = 0;
  unsigned warm_passes = 0;  // passes until one was clean
  bool warm = false;         // a clean pass happened within max_warm_passes
};

// A (size, variant, threads, path) over rounds.
struct PreadRow {
  std::size_t size = 0;
  PreadVariant variant = PreadVariant::shared;
  unsigned threads = 0;
  PreadPath path = PreadPath::noref;
  std::vector<PreadMeasurement> rounds;
  double reads_per_sec = 0, reads_per_sec_min = 0, reads_per_sec_max = 0;  // median, min, max
  double ns_per_read = 0;                                                  // median
  double cpu_share = 0, cpu_ns_per_read = 0;  // medians (NaN if unknown)
  // Median (min, max) over rounds of reads/s / ref's reads/s in the same
  // round; NaN if ref was not measured.
  double ratio_to_ref = 0, ratio_to_ref_min = 0, ratio_to_ref_max = 0;
  // The same for floor's reads/s / this row's (how many times the floor's
  // time a read takes: 1.0 = at the floor); and the median over rounds of
  // this row's ns/read minus the floor's in the same round (what the path
  // adds to the floor).  NaN if floor was not measured.
  double times_floor = 0, times_floor_min = 0, times_floor_max = 0;
  double ns_over_floor = 0;
  // Fast-path stops per million reads, by reason, over all rounds.
  std::array<double, cache::kStops> stops_per_mread{};
  double fast_read_fraction = 0;  // fast_reads / cache_reads, over all rounds
  bool all_warm = true;
};

// One of the targets, evaluated from measured medians (tools/lib/report.h).
using PreadTarget = report::Target;

struct PreadScalingResult {
  PreadScalingParams params;
  long cpus = 0;               // online CPUs
  std::vector<PreadRow> rows;  // sizes x variants x threads x paths, in that order
  std::vector<PreadTarget> targets;
};

// Runs the whole sweep.  `progress`, if set, gets a line after each
// measurement ("round 1/3  5/24  noref 16 B shared 2 threads: 65.3M reads/s")
// with `done` false, and one after each round with `done` true.
// Throws std::system_error if a temp file cannot be made.
using PreadProgress = std::function<void(const std::string& line, bool done)>;
PreadScalingResult run_pread_scaling(const PreadScalingParams& p,
                                     const PreadProgress& progress = {});

// One measurement with a fresh cache (what run_pread_scaling() repeats).
PreadMeasurement measure_pread(const PreadScalingParams& p, std::size_t size, PreadVariant variant,
                               unsigned threads, PreadPath path);

// Aggregates measurements per row (rounds: one vector per row in the order of
// `rows`, filled in) and computes ratios; then the targets.
void aggregate_pread_rows(std::vector<PreadRow>& rows);
std::vector<PreadTarget> evaluate_pread_targets(const std::vector<PreadRow>& rows);

// Output (pread_scaling_report.cc, with the targets).  The effective configuration (one or two
// lines), the table, the targets, and the machine-readable forms of the same rows.
std::string describe_pread_config(const PreadScalingParams& p, long cpus);
std::string format_pread_table(const PreadScalingResult& r);
std::string format_pread_targets(const PreadScalingResult& r);
std::string pread_csv(const PreadScalingResult& r);
std::string pread_json(const PreadScalingResult& r);  // {config, rows, targets}

}  // namespace norefs::tools
