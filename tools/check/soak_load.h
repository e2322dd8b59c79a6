// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/check/soak_load.h — the two self-checking loaders of the soak
// (tools/check/soak.sh, docs/soak.md) besides fio, run through a norefs mount:
//
//  - read-check: readers of pattern files.  A pattern file's bytes are a
//    function of (file id, offset) — the evict-race checker's content
//    (tools/check/evict_race.h: the 8-byte word at offset 8w of file f is
//    evict_race_word(f, w)) — so every byte of every read is checked, and a
//    wrong word can be decoded (another file's data, which offset).  Reads
//    are random in position and length: small ones (1..1024 bytes: the
//    stackcopy path's range, and the fast path's 16-byte case), page-sized
//    ones and long ones that span many batches.  Pattern files never change
//    during the soak; they are only evicted and refilled.
//
//  - punch: hole-punch loaders.  Each thread owns regions of one file and,
//    in a loop, writes a region with a fresh generation's pattern, reads it
//    back and checks it, punches a random sub-range of it with
//    FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE (page-aligned or not: an
//    unaligned end zeroes part of a cached page, a copy-on-write
//    replacement), reads the region again and checks zeros in the hole and
//    the pattern around it.  Threads share the file (one index, one lock)
//    but never a region, so the expected bytes are known at every moment.
//
// Both count I/O errors as failures: the soak's backing never fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace norefs::tools {

// Creates (or replaces) `path` with `size` bytes of file `id`'s pattern.
// Throws std::system_error.
void write_pattern_file(const std::string& path, unsigned id, std::uint64_t size);

// The bytes [off, off+n) of file `id`'s pattern.
void pattern_bytes(unsigned id, std::uint64_t off, void* dst, std::size_t n);

struct ReadCheckParams {
  // The files, in order; file k holds pattern id k + 1 (as `norefs_soak
  // pattern` wrote it given the same list).
  std::vector<std::string> files;
  unsigned threads = 2;
  double seconds = 1.0;
  std::size_t max_read = std::size_t{256} * 1024;  // longest read, bytes
  std::uint64_t seed = 1;
};

// A failed check, for the report (the first few of each run are kept).
struct SoakFailure {
  std::string what;
};

struct ReadCheckResult {
  std::uint64_t reads = 0, small_reads = 0, bytes = 0;
  std::uint64_t bad_reads = 0;        // reads with a wrong byte or a wrong length
  std::uint64_t io_errors = 0;        // reads that failed
  std::vector<SoakFailure> failures;  // the first few
  double seconds = 0;
  bool ok() const { return bad_reads == 0 && io_errors == 0 && reads > 0; }
};

// Opens every file once per thread (a handle each) and reads until
// `seconds` have passed.  Throws std::system_error if a file cannot be
// opened or is empty.
ReadCheckResult run_read_check(const ReadCheckParams& p);

struct PunchParams {
  std::string file;  // created if missing, sized to threads * regions * region_bytes
  unsigned threads = 2;
  unsigned regions_per_thread = 4;
  std::size_t region_bytes = std::size_t{64} * 1024;
  double seconds = 1.0;
  std::uint64_t seed = 1;
};

struct PunchResult {
  std::uint64_t cycles = 0;  // write, check, punch, check
  std::uint64_t unaligned_punches = 0;
  std::uint64_t bytes_checked = 0;
  std::uint64_t bad_reads = 0;  // a check that found a wrong byte or length
  std::uint64_t io_errors = 0;  // pwrite, pread or fallocate failed
  std::vector<SoakFailure> failures;
  double seconds = 0;
  bool ok() const { return bad_reads == 0 && io_errors == 0 && cycles > 0; }
};

// Throws std::system_error if the file cannot be opened or sized, or
// std::invalid_argument on a region smaller than a page or of zero count.
PunchResult run_punch(const PunchParams& p);

// {params, result} as JSON text.
std::string read_check_json(const ReadCheckParams& p, const ReadCheckResult& r);
std::string punch_json(const PunchParams& p, const PunchResult& r);

}  // namespace norefs::tools
