// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/bench/addressing.h — what the fast path's chain of dependent loads
// costs with pointers (what main stores in the shared region: one address
// in every process, alloc/shared_region.h) against offsets from the
// region's base (what a region mapped at any address would need: an add
// per link).  Issue 19, section 1: "same address or offsets, measure both
// on the same run".  Run by norefs_addressing_bench.
//
// Three readers of one cached page, 16-byte reads at offset 0, each inside
// an rcu::ReadGuard and through a function the loop cannot see into (as
// PageCache::read is):
//   fast_read      (a)  the real cache/fast_path.h fast_read() on the real
//                       SharedFile of a PageCache, its real index and page;
//   copy-pointers  (a') a simplified copy of that fast path (file -> root ->
//                       slot -> page -> state, data) over its own copies of
//                       the structures, with absolute pointers;
//   copy-offsets   (b)  the same copy where every link is an offset from the
//                       region's base, added at each load (the entry point
//                       too: base + file offset).
// The copies are MEASUREMENT VARIANTS, not product code: they live here,
// allocated in the same region (the page pool's SharedAlloc) and carrying
// the real page's state word and bytes.  a' against b isolates the
// addressing (same code, one add per link more); a against a' says what
// the copy leaves out (the real index's node layout and checks).
//
// Two loop shapes per reader:
//   throughput  each read independent of the last (pread_scaling's loop):
//               the CPU overlaps successive chains, so an add per link
//               shows only as the instructions it costs;
//   latency     each read's file pointer (or offset) and position depend
//               on the bytes the previous read copied (an AND with a zero
//               the compiler cannot see): the chains run one after the
//               other, so an add per link shows as its latency.
// Rounds interleave everything (the readers' order rotated by the round);
// rows report the median ns/read over rounds (wall clock, and the thread's
// CPU clock: on a machine shared with other work, what a read costs when it
// runs), the min-max, and the median of the same-round ratios of CPU
// ns/read to copy-pointers'.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace norefs::tools::addressing {

enum class Reader { fast_read, copy_pointers, copy_offsets };
enum class Shape { throughput, latency };
std::string_view reader_name(Reader r);  // "fast_read", "copy-pointers", "copy-offsets"
std::string_view shape_name(Shape s);    // "throughput", "latency"

struct Params {
  unsigned rounds = 9;
  double seconds = 0.3;  // per (reader, shape) in each round
  int cpu = 0;           // pin to the cpu-th allowed CPU; -1: not pinned
};

struct Measurement {
  std::uint64_t reads = 0;
  double seconds = 0, cpu_seconds = 0;  // wall clock; this thread's CPU clock
  double ns_per_read = 0, cpu_ns_per_read = 0;
};

struct Row {
  Reader reader{};
  Shape shape{};
  std::vector<Measurement> rounds;
  double ns_per_read = 0, ns_min = 0, ns_max = 0;     // wall: median, min, max over rounds
  double cpu_ns = 0, cpu_ns_min = 0, cpu_ns_max = 0;  // CPU clock: the same
  // Median (min, max) of CPU ns/read / copy-pointers' in the same round.
  double vs_pointers = 0, vs_pointers_min = 0, vs_pointers_max = 0;
};

struct Result {
  Params params;
  int pinned_cpu = -1;
  std::vector<Row> rows;  // shapes x readers, in that order
};

// Runs every round.  `progress`, if set, gets a line per round.  Throws
// std::runtime_error if a reader read the wrong bytes or stopped.
Result run(const Params& p, const std::function<void(const std::string&)>& progress = {});

std::string describe(const Params& p);
std::string format_table(const Result& r);
std::string csv(const Result& r);
std::string json(const Result& r);  // {config, rows (every round)}

}  // namespace norefs::tools::addressing
