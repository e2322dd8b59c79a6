// SPDX-License-Identifier: LGPL-2.1-or-later
//
// alloc/stats_block.h — PagePool's counters, readable by another process.
//
// A counter block (alloc/counter_block.h: the layout, the writer, the
// reader, and why relaxed single-writer updates are enough): a StatsHeader
// and one 64-byte SlotCounters per pool slot (page_pool.cc).  Any process
// may map the file read-only with StatsReader and sum it as often as it
// likes without taking any lock a freeing thread takes.
//
// Writers: a slot's counters are written by whoever holds that slot's lock,
// or for the owner-only fields by the slot's owning thread (see
// SlotCounters), each with counter_add()/counter_sub().  The header's
// fields say who writes them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "alloc/counter_block.h"

namespace norefs::alloc {

inline constexpr std::uint64_t kStatsMagic = 0x6e6f726566737374ULL;  // "norefsst"
// 2: the common BlockHeader of counter_block.h; config bit 4 retired.
// 3: the remote readers' counters.
inline constexpr std::uint64_t kStatsVersion = 3;

// The process registry's counters (ReaderRegistryStats), as published.
struct RemoteReaderCounters {
  Counter slots_in_use;    // registered reader threads, all processes
  Counter slots_peak;      // the most at once
  Counter grace_periods;   // registry grace periods run (those with readers registered)
  Counter waited;          // grace periods that found a reader inside a section
  Counter reclaimed_dead;  // slots taken back from dead threads and processes
  Counter blocking_pid;    // pid holding the running grace period back >= 1 ms, else 0
  Counter blocking_ms;     // for how long
  Counter membarriers;     // membarrier(GLOBAL_EXPEDITED) calls
};

// One per thread slot; cache-line sized so that no two threads write one line.
struct alignas(64) SlotCounters {
  // Written under the slot lock.
  Counter pending;         // pages queued, grace period not started yet
  Counter inflight;        // pages whose grace period is running (batch + expedite)
  Counter deferred;        // pages ever queued to wait for a grace period
  Counter freed_after_gp;  // queued pages that reached the arena after their grace period
  // Written by the owning thread only.
  Counter allocated;     // pages allocated
  Counter immediate;     // pages freed at once by free() (rcu_free clear, or defer off)
  Counter not_deferred;  // pages freed by free_not_deferred() (file being deleted)
  Counter in_use;        // 1 while a live user thread (not a pool worker) owns the slot;
                         // written under the pool's slot registry lock
};
static_assert(sizeof(SlotCounters) == 64);

// The padding the analyzer reports is deliberate: each group of writers
// (alignas(64) below) has cache lines of its own.
// NOLINTNEXTLINE(clang-analyzer-optin.performance.Padding)
struct alignas(64) StatsHeader {
  static constexpr std::uint64_t kMagic = kStatsMagic, kVersion = kStatsVersion;
  static constexpr const char* kWhat = "stats block";

  BlockHeader block;
  Counter page_size;  // written once, before the magic
  Counter config;     // ConfigBits of the pool, so a reader can label what it sees

  // Written by GracePeriods (grace_period.h says how).
  alignas(64) Counter gp_started;  // grace periods begun
  Counter gp_completed;            // highest grace period known complete
  Counter grace_periods;           // synchronize() calls completed by the pool
  // Single writer (the expedite worker).
  Counter expedites;        // expedite works run
  Counter expedited_pages;  // pages freed by expedite works
  Counter peak_waiting;     // single writer (the driver): max of pending+inflight it saw
  // Several writers, rare: relaxed fetch_add.
  Counter check_violations;  // check mode: pages freed before their grace period
  Counter make_way_yields;   // make_way() calls that yielded to the expedite worker

  // Single writer (the driver), refreshed at human intervals.
  alignas(64) Counter arena_active_bytes;
  Counter arena_resident_bytes;
  Counter arena_stats_age_ms;  // CLOCK_MONOTONIC ms of the last refresh

  // Readers in other processes (alloc/reader_registry.h): published by the
  // process registry's grace periods, live while one waits, when this pool
  // is the registry's sink (PagePool's constructor makes it so if the
  // registry exists).  Single writer: the thread running the registry's
  // grace period, under its gp_mu_.
  alignas(64) RemoteReaderCounters remote;
};

enum ConfigBits : std::uint64_t {
  kCfgDefer = 1,
  kCfgExpedite = 2,
  // 4: retired (the call_rcu grace-period engine); never set.
  kCfgTcacheNone = 8,
  kCfgCheck = 16,
};

// A sum of the block: what a user wants to see.
struct Counters {
  std::uint64_t pending = 0, inflight = 0, waiting = 0, peak_waiting = 0;
  std::uint64_t allocated = 0, deferred = 0, immediate = 0, not_deferred = 0;
  std::uint64_t freed_after_gp = 0;
  std::uint64_t grace_periods = 0, expedites = 0, expedited_pages = 0;
  std::uint64_t gp_started = 0, gp_completed = 0, check_violations = 0, make_way_yields = 0;
  std::uint64_t threads = 0, slots = 0;
  std::uint64_t arena_active_bytes = 0, arena_resident_bytes = 0;
  std::uint64_t config = 0;
  struct Remote {
    std::uint64_t slots_in_use = 0, slots_peak = 0, grace_periods = 0, waited = 0;
    std::uint64_t reclaimed_dead = 0, blocking_pid = 0, blocking_ms = 0, membarriers = 0;
  } remote;
  // Pages allocated and not yet back in the arena.
  std::uint64_t live() const { return allocated - immediate - not_deferred - freed_after_gp; }
};

// The writable block, owned by a PagePool.  Anonymous shared mapping when
// `path` is empty; else creates `path` (mode 0600, O_EXCL; unlinked in the
// destructor).  Throws std::system_error on failure.
class StatsBlock : public CounterBlock<StatsHeader, SlotCounters> {
 public:
  StatsBlock(const std::string& path, std::size_t max_slots);
  Counters sum() const;
};

// Read-only view of a block, in this process or another.  Throws
// std::system_error (open/mmap) or std::runtime_error (not a norefs stats
// block, or another version).
class StatsReader : public CounterBlockReader<StatsHeader, SlotCounters> {
 public:
  explicit StatsReader(const std::string& path) : CounterBlockReader(path) {}
  Counters sum() const;
  // Sum of pending + inflight only: the cheap read for 2 ms sampling.
  std::uint64_t waiting() const;
  // Pages allocated and not back in the arena, never more than were at some
  // moment during the call: see sum_live_lower_bound().
  std::int64_t live_lower_bound() const;
};

// Shared by both: sums a mapped block.
Counters sum_counters(const StatsHeader& h, const SlotCounters* slots);
std::uint64_t sum_waiting(const StatsHeader& h, const SlotCounters* slots);
// Counters::live() as a lower bound, for a sampler that checks a bound on it
// while the pool runs (tools/check/soak_monitor.h): every slot's `allocated` is
// read first, then every slot's frees.  Each counter only grows, so the
// allocations read are at most those made by the moment t between the two
// passes and the frees read at least those made by t: the result is at most
// live() at t, and a result above a limit proves live() was above it.  (A
// sum in one pass, like sum_counters(), can count a page freed in one slot
// and reallocated in another twice.)  The argument takes the loads in
// program order (acquire) and the writers' relaxed stores in one global
// order consistent with each thread's: multi-copy atomic hardware (x86-64,
// ARMv8), where the daemon's own reserve() read of live() has the same
// footing.  May be negative while frees race ahead.
std::int64_t sum_live_lower_bound(const StatsHeader& h, const SlotCounters* slots);

}  // namespace norefs::alloc
