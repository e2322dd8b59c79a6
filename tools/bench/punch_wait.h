// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/bench/punch_wait.h — the punch-wait comparison (docs/punch-wait.md): memory
// waiting for a grace period under hole-punch loads, in the shape of the
// kernel series' "Numbers" (seeds/noref-filemap-read-cover-letter.txt).
//
// Load: N loaders, each filling its own file (file_bytes, written in
// write_bytes pieces) and freeing it again, in a loop:
//   punch     fill, then fallocate(PUNCH_HOLE | KEEP_SIZE) of the whole file
//   truncate  fill, then ftruncate(0) (the seed's ext4 variant)
//   evict     fill, then evict the file's pages (the slow-free case)
// Targets: in-process against cache/ (backing files are memfds; the loader
// writes the backing file, then PageCache::write, then punch/truncate/evict,
// as the daemon does), or through a norefs mount (pwrite, fallocate,
// ftruncate, NOREFS_IOC_EVICT on files of the mount: real FUSE requests).
// Modes, interleaved for each (variant, gp interval, N): defer=off,
// defer without expedite, defer with expedite (the default), and that with
// the bound cache_size=B; round r starts at the r-th mode.  Each cell gets a
// fresh cache (or daemon).
//
// Sampling every sample_us from the published counter blocks (the alloc/
// and cache/ stats files, as another process reads them): pages waiting,
// pages cached, and VmRSS of the process holding the cache (the daemon's
// for the mount target).  After the load stops sampling goes on for
// settle_seconds, to see the memory come back.
//
// Readers in other processes (in-process target only: the daemon hands its
// registry to no one yet).  remote_readers = R starts R processes
// (norefs_remote_reader idle: tools/bench/remote_readers.h) that attach to
// this process's reader registry, take a slot with one empty section and
// sleep, so that every grace period of the cell pays the registry's
// membarrier and scan; R is one more dimension of the cells, between N and
// the modes, its values in an order rotated by the round like the modes'.
// stop_reader_ms = MS (with R >= 1): at 1/3 of each cell's load the first
// reader enters a section and is SIGSTOPped for MS, then SIGCONTed and
// leaves it.  Grace periods wait for it the whole time; the cell reports the
// bound's samples, limit_blocked, how long the registry held grace periods
// back, and the throughput during the stop.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace norefs::tools::punch_wait {

enum class Target { inproc, mount };
enum class Variant { punch, truncate, evict };
enum class Mode { off, defer, expedite, bound, given };  // given: an existing mount's own

std::string_view target_name(Target t);
std::string_view variant_name(Variant v);
std::string_view mode_name(Mode m);
std::optional<Variant> parse_variant(std::string_view s);
std::optional<Mode> parse_mode(std::string_view s);

struct Params {
  Target target = Target::inproc;
  std::vector<Variant> variants{Variant::punch, Variant::truncate, Variant::evict};
  std::vector<Mode> modes{Mode::off, Mode::defer, Mode::expedite, Mode::bound};
  std::vector<unsigned> threads{1, 2, 4, 8, 16};
  std::vector<unsigned> gp_intervals_us{1000, 20000};
  std::vector<unsigned> remote_readers{0};  // idle registered reader processes, per cell
  unsigned stop_reader_ms = 0;              // SIGSTOP one of them inside a section for this long
  std::string remote_reader;                // the reader program; empty: default_remote_reader()
  std::uint64_t file_bytes = 64ull << 20;
  std::size_t write_bytes = 1 << 20;
  std::uint64_t write_offset = 0;            // shifts every write (unaligned: partial pages)
  std::uint64_t bound_bytes = 128ull << 20;  // B of the bound mode
  std::size_t expedite_pages = 1024;
  long dirty_decay_ms = -3;        // -3: the pool's default; else PagePoolConfig's
  bool write_fill_partial = true;  // PageCacheConfig::write_fill_partial; -o write_fill
  double seconds = 1.0;            // load per cell
  double settle_seconds = 2.5;     // sampling after the load stops
  unsigned sample_us = 2000;
  unsigned rounds = 1;
  // The stated fixed overhead: RSS may exceed the live pages by the idle
  // RSS measured before the load plus this.
  std::uint64_t rss_slack_bytes = 32ull << 20;
  // Mount target: start this daemon for each cell, or use `mount_dir`.
  std::string daemon;
  std::string mount_dir;
  std::string work_dir = "/dev/shm";  // temp trees (backing files, mountpoints)
  // Set by a signal handler: the run stops, cleans up and throws Interrupted.
  const std::atomic<bool>* interrupted = nullptr;
  // Per-sample rows (CSV, header written by run()).  Optional.
  std::ostream* samples_csv = nullptr;
  // Called after each cell with its index and the number of cells.
  std::function<void(const struct Cell&, std::size_t, std::size_t)> progress;
};

struct Cell {
  Variant variant{};
  Mode mode{};
  unsigned gp_interval_us = 0, threads = 0, round = 0;
  std::uint64_t bound_pages = 0;  // the cache's limit (0: none)
  double seconds = 0;             // load wall time
  std::uint64_t bytes = 0;        // bytes written (and freed again)
  double gib_per_s = 0;
  std::uint64_t samples = 0;       // during the load
  double mean_waiting = 0;         // pages
  std::uint64_t peak_waiting = 0;  // pages
  double mean_cached = 0;
  // Pages; total = cached + waiting, two reads and not one snapshot: a page
  // recycled between them counts twice (Sampler::loop in punch_wait.cc).
  std::uint64_t peak_cached = 0, peak_total = 0;
  // Pages not back in the arena (cached, held, waiting), a lower bound per
  // sample (alloc::sum_live_lower_bound()): what the bound is enforced on.
  std::uint64_t peak_live = 0;
  std::uint64_t samples_over_bound = 0;  // samples whose live pages exceed the bound
  std::uint64_t grace_periods = 0, expedites = 0;
  double gp_per_s = 0, expedites_per_s = 0;
  std::uint64_t idle_rss_kib = 0, peak_rss_kib = 0;
  double mean_rss_kib = 0;
  std::uint64_t rss_over_bound_samples = 0;  // bound mode: RSS > B + overhead
  std::uint64_t minor_faults = 0;            // of the cache's process, during the load
  // After the load: ms until RSS <= live pages + overhead (-1: not within
  // settle_seconds), and the last sample.
  double settle_ms = -1;
  std::uint64_t end_rss_kib = 0, end_live_pages = 0;
  std::uint64_t write_alloc = 0, write_skipped = 0, limit_drains = 0;
  // The limit gave up waiting: grace periods made no progress (Ctr::limit_blocked).
  std::uint64_t limit_blocked = 0;
  // Readers in other processes: how many were started, and the registry's
  // slots in use when the load began (theirs: this process holds none).
  unsigned remote_readers = 0;
  std::uint64_t registry_slots = 0;
  // The registry's grace periods and membarrier calls during the load, those
  // that found a reader inside a section, and the longest any was held back
  // by one (its blocking_ms, sampled).
  std::uint64_t registry_gps = 0, membarriers = 0, registry_waited = 0;
  std::uint64_t max_gp_blocked_ms = 0;
  // stop_reader_ms: the stop as it happened (0: none), the samples taken
  // during it, whether the registry named the stopped pid as the blocker,
  // and GiB/s during the stop (the rest: gib_per_s over the whole load).
  double stop_ms = 0;
  std::uint64_t stop_samples = 0;
  bool stop_blocker_named = false;
  double stop_gib_per_s = 0;
};

struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("interrupted") {}
};

// Runs every cell.  Throws std::runtime_error / std::system_error with a
// message a user can act on (daemon did not mount, not a norefs mount...),
// Interrupted on a signal; a started daemon is unmounted in every case.
std::vector<Cell> run(const Params& p);

// The effective configuration, one "key: value" per line.
std::string describe(const Params& p);
// The table: one row per cell, ratios against defer=off of the same
// (variant, gp interval, N, round).
void print_table(std::ostream& os, const std::vector<Cell>& cells);
void write_csv(std::ostream& os, const std::vector<Cell>& cells);
nlohmann::json to_json(const Params& p, const std::vector<Cell>& cells);

// VmRSS of `pid` in KiB (0 if unreadable).
std::uint64_t rss_kib(long pid);

}  // namespace norefs::tools::punch_wait
