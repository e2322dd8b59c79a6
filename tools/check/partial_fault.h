// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/check/partial_fault.h — the seed's partial-fault test (docs/races.md):
// reads of cached files into buffers whose pages are zapped with
// madvise(MADV_DONTNEED), so that the copy faults partway through a source
// page, with every byte of the buffer checked afterwards.
//
// Where the copy runs:
//  - in-process (dir empty): PageCache::read() on a cache whose files are
//    all cached, so the copy is the fast path's memcpy inside the read-side
//    section, and the faults happen there;
//  - through a mount (dir set): pread() of files on a norefs mount, so the
//    kernel faults the buffer in (pinning it for the FUSE reply) partway
//    through the read.
//
// Two kinds of buffer, alternating per read:
//  - anon: private anonymous memory.  Before each read the buffer is filled
//    with a sentinel and then some of its pages are zapped (they read as
//    zero and fault on the next touch); the destination starts at a random
//    offset within the first page, so a destination page boundary falls
//    inside a source page.  Zapping concurrently with the copy would lose
//    bytes the copy already wrote (private anonymous pages come back as
//    zeros), so these are zapped just before the read.
//  - shared: a MAP_SHARED memfd mapping that another thread keeps zapping
//    all the time.  Zapping a shared mapping only drops the page table
//    entries; the bytes stay in the memfd, so a zap at any moment, even in
//    the middle of the copy, loses nothing and the check stays exact.
// Check: the read's byte count, every byte it returned (tools/check/evict_race.h's
// content function), and every other byte of the buffer (the sentinel, or
// zero on a zapped anon page): a copy that wrote outside its range or
// skipped bytes after a fault is caught.  Faults are counted per read
// (getrusage(RUSAGE_THREAD) around the read call), so a run shows that the
// copies did fault.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cache/page_cache.h"

namespace norefs::tools {

struct PartialFaultParams {
  std::string dir;  // "": in-process; else a directory on a norefs mount
  cache::ReadPath read_path = cache::ReadPath::noref;  // in-process only
  double seconds = 1.0;
  unsigned readers = 2;
  unsigned files = 4;
  std::size_t file_pages = 32;
  std::size_t max_read = std::size_t{8} * 4096;
  unsigned zap_pause_us = 50;  // the shared-buffer zapper's sleep between rounds
  std::uint64_t seed = 1;
  unsigned keep_bad = 8;
  const std::atomic<bool>* cancel = nullptr;
};

enum class ZapBuffer : std::uint8_t { anon, shared, kCount };
inline constexpr std::size_t kZapBuffers = static_cast<std::size_t>(ZapBuffer::kCount);
std::string_view zap_buffer_name(ZapBuffer b);

struct PartialFaultResult {
  double seconds = 0;
  struct PerBuffer {
    std::uint64_t reads = 0, bytes_checked = 0, bad_reads = 0, bad_bytes = 0;
    std::uint64_t faults = 0;         // minor faults during the read calls
    std::uint64_t faulted_reads = 0;  // reads with at least one
  };
  std::array<PerBuffer, kZapBuffers> by_buffer{};
  std::uint64_t reads = 0, bytes_checked = 0, bad_reads = 0, bad_bytes = 0, faults = 0;
  std::uint64_t pages_zapped = 0;  // anon pages zapped before reads + shared pages zapped
  // Cache counters over the run: in-process, or the daemon's if readable.
  bool have_counters = false;
  std::uint64_t fast_pages = 0, misses = 0;
  std::vector<std::string> first_bad;
};

// Throws std::invalid_argument on a bad configuration, std::system_error if
// the buffers or files cannot be set up.
PartialFaultResult run_partial_fault(const PartialFaultParams& p);

// 0: reads, faults, no bad byte; 1: bad bytes, or nothing read;
// 2: inconclusive (no read faulted).
int partial_fault_exit_code(const PartialFaultResult& r);
std::string describe_partial_fault_config(const PartialFaultParams& p);
std::string format_partial_fault_report(const PartialFaultResult& r);
std::string partial_fault_json(const PartialFaultParams& p, const PartialFaultResult& r);

}  // namespace norefs::tools
