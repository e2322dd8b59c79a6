// SPDX-License-Identifier: LGPL-2.1-or-later
//
// alloc/stats_block.h — PagePool's counters, readable by another process.
//
// The counters live in one shared mapping: a header and one 64-byte slot per
// thread that has used the pool.  The pool maps it read-write (anonymous, or a
// file when StatsBlock::create() is given a path); any process may map the
// file read-only with StatsReader and sum it as often as it likes — every 2 ms
// is cheap — without taking any lock a freeing thread takes.  Readers never
// write, so a reader cannot disturb the pool.
//
// Interface (version 1), all fields native-endian, 8-byte aligned:
//   StatsHeader at offset 0, then `max_slots` SlotCounters at offset
//   `slots_offset`.  Readers check `magic` and `version` and sum the slots
//   [0, nslots).  Every field is a lock-free std::atomic<uint64_t>, so a
//   relaxed load in another process reads a whole, once-written value.
//
// Writers and ordering:
//  - A slot's counters are written by whoever holds that slot's lock, or for
//    the owner-only fields by the slot's owning thread (see SlotCounters).
//    Each field has one writer at a time, so writers use relaxed load + relaxed
//    store (no RMW, no shared line between threads).  Relaxed is enough because
//    the values carry no pointers: a reader wants each number, not an
//    ordering between them.
//  - A sum over slots is not an atomic snapshot: it can be off by what moves
//    while it reads (at most a batch per thread).  After quiescence it is exact.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "alloc/shared_mapping.h"

namespace norefs::alloc {

inline constexpr std::uint64_t kStatsMagic = 0x6e6f726566737374ULL;  // "norefsst"
inline constexpr std::uint64_t kStatsVersion = 1;

using Counter = std::atomic<std::uint64_t>;
static_assert(Counter::is_always_lock_free, "counters are read from another process");

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
                         // written under the pool's registry lock
};
static_assert(sizeof(SlotCounters) == 64);

struct alignas(64) StatsHeader {
  Counter magic;
  Counter version;
  Counter page_size;
  Counter max_slots;
  Counter slots_offset;
  Counter pid;
  Counter config;  // ConfigBits of the pool, so a reader can label what it sees
  Counter nslots;  // slots handed out so far; readers sum [0, nslots)

  alignas(64) Counter gp_started;  // grace periods begun (GracePeriods)
  Counter gp_completed;            // highest grace period known complete
  Counter grace_periods;           // synchronize() calls completed by the pool
  Counter expedites;               // expedite works run
  Counter expedited_pages;         // pages freed by expedite works
  Counter peak_waiting;            // max of pending+inflight seen at every sweep
  Counter check_violations;        // check mode: pages freed before their grace period
  Counter make_way_yields;         // make_way() calls that yielded to the expedite worker

  alignas(64) Counter arena_active_bytes;  // refreshed at human intervals
  Counter arena_resident_bytes;
  Counter arena_stats_age_ms;  // CLOCK_MONOTONIC ms of the last refresh
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
  // Pages allocated and not yet back in the arena.
  std::uint64_t live() const { return allocated - immediate - not_deferred - freed_after_gp; }
};

// The writable block, owned by a PagePool.
class StatsBlock {
 public:
  // Anonymous shared mapping when `path` is empty; else creates `path` (mode
  // 0600, O_EXCL; the owner unlinks it in the destructor).  Throws
  // std::system_error on failure.
  StatsBlock(const std::string& path, std::size_t max_slots);
  ~StatsBlock();
  StatsBlock(const StatsBlock&) = delete;
  StatsBlock& operator=(const StatsBlock&) = delete;

  StatsHeader& header() { return *header_; }
  const StatsHeader& header() const { return *header_; }
  SlotCounters& slot(std::size_t i) { return slots_[i]; }
  std::size_t max_slots() const { return max_slots_; }
  const std::string& path() const { return map_.path(); }
  Counters sum() const;

 private:
  SharedMapping map_;
  std::size_t max_slots_;
  StatsHeader* header_;
  SlotCounters* slots_;
};

// Read-only view of a block, in this process or another.
class StatsReader {
 public:
  // Throws std::system_error (open/mmap) or std::runtime_error (not a
  // norefs stats block, or another version).
  explicit StatsReader(const std::string& path);
  ~StatsReader();
  StatsReader(const StatsReader&) = delete;
  StatsReader& operator=(const StatsReader&) = delete;
  Counters sum() const;
  // Sum of pending + inflight only: the cheap read for 2 ms sampling.
  std::uint64_t waiting() const;
  // Pages allocated and not back in the arena, never more than were at some
  // moment during the call: see sum_live_lower_bound().
  std::int64_t live_lower_bound() const;

 private:
  SharedMapping map_;
  const StatsHeader* header_;
  const SlotCounters* slots_;
};

// Shared by both: sums a mapped block.
Counters sum_counters(const StatsHeader& h, const SlotCounters* slots);
std::uint64_t sum_waiting(const StatsHeader& h, const SlotCounters* slots);
// Counters::live() as a lower bound, for a sampler that checks a bound on it
// while the pool runs (tools/soak_monitor.h): every slot's `allocated` is
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

// Relaxed single-writer update: see "Writers and ordering" above.
inline void counter_add(Counter& c, std::uint64_t n) {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}
inline void counter_sub(Counter& c, std::uint64_t n) {
  c.store(c.load(std::memory_order_relaxed) - n, std::memory_order_relaxed);
}

}  // namespace norefs::alloc
