// SPDX-License-Identifier: LGPL-2.1-or-later
#include "alloc/stats_block.h"

#include "alloc/page.h"

namespace norefs::alloc {

StatsBlock::StatsBlock(const std::string& path, std::size_t max_slots)
    : CounterBlock(path, max_slots, [](StatsHeader& h) {
        h.page_size.store(kPageSize, std::memory_order_relaxed);  // before the magic
      }) {}

Counters StatsBlock::sum() const { return sum_counters(header(), slots()); }
Counters StatsReader::sum() const { return sum_counters(header(), slots()); }
std::uint64_t StatsReader::waiting() const { return sum_waiting(header(), slots()); }
std::int64_t StatsReader::live_lower_bound() const {
  return sum_live_lower_bound(header(), slots());
}

// All loads relaxed: see "Writers and ordering" in counter_block.h.
std::uint64_t sum_waiting(const StatsHeader& h, const SlotCounters* slots) {
  std::uint64_t n = h.block.nslots.load(std::memory_order_relaxed), waiting = 0;
  for (std::uint64_t i = 0; i < n; i++) {
    waiting += slots[i].pending.load(std::memory_order_relaxed) +
               slots[i].inflight.load(std::memory_order_relaxed);
  }
  return waiting;
}

// Acquire loads: each pass's loads stay before the next pass's (the bound
// in the header needs the allocations read before the frees).  Nothing
// here pairs with a release; the writers' stores are relaxed.
std::int64_t sum_live_lower_bound(const StatsHeader& h, const SlotCounters* slots) {
  auto rd = [](const Counter& c) { return c.load(std::memory_order_acquire); };
  // Slots handed out after this load allocated nothing we read: a smaller
  // count of allocations, which keeps the bound.
  std::uint64_t n = rd(h.block.nslots), allocated = 0, freed = 0;
  for (std::uint64_t i = 0; i < n; i++) allocated += rd(slots[i].allocated);
  // Read again: a slot handed out meanwhile may hold frees of pages counted
  // above, and leaving them out would overstate what is live.
  n = rd(h.block.nslots);
  for (std::uint64_t i = 0; i < n; i++) {
    freed += rd(slots[i].immediate) + rd(slots[i].not_deferred) + rd(slots[i].freed_after_gp);
  }
  return static_cast<std::int64_t>(allocated - freed);
}

Counters sum_counters(const StatsHeader& h, const SlotCounters* slots) {
  auto rd = [](const Counter& c) { return c.load(std::memory_order_relaxed); };
  Counters c;
  c.slots = rd(h.block.nslots);
  for (std::uint64_t i = 0; i < c.slots; i++) {
    const SlotCounters& s = slots[i];
    c.pending += rd(s.pending);
    c.inflight += rd(s.inflight);
    c.deferred += rd(s.deferred);
    c.freed_after_gp += rd(s.freed_after_gp);
    c.allocated += rd(s.allocated);
    c.immediate += rd(s.immediate);
    c.not_deferred += rd(s.not_deferred);
    c.threads += rd(s.in_use);
  }
  c.waiting = c.pending + c.inflight;
  c.peak_waiting = rd(h.peak_waiting);
  c.grace_periods = rd(h.grace_periods);
  c.expedites = rd(h.expedites);
  c.expedited_pages = rd(h.expedited_pages);
  c.gp_started = rd(h.gp_started);
  c.gp_completed = rd(h.gp_completed);
  c.check_violations = rd(h.check_violations);
  c.make_way_yields = rd(h.make_way_yields);
  c.arena_active_bytes = rd(h.arena_active_bytes);
  c.arena_resident_bytes = rd(h.arena_resident_bytes);
  c.config = rd(h.config);
  c.remote = {rd(h.remote.slots_in_use), rd(h.remote.slots_peak),     rd(h.remote.grace_periods),
              rd(h.remote.waited),       rd(h.remote.reclaimed_dead), rd(h.remote.blocking_pid),
              rd(h.remote.blocking_ms),  rd(h.remote.membarriers)};
  return c;
}

}  // namespace norefs::alloc
